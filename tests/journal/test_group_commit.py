"""Group commit in the PostgreSQL journal: concurrent appends share transactions, and keep every
rule of ``journal/store.py`` per caller (the contract suite and fault tests run on it too)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from journal.errors import EventConflict
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from tests.journal.contract import assistant, user_input
from tests.journal.test_postgres_faults import side_connection

GROUP_CALL = "journal_append_group"
SINGLE_CALL = "journal_append("


class WatchedPool:
    """A pool wrapper that records each statement, and can hold every ``acquire`` at a gate."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.statements: list[tuple[str, tuple[Any, ...]]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    @contextlib.asynccontextmanager
    async def acquire(self, *, timeout: float | None = None) -> AsyncIterator[Any]:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        async with self.pool.acquire(timeout=timeout) as conn:
            yield WatchedConnection(conn, self)

    def groups(self) -> list[int]:
        """How many batches each group statement carried."""
        return [len(set(args[4])) for query, args in self.statements if GROUP_CALL in query]

    def singles(self) -> int:
        return sum(1 for query, _ in self.statements if SINGLE_CALL in query)


class WatchedConnection:
    def __init__(self, conn: Any, owner: WatchedPool) -> None:
        self._conn = conn
        self._owner = owner

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        self._owner.statements.append((query, args))
        return await self._conn.fetch(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        self._owner.statements.append((query, args))
        return await self._conn.fetchval(query, *args, **kwargs)


async def until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def seqs(events: list[JournalEvent]) -> list[int]:
    return [e.seq for e in events]


def contiguous(events: list[JournalEvent]) -> bool:
    return seqs(events) == list(range(events[0].seq, events[0].seq + len(events)))


async def test_many_appenders_to_many_threads_and_one_thread(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched)
    rng = random.Random(11)
    shared = ThreadRef("acme", "alice", "shared")
    # 40 callers with a thread each, 20 callers on one shared thread; 5 batches of 1–3 each.
    callers = [(ThreadRef("acme", f"user{c}", "own"), c) for c in range(40)]
    callers += [(shared, 100 + c) for c in range(20)]
    plans = {
        c: [[assistant(f"c{c}-b{b}-e{i}") for i in range(rng.randint(1, 3))] for b in range(5)]
        for _, c in callers
    }

    async def caller(thread: ThreadRef, c: int) -> list[list[JournalEvent]]:
        out = []
        for batch in plans[c]:
            out.append(await store.append(thread, batch))
        return out

    results = await asyncio.gather(*(caller(thread, c) for thread, c in callers))

    for (_, c), stored_batches in zip(callers, results, strict=True):
        previous = 0
        for batch, stored in zip(plans[c], stored_batches, strict=True):
            assert [e.event_id for e in stored] == [e.event_id for e in batch]
            assert contiguous(stored)
            assert stored[0].seq > previous  # a caller's batches in its order
            previous = stored[-1].seq
    for thread, c in callers[:40]:
        expected = [e.event_id for batch in plans[c] for e in batch]
        stored = await store.read(thread)
        assert [e.event_id for e in stored] == expected
        assert seqs(stored) == list(range(1, len(expected) + 1))
    everything = await store.read(shared)
    total = sum(len(batch) for c in range(100, 120) for batch in plans[c])
    assert seqs(everything) == list(range(1, total + 1))
    assert len({e.event_id for e in everything}) == total
    # Coalesced: 300 appends in far fewer transactions, some groups mixing many batches.
    groups = watched.groups()
    assert sum(groups) == 300 and watched.singles() == 0
    assert len(groups) < 100 and max(groups) >= 10


async def test_queued_appends_to_one_thread_keep_their_order(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    thread = ThreadRef("acme", "alice", "t1")
    await store.append(thread, [user_input("e0")])
    batches = [[assistant(f"c{c}-e{i}") for i in range(1 + c % 3)] for c in range(12)]
    watched.statements.clear()
    stored = await asyncio.gather(*(store.append(thread, batch) for batch in batches))
    assert watched.groups() == [12]  # one transaction
    first = 2
    for batch, got in zip(batches, stored, strict=True):
        assert seqs(got) == list(range(first, first + len(batch)))  # in call order, no gaps
        first += len(batch)
    assert seqs(await store.read(thread)) == list(range(1, first))


async def test_idempotent_retries_inside_a_group(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    thread = ThreadRef("acme", "alice", "t1")
    other = ThreadRef("acme", "bob", "t1")
    await store.append(thread, [user_input("e1")])
    watched.statements.clear()
    batch = [assistant("e2"), user_input("e3")]
    results = await asyncio.gather(
        store.append(thread, batch),
        store.append(other, [user_input("x1")]),
        store.append(thread, batch),  # the same batch again, racing the first
        store.append(thread, [user_input("e3"), assistant("e4")]),  # overlaps it
        store.append(thread, [user_input("e1")]),  # stored before the group
        store.append(thread, batch),
    )
    first, on_other, again, overlapping, old, third = results
    assert seqs(first) == [2, 3]
    assert again == first and third == first
    assert seqs(overlapping) == [3, 4]
    assert seqs(old) == [1]
    assert seqs(on_other) == [1]
    stored = await store.read(thread)
    assert [e.event_id for e in stored] == ["e1", "e2", "e3", "e4"]
    assert seqs(stored) == [1, 2, 3, 4]
    # Each racing repeat waited for a later group, which found the stored events.
    assert sum(watched.groups()) == 6 and len(watched.groups()) >= 2


async def test_a_conflicting_append_fails_alone(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    thread = ThreadRef("acme", "alice", "t1")
    await store.append(thread, [user_input("e1")])
    watched.statements.clear()
    before, conflicting, after, elsewhere = await asyncio.gather(
        store.append(thread, [assistant("e2")]),
        store.append(thread, [assistant("e3"), user_input("e1", text="changed"), assistant("e4")]),
        store.append(thread, [assistant("e5"), assistant("e6")]),
        store.append(ThreadRef("acme", "bob", "t1"), [user_input("e1", text="changed")]),
        return_exceptions=True,
    )
    assert watched.groups() == [4]
    assert isinstance(conflicting, EventConflict)
    assert "e1" in str(conflicting)
    assert isinstance(before, list) and isinstance(after, list) and isinstance(elsewhere, list)
    assert seqs(before) == [2] and seqs(after) == [3, 4] and seqs(elsewhere) == [1]
    stored = await store.read(thread)
    assert [e.event_id for e in stored] == ["e1", "e2", "e5", "e6"]  # e3, e4 never written
    assert seqs(stored) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("bad_text", "bad_id"),
    [("nul \x00 character", "e3"), ("fine", "e3\x00")],
    ids=["payload-seen-before-grouping", "id-refused-by-the-group"],
)
async def test_a_bad_append_fails_only_itself(pg_pool: Any, bad_text: str, bad_id: str) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    threads = [ThreadRef("acme", f"user{i}", "t1") for i in range(4)]
    await store.append(threads[1], [user_input("e1")])
    watched.statements.clear()
    results = await asyncio.gather(
        store.append(threads[0], [user_input("a1"), assistant("a2")]),
        store.append(threads[1], [assistant("e2"), user_input(bad_id, text=bad_text)]),
        store.append(threads[2], [user_input("c1")]),
        store.append(threads[1], [assistant("e4")]),
        store.append(threads[3], [user_input("d1")]),
        return_exceptions=True,
    )
    assert isinstance(results[1], ValueError)
    grouped = {i for query, args in watched.statements if GROUP_CALL in query for i in args[5]}
    if bad_id == "e3":  # seen before grouping: that batch went alone (its thread's next too)
        assert grouped == {"a1", "a2", "c1", "d1"}
    else:  # the group was refused, then each of its batches appended on its own
        assert watched.groups() == [5] and watched.singles() == 5
    assert [seqs(r) for i, r in enumerate(results) if i != 1] == [[1, 2], [1], [2], [1]]
    assert [e.event_id for e in await store.read(threads[1])] == ["e1", "e4"]
    for thread, ids in [(threads[0], ["a1", "a2"]), (threads[2], ["c1"]), (threads[3], ["d1"])]:
        assert [e.event_id for e in await store.read(thread)] == ids


async def test_cancelled_caller_waiting_for_a_group(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    first, second, third = (ThreadRef("acme", f"user{i}", "t1") for i in range(3))
    watched.gate.clear()  # the lane's first flush waits to get a connection
    in_flight = asyncio.create_task(store.append(first, [user_input("a1")]))
    await until(lambda: watched.waiting == 1, "the first flush")
    queued = asyncio.create_task(store.append(second, [user_input("b1")]))
    also_queued = asyncio.create_task(store.append(third, [user_input("c1")]))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    watched.gate.set()
    assert seqs(await in_flight) == [1]
    assert seqs(await also_queued) == [1]
    # The cancelled batch was never written: the thread starts empty.
    assert await store.read(second) == []
    assert all("b1" not in args[5] for query, args in watched.statements if GROUP_CALL in query)
    assert seqs(await store.append(second, [user_input("b2")])) == [1]


async def test_cancelled_caller_whose_group_is_sent(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1)
    mine, theirs = ThreadRef("acme", "alice", "t1"), ThreadRef("acme", "bob", "t1")
    watched.gate.clear()
    cancelled = asyncio.create_task(store.append(mine, [user_input("a1")]))
    kept = asyncio.create_task(store.append(theirs, [user_input("b1")]))
    await until(lambda: watched.waiting == 1, "the group's flush")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    watched.gate.set()
    # The group goes on for the others; the cancelled batch went with it (as a cancelled
    # single append may have committed), so a retry by that caller finds it.
    assert seqs(await kept) == [1]
    assert watched.groups() == [2]
    assert seqs(await store.append(mine, [user_input("a1")])) == [1]
    assert seqs(await store.read(mine)) == [1]


@pytest.mark.parametrize(
    "holder_sql",
    [
        "SELECT 1 FROM journal_threads WHERE user_id = 'alice' FOR UPDATE",
        "DELETE FROM journal_threads WHERE user_id = 'alice'",  # an erasure, rolled back
    ],
    ids=["row-lock", "delete"],
)
async def test_a_thread_locked_elsewhere_holds_up_no_other_thread(
    pg_pool: Any, postgres_url: str, holder_sql: str
) -> None:
    store = PostgresJournalStore(pg_pool, lanes=1)
    locked, free = ThreadRef("acme", "alice", "t1"), ThreadRef("acme", "bob", "t1")
    await store.append(locked, [user_input("e1")])
    async with side_connection(postgres_url) as conn:
        holder = conn.transaction()
        await holder.start()
        try:
            await conn.execute(holder_sql, timeout=10)
            waiting = [
                asyncio.create_task(store.append(locked, [assistant(f"e{i}")])) for i in (2, 3)
            ]
            # The same lane keeps committing other threads' appends meanwhile.
            for i in range(5):
                [event] = await asyncio.wait_for(
                    store.append(free, [NewEvent(f"f{i}", EventKind.USER_INPUT, {"text": "x"})]),
                    10,
                )
                assert event.seq == i + 1
            assert not any(task.done() for task in waiting)
        finally:
            await holder.rollback()
        stored = [await asyncio.wait_for(task, 10) for task in waiting]
    assert [seqs(s) for s in stored] == [[2], [3]]  # in call order after the wait
    assert [e.event_id for e in await store.read(locked)] == ["e1", "e2", "e3"]


async def test_group_commit_off_appends_one_by_one(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, group_commit=False)
    thread = ThreadRef("acme", "alice", "t1")
    stored = await asyncio.gather(*(store.append(thread, [assistant(f"e{i}")]) for i in range(5)))
    assert sorted(e.seq for [e] in stored) == [1, 2, 3, 4, 5]
    assert watched.groups() == [] and watched.singles() == 5


def test_group_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        PostgresJournalStore(None, lanes=0)
    with pytest.raises(ValueError):
        PostgresJournalStore(None, max_group_events=0)


async def test_groups_are_bounded(pg_pool: Any) -> None:
    watched = WatchedPool(pg_pool)
    store = PostgresJournalStore(watched, lanes=1, max_group_appends=3, max_group_events=5)
    threads = [ThreadRef("acme", f"user{i}", "t1") for i in range(10)]
    batches = [[assistant(f"e{i}-{j}") for j in range(1 + i % 3)] for i in range(10)]
    batches[4] = [assistant(f"big-{j}") for j in range(7)]  # larger than a group: goes alone
    stored = await asyncio.gather(
        *(store.append(t, b) for t, b in zip(threads, batches, strict=True))
    )
    assert [seqs(s) for s in stored] == [list(range(1, len(b) + 1)) for b in batches]
    groups = watched.groups()
    assert sum(groups) == 10 and max(groups) <= 3
    events_per_group = [len(args[5]) for query, args in watched.statements if GROUP_CALL in query]
    assert 7 in events_per_group
    assert all(n <= 5 for n in events_per_group if n != 7)
