"""The journal on PostgreSQL (SPEC J-2): the rules of ``journal/store.py`` kept by the database.

Theory of operation
-------------------
Tables and the ``journal_append`` function live in ``journal/migrations/0001_journal.sql``,
``journal_append_group`` in ``0003_append_group.sql``.

- Order (rule 2): each thread has a head row in ``journal_threads`` holding its last seq. An
  append locks that row (``SELECT … FOR UPDATE``) for its transaction, so appends to one thread
  queue behind each other and each batch takes the next contiguous seqs; appends to different
  threads do not wait for each other. ``(tenant, user_id, thread_id, seq)`` is the primary key,
  so a gap-free, duplicate-free order is also what the database enforces.
- Idempotency (rule 3): ``(tenant, user_id, thread_id, event_id)`` is unique and each row keeps
  the fingerprint the event had when first appended. Under the head lock, ``journal_append``
  first checks every id already stored: a different fingerprint raises (SQLSTATE ``OR409``,
  mapped to ``EventConflict``) before anything is written, so a batch is all-or-nothing; ids
  already stored with the same fingerprint keep their seq and only the others are inserted.
- Group commit: concurrent appends share transactions. Each thread belongs to one of ``lanes``
  lanes (by hash); a lane has a queue and, while the queue is not empty, one writer task that
  takes everything queued (in order, at most ``max_group_appends`` batches and
  ``max_group_events`` events) and writes it with one ``journal_append_group`` statement — one
  round trip, one transaction, one commit for batches of many threads and several batches of
  one thread (in queue order). Nothing waits on purpose: an idle lane flushes a lone append at
  once, and what arrives during a flush goes in the next, so the added wait is bounded by one
  flush. A caller's ``append`` returns when its group has committed. Per batch, the group
  keeps the rules of ``journal_append``: contiguous seqs in queue order, a conflicting batch
  refused whole (``EventConflict`` for that caller only, no seq consumed). A batch reusing an
  id of an earlier batch of its thread in the group (a retry racing the original) waits for
  the next group, which finds the stored events. Head rows are locked with ``SKIP LOCKED``: a
  thread whose row another transaction holds (another process, ``delete_thread``) is left out
  and its batches are *detached* — appended one by one with ``journal_append`` by a task of
  their own, which waits for the lock, with the thread's later batches queued behind them — so
  one busy thread holds up neither the lane nor its group. A group refused for any other,
  non-transient reason (PostgreSQL refusing some batch's data) is retried as detached single
  appends, so only the bad batch fails; payloads jsonb may refuse (NUL, NaN) are detached
  before grouping. A caller cancelled while its batch is queued removes it (never written);
  once sent, it commits or not with its group. ``group_commit=False`` appends each batch in
  its own transaction.
- One append (or one group) is one statement, one round trip, one transaction. If the
  connection dies (``pg_terminate_backend``, a restart, a network drop) or the call times out,
  we cannot know whether it committed — so the same batch (or group), with the same event ids,
  is sent again on a fresh connection. Either it had committed (the retry finds every id and
  returns the stored seqs) or it had not (the retry appends it): never lost, never duplicated,
  never a false conflict.
  Reads are retried the same way. After ``max_attempts`` or ``retry_deadline`` the call raises
  ``JournalUnavailable``.
- ``read`` and ``read_tail`` walk the primary key index from a seq, so their cost grows with
  the number of events returned, not with the thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from journal.errors import EventConflict, JournalUnavailable
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef, canonical_json

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_SQLSTATE = "OR409"

_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,  # class 08, including "connection was closed"
    asyncpg.exceptions.OperatorInterventionError,  # 57: terminated backend, shutdown, cancel
    asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections
    asyncpg.exceptions.TransactionRollbackError,  # 40: serialization failure, deadlock
    # A backend terminated while its connection sat idle in the pool sends an unsolicited
    # error that leaves asyncpg's protocol stuck ("another operation is in progress") until
    # the socket closes; the pool then drops that connection. Safe to retry: every call here
    # is idempotent.
    asyncpg.exceptions.InternalClientError,
)

_COLUMNS = "seq, event_id, kind, payload::text AS payload, voice_session_id, created_at"
_SCOPE = "tenant = $1 AND user_id = $2 AND thread_id = $3"


_Stored = dict[str, tuple[int, datetime]]
"""What an append learns per event id: its seq and created_at."""


@dataclass(eq=False, slots=True)
class _Append:
    """One caller's batch (each event id once), as sent to PostgreSQL."""

    thread: ThreadRef
    event_ids: list[str]
    kinds: list[str]
    payloads: list[str]
    fingerprints: list[str]
    sessions: list[str | None]
    alone: bool
    """Never grouped with other batches (see ``_may_be_refused``)."""
    future: asyncio.Future[_Stored] | None = None


@dataclass(eq=False, slots=True)
class _Lane:
    """Batches waiting for a group, and the task writing them (None when idle)."""

    queue: deque[_Append] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    detached: dict[ThreadRef, deque[_Append]] = field(default_factory=dict)
    """Per thread, batches appended one by one (see ``PostgresJournalStore._detach``)."""
    detached_tasks: dict[ThreadRef, asyncio.Task[None]] = field(default_factory=dict)


def _may_be_refused(payload_json: str) -> bool:
    """Whether jsonb might refuse this JSON text (a NUL character, NaN, ±Infinity).

    Such a batch is written alone, so its refusal never costs another caller's batch a second
    round trip. A false positive (say, the word "NaN" in a transcript) only costs batching.
    """
    return "\\u0000" in payload_json or "NaN" in payload_json or "Infinity" in payload_json


async def _settle(pending: _Append, result: Awaitable[_Stored]) -> None:
    """Await ``result`` and hand its outcome to the batch's caller (if still waiting)."""
    try:
        stored = await result
    except Exception as e:
        _fail(pending, e)
    else:
        if pending.future is not None and not pending.future.done():
            pending.future.set_result(stored)


def _cancel(pending: _Append) -> None:
    if pending.future is not None:
        pending.future.cancel()


def _fail(pending: _Append, error: Exception, *, cause: BaseException | None = None) -> None:
    if cause is not None:
        error.__cause__ = cause
    if pending.future is not None and not pending.future.done():
        pending.future.set_exception(error)


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, _TRANSIENT_ERRORS):
        return True
    # asyncpg reports a call on a connection that already went away as an InterfaceError.
    return isinstance(error, asyncpg.InterfaceError) and "connection is closed" in str(error)


class PostgresJournalStore:
    """``JournalStore`` on an asyncpg pool whose database has the journal migrations applied.

    Settings: ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a pooled
    connection; a failed call is tried at most ``max_attempts`` times within ``retry_deadline``
    seconds; ``max_batch`` bounds the events of one append. Group commit (module docstring):
    ``group_commit`` turns it on (default), ``lanes`` writers run at once (each holding one
    pooled connection while it flushes), a group carries at most ``max_group_appends`` batches
    and ``max_group_events`` events (a larger batch goes alone).
    """

    def __init__(
        self,
        pool: Any,
        *,
        query_timeout: float = 10.0,
        acquire_timeout: float = 10.0,
        max_attempts: int = 6,
        retry_deadline: float = 30.0,
        max_batch: int = 1000,
        group_commit: bool = True,
        lanes: int = 2,
        max_group_appends: int = 256,
        max_group_events: int = 1000,
    ) -> None:
        if lanes < 1 or max_group_appends < 1 or max_group_events < 1:
            raise ValueError("lanes, max_group_appends and max_group_events must be positive")
        self._pool = pool
        self._query_timeout = query_timeout
        self._acquire_timeout = acquire_timeout
        self._max_attempts = max_attempts
        self._retry_deadline = retry_deadline
        self._max_batch = max_batch
        self._group_commit = group_commit
        self._lanes = [_Lane() for _ in range(lanes)]
        self._max_group_appends = max_group_appends
        self._max_group_events = max_group_events

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        pending = self._prepare(thread, events)
        if pending is None:
            return []
        if self._group_commit:
            stored = await self._submit(pending)
        else:
            stored = await self._append_alone(pending)
        out: list[JournalEvent] = []
        for event in events:
            seq, created_at = stored[event.event_id]
            # Same fingerprint as the stored event, so the same kind, payload and session.
            out.append(
                JournalEvent(
                    thread=thread,
                    seq=seq,
                    event_id=event.event_id,
                    kind=event.kind,
                    payload=event.payload,
                    voice_session_id=event.voice_session_id,
                    created_at=created_at,
                )
            )
        return out

    def _prepare(self, thread: ThreadRef, events: Sequence[NewEvent]) -> _Append | None:
        """Check a batch before any I/O; its events with each id once, or None when empty."""
        if len(events) > self._max_batch:
            raise ValueError(f"a batch holds at most {self._max_batch} events, got {len(events)}")
        unique: dict[str, NewEvent] = {}
        fingerprints: dict[str, str] = {}
        for event in events:
            fingerprint = event.fingerprint()
            earlier = fingerprints.get(event.event_id)
            if earlier is None:
                unique[event.event_id] = event
                fingerprints[event.event_id] = fingerprint
            elif earlier != fingerprint:
                raise EventConflict(f"event {event.event_id} twice in one batch")
        if not unique:
            return None
        batch = list(unique.values())
        payloads = [canonical_json(e.payload) for e in batch]
        return _Append(
            thread=thread,
            event_ids=list(unique),
            kinds=[e.kind.value for e in batch],
            payloads=payloads,
            fingerprints=list(fingerprints.values()),
            sessions=[e.voice_session_id for e in batch],
            alone=any(_may_be_refused(p) for p in payloads),
        )

    async def _append_alone(self, pending: _Append) -> _Stored:
        """One batch, one ``journal_append`` transaction (no group)."""
        thread = pending.thread
        args = (
            thread.tenant,
            thread.user,
            thread.thread_id,
            pending.event_ids,
            pending.kinds,
            pending.payloads,
            pending.fingerprints,
            pending.sessions,
        )

        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT o_event_id, o_seq, o_created_at"
                " FROM journal_append($1, $2, $3, $4, $5, $6::jsonb[], $7, $8)",
                *args,
                timeout=self._query_timeout,
            )
            return rows

        try:
            rows = await self._run("append", call)
        except asyncpg.PostgresError as e:
            if e.sqlstate == CONFLICT_SQLSTATE:
                raise EventConflict(str(e)) from e
            if isinstance(e, asyncpg.DataError):
                # e.g. a NUL character or NaN in a payload: PostgreSQL's jsonb cannot hold it.
                raise ValueError(f"event payload cannot be stored: {e}") from e
            raise
        return {row["o_event_id"]: (row["o_seq"], row["o_created_at"]) for row in rows}

    # --- group commit ---------------------------------------------------------------------

    async def _submit(self, pending: _Append) -> _Stored:
        """Queue a batch on its thread's lane and wait until it has committed (or failed)."""
        loop = asyncio.get_running_loop()
        pending.future = loop.create_future()
        lane = self._lanes[hash(pending.thread) % len(self._lanes)]
        lane.queue.append(pending)
        if lane.task is None:
            lane.task = loop.create_task(self._drain(lane), name="journal-group-commit")
        # Cancelling the caller cancels the future: a batch still queued is then never written
        # (it is skipped); one already sent commits or not with its group.
        return await pending.future

    async def _drain(self, lane: _Lane) -> None:
        """A lane's writer: flush groups until the queue is empty, then end."""
        group: list[_Append] = []
        try:
            while lane.queue:
                group = self._take_group(lane)
                if group:
                    try:
                        await self._flush(lane, group)
                    except Exception as e:  # a bug: fail this group, keep the lane going
                        logger.exception("journal append group failed")
                        for pending in group:
                            _fail(pending, RuntimeError(f"journal append failed: {e!r}"), cause=e)
                group = []
        finally:
            lane.task = None
            # Only when this task is cancelled (the loop shutting down) is anything left here.
            for pending in (*group, *lane.queue):
                _cancel(pending)
            lane.queue.clear()

    def _take_group(self, lane: _Lane) -> list[_Append]:
        """The next group from the lane's queue, in queue order; the rest stays queued.

        Bounded by ``max_group_appends`` batches and ``max_group_events`` events (a larger
        batch goes alone). A batch reusing an event id of an earlier batch of the same thread
        in this group (a retry racing the original) waits for a later group — and every later
        batch of its thread with it, so each thread's batches keep their order. Batches of a
        detached thread, and batches that should not share a group (``_may_be_refused``), go
        to the thread's detached queue.
        """
        group: list[_Append] = []
        rest: deque[_Append] = deque()
        blocked: set[ThreadRef] = set()
        ids: dict[ThreadRef, set[str]] = {}
        events = 0
        queue = lane.queue
        while queue:
            pending = queue.popleft()
            if pending.future is None or pending.future.done():
                continue  # its caller was cancelled
            if pending.thread in blocked:
                rest.append(pending)
                continue
            if pending.alone or pending.thread in lane.detached:
                if pending.thread in ids:  # after this group's batches of the thread
                    blocked.add(pending.thread)
                    rest.append(pending)
                else:
                    self._detach(lane, pending)
                continue
            size = len(pending.event_ids)
            if group and (
                len(group) >= self._max_group_appends or events + size > self._max_group_events
            ):
                rest.append(pending)
                break
            seen = ids.get(pending.thread)
            if seen is not None and not seen.isdisjoint(pending.event_ids):
                blocked.add(pending.thread)
                rest.append(pending)
                continue
            group.append(pending)
            events += size
            ids.setdefault(pending.thread, set()).update(pending.event_ids)
        rest.extend(queue)
        lane.queue = rest
        return group

    async def _flush(self, lane: _Lane, group: list[_Append]) -> None:
        """Write one group and settle its callers. Raises only when cancelled."""
        thread_no: dict[ThreadRef, int] = {}
        args: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [], [])
        (
            tenants,
            users,
            threads,
            thread_of,
            appends,
            ids,
            kinds,
            payloads,
            fingerprints,
            sessions,
        ) = args
        for n, pending in enumerate(group):
            thread = pending.thread
            number = thread_no.get(thread)
            if number is None:
                number = thread_no[thread] = len(thread_no) + 1
                tenants.append(thread.tenant)
                users.append(thread.user)
                threads.append(thread.thread_id)
            size = len(pending.event_ids)
            thread_of.extend([number] * size)
            appends.extend([n] * size)
            ids.extend(pending.event_ids)
            kinds.extend(pending.kinds)
            payloads.extend(pending.payloads)
            fingerprints.extend(pending.fingerprints)
            sessions.extend(pending.sessions)

        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT o_append, o_event_id, o_seq, o_created_at, o_conflict, o_busy FROM"
                " journal_append_group($1, $2, $3, $4, $5, $6, $7, $8::jsonb[], $9, $10)",
                *args,
                timeout=self._query_timeout,
            )
            return rows

        try:
            rows = await self._run("append", call)
        except JournalUnavailable as e:
            for pending in group:
                _fail(pending, JournalUnavailable(str(e)), cause=e)
            return
        except Exception as e:
            # Not transient, so caused by some batch's data (jsonb refusing a payload): isolate
            # it by appending each batch of the group on its own, each with its own outcome.
            logger.warning(
                "journal append group of %d batches refused (%s); appending them one by one",
                len(group),
                type(e).__name__,
            )
            for pending in group:
                self._detach(lane, pending)
            return
        rows_of: list[list[Any]] = [[] for _ in group]
        for row in rows:
            rows_of[row["o_append"]].append(row)
        for pending, own in zip(group, rows_of, strict=True):
            conflict = next((r["o_event_id"] for r in own if r["o_conflict"]), None)
            if [r["o_event_id"] for r in own] != pending.event_ids:
                _fail(pending, RuntimeError("journal_append_group returned other events"))
            elif own[0]["o_busy"]:
                # Another transaction holds the thread's head row: wait for it off the lane.
                self._detach(lane, pending)
            elif conflict is not None:
                _fail(pending, EventConflict(f"event {conflict} exists with other content"))
            elif pending.future is not None and not pending.future.done():
                pending.future.set_result(
                    {r["o_event_id"]: (r["o_seq"], r["o_created_at"]) for r in own}
                )

    def _detach(self, lane: _Lane, pending: _Append) -> None:
        """Append ``pending`` on its own, after its thread's batches already detached.

        While a thread has detached batches, its later batches join them (thread order), and
        one task per such thread appends them one by one with ``journal_append``, which waits
        for the head row's lock — so a thread whose lock is held elsewhere, or a batch PostgreSQL
        refuses, holds up neither the lane nor the other batches of its group.
        """
        waiting = lane.detached.get(pending.thread)
        if waiting is None:
            waiting = lane.detached[pending.thread] = deque()
            lane.detached_tasks[pending.thread] = asyncio.get_running_loop().create_task(
                self._drain_detached(lane, pending.thread, waiting),
                name="journal-append-detached",
            )
        waiting.append(pending)

    async def _drain_detached(
        self, lane: _Lane, thread: ThreadRef, waiting: deque[_Append]
    ) -> None:
        pending: _Append | None = None
        try:
            while waiting:
                pending = waiting.popleft()
                if pending.future is not None and not pending.future.done():
                    await _settle(pending, self._append_alone(pending))
                pending = None
        finally:
            del lane.detached[thread]
            del lane.detached_tasks[thread]
            # Only when this task is cancelled (the loop shutting down) is anything left here.
            for left in (*([pending] if pending else []), *waiting):
                _cancel(left)

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                f"SELECT {_COLUMNS} FROM journal_events WHERE {_SCOPE} AND seq > $4"
                " ORDER BY seq LIMIT $5",
                thread.tenant,
                thread.user,
                thread.thread_id,
                after_seq,
                None if limit is None else max(limit, 0),
                timeout=self._query_timeout,
            )
            return rows

        return [_event(thread, row) for row in await self._run("read", call)]

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        if count <= 0:
            return []

        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                f"SELECT {_COLUMNS} FROM journal_events WHERE {_SCOPE} ORDER BY seq DESC LIMIT $4",
                thread.tenant,
                thread.user,
                thread.thread_id,
                count,
                timeout=self._query_timeout,
            )
            return rows

        rows = await self._run("read_tail", call)
        return [_event(thread, row) for row in reversed(rows)]

    async def has_session(self, thread: ThreadRef, voice_session_id: str) -> bool:
        async def call(conn: Any) -> bool:
            found: bool = await conn.fetchval(
                f"SELECT EXISTS (SELECT 1 FROM journal_events WHERE {_SCOPE}"
                " AND voice_session_id = $4)",
                thread.tenant,
                thread.user,
                thread.thread_id,
                voice_session_id,
                timeout=self._query_timeout,
            )
            return found

        return await self._run("has_session", call)

    async def delete_thread(self, thread: ThreadRef) -> int:
        # Deleting the head row waits for appenders holding it and cascades to the events; the
        # head seq is the number of events (seqs run from 1 without gaps). A retry after a lost
        # reply finds nothing left and returns 0.
        async def call(conn: Any) -> int:
            removed: int | None = await conn.fetchval(
                f"DELETE FROM journal_threads WHERE {_SCOPE} RETURNING head_seq",
                thread.tenant,
                thread.user,
                thread.thread_id,
                timeout=self._query_timeout,
            )
            return removed or 0

        return await self._run("delete_thread", call)

    async def _run(self, operation: str, call: Callable[[Any], Awaitable[T]]) -> T:
        return await run_with_retries(
            self._pool,
            f"journal {operation}",
            call,
            acquire_timeout=self._acquire_timeout,
            max_attempts=self._max_attempts,
            retry_deadline=self._retry_deadline,
        )


async def run_with_retries(
    pool: Any,
    operation: str,
    call: Callable[[Any], Awaitable[T]],
    *,
    acquire_timeout: float,
    max_attempts: int,
    retry_deadline: float,
) -> T:
    """Run ``call`` on a pooled connection; on a transient failure, again on a fresh one.

    Only for idempotent calls. Raises ``JournalUnavailable`` after ``max_attempts`` or
    ``retry_deadline`` seconds; other errors propagate unchanged.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_deadline
    delay = 0.02
    attempt = 1
    while True:
        try:
            async with pool.acquire(timeout=acquire_timeout) as conn:
                return await call(conn)
        except Exception as e:
            if not _is_transient(e):
                raise
            if attempt >= max_attempts or loop.time() + delay > deadline:
                raise JournalUnavailable(
                    f"{operation} failed after {attempt} attempt(s): {type(e).__name__}: {e}"
                ) from e
            logger.warning(
                "%s failed (%s), retrying (attempt %d)", operation, type(e).__name__, attempt + 1
            )
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        delay = min(delay * 2, 1.0)
        attempt += 1


def _event(thread: ThreadRef, row: Any) -> JournalEvent:
    return JournalEvent(
        thread=thread,
        seq=row["seq"],
        event_id=row["event_id"],
        kind=EventKind(row["kind"]),
        payload=json.loads(row["payload"]),
        voice_session_id=row["voice_session_id"],
        created_at=row["created_at"],
    )
