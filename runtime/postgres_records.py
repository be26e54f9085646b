"""Conversation records on PostgreSQL: the rules of ``runtime/records.py`` kept by the database.

Theory of operation
-------------------
Tables are in ``runtime/migrations/0003_conversation_records.sql``.

- One write is one transaction. It first makes sure the record's row exists (``INSERT … ON
  CONFLICT DO NOTHING``, version 0) and locks it (``SELECT … FOR UPDATE``), so writes to one
  record run one at a time while other records' writes do not wait. Two writers creating the
  same record collide on the primary key: the second waits for the first to commit and then
  finds its row.
- Under that lock the idempotency key is looked up first (rule 4): a stored key with the same
  fingerprint returns the stored result and writes nothing — so of two concurrent writes with
  one key, the second returns what the first wrote. Then the version and limits are checked
  (``plan_write``, shared with the in-memory store); any refusal rolls the transaction back, so
  a refused segment creates nothing (rule 6).
- Messages are upserted by index in one statement; the key row is written with the result.
  Keys older than ``key_retention_s`` are pruned on the record's next write.
- Connection failures become ``RecordsUnavailable``; the caller retries with the same key.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from runtime.records import (
    ConversationRecord,
    IdempotencyKeyReused,
    RecordLimits,
    RecordsUnavailable,
    Segment,
    StoredMessage,
    WriteResult,
    check_segment,
    plan_write,
)
from storage.postgres import CONNECTION_ERRORS

_TIMEOUT = 10.0
_COLUMNS = (
    "tenant, user_id, id, title, role_id, thread_id, voice_session_id, message_count, version, "
    "created_at, updated_at"
)
_SCOPE = "tenant = $1 AND user_id = $2"


def _record(row: Any) -> ConversationRecord:
    return ConversationRecord(
        tenant=row["tenant"],
        user=row["user_id"],
        id=row["id"],
        title=row["title"],
        role_id=row["role_id"],
        thread_id=row["thread_id"],
        voice_session_id=row["voice_session_id"],
        message_count=row["message_count"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class PostgresRecordStore:
    def __init__(self, pool: asyncpg.Pool, *, limits: RecordLimits | None = None) -> None:
        self.pool = pool
        self.limits = limits or RecordLimits()

    async def write(self, tenant: str, user: str, segment: Segment) -> WriteResult:
        check_segment(segment, self.limits)
        try:
            async with (
                self.pool.acquire(timeout=_TIMEOUT) as conn,
                conn.transaction(),
            ):
                return await self._write(conn, tenant, user, segment)
        except CONNECTION_ERRORS as e:
            raise RecordsUnavailable(f"records write failed: {type(e).__name__}") from e

    async def _write(self, conn: Any, tenant: str, user: str, segment: Segment) -> WriteResult:
        scope = (tenant, user, segment.record_id)
        await conn.execute(
            "INSERT INTO conversation_records (tenant, user_id, id) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            *scope,
            timeout=_TIMEOUT,
        )
        row = await conn.fetchrow(
            "SELECT version, message_count, thread_id FROM conversation_records"
            f" WHERE {_SCOPE} AND id = $3 FOR UPDATE",
            *scope,
            timeout=_TIMEOUT,
        )
        await conn.execute(
            "DELETE FROM conversation_segment_keys"
            f" WHERE {_SCOPE} AND record_id = $3"
            " AND created_at < now() - make_interval(secs => $4)",
            *scope,
            self.limits.key_retention_s,
            timeout=_TIMEOUT,
        )
        fingerprint = segment.fingerprint()
        known = await conn.fetchrow(
            "SELECT fingerprint, version, message_count FROM conversation_segment_keys"
            f" WHERE {_SCOPE} AND record_id = $3 AND idempotency_key = $4",
            *scope,
            segment.idempotency_key,
            timeout=_TIMEOUT,
        )
        if known is not None:
            if known["fingerprint"] != fingerprint:
                raise IdempotencyKeyReused("this idempotency key was used for another segment")
            return WriteResult(segment.record_id, known["version"], known["message_count"])
        version: int = row["version"]
        new_count = plan_write(
            segment, self.limits,
            exists=version > 0,
            version=version,
            message_count=row["message_count"],
            thread_id=row["thread_id"],
        )  # fmt: skip
        if segment.messages:
            await conn.execute(
                """INSERT INTO conversation_messages
                       (tenant, user_id, record_id, idx, role, text, at)
                   SELECT $1, $2, $3, m.idx, m.role, m.text, m.at
                     FROM unnest($4::integer[], $5::text[], $6::text[], $7::timestamptz[])
                          AS m(idx, role, text, at)
                   ON CONFLICT (tenant, user_id, record_id, idx) DO UPDATE
                      SET role = EXCLUDED.role, text = EXCLUDED.text, at = EXCLUDED.at""",
                *scope,
                [segment.start_index + i for i in range(len(segment.messages))],
                [m.role for m in segment.messages],
                [m.text for m in segment.messages],
                [m.at for m in segment.messages],
                timeout=_TIMEOUT,
            )
        await conn.execute(
            f"""UPDATE conversation_records
                   SET title = COALESCE($4, title),
                       role_id = COALESCE($5, role_id),
                       thread_id = COALESCE($6, thread_id),
                       voice_session_id = COALESCE($7, voice_session_id),
                       message_count = $8,
                       version = version + 1,
                       updated_at = now()
                 WHERE {_SCOPE} AND id = $3""",
            *scope,
            segment.title, segment.role_id, segment.thread_id, segment.voice_session_id,
            new_count,
            timeout=_TIMEOUT,
        )  # fmt: skip
        await conn.execute(
            """INSERT INTO conversation_segment_keys
                   (tenant, user_id, record_id, idempotency_key, fingerprint, version,
                    message_count)
               VALUES ($1, $2, $3, $4, $5, $6, $7)""",
            *scope, segment.idempotency_key, fingerprint, version + 1, new_count,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return WriteResult(segment.record_id, version + 1, new_count)

    async def get(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        row = await self._fetchrow(
            f"SELECT {_COLUMNS} FROM conversation_records"
            f" WHERE {_SCOPE} AND id = $3 AND version > 0",
            tenant,
            user,
            record_id,
        )
        return None if row is None else _record(row)

    async def recent(self, tenant: str, user: str, *, limit: int = 100) -> list[ConversationRecord]:
        rows = await self._fetch(
            f"SELECT {_COLUMNS} FROM conversation_records WHERE {_SCOPE} AND version > 0"
            " ORDER BY updated_at DESC, id DESC LIMIT $3",
            tenant,
            user,
            max(0, min(limit, self.limits.max_list)),
        )
        return [_record(r) for r in rows]

    async def messages(
        self, tenant: str, user: str, record_id: str, *, from_index: int = 0,
        limit: int | None = None,
    ) -> list[StoredMessage]:  # fmt: skip
        rows = await self._fetch(
            "SELECT idx, role, text, at FROM conversation_messages"
            f" WHERE {_SCOPE} AND record_id = $3 AND idx >= $4 ORDER BY idx LIMIT $5",
            tenant,
            user,
            record_id,
            max(from_index, 0),
            None if limit is None else max(limit, 0),
        )
        return [StoredMessage(r["idx"], r["role"], r["text"], r["at"]) for r in rows]

    async def delete(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        row = await self._fetchrow(
            f"DELETE FROM conversation_records WHERE {_SCOPE} AND id = $3 RETURNING {_COLUMNS}",
            tenant,
            user,
            record_id,
        )
        return None if row is None else _record(row)

    async def ids_for_thread(self, tenant: str, user: str, thread_id: str) -> list[str]:
        rows = await self._fetch(
            f"SELECT id FROM conversation_records WHERE {_SCOPE} AND thread_id = $3"
            " AND version > 0 ORDER BY id",
            tenant,
            user,
            thread_id,
        )
        return [r["id"] for r in rows]

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            rows: list[Any] = await self.pool.fetch(sql, *args, timeout=_TIMEOUT)
        except CONNECTION_ERRORS as e:
            raise RecordsUnavailable(f"records read failed: {type(e).__name__}") from e
        return rows

    async def _fetchrow(self, sql: str, *args: Any) -> Any:
        try:
            return await self.pool.fetchrow(sql, *args, timeout=_TIMEOUT)
        except CONNECTION_ERRORS as e:
            raise RecordsUnavailable(f"records call failed: {type(e).__name__}") from e
