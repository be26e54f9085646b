"""Thread memory on PostgreSQL: the contract of ``memory/thread_store.py`` in single statements.

Theory of operation
-------------------
One row per thread in ``thread_memory`` (``memory/migrations/0002_thread_memory.sql``): the
facts as one JSONB object, ``processed`` as a text array, the overrides, ``last_failure`` and
``revision``. The compare-and-set of ``save`` is one statement, so two saves at the same
expected revision cannot both win:

1. ``expected_revision == 0`` (no row yet): ``INSERT … ON CONFLICT DO NOTHING RETURNING`` —
   the second of two racing inserts waits for the first to commit, then inserts nothing.
2. Otherwise ``UPDATE … WHERE revision = $expected RETURNING``: the row lock serialises racing
   updates and the loser's re-evaluated ``WHERE`` no longer matches.
3. When nothing was written the row is read again and ``RevisionConflict`` carries it.

``copy`` reads the source and writes the target in one transaction, the target row locked
(``FOR UPDATE``) so its revision goes up by exactly one. Tenant defaults live in
``thread_memory_defaults`` (no row: both on). Connection failures and timeouts become
``MemoryUnavailable``; times in facts are kept as ISO 8601 strings with their offset.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from memory.entries import owner_key
from memory.errors import MemoryUnavailable, RevisionConflict
from memory.postgres_store import _UNAVAILABLE
from memory.thread_memory import Overrides, Settings, ThreadFact, ThreadMemory, forked
from memory.thread_store import EMPTY, check_new_revision

T = TypeVar("T")

_COLUMNS = "revision, facts, processed, use_override, generate_override, last_failure"
_WHERE = "tenant = $1 AND owner = $2 AND thread_id = $3"
_INSERT = f"""
INSERT INTO thread_memory (tenant, owner, thread_id, {_COLUMNS})
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)
ON CONFLICT (tenant, owner, thread_id) DO NOTHING
RETURNING revision
"""
_UPDATE = f"""
UPDATE thread_memory SET
    revision = $4, facts = $5::jsonb, processed = $6, use_override = $7,
    generate_override = $8, last_failure = $9, updated_at = clock_timestamp()
WHERE {_WHERE} AND revision = $10
RETURNING revision
"""
_UPSERT = f"""
INSERT INTO thread_memory (tenant, owner, thread_id, {_COLUMNS})
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)
ON CONFLICT (tenant, owner, thread_id) DO UPDATE SET
    revision = EXCLUDED.revision, facts = EXCLUDED.facts, processed = EXCLUDED.processed,
    use_override = EXCLUDED.use_override, generate_override = EXCLUDED.generate_override,
    last_failure = EXCLUDED.last_failure, updated_at = clock_timestamp()
"""


def facts_json(memory: ThreadMemory) -> str:
    return json.dumps(
        {
            key: {
                "content": f.content,
                "kind": f.kind,
                "sources": list(f.sources),
                "status": f.status,
                "updated_at": f.updated_at.isoformat(),
            }
            for key, f in memory.facts.items()
        },
        ensure_ascii=False,
    )


def _memory(row: Any) -> ThreadMemory:
    raw: dict[str, Any] = json.loads(row["facts"])
    facts = {
        key: ThreadFact(
            key=key,
            content=f["content"],
            kind=f["kind"],
            sources=tuple(f["sources"]),
            status=f["status"],
            updated_at=datetime.fromisoformat(f["updated_at"]),
        )
        for key, f in raw.items()
    }
    return ThreadMemory(
        facts=facts,
        processed=frozenset(row["processed"]),
        revision=row["revision"],
        overrides=Overrides(use=row["use_override"], generate=row["generate_override"]),
        last_failure=row["last_failure"],
    )


def _args(tenant: str, owner: str, thread_id: str, m: ThreadMemory) -> tuple[Any, ...]:
    return (
        tenant, owner, thread_id, m.revision, facts_json(m), sorted(m.processed),
        m.overrides.use, m.overrides.generate, m.last_failure,
    )  # fmt: skip


class PostgresThreadMemoryStore:
    """``ThreadMemoryStore`` on an asyncpg pool whose database has the memory migrations.

    ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a connection.
    """

    def __init__(
        self, pool: Any, *, query_timeout: float = 5.0, acquire_timeout: float = 5.0
    ) -> None:
        self.pool = pool
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout

    async def _call(self, work: Callable[[Any], Awaitable[T]], *, transaction: bool) -> T:
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                if not transaction:
                    return await work(conn)
                async with conn.transaction():
                    return await work(conn)
        except _UNAVAILABLE as e:
            raise MemoryUnavailable(f"thread memory unavailable: {type(e).__name__}") from e

    async def _read(
        self, conn: Any, tenant: str, owner: str, thread_id: str, *, lock: bool = False
    ) -> ThreadMemory:
        row = await conn.fetchrow(
            f"SELECT {_COLUMNS} FROM thread_memory WHERE {_WHERE}"
            + (" FOR UPDATE" if lock else ""),
            tenant,
            owner,
            thread_id,
            timeout=self.query_timeout,
        )
        return EMPTY if row is None else _memory(row)

    async def load(self, tenant: str, user: str, thread_id: str) -> ThreadMemory:
        owner = owner_key(user)
        return await self._call(
            lambda conn: self._read(conn, tenant, owner, thread_id), transaction=False
        )

    async def save(
        self,
        tenant: str,
        user: str,
        thread_id: str,
        new: ThreadMemory,
        expected_revision: int,
    ) -> ThreadMemory:
        check_new_revision(new, expected_revision)
        owner = owner_key(user)

        async def work(conn: Any) -> ThreadMemory:
            if new.revision > expected_revision:
                args = _args(tenant, owner, thread_id, new)
                if expected_revision == 0:
                    written = await conn.fetchval(_INSERT, *args, timeout=self.query_timeout)
                else:
                    written = await conn.fetchval(
                        _UPDATE, *args, expected_revision, timeout=self.query_timeout
                    )
                if written is not None:
                    return new
            stored = await self._read(conn, tenant, owner, thread_id)
            if stored.revision != expected_revision:
                raise RevisionConflict(stored)
            return stored

        return await self._call(work, transaction=False)

    async def copy(
        self,
        tenant: str,
        user: str,
        from_thread: str,
        to_thread: str,
        keep_sources: set[str] | None,
    ) -> ThreadMemory:
        owner = owner_key(user)

        async def work(conn: Any) -> ThreadMemory:
            source = await self._read(conn, tenant, owner, from_thread)
            target = await self._read(conn, tenant, owner, to_thread, lock=True)
            copied = forked(source, keep_sources, revision=target.revision + 1)
            await conn.execute(
                _UPSERT, *_args(tenant, owner, to_thread, copied), timeout=self.query_timeout
            )
            return copied

        return await self._call(work, transaction=True)

    async def delete(self, tenant: str, user: str, thread_id: str) -> None:
        owner = owner_key(user)
        await self._call(
            lambda conn: conn.execute(
                f"DELETE FROM thread_memory WHERE {_WHERE}",
                tenant,
                owner,
                thread_id,
                timeout=self.query_timeout,
            ),
            transaction=False,
        )

    async def get_defaults(self, tenant: str) -> Settings:
        async def work(conn: Any) -> Settings:
            row = await conn.fetchrow(
                "SELECT use_memory, generate_memory FROM thread_memory_defaults WHERE tenant = $1",
                tenant,
                timeout=self.query_timeout,
            )
            if row is None:
                return Settings()
            return Settings(use=row["use_memory"], generate=row["generate_memory"])

        return await self._call(work, transaction=False)

    async def set_defaults(self, tenant: str, settings: Settings) -> None:
        await self._call(
            lambda conn: conn.execute(
                "INSERT INTO thread_memory_defaults (tenant, use_memory, generate_memory)"
                " VALUES ($1, $2, $3) ON CONFLICT (tenant) DO UPDATE SET"
                " use_memory = EXCLUDED.use_memory, generate_memory = EXCLUDED.generate_memory",
                tenant,
                settings.use,
                settings.generate,
                timeout=self.query_timeout,
            ),
            transaction=False,
        )
