"""Memory test fixtures: PostgreSQL from ``tests/postgres.py``, ``store`` — the memory store
(per-user memory over the role pools, ``memory/pool_memory.py``) of one backend (in-memory or
PostgreSQL), so the contract suite runs against both —
``thread_store``, the same for thread memory, and ``pool_store`` for the role-memory pools."""

from __future__ import annotations

import pytest

from memory.memory_ledger import InMemoryMemoryLedger
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import InMemoryPoolStore, PoolLocks, PoolStore
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_thread_store import PostgresThreadMemoryStore
from memory.store import MemoryStore
from memory.thread_store import InMemoryThreadMemoryStore, ThreadMemoryStore
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "pool_store", "postgres_url", "store", "thread_store"]


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> MemoryStore:
    if request.param == "memory":
        return PoolMemoryStore(InMemoryPoolStore(locks=PoolLocks()), InMemoryMemoryLedger())
    pg = request.getfixturevalue("pg_pool")
    return PoolMemoryStore(PostgresPoolStore(pg, locks=PoolLocks()), PostgresMemoryLedger(pg))


@pytest.fixture(params=["memory", "postgres"])
def thread_store(request: pytest.FixtureRequest) -> ThreadMemoryStore:
    if request.param == "memory":
        return InMemoryThreadMemoryStore()
    return PostgresThreadMemoryStore(request.getfixturevalue("pg_pool"))


@pytest.fixture(params=["memory", "postgres"])
def pool_store(request: pytest.FixtureRequest) -> PoolStore:
    if request.param == "memory":
        return InMemoryPoolStore(locks=PoolLocks())
    return PostgresPoolStore(request.getfixturevalue("pg_pool"), locks=PoolLocks())
