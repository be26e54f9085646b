"""Knowledge test fixtures: PostgreSQL from ``tests/postgres.py``; ``store`` — the knowledge
store of one backend (in-memory or PostgreSQL), for the contract suite and everything that must
hold on both; ``embedder`` — the real offline model, loaded once per test session."""

from __future__ import annotations

from typing import Any

import pytest

from knowledge.postgres_store import PostgresKnowledgeStore
from knowledge.store import InMemoryKnowledgeStore, KnowledgeStore
from tests.embedder import embedder
from tests.postgres import pg_pool, postgres_url

__all__ = ["embedder", "pg_pool", "postgres_url", "store"]


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryKnowledgeStore()
    pool = request.getfixturevalue("pg_pool")
    knowledge: KnowledgeStore = PostgresKnowledgeStore(pool)
    return knowledge
