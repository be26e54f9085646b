"""Summary checkpoints on PostgreSQL: the rules of ``journal/checkpoints.py`` kept by the database.

Theory of operation
-------------------
The table is ``journal_checkpoints`` (``journal/migrations/0002_checkpoints.sql``).

- Chain (rule 2): ``put`` is one ``INSERT … SELECT … WHERE`` that inserts only when the new
  checkpoint starts right after the thread's latest one and names its checksum. Two puts racing
  to extend the same chain both pass that check against the same latest row, and then collide
  on the primary key (``…, from_seq``): ``ON CONFLICT DO NOTHING`` lets the second wait for the
  first to commit and write nothing.
- Idempotency (rule 3): when nothing was inserted, the row stored at ``from_seq`` is read back:
  equal to the one put → returned (a retry, or a racing compaction that computed the same
  thing); different, or none → ``CheckpointConflict``.
- ``latest`` is one probe of the unique ``(…, to_seq)`` index; ``list`` a range of the primary
  key. The foreign key to ``journal_threads`` means a checkpoint needs its thread's journal and
  goes when the journal is erased.
- Every call is idempotent and retried on a fresh connection after a transient failure, like
  the journal store (``run_with_retries``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from journal.checkpoints import MAX_LIST, Checkpoint, NewCheckpoint
from journal.errors import CheckpointConflict, ThreadNotFound
from journal.events import ThreadRef
from journal.postgres_store import run_with_retries

T = TypeVar("T")

_COLUMNS = "from_seq, to_seq, summary, checksum, previous_checksum, summarizer, digest, created_at"
_SCOPE = "tenant = $1 AND user_id = $2 AND thread_id = $3"

_PUT = f"""
WITH head AS (
    SELECT to_seq, checksum FROM journal_checkpoints
     WHERE {_SCOPE} ORDER BY to_seq DESC LIMIT 1
)
INSERT INTO journal_checkpoints
    (tenant, user_id, thread_id, from_seq, to_seq, summary, checksum, previous_checksum,
     summarizer, digest)
SELECT $1, $2, $3, $4::bigint, $5::bigint, $6, $7, $8::text, $9, $10
 WHERE COALESCE((SELECT to_seq FROM head), 0) = $4::bigint - 1
   AND (SELECT checksum FROM head) IS NOT DISTINCT FROM $8
ON CONFLICT DO NOTHING
RETURNING {_COLUMNS}
"""


class PostgresCheckpointStore:
    """``CheckpointStore`` on an asyncpg pool whose database has the journal migrations applied.

    Settings as for ``PostgresJournalStore``: ``query_timeout`` bounds each statement,
    ``acquire_timeout`` the wait for a connection; a failed call is tried at most
    ``max_attempts`` times within ``retry_deadline`` seconds.
    """

    def __init__(
        self,
        pool: Any,
        *,
        query_timeout: float = 10.0,
        acquire_timeout: float = 10.0,
        max_attempts: int = 6,
        retry_deadline: float = 30.0,
    ) -> None:
        self._pool = pool
        self._query_timeout = query_timeout
        self._acquire_timeout = acquire_timeout
        self._max_attempts = max_attempts
        self._retry_deadline = retry_deadline

    async def put(self, thread: ThreadRef, checkpoint: NewCheckpoint) -> Checkpoint:
        async def call(conn: Any) -> tuple[Any, Any]:
            inserted = await conn.fetchrow(
                _PUT,
                thread.tenant,
                thread.user,
                thread.thread_id,
                checkpoint.from_seq,
                checkpoint.to_seq,
                checkpoint.summary,
                checkpoint.checksum,
                checkpoint.previous_checksum,
                checkpoint.summarizer,
                checkpoint.digest(),
                timeout=self._query_timeout,
            )
            if inserted is not None:
                return inserted, None
            existing = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM journal_checkpoints WHERE {_SCOPE} AND from_seq = $4",
                thread.tenant,
                thread.user,
                thread.thread_id,
                checkpoint.from_seq,
                timeout=self._query_timeout,
            )
            return None, existing

        try:
            inserted, existing = await self._run("put", call)
        except asyncpg.ForeignKeyViolationError as e:
            raise ThreadNotFound(f"no journal for thread {thread.thread_id}") from e
        if inserted is not None:
            return _checkpoint(thread, inserted)
        if existing is not None:
            stored = _checkpoint(thread, existing)
            if stored.content() == checkpoint:
                return stored
            raise CheckpointConflict(
                f"another checkpoint already starts at seq {checkpoint.from_seq}"
            )
        raise CheckpointConflict(
            f"a checkpoint from seq {checkpoint.from_seq} does not extend the thread's chain"
        )

    async def latest(
        self, thread: ThreadRef, *, before_seq: int | None = None
    ) -> Checkpoint | None:
        async def call(conn: Any) -> Any:
            return await conn.fetchrow(  # a Record or None
                f"SELECT {_COLUMNS} FROM journal_checkpoints WHERE {_SCOPE}"
                " AND ($4::bigint IS NULL OR to_seq < $4) ORDER BY to_seq DESC LIMIT 1",
                thread.tenant,
                thread.user,
                thread.thread_id,
                before_seq,
                timeout=self._query_timeout,
            )

        row = await self._run("latest", call)
        return None if row is None else _checkpoint(thread, row)

    async def list(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int = 100
    ) -> list[Checkpoint]:
        async def call(conn: Any) -> list[Any]:
            rows: list[Any] = await conn.fetch(
                f"SELECT {_COLUMNS} FROM journal_checkpoints WHERE {_SCOPE} AND from_seq > $4"
                " ORDER BY from_seq LIMIT $5",
                thread.tenant,
                thread.user,
                thread.thread_id,
                after_seq,
                max(0, min(limit, MAX_LIST)),
                timeout=self._query_timeout,
            )
            return rows

        return [_checkpoint(thread, row) for row in await self._run("list", call)]

    async def delete_thread(self, thread: ThreadRef) -> int:
        async def call(conn: Any) -> int:
            status: str = await conn.execute(
                f"DELETE FROM journal_checkpoints WHERE {_SCOPE}",
                thread.tenant,
                thread.user,
                thread.thread_id,
                timeout=self._query_timeout,
            )
            return int(status.rsplit(" ", 1)[-1])

        return await self._run("delete_thread", call)

    async def _run(self, operation: str, call: Callable[[Any], Awaitable[T]]) -> T:
        return await run_with_retries(
            self._pool,
            f"checkpoint {operation}",
            call,
            acquire_timeout=self._acquire_timeout,
            max_attempts=self._max_attempts,
            retry_deadline=self._retry_deadline,
        )


def _checkpoint(thread: ThreadRef, row: Any) -> Checkpoint:
    return Checkpoint(
        thread=thread,
        from_seq=row["from_seq"],
        to_seq=row["to_seq"],
        summary=row["summary"],
        checksum=row["checksum"],
        previous_checksum=row["previous_checksum"],
        summarizer=row["summarizer"],
        digest=row["digest"],
        created_at=row["created_at"],
    )
