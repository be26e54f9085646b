"""The model's reading of facts the patterns missed, run in the background (``model_extraction``).

Theory of operation
-------------------
One ``FactReader`` per process, beside the store it writes to; sessions hand it work and go on.

Rule 1. ``offer`` never waits: a statement goes into a bounded queue (``max_waiting``); a full
        queue drops it, counted and logged without content. The person's turn is never
        slowed by it.
Rule 2. One worker reads the queue in order. Each read is one constrained-JSON call on the
        memory model in the *background* class (SPEC RT-11: it runs in the pauses and yields
        to any person's turn; the model queue bounds its running); the save is bounded by
        ``timeout_s``.
Rule 3. Before it saves, the worker asks the session's switch again (memory may have been
        switched off meanwhile); the entry is saved as an extraction under the session's
        tenant, user and role — never from anything the model wrote about who it is.
Rule 4. The work belongs to the process, not the session: a session that ends (or is
        continued on another process) does not cancel a read it handed over. What is still
        queued when the process stops is lost (the patterns' entries were saved at once);
        ``close`` stops the worker.
Rule 5. A failed read (model error, timeout, store error) is counted and logged by type; it
        never reaches the person.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from memory.entries import MemoryDraft, MemorySource
from memory.model_extraction import MAX_TOKENS, SCHEMA, messages, read_answer
from memory.store import MemoryStore
from memory.thread_consolidation import JsonModel

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FactRead:
    """One statement to read, with whose it is (Rule 3)."""

    tenant: str
    user: str
    role_id: str
    statement: str
    source: MemorySource
    is_enabled: Callable[[], Awaitable[bool]]


@dataclass
class FactReaderCounters:
    offered: int = 0
    dropped: int = 0
    read: int = 0
    saved: int = 0
    failed: int = 0
    failure_types: dict[str, int] = field(default_factory=dict)


class FactReader:
    def __init__(
        self,
        model: JsonModel,
        store: MemoryStore,
        *,
        max_waiting: int = 256,
        timeout_s: float = 60.0,
    ) -> None:
        self.model = model
        self.store = store
        self.timeout_s = timeout_s
        self.counters = FactReaderCounters()
        self._queue: asyncio.Queue[FactRead] = asyncio.Queue(max_waiting)
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._pending = 0

    @property
    def pending(self) -> int:
        """Statements offered and not yet read (queued or being read)."""
        return self._pending

    def offer(self, read: FactRead) -> bool:
        """Rule 1: queue ``read``; False when it was dropped (full or closed)."""
        self.counters.offered += 1
        if self._closed:
            return False
        try:
            self._queue.put_nowait(read)
        except asyncio.QueueFull:
            self.counters.dropped += 1
            log.warning("memory fact reader: queue full, a statement was not read")
            return False
        self._pending += 1
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(
                self._work(), name="memory-fact-reader"
            )
        return True

    async def drained(self) -> None:
        """Wait until everything offered so far was read (tests, benchmarks)."""
        await self._queue.join()

    async def close(self) -> None:
        """Rule 4: stop the worker; what is still queued is not read."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    async def _work(self) -> None:
        while True:
            read = await self._queue.get()
            try:
                await self._read(read)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Rule 5: a failed read never stops the worker
                name = type(e).__name__
                self.counters.failed += 1
                self.counters.failure_types[name] = self.counters.failure_types.get(name, 0) + 1
                log.warning("memory fact reader: a read failed (%s)", name)
            finally:
                self._pending -= 1
                self._queue.task_done()

    async def _read(self, read: FactRead) -> None:
        answer = await self.model.complete_json(
            messages(read.statement),
            SCHEMA,
            max_tokens=MAX_TOKENS,
            lane=f"memory-facts:{read.tenant}",
            background=True,
        )
        self.counters.read += 1
        found = read_answer(answer, read.statement)
        if found is None or not await read.is_enabled():
            return
        draft = MemoryDraft(found.kind, found.content, found.key, "extraction", read.source)
        async with asyncio.timeout(self.timeout_s):
            outcome = await self.store.save(read.tenant, read.user, read.role_id, draft)
        if outcome.changed:
            self.counters.saved += 1
