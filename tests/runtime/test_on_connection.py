"""``runtime.database.on_connection``: a connection that failed as unreachable is not reused."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from storage.postgres import on_connection


class StoreUnavailable(Exception):
    pass


class Conn:
    def __init__(self) -> None:
        self.terminated = False

    def terminate(self) -> None:
        self.terminated = True


class Pool:
    """Hands out one connection (what asyncpg's pool does while it keeps a connection)."""

    def __init__(self) -> None:
        self.conn = Conn()

    @contextlib.asynccontextmanager
    async def acquire(self, timeout: float) -> AsyncIterator[Conn]:
        yield self.conn


async def call(pool: Pool, error: BaseException) -> None:
    async def work(conn: Any) -> None:
        raise error

    await on_connection(
        pool, work, transaction=False, acquire_timeout=1.0,
        unavailable=StoreUnavailable, what="test store",
    )  # fmt: skip


async def test_a_connection_left_stuck_by_a_restart_is_dropped_and_the_store_says_unavailable() -> (
    None
):
    """asyncpg's "another operation is in progress" (a pooled connection whose backend went
    away) is the database being unreachable, retryable — and that connection is terminated, so
    the pool opens a fresh one instead of handing out the stuck one again."""
    pool = Pool()
    stuck = asyncpg.InternalClientError("cannot switch to state 12; another operation (2)")
    with pytest.raises(StoreUnavailable, match="test store unavailable: InternalClientError"):
        await call(pool, stuck)
    assert pool.conn.terminated


async def test_a_bad_query_keeps_its_connection_and_its_own_error() -> None:
    pool = Pool()
    with pytest.raises(asyncpg.exceptions.UndefinedTableError):
        await call(pool, asyncpg.exceptions.UndefinedTableError("no such table"))
    assert not pool.conn.terminated
