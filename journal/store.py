"""The journal store contract and its in-memory implementation.

Rules every implementation keeps (the contract suite in ``tests/journal/contract.py`` checks
them against each store):

1. Scope: every call names a ``ThreadRef``; events of another tenant, user or thread are never
   returned, and an event id is unique within its thread.
2. Order: ``seq`` starts at 1 per thread and has no gaps; one ``append`` call is one contiguous
   batch even under concurrent appenders.
3. Idempotency: appending an event whose id is already in the thread with the same fingerprint
   returns the stored event (same seq) and writes nothing; a different fingerprint raises
   ``EventConflict``. A batch is all-or-nothing.
4. Writer fences: a writer that another process may take over (a voice session) appends with
   ``append_fenced(thread, events, WriterFence(writer, epoch))``. ``fence(thread, fence)``
   raises that writer's epoch on the thread (never lowers it) and returns once every append in
   flight to the thread has finished: from then on each ``append_fenced`` of the writer at a
   lower epoch is refused with ``WriterFenced`` and writes nothing, and each one accepted before
   is readable. So of two copies of a writer, only the one holding the current epoch adds to
   the thread. A refused batch whose events are all stored already (a retry of an append that
   did commit) returns them instead (rule 3). Plain ``append`` is never fenced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from journal.errors import EventConflict, WriterFenced
from journal.events import JournalEvent, NewEvent, ThreadRef


@dataclass(frozen=True, slots=True)
class WriterFence:
    """Who appends (``writer``, e.g. a voice session id) and under which ``epoch`` (rule 4)."""

    writer: str
    epoch: int


class JournalStore(Protocol):
    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        """Append a batch atomically; returns the stored events in order (see rule 3)."""
        ...

    async def append_fenced(
        self, thread: ThreadRef, events: Sequence[NewEvent], fence: WriterFence
    ) -> list[JournalEvent]:
        """``append``, refused (``WriterFenced``) when ``fence.epoch`` is below the writer's
        fence on the thread (rule 4)."""
        ...

    async def fence(self, thread: ThreadRef, fence: WriterFence) -> None:
        """Raise the writer's fence on the thread to ``fence.epoch``; returns once the appends
        in flight to the thread have finished (rule 4)."""
        ...

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        """Events with ``seq > after_seq`` in order, at most ``limit``."""
        ...

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        """The last ``count`` events in order (cost grows with ``count``, not the thread)."""
        ...

    async def has_session(self, thread: ThreadRef, voice_session_id: str) -> bool:
        """Whether any event of the thread was written by that voice session."""
        ...

    async def delete_thread(self, thread: ThreadRef) -> int:
        """Erase a thread's events; returns how many were removed."""
        ...


class InMemoryJournalStore:
    """Journal for tests and for runs without a database. Same rules as the PostgreSQL store."""

    def __init__(self) -> None:
        self._threads: dict[ThreadRef, list[JournalEvent]] = {}
        self._fences: dict[tuple[ThreadRef, str], int] = {}
        self._lock = asyncio.Lock()

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        async with self._lock:
            return self._append(thread, events)

    async def append_fenced(
        self, thread: ThreadRef, events: Sequence[NewEvent], fence: WriterFence
    ) -> list[JournalEvent]:
        async with self._lock:
            if self._fences.get((thread, fence.writer), 0) > fence.epoch:
                stored = {e.event_id for e in self._threads.get(thread, [])}
                if any(e.event_id not in stored for e in events):
                    raise WriterFenced(f"writer {fence.writer} was fenced past {fence.epoch}")
            return self._append(thread, events)

    async def fence(self, thread: ThreadRef, fence: WriterFence) -> None:
        async with self._lock:  # appends in flight hold it: they finish first
            key = (thread, fence.writer)
            self._fences[key] = max(self._fences.get(key, 0), fence.epoch)

    def _append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        log = self._threads.setdefault(thread, [])
        by_id = {e.event_id: e for e in log}
        stored: list[JournalEvent] = []
        fresh: list[JournalEvent] = []
        batch_ids: dict[str, NewEvent] = {}
        next_seq = len(log) + 1
        now = datetime.now(UTC)
        for event in events:
            existing = by_id.get(event.event_id)
            if existing is not None:
                if existing.fingerprint() != event.fingerprint():
                    raise EventConflict(f"event {event.event_id} exists with other content")
                stored.append(existing)
                continue
            earlier = batch_ids.get(event.event_id)
            if earlier is not None:
                if earlier.fingerprint() != event.fingerprint():
                    raise EventConflict(f"event {event.event_id} twice in one batch")
                stored.append(next(e for e in fresh if e.event_id == event.event_id))
                continue
            batch_ids[event.event_id] = event
            new = JournalEvent(
                thread=thread,
                seq=next_seq,
                event_id=event.event_id,
                kind=event.kind,
                payload=event.payload,
                voice_session_id=event.voice_session_id,
                created_at=now,
            )
            next_seq += 1
            fresh.append(new)
            stored.append(new)
        log.extend(fresh)
        return stored

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        log = self._threads.get(thread, [])
        start = max(after_seq, 0)  # seqs run from 1 without gaps: seq n is log[n - 1]
        # Slice only what is returned, so the cost grows with ``limit``, not the thread.
        return log[start:] if limit is None else log[start : start + max(limit, 0)]

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        log = self._threads.get(thread, [])
        return log[-count:] if count > 0 else []

    async def has_session(self, thread: ThreadRef, voice_session_id: str) -> bool:
        return any(e.voice_session_id == voice_session_id for e in self._threads.get(thread, []))

    async def delete_thread(self, thread: ThreadRef) -> int:
        async with self._lock:
            for key in [k for k in self._fences if k[0] == thread]:
                del self._fences[key]
            return len(self._threads.pop(thread, []))
