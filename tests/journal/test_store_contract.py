"""The journal contract run against every store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from journal.errors import WriterFenced
from journal.postgres_store import PostgresJournalStore
from journal.store import InMemoryJournalStore, JournalStore, WriterFence
from tests.journal.contract import THREAD, JournalStoreContract, user_input


class TestInMemoryJournalStore(JournalStoreContract):
    @pytest.fixture
    def store(self) -> JournalStore:
        return InMemoryJournalStore()


class TestPostgresJournalStore(JournalStoreContract):
    @pytest.fixture
    def store(self, pg_pool: Any) -> JournalStore:
        return PostgresJournalStore(pg_pool)


async def test_a_fence_waits_for_the_append_in_flight_and_then_sees_it(pg_pool: Any) -> None:
    """Rule 4's interleaving on PostgreSQL, injected with a transaction held open: an older
    copy's append is in flight (locked, uncommitted) when the fence is raised. The fence waits
    for it; once the fence returns, that append is readable and the next one is refused."""
    store = PostgresJournalStore(pg_pool)
    old, new = WriterFence("vs_1", 0), WriterFence("vs_1", 1)
    async with pg_pool.acquire() as in_flight:
        transaction = in_flight.transaction()
        await transaction.start()
        await in_flight.fetch(
            "SELECT * FROM journal_append_fenced($1, $2, $3, $4, $5, $6::jsonb[], $7, $8, $9, $10)",
            THREAD.tenant, THREAD.user, THREAD.thread_id, ["late"], ["assistant_output"],
            ['{"text": "hi"}'], ["f"], ["vs_1"], old.writer, old.epoch,
        )  # fmt: skip
        fencing = asyncio.create_task(store.fence(THREAD, new))
        while not await _waits_for_a_lock(pg_pool):  # the fence is queued behind the append
            assert not fencing.done()
            await asyncio.sleep(0.01)
        await transaction.commit()
    await fencing
    assert [e.event_id for e in await store.read(THREAD)] == ["late"]
    with pytest.raises(WriterFenced):
        await store.append_fenced(THREAD, [user_input("later")], old)


async def _waits_for_a_lock(pool: Any) -> bool:
    waiting: int = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query LIKE '%journal_fence%'"
    )
    return waiting > 0
