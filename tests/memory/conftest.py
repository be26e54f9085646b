"""Memory test fixtures: PostgreSQL from ``tests/postgres.py`` and ``store`` — the memory store
of one backend (in-memory or PostgreSQL), so the contract suite runs against both."""

from __future__ import annotations

import pytest

from memory.postgres_store import PostgresMemoryStore
from memory.store import InMemoryMemoryStore, MemoryStore
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url", "store"]


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> MemoryStore:
    if request.param == "memory":
        return InMemoryMemoryStore()
    return PostgresMemoryStore(request.getfixturevalue("pg_pool"))
