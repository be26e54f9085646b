"""Memory test fixtures: PostgreSQL from ``tests/postgres.py``, ``store`` — the memory store
(per-user memory over the role pools, ``memory/pool_memory.py``) of one backend (in-memory or
PostgreSQL), so the contract suite runs against both — ``thread_store``, the same for thread
memory, ``pool_store`` for the role-memory pools, ``role_records`` for role memory's settings,
confessions, enrichments and call log, and ``local_model``: the real local model, loaded once
for the session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from memory.memory_ledger import InMemoryMemoryLedger
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import InMemoryPoolStore, PoolLocks, PoolStore
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_role_records import PostgresRoleRecords
from memory.postgres_thread_store import PostgresThreadMemoryStore
from memory.role_records import InMemoryRoleRecords, RoleRecords
from memory.store import MemoryStore
from memory.thread_store import InMemoryThreadMemoryStore, ThreadMemoryStore
from plugins.brain.local_model import LocalModel, LocalModelSettings
from tests.postgres import pg_pool, postgres_url

__all__ = [
    "local_model", "pg_pool", "pool_store", "postgres_url", "role_records", "store",
    "thread_store",
]  # fmt: skip


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


@pytest.fixture(params=["memory", "postgres"])
def role_records(request: pytest.FixtureRequest) -> RoleRecords:
    if request.param == "memory":
        return InMemoryRoleRecords()
    return PostgresRoleRecords(request.getfixturevalue("pg_pool"))


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModel]:
    """The real local model (Qwen2.5-Coder-0.5B-Instruct), loaded once for the session;
    the test is skipped, with the reason, when its packages are not installed. Generations may
    take long: the tests check correctness on a machine that may be loaded, not speed."""
    reason = LocalModel.unavailable_reason()
    if reason is not None:
        pytest.skip(f"local model not installed: {reason}")
    local = LocalModel(LocalModelSettings(start_deadline_s=30.0, max_generation_s=300.0))
    asyncio.run(local.warm_up())
    yield local
    asyncio.run(local.aclose())
