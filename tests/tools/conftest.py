"""Tools test fixtures: PostgreSQL from ``tests/postgres.py``; ``grant_store`` — one backend
(in memory or PostgreSQL), so the contract suite runs against both."""

from __future__ import annotations

import pytest

from tests.postgres import pg_pool, postgres_url
from tools.grants import GrantStore, InMemoryGrantStore
from tools.postgres_grants import PostgresGrantStore

__all__ = ["grant_store", "pg_pool", "postgres_url"]


@pytest.fixture(params=["memory", "postgres"])
def grant_store(request: pytest.FixtureRequest) -> GrantStore:
    if request.param == "memory":
        return InMemoryGrantStore(max_active=20)
    return PostgresGrantStore(request.getfixturevalue("pg_pool"), max_active=20)
