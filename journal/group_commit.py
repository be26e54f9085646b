"""Group commit for the PostgreSQL journal: concurrent appends share one transaction.

Theory of operation
-------------------
``GroupCommit`` forms groups; the store (``journal/postgres_store.py``) writes them, a group
with ``journal_append_group`` (``journal/migrations/0003_append_group.sql``) and a single batch
with ``journal_append``, each retried on a fresh connection after a transient failure.

Rule 1 (lanes): each thread belongs to one of ``lanes`` lanes (by hash). A lane has a queue
  and, while the queue is not empty, one writer task; an idle lane has no task.
Rule 2 (groups): the writer takes everything queued, in queue order, up to
  ``max_group_appends`` batches and ``max_group_events`` events (a larger batch goes alone), and
  writes it as one statement — one round trip, one transaction, one commit for batches of many
  threads and several batches of one thread. Nothing waits on purpose: an idle lane flushes a
  lone append at once, and what arrives during a flush goes in the next, so the added wait is
  bounded by one flush. A caller's ``submit`` returns when its group has committed.
Rule 3 (per batch): a group keeps the rules of ``journal_append`` for each batch: contiguous
  seqs in queue order, a conflicting batch refused whole (``EventConflict`` for that caller
  only, no seq consumed).
Rule 4 (retries racing originals): a batch reusing an event id of an earlier batch of its
  thread in the group waits for the next group (which finds the stored events), and every
  later batch of its thread with it, so each thread's batches keep their order.
Rule 5 (detached threads): head rows are locked with ``SKIP LOCKED``; a thread whose row
  another transaction holds (another process, ``delete_thread``) comes back *busy*, and its
  batches are *detached*: appended one by one with ``journal_append`` (which waits for the
  lock) by a task of the thread's own, with the thread's later batches queued behind them. So
  one busy thread holds up neither the lane nor its group.
Rule 6 (bad data): a group refused for a non-transient reason (PostgreSQL refusing some
  batch's data) is retried as detached single appends, so only the bad batch fails. Batches
  whose payloads jsonb may refuse (NUL, NaN, ±Infinity) are detached before grouping.
Rule 7 (cancellation): a caller cancelled while its batch is queued removes it (never
  written); once sent, it commits or not with its group. Writer tasks cancelled (the loop
  shutting down) cancel whatever they still hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from journal.errors import EventConflict, JournalUnavailable
from journal.events import ThreadRef

logger = logging.getLogger(__name__)

Stored = dict[str, tuple[int, datetime]]
"""What an append learns per event id: its seq and created_at."""


def _may_be_refused(payload_json: str) -> bool:
    """Whether jsonb might refuse this JSON text (a NUL character, NaN, ±Infinity).

    Such a batch is written alone, so its refusal never costs another caller's batch a second
    round trip. A false positive (say, the word "NaN" in a transcript) only costs batching.
    """
    return "\\u0000" in payload_json or "NaN" in payload_json or "Infinity" in payload_json


@dataclass(eq=False, slots=True)
class Batch:
    """One caller's batch (each event id once), as sent to PostgreSQL."""

    thread: ThreadRef
    event_ids: list[str]
    kinds: list[str]
    payloads: list[str]
    fingerprints: list[str]
    sessions: list[str | None]
    alone: bool = field(init=False)
    """Never grouped with other batches (rule 6)."""
    future: asyncio.Future[Stored] | None = None
    """Set while the batch waits for a group (``GroupCommit.submit``)."""

    def __post_init__(self) -> None:
        self.alone = any(_may_be_refused(p) for p in self.payloads)


@dataclass(eq=False, slots=True)
class _Lane:
    """Batches waiting for a group, and the task writing them (None when idle)."""

    queue: deque[Batch] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    detached: dict[ThreadRef, deque[Batch]] = field(default_factory=dict)
    """Per thread, batches appended one by one (rule 5, ``GroupCommit._detach``)."""
    detached_tasks: dict[ThreadRef, asyncio.Task[None]] = field(default_factory=dict)


def _waiting(batch: Batch) -> bool:
    """Whether the batch's caller still waits for its outcome."""
    return batch.future is not None and not batch.future.done()


def _resolve(batch: Batch, stored: Stored) -> None:
    future = batch.future
    if future is not None and not future.done():
        future.set_result(stored)


def _fail(batch: Batch, error: Exception, *, cause: BaseException | None = None) -> None:
    if cause is not None:
        error.__cause__ = cause
    future = batch.future
    if future is not None and not future.done():
        future.set_exception(error)


def _cancel(batch: Batch) -> None:
    if batch.future is not None:
        batch.future.cancel()


class GroupCommit:
    """Queues batches on lanes and writes them in groups (module docstring).

    ``write_group`` runs ``journal_append_group`` for a group and returns its rows (raising
    ``JournalUnavailable`` once retries are exhausted); ``append_alone`` appends one batch with
    ``journal_append`` and returns what it stored.
    """

    def __init__(
        self,
        *,
        write_group: Callable[[list[Batch]], Awaitable[list[Any]]],
        append_alone: Callable[[Batch], Awaitable[Stored]],
        lanes: int,
        max_group_appends: int,
        max_group_events: int,
    ) -> None:
        if lanes < 1 or max_group_appends < 1 or max_group_events < 1:
            raise ValueError("lanes, max_group_appends and max_group_events must be positive")
        self._write_group = write_group
        self._append_alone = append_alone
        self._lanes = [_Lane() for _ in range(lanes)]
        self._max_group_appends = max_group_appends
        self._max_group_events = max_group_events

    async def submit(self, batch: Batch) -> Stored:
        """Queue a batch on its thread's lane and wait until it has committed (or failed)."""
        loop = asyncio.get_running_loop()
        batch.future = loop.create_future()
        lane = self._lanes[hash(batch.thread) % len(self._lanes)]
        lane.queue.append(batch)
        if lane.task is None:
            lane.task = loop.create_task(self._drain(lane), name="journal-group-commit")
        # Cancelling the caller cancels the future: a batch still queued is then never written
        # (it is skipped); one already sent commits or not with its group.
        return await batch.future

    async def _drain(self, lane: _Lane) -> None:
        """A lane's writer: flush groups until the queue is empty, then end."""
        group: list[Batch] = []
        try:
            while lane.queue:
                group = self._take_group(lane)
                if group:
                    try:
                        await self._flush(lane, group)
                    except Exception as e:  # a bug: fail this group, keep the lane going
                        logger.exception("journal append group failed")
                        for batch in group:
                            _fail(batch, RuntimeError(f"journal append failed: {e!r}"), cause=e)
                group = []
        finally:
            lane.task = None
            # Only when this task is cancelled (the loop shutting down) is anything left here.
            for batch in (*group, *lane.queue):
                _cancel(batch)
            lane.queue.clear()

    def _take_group(self, lane: _Lane) -> list[Batch]:
        """The next group from the lane's queue, in queue order; the rest stays queued.

        Bounded by ``max_group_appends`` batches and ``max_group_events`` events (rule 2);
        a batch reusing an id of its thread's batches in this group waits (rule 4); batches of
        a detached thread, and batches that should not share a group, are detached (rules 5
        and 6).
        """
        group: list[Batch] = []
        rest: deque[Batch] = deque()
        blocked: set[ThreadRef] = set()
        ids: dict[ThreadRef, set[str]] = {}
        events = 0
        queue = lane.queue
        while queue:
            batch = queue.popleft()
            if not _waiting(batch):
                continue  # its caller was cancelled
            if batch.thread in blocked:
                rest.append(batch)
                continue
            if batch.alone or batch.thread in lane.detached:
                if batch.thread in ids:  # after this group's batches of the thread
                    blocked.add(batch.thread)
                    rest.append(batch)
                else:
                    self._detach(lane, batch)
                continue
            size = len(batch.event_ids)
            if group and (
                len(group) >= self._max_group_appends or events + size > self._max_group_events
            ):
                rest.append(batch)
                break
            seen = ids.get(batch.thread)
            if seen is not None and not seen.isdisjoint(batch.event_ids):
                blocked.add(batch.thread)
                rest.append(batch)
                continue
            group.append(batch)
            events += size
            ids.setdefault(batch.thread, set()).update(batch.event_ids)
        rest.extend(queue)
        lane.queue = rest
        return group

    async def _flush(self, lane: _Lane, group: list[Batch]) -> None:
        """Write one group and settle its callers. Raises only when cancelled."""
        try:
            rows = await self._write_group(group)
        except JournalUnavailable as e:
            for batch in group:
                _fail(batch, JournalUnavailable(str(e)), cause=e)
            return
        except Exception as e:
            # Not transient, so caused by some batch's data (jsonb refusing a payload): isolate
            # it by appending each batch of the group on its own, each with its own outcome.
            logger.warning(
                "journal append group of %d batches refused (%s); appending them one by one",
                len(group),
                type(e).__name__,
            )
            for batch in group:
                self._detach(lane, batch)
            return
        rows_of: list[list[Any]] = [[] for _ in group]
        for row in rows:
            rows_of[row["o_append"]].append(row)
        for batch, own in zip(group, rows_of, strict=True):
            conflict = next((r["o_event_id"] for r in own if r["o_conflict"]), None)
            if [r["o_event_id"] for r in own] != batch.event_ids:
                _fail(batch, RuntimeError("journal_append_group returned other events"))
            elif own[0]["o_busy"]:
                # Another transaction holds the thread's head row: wait for it off the lane.
                self._detach(lane, batch)
            elif conflict is not None:
                _fail(batch, EventConflict(f"event {conflict} exists with other content"))
            else:
                _resolve(batch, {r["o_event_id"]: (r["o_seq"], r["o_created_at"]) for r in own})

    def _detach(self, lane: _Lane, batch: Batch) -> None:
        """Append ``batch`` on its own, after its thread's batches already detached (rule 5)."""
        waiting = lane.detached.get(batch.thread)
        if waiting is None:
            waiting = lane.detached[batch.thread] = deque()
            lane.detached_tasks[batch.thread] = asyncio.get_running_loop().create_task(
                self._drain_detached(lane, batch.thread, waiting),
                name="journal-append-detached",
            )
        waiting.append(batch)

    async def _drain_detached(self, lane: _Lane, thread: ThreadRef, waiting: deque[Batch]) -> None:
        batch: Batch | None = None
        try:
            while waiting:
                batch = waiting.popleft()
                if _waiting(batch):
                    try:
                        stored = await self._append_alone(batch)
                    except Exception as e:
                        _fail(batch, e)
                    else:
                        _resolve(batch, stored)
                batch = None
        finally:
            del lane.detached[thread]
            del lane.detached_tasks[thread]
            # Only when this task is cancelled (the loop shutting down) is anything left here.
            for left in (*([batch] if batch else []), *waiting):
                _cancel(left)
