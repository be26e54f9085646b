"""The checkpoint contract run against every store, and what only PostgreSQL adds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from journal.checkpoints import CheckpointStore, InMemoryCheckpointStore
from journal.errors import ThreadNotFound
from journal.events import ThreadRef
from journal.postgres_checkpoints import PostgresCheckpointStore
from journal.postgres_store import PostgresJournalStore
from journal.store import InMemoryJournalStore, JournalStore
from runtime.database import open_database
from tests.journal.builders import THREAD, append_all, conversation
from tests.journal.checkpoint_contract import CheckpointStoreContract, new


class TestInMemoryCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def journal(self) -> JournalStore:
        return InMemoryJournalStore()

    @pytest.fixture
    def checkpoints(self) -> CheckpointStore:
        return InMemoryCheckpointStore()


class TestPostgresCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def journal(self, pg_pool: Any) -> JournalStore:
        return PostgresJournalStore(pg_pool)

    @pytest.fixture
    def checkpoints(self, pg_pool: Any) -> CheckpointStore:
        return PostgresCheckpointStore(pg_pool)


async def test_checkpoints_survive_a_restart(pg_pool: Any, postgres_url: str) -> None:
    journal = PostgresJournalStore(pg_pool)
    await append_all(journal, THREAD, conversation(10))
    first = await PostgresCheckpointStore(pg_pool).put(THREAD, new(1, 8))
    # Another process (a restarted server): its own pool and store objects.
    database = await open_database(database_url=postgres_url, data_dir=Path("unused"))
    try:
        reopened = PostgresCheckpointStore(database.pool)
        assert await reopened.latest(THREAD) == first
        assert (await reopened.latest(THREAD)).intact()  # type: ignore[union-attr]
    finally:
        await database.close()


async def test_erasing_the_journal_erases_its_checkpoints(pg_pool: Any) -> None:
    journal = PostgresJournalStore(pg_pool)
    checkpoints = PostgresCheckpointStore(pg_pool)
    other = ThreadRef("acme", "alice", "t2")
    for thread in (THREAD, other):
        await append_all(journal, thread, conversation(5))
        await checkpoints.put(thread, new(1, 6))
    assert await journal.delete_thread(THREAD) == 10
    assert await checkpoints.latest(THREAD) is None
    assert await checkpoints.latest(other) is not None


async def test_a_checkpoint_needs_its_threads_journal(pg_pool: Any) -> None:
    with pytest.raises(ThreadNotFound):
        await PostgresCheckpointStore(pg_pool).put(ThreadRef("acme", "nobody", "t"), new(1, 2))
