"""A session's journal writer that survives a database outage without losing events.

Theory of operation
-------------------
``BufferedJournal`` wraps the real store for one voice session. An append goes straight to the
store, bounded by ``append_timeout``. If the store is unavailable (or too slow) the events are
kept, in order, in a bounded buffer, the session is told (``on_outage``: an ``error`` event with
code ``journal_unavailable``, ``retryable``), and a retry task writes the buffer back with
backoff; later appends queue behind the buffer so the journal's order stays the conversation's
order (direct writes go one at a time, so an append made while an earlier one is in flight
cannot overtake it if that one fails). Appends are idempotent by event id, so an attempt that
timed out but did commit is not duplicated by its retry. When the buffer would exceed
``max_buffered`` events ``on_overflow`` is called (the session closes with 4011) — events are
never dropped silently.

Fencing (``journal/store.py`` rule 4): a buffer made with ``fence`` (its session's id and
epoch) appends with ``append_fenced``. When the store refuses (``WriterFenced``: another process
continued the session under a later epoch) the buffer stops for good: ``on_fenced`` is called
once, whatever is buffered is given up (the session's new copy owns the thread now), and every
later append raises ``WriterFenced`` without trying. ``take_over`` raises the fence to this
buffer's epoch — the new copy's first step, before it reads the journal.

``read_tail`` merges the buffered events (with provisional seqs) after what the store returns,
so the brain still sees the latest turns during an outage; if the store cannot be read at all,
only the buffer's events are returned (with nothing buffered that is ``JournalUnavailable``).
Other reads pass straight through to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from journal.errors import JournalUnavailable, WriterFenced
from journal.events import JournalEvent, NewEvent, ThreadRef
from journal.store import JournalStore, WriterFence

log = logging.getLogger(__name__)


class JournalBufferFull(JournalUnavailable):
    code = "journal_buffer_full"
    retryable = False


class BufferedJournal:
    def __init__(
        self,
        store: JournalStore,
        *,
        on_outage: Callable[[str], None],
        on_recovered: Callable[[], None],
        on_overflow: Callable[[], None],
        max_buffered: int = 256,
        append_timeout: float = 3.0,
        retry_initial: float = 0.2,
        retry_max: float = 5.0,
        fence: WriterFence | None = None,
        on_fenced: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.fence_as = fence
        self.on_fenced = on_fenced
        self.fenced = False
        """The store refused this writer's epoch: nothing more is written (module doc)."""
        self.on_outage = on_outage
        self.on_recovered = on_recovered
        self.on_overflow = on_overflow
        self.max_buffered = max_buffered
        self.append_timeout = append_timeout
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self._buffer: list[tuple[ThreadRef, NewEvent]] = []
        self._retry: asyncio.Task[None] | None = None
        self._in_flight = asyncio.Lock()

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        # One direct write at a time: an append made while an earlier one is still in flight
        # waits for it, so if that one fails and is buffered, this one queues behind it.
        async with self._in_flight:
            if self.fenced:
                raise WriterFenced("this session was continued elsewhere")
            if not self._buffer:
                try:
                    async with asyncio.timeout(self.append_timeout):
                        return await self._write(thread, events)
                except WriterFenced:
                    self._fenced()
                    raise
                except (JournalUnavailable, TimeoutError) as e:
                    log.warning("journal unavailable, buffering: %s", e)
                    self.on_outage(str(e) or "the journal did not answer in time")
            self._keep(thread, events)
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._flush(), name="journal-retry")
        return [self._provisional(thread, e, i) for i, e in enumerate(events)]

    async def append_fenced(
        self, thread: ThreadRef, events: Sequence[NewEvent], fence: WriterFence
    ) -> list[JournalEvent]:
        """Straight to the store (not buffered): for a writer other than this buffer's."""
        return await self.store.append_fenced(thread, events, fence)

    async def fence(self, thread: ThreadRef, fence: WriterFence) -> None:
        await self.store.fence(thread, fence)

    async def take_over(self, thread: ThreadRef) -> None:
        """Raise the store's fence to this buffer's epoch (module doc): returns once every
        append of an older copy of the session has landed or can no longer land."""
        assert self.fence_as is not None, "a buffer without a fence takes nothing over"
        await self.store.fence(thread, self.fence_as)

    async def _write(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if self.fence_as is None:
            return await self.store.append(thread, events)
        return await self.store.append_fenced(thread, events, self.fence_as)

    def _fenced(self) -> None:
        if self.fenced:
            return
        self.fenced = True
        if self._buffer:
            log.info("journal writer fenced: %d buffered events given up", len(self._buffer))
            self._buffer.clear()
        if self.on_fenced is not None:
            self.on_fenced()

    def _keep(self, thread: ThreadRef, events: Sequence[NewEvent]) -> None:
        if len(self._buffer) + len(events) > self.max_buffered:
            self.on_overflow()
            raise JournalBufferFull(f"more than {self.max_buffered} events could not be saved")
        self._buffer.extend((thread, e) for e in events)

    async def _flush(self) -> None:
        delay = self.retry_initial
        while self._buffer:
            thread, event = self._buffer[0]
            batch = [e for t, e in self._buffer if t == thread]
            try:
                async with asyncio.timeout(self.append_timeout):
                    await self._write(thread, batch[:100])
            except WriterFenced:
                self._fenced()
                return
            except (JournalUnavailable, TimeoutError) as e:
                log.info("journal still unavailable, retrying in %.1fs: %s", delay, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max)
                continue
            written = {id(e) for e in batch[:100]}
            self._buffer = [(t, e) for t, e in self._buffer if id(e) not in written]
            delay = self.retry_initial
        self.on_recovered()

    def _provisional(self, thread: ThreadRef, event: NewEvent, index: int) -> JournalEvent:
        return JournalEvent(
            thread=thread,
            seq=-(len(self._buffer) - index),
            event_id=event.event_id,
            kind=event.kind,
            payload=event.payload,
            voice_session_id=event.voice_session_id,
            created_at=datetime.now(UTC),
        )

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        return await self.store.read(thread, after_seq=after_seq, limit=limit)

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        pending = [
            self._provisional(t, e, i) for i, (t, e) in enumerate(self._buffer) if t == thread
        ]
        try:
            async with asyncio.timeout(self.append_timeout):
                stored = await self.store.read_tail(thread, count)
        except (JournalUnavailable, TimeoutError) as e:
            if not pending:
                if isinstance(e, JournalUnavailable):
                    raise
                raise JournalUnavailable(
                    f"the journal did not answer within {self.append_timeout} s"
                ) from e
            stored = []
        seen = {e.event_id for e in stored}
        merged = stored + [e for e in pending if e.event_id not in seen]
        return merged[-count:] if count > 0 else []

    async def has_session(self, thread: ThreadRef, voice_session_id: str) -> bool:
        return await self.store.has_session(thread, voice_session_id)

    async def delete_thread(self, thread: ThreadRef) -> int:
        return await self.store.delete_thread(thread)

    async def close(self, timeout: float = 5.0) -> None:
        """Give buffered events a last chance to be written, then stop retrying."""
        retry = self._retry
        if retry is None or retry.done():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(retry), timeout)
        if not retry.done():
            retry.cancel()
            with contextlib.suppress(BaseException):
                await retry
            log.error("closing with %d journal events unsaved", len(self._buffer))
