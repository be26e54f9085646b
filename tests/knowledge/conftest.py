"""Knowledge test fixtures: PostgreSQL from ``tests/postgres.py``; ``store`` — the knowledge
store of one backend (in-memory or PostgreSQL), for the contract suite and everything that must
hold on both; ``embedder`` — the real offline model, loaded once per test session."""

from __future__ import annotations

from typing import Any

import pytest

from knowledge.embedding import E5Embedder
from knowledge.postgres_store import PostgresKnowledgeStore
from knowledge.store import InMemoryKnowledgeStore, KnowledgeStore
from tests.postgres import pg_pool, postgres_url

__all__ = ["embedder", "pg_pool", "postgres_url", "store"]


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryKnowledgeStore()
    pool = request.getfixturevalue("pg_pool")
    knowledge: KnowledgeStore = PostgresKnowledgeStore(pool)
    return knowledge


@pytest.fixture(scope="session")
def embedder() -> E5Embedder:
    """The process's embedder (``E5Embedder.shared``): the model loads once per session."""
    shared = E5Embedder.shared()
    shared.load()
    return shared
