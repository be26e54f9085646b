"""The PostgreSQL journal under connection faults: never a lost or a duplicated event."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from journal.errors import JournalUnavailable
from journal.events import EventKind, NewEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from tests.journal.contract import assistant, user_input
from tests.postgres import APPLICATION_NAME

APP = APPLICATION_NAME


@contextlib.asynccontextmanager
async def side_connection(url: str) -> AsyncIterator[Any]:
    """A connection outside the store's pool, to the same database."""
    conn = await asyncpg.connect(
        url, server_settings={"application_name": "fault-injector"}, timeout=10
    )
    try:
        yield conn
    finally:
        await conn.close(timeout=10)


async def terminate_store_connections(conn: Any) -> int:
    terminated: int = await conn.fetchval(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = $1 AND datname = current_database()"
        " AND pid <> pg_backend_pid()",
        APP,
        timeout=10,
    )
    return terminated


async def test_terminated_backends_lose_and_duplicate_nothing(
    pg_pool: Any, postgres_url: str
) -> None:
    store = PostgresJournalStore(pg_pool, max_attempts=50, retry_deadline=60)
    threads = [ThreadRef("acme", f"user{i}", "t") for i in range(8)]
    min_batches, min_rounds = 40, 6
    done = asyncio.Event()
    rounds = kills = 0
    batches_done = [0] * len(threads)

    def batch(thread_no: int, b: int) -> list[NewEvent]:
        size = 1 + (thread_no + b) % 3
        return [assistant(f"t{thread_no}-b{b}-e{i}", text=f"{b}/{i}") for i in range(size)]

    async def writer(thread_no: int) -> None:
        # At least min_batches each, and on until the killer has had min_rounds (bounded).
        b = 0
        while (b < min_batches or rounds < min_rounds) and b < 2000:
            stored = await store.append(threads[thread_no], batch(thread_no, b))
            first = stored[0].seq
            assert [e.seq for e in stored] == list(range(first, first + len(stored)))
            b += 1
        batches_done[thread_no] = b

    async def killer() -> None:
        # Rounds far enough apart that a fresh connection (connect, type introspection, first
        # call: ~25 ms) usually gets some work done in between.
        nonlocal rounds, kills
        rng = random.Random(3)
        async with side_connection(postgres_url) as conn:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), rng.uniform(0.04, 0.12))
                if not done.is_set():
                    kills += await terminate_store_connections(conn)
                    rounds += 1

    killing = asyncio.create_task(killer())
    try:
        await asyncio.gather(*(writer(i) for i in range(len(threads))))
    finally:
        done.set()
        await killing

    assert rounds >= min_rounds and kills > 0
    for thread_no, thread in enumerate(threads):
        expected = [e.event_id for b in range(batches_done[thread_no]) for e in batch(thread_no, b)]
        stored = await store.read(thread)
        assert [e.event_id for e in stored] == expected  # each once, in append order
        assert [e.seq for e in stored] == list(range(1, len(expected) + 1))


async def test_append_killed_while_waiting_is_retried(
    pg_pool: Any, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresJournalStore(pg_pool)
    thread = ThreadRef("acme", "alice", "t1")
    await store.append(thread, [user_input("e1")])
    async with side_connection(postgres_url) as conn:
        # Hold the thread's head row so the next append waits inside journal_append.
        locker = conn.transaction()
        await locker.start()
        await conn.execute("SELECT 1 FROM journal_threads FOR UPDATE")
        appending = asyncio.create_task(store.append(thread, [assistant("e2")]))
        try:
            waiting: list[Any] = []
            for _ in range(500):
                waiting = await conn.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                    " AND datname = current_database() AND wait_event_type = 'Lock'",
                    APP,
                )
                if waiting:
                    break
                await asyncio.sleep(0.01)
            assert len(waiting) == 1
            with caplog.at_level(logging.WARNING, logger="journal.postgres_store"):
                await conn.fetchval("SELECT pg_terminate_backend($1)", waiting[0]["pid"])
                await locker.rollback()
                [stored] = await asyncio.wait_for(appending, 10)
        finally:
            if not appending.done():
                appending.cancel()
    assert stored.seq == 2
    assert "retrying" in caplog.text
    assert [e.event_id for e in await store.read(thread)] == ["e1", "e2"]


class ReplyLosingPool:
    """Runs the next ``fetch`` to completion (it commits), then drops the connection."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.replies_to_lose = 1

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float | None = None) -> AsyncIterator[Any]:
        async with self.pool.acquire(timeout=timeout) as conn:
            if self.replies_to_lose > 0:
                self.replies_to_lose -= 1
                yield ReplyLosingConnection(conn)
            else:
                yield conn


class ReplyLosingConnection:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        await self._conn.fetch(*args, **kwargs)
        self._conn.terminate()
        raise asyncpg.ConnectionDoesNotExistError("connection closed in the middle of operation")


async def test_lost_reply_after_commit_returns_the_committed_events(pg_pool: Any) -> None:
    thread = ThreadRef("acme", "alice", "t1")
    plain = PostgresJournalStore(pg_pool)
    await plain.append(thread, [user_input("e1")])
    losing = ReplyLosingPool(pg_pool)
    store = PostgresJournalStore(losing)
    batch = [assistant("e2"), user_input("e3"), assistant("e4")]
    stored = await store.append(thread, batch)
    assert losing.replies_to_lose == 0  # the first attempt did commit, and its reply was lost
    assert [e.seq for e in stored] == [2, 3, 4]
    everything = await plain.read(thread)
    assert [e.seq for e in everything] == [1, 2, 3, 4]
    assert everything[1:] == stored


class UnreachablePool:
    def __init__(self) -> None:
        self.attempts = 0

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float | None = None) -> AsyncIterator[Any]:
        self.attempts += 1
        raise ConnectionRefusedError(111, "Connection refused")
        yield  # pragma: no cover - makes this an async generator


async def test_unreachable_database_raises_journal_unavailable() -> None:
    pool = UnreachablePool()
    store = PostgresJournalStore(pool, max_attempts=3)
    with pytest.raises(JournalUnavailable) as caught:
        await store.append(
            ThreadRef("acme", "alice", "t1"), [NewEvent("e1", EventKind.USER_INPUT, {"text": "x"})]
        )
    assert pool.attempts == 3
    assert caught.value.retryable
