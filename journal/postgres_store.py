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
- Group commit (``journal/group_commit.py``): concurrent appends share transactions; each
  group is one ``journal_append_group`` statement that keeps these rules per batch, and a
  thread whose head row is locked elsewhere, or a batch PostgreSQL refuses, is appended on its
  own with ``journal_append``. ``group_commit=False`` appends each batch in its own
  transaction.
- Writer fences (rule 4, ``0004_writer_fences.sql``): ``fence`` raises a writer's epoch in
  ``journal_writer_fences`` under the thread's head lock, so it waits for the appends in flight;
  ``append_fenced`` runs ``journal_append_fenced`` on its own (never grouped), which checks the
  fence under the same lock before appending.
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
import contextlib
import json
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg

from journal.errors import EventConflict, JournalUnavailable, WriterFenced
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef, canonical_json
from journal.group_commit import Batch, GroupCommit, Stored
from journal.store import WriterFence

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_SQLSTATE = "OR409"
FENCED_SQLSTATE = "OR412"

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


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, _TRANSIENT_ERRORS):
        return True
    # asyncpg reports a call on a connection that already went away as an InterfaceError.
    return isinstance(error, asyncpg.InterfaceError) and "connection is closed" in str(error)


class PostgresJournalStore:
    """``JournalStore`` on an asyncpg pool whose database has the journal migrations applied.

    Settings: ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a pooled
    connection; a failed call is tried at most ``max_attempts`` times within ``retry_deadline``
    seconds; ``max_batch`` bounds the events of one append. Group commit (``group_commit.py``):
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
        self._pool = pool
        self._query_timeout = query_timeout
        self._acquire_timeout = acquire_timeout
        self._max_attempts = max_attempts
        self._retry_deadline = retry_deadline
        self._max_batch = max_batch
        groups = GroupCommit(  # checks the group settings even when group commit is off
            write_group=self._append_group,
            append_alone=self._append_alone,
            lanes=lanes,
            max_group_appends=max_group_appends,
            max_group_events=max_group_events,
        )
        self._groups = groups if group_commit else None

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        batch = self._prepare(thread, events)
        if batch is None:
            return []
        if self._groups is not None:
            stored = await self._groups.submit(batch)
        else:
            stored = await self._append_alone(batch)
        return self._stored(thread, events, stored)

    @staticmethod
    def _stored(
        thread: ThreadRef, events: Sequence[NewEvent], stored: Stored
    ) -> list[JournalEvent]:
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

    def _prepare(self, thread: ThreadRef, events: Sequence[NewEvent]) -> Batch | None:
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
        kept = list(unique.values())
        return Batch(
            thread=thread,
            event_ids=list(unique),
            kinds=[e.kind.value for e in kept],
            payloads=[canonical_json(e.payload) for e in kept],
            fingerprints=list(fingerprints.values()),
            sessions=[e.voice_session_id for e in kept],
        )

    async def append_fenced(
        self, thread: ThreadRef, events: Sequence[NewEvent], fence: WriterFence
    ) -> list[JournalEvent]:
        batch = self._prepare(thread, events)
        if batch is None:
            return []
        # Never grouped: the fence is checked under the thread's head lock, in the append's
        # own transaction (``journal_append_fenced``).
        return self._stored(thread, events, await self._append_alone(batch, fence))

    async def fence(self, thread: ThreadRef, fence: WriterFence) -> None:
        async def call(conn: Any) -> None:
            await conn.execute(
                "SELECT journal_fence($1, $2, $3, $4, $5)",
                thread.tenant, thread.user, thread.thread_id, fence.writer, fence.epoch,
                timeout=self._query_timeout,
            )  # fmt: skip

        await self._run("fence", call)  # idempotent: the fence only ever rises

    async def _append_alone(self, batch: Batch, fence: WriterFence | None = None) -> Stored:
        """One batch, one ``journal_append`` transaction (no group); ``journal_append_fenced``
        with a fence."""
        thread = batch.thread
        args: tuple[Any, ...] = (
            thread.tenant,
            thread.user,
            thread.thread_id,
            batch.event_ids,
            batch.kinds,
            batch.payloads,
            batch.fingerprints,
            batch.sessions,
        )
        function = "journal_append($1, $2, $3, $4, $5, $6::jsonb[], $7, $8)"
        if fence is not None:
            args = (*args, fence.writer, fence.epoch)
            function = "journal_append_fenced($1, $2, $3, $4, $5, $6::jsonb[], $7, $8, $9, $10)"

        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                f"SELECT o_event_id, o_seq, o_created_at FROM {function}",
                *args,
                timeout=self._query_timeout,
            )
            return rows

        try:
            rows = await self._run("append", call)
        except asyncpg.PostgresError as e:
            if e.sqlstate == CONFLICT_SQLSTATE:
                raise EventConflict(str(e)) from e
            if e.sqlstate == FENCED_SQLSTATE:
                raise WriterFenced(str(e)) from e
            if isinstance(e, asyncpg.DataError):
                # e.g. a NUL character or NaN in a payload: PostgreSQL's jsonb cannot hold it.
                raise ValueError(f"event payload cannot be stored: {e}") from e
            raise
        return {row["o_event_id"]: (row["o_seq"], row["o_created_at"]) for row in rows}

    async def _append_group(self, group: list[Batch]) -> list[Any]:
        """One group, one ``journal_append_group`` transaction; its rows, one per event.

        The group's threads are listed once each; every event names its thread's (1-based)
        position in that list and its batch's index in ``group``.
        """
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
        for n, batch in enumerate(group):
            thread = batch.thread
            number = thread_no.get(thread)
            if number is None:
                number = thread_no[thread] = len(thread_no) + 1
                tenants.append(thread.tenant)
                users.append(thread.user)
                threads.append(thread.thread_id)
            size = len(batch.event_ids)
            thread_of.extend([number] * size)
            appends.extend([n] * size)
            ids.extend(batch.event_ids)
            kinds.extend(batch.kinds)
            payloads.extend(batch.payloads)
            fingerprints.extend(batch.fingerprints)
            sessions.extend(batch.sessions)

        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                "SELECT o_append, o_event_id, o_seq, o_created_at, o_conflict, o_busy FROM"
                " journal_append_group($1, $2, $3, $4, $5, $6, $7, $8::jsonb[], $9, $10)",
                *args,
                timeout=self._query_timeout,
            )
            return rows

        return await self._run("append", call)

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
                try:
                    return await call(conn)
                except Exception as e:
                    if _is_transient(e) and not isinstance(
                        e, asyncpg.exceptions.TransactionRollbackError
                    ):
                        # The connection such a failure leaves may be stuck ("another operation
                        # is in progress") for good: drop it, so the retry gets a new one.
                        with contextlib.suppress(asyncpg.InterfaceError):  # already gone
                            conn.terminate()
                    raise
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
