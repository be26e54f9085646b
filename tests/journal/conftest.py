"""Journal test fixtures: PostgreSQL from ``tests/postgres.py``, and ``backend`` — the journal
and checkpoint stores of one backend (in-memory or PostgreSQL) with ways to tamper with data at
rest, for tests that must hold on both."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest

from journal.checkpoints import CheckpointStore, InMemoryCheckpointStore
from journal.events import JournalEvent, ThreadRef
from journal.postgres_checkpoints import PostgresCheckpointStore
from journal.postgres_store import PostgresJournalStore
from journal.store import InMemoryJournalStore, JournalStore
from tests.postgres import pg_pool, postgres_url

__all__ = ["Backend", "CountingStore", "backend", "pg_pool", "postgres_url"]


class CountingStore:
    """A ``JournalStore`` wrapper that counts the rows (events) each read returns."""

    def __init__(self, inner: JournalStore) -> None:
        self.inner = inner
        self.rows_read = 0
        self.reads = 0

    async def append(self, thread: ThreadRef, events: Sequence[Any]) -> list[JournalEvent]:
        return await self.inner.append(thread, events)

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        out = await self.inner.read(thread, after_seq=after_seq, limit=limit)
        self.reads += 1
        self.rows_read += len(out)
        return out

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        out = await self.inner.read_tail(thread, count)
        self.reads += 1
        self.rows_read += len(out)
        return out

    async def has_session(self, thread: ThreadRef, voice_session_id: str) -> bool:
        return await self.inner.has_session(thread, voice_session_id)

    async def delete_thread(self, thread: ThreadRef) -> int:
        return await self.inner.delete_thread(thread)

    def reset(self) -> None:
        self.rows_read = self.reads = 0


@dataclasses.dataclass
class Backend:
    name: str
    journal: JournalStore
    checkpoints: CheckpointStore
    pool: Any = None

    async def tamper_event(self, thread: ThreadRef, seq: int, payload: dict[str, Any]) -> None:
        """Change a stored event's payload behind the store's back (data at rest)."""
        if self.pool is None:
            assert isinstance(self.journal, InMemoryJournalStore)
            log = self.journal._threads[thread]
            log[seq - 1] = dataclasses.replace(log[seq - 1], payload=payload)
            return
        async with self.pool.acquire() as conn:
            status = await conn.execute(
                "UPDATE journal_events SET payload = $5::jsonb WHERE tenant = $1 AND user_id = $2"
                " AND thread_id = $3 AND seq = $4",
                thread.tenant,
                thread.user,
                thread.thread_id,
                seq,
                json.dumps(payload),
            )
            assert status == "UPDATE 1"

    async def tamper_checkpoint(self, thread: ThreadRef, from_seq: int, **fields: Any) -> None:
        """Change a stored checkpoint's fields behind the store's back."""
        if self.pool is None:
            assert isinstance(self.checkpoints, InMemoryCheckpointStore)
            chain = self.checkpoints._chains[thread]
            index = next(i for i, c in enumerate(chain) if c.from_seq == from_seq)
            chain[index] = dataclasses.replace(chain[index], **fields)
            return
        sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(fields, start=5))
        async with self.pool.acquire() as conn:
            status = await conn.execute(
                f"UPDATE journal_checkpoints SET {sets} WHERE tenant = $1 AND user_id = $2"
                " AND thread_id = $3 AND from_seq = $4",
                thread.tenant,
                thread.user,
                thread.thread_id,
                from_seq,
                *fields.values(),
            )
            assert status == "UPDATE 1"


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return Backend("memory", InMemoryJournalStore(), InMemoryCheckpointStore())
    pool = request.getfixturevalue("pg_pool")
    return Backend("postgres", PostgresJournalStore(pool), PostgresCheckpointStore(pool), pool=pool)
