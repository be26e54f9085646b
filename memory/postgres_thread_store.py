"""Thread memory on PostgreSQL: the contract of ``memory/thread_store.py`` in single statements.

Theory of operation
-------------------
One row per thread in ``thread_memory`` (``memory/migrations/0002_thread_memory.sql``, sealed by
``0009``): the facts as one JSON object sealed with the memory keyring (``facts_sealed`` under
``key_id``, associated data naming tenant, owner and thread — RM-8), ``processed`` as a text
array (journal item ids, no content), the overrides, ``last_failure`` and ``revision``. The
compare-and-set of ``save`` is one statement, so two saves at the same expected revision cannot
both win:

1. ``expected_revision == 0`` (no row yet): ``INSERT … ON CONFLICT DO NOTHING RETURNING`` —
   the second of two racing inserts waits for the first to commit, then inserts nothing.
2. Otherwise ``UPDATE … WHERE revision = $expected RETURNING``: the row lock serialises racing
   updates and the loser's re-evaluated ``WHERE`` no longer matches.
3. When nothing was written the row is read again and ``RevisionConflict`` carries it.

Rows written before encryption hold plaintext ``facts``; ``seal_plaintext`` seals them in
batches on start, ``rotate`` moves rows to the active key (``openrealtime memory rotate-key``).

``copy`` reads the source and writes the target in one transaction, the target row locked
(``FOR UPDATE``) so its revision goes up by exactly one. Tenant defaults live in
``thread_memory_defaults`` (no row: both on). Connection failures and timeouts become
``MemoryUnavailable``; times in facts are kept as ISO 8601 strings with their offset.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, TypeVar

from memory.crypto import Keyring, Sealed, row_context
from memory.entries import owner_key
from memory.errors import MemoryUnavailable, RevisionConflict
from memory.postgres_store import SEAL_BATCH, process_keyring
from memory.thread_memory import Overrides, Settings, ThreadFact, ThreadMemory, forked
from memory.thread_store import EMPTY, check_new_revision
from storage.postgres import PooledCalls, in_batches

T = TypeVar("T")

_COLUMNS = (
    "revision, key_id, facts_sealed, processed, use_override, generate_override, last_failure"
)
_READ_COLUMNS = f"{_COLUMNS}, facts"
_WHERE = "tenant = $1 AND owner = $2 AND thread_id = $3"
_INSERT = f"""
INSERT INTO thread_memory (tenant, owner, thread_id, {_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (tenant, owner, thread_id) DO NOTHING
RETURNING revision
"""
_UPDATE = f"""
UPDATE thread_memory SET
    revision = $4, key_id = $5, facts_sealed = $6, facts = NULL, processed = $7,
    use_override = $8, generate_override = $9, last_failure = $10,
    updated_at = clock_timestamp()
WHERE {_WHERE} AND revision = $11
RETURNING revision
"""
_UPSERT = f"""
INSERT INTO thread_memory (tenant, owner, thread_id, {_COLUMNS})
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (tenant, owner, thread_id) DO UPDATE SET
    revision = EXCLUDED.revision, key_id = EXCLUDED.key_id,
    facts_sealed = EXCLUDED.facts_sealed, facts = NULL, processed = EXCLUDED.processed,
    use_override = EXCLUDED.use_override, generate_override = EXCLUDED.generate_override,
    last_failure = EXCLUDED.last_failure, updated_at = clock_timestamp()
"""


def facts_context(tenant: str, owner: str, thread_id: str) -> bytes:
    """Associated data of a thread's sealed facts."""
    return row_context("thread_memory", "facts", tenant, owner, thread_id)


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


def _memory(row: Any, facts_text: str) -> ThreadMemory:
    raw: dict[str, Any] = json.loads(facts_text)
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


class PostgresThreadMemoryStore:
    """``ThreadMemoryStore`` on an asyncpg pool whose database has the memory migrations.

    ``keyring`` seals the facts (``process_keyring()`` when None: tests and benchmarks);
    ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a connection.
    """

    def __init__(
        self,
        pool: Any,
        *,
        keyring: Keyring | None = None,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        self.pool = pool
        self.keyring = keyring if keyring is not None else process_keyring()
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool,
            acquire_timeout=acquire_timeout,
            unavailable=MemoryUnavailable,
            what="thread memory",
        )

    def _args(self, tenant: str, owner: str, thread_id: str, m: ThreadMemory) -> tuple[Any, ...]:
        sealed = self.keyring.seal(facts_json(m), context=facts_context(tenant, owner, thread_id))
        return (
            tenant, owner, thread_id, m.revision, sealed.key_id, sealed.blob,
            sorted(m.processed), m.overrides.use, m.overrides.generate, m.last_failure,
        )  # fmt: skip

    def _facts_text(self, row: Any, tenant: str, owner: str, thread_id: str) -> str:
        if row["facts_sealed"] is None:  # written before encryption, not sealed yet
            return str(row["facts"])
        sealed = Sealed(row["key_id"], bytes(row["facts_sealed"]))
        return self.keyring.open(sealed, context=facts_context(tenant, owner, thread_id))

    async def _read(
        self, conn: Any, tenant: str, owner: str, thread_id: str, *, lock: bool = False
    ) -> ThreadMemory:
        row = await conn.fetchrow(
            f"SELECT {_READ_COLUMNS} FROM thread_memory WHERE {_WHERE}"
            + (" FOR UPDATE" if lock else ""),
            tenant,
            owner,
            thread_id,
            timeout=self.query_timeout,
        )
        if row is None:
            return EMPTY
        return _memory(row, self._facts_text(row, tenant, owner, thread_id))

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
                args = self._args(tenant, owner, thread_id, new)
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
                _UPSERT, *self._args(tenant, owner, to_thread, copied), timeout=self.query_timeout
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

    # ------------------------------------------------------------ encryption at rest

    async def seal_plaintext(self, *, batch: int = SEAL_BATCH) -> int:
        """Seal, in batches of ``batch`` rows (one transaction each), every row written before
        encryption; returns how many. Idempotent."""
        return await self._reseal("facts IS NOT NULL", (), batch=batch)

    async def rotate(self, *, batch: int = SEAL_BATCH) -> int:
        """Re-encrypt, in batches, every sealed row not under the active key; returns how many."""
        return await self._reseal(
            "facts_sealed IS NOT NULL AND key_id <> $1", (self.keyring.active_id,), batch=batch
        )

    async def key_ids_in_use(self) -> dict[str, int]:
        """Sealed rows per key id (``None`` for rows still in plaintext, if any)."""

        async def work(conn: Any) -> dict[str, int]:
            rows = await conn.fetch(
                "SELECT key_id, count(*) AS n FROM thread_memory GROUP BY key_id",
                timeout=self.query_timeout,
            )
            return {r["key_id"]: int(r["n"]) for r in rows}

        return await self._call(work, transaction=False)

    async def _reseal(self, where: str, args: tuple[Any, ...], *, batch: int) -> int:
        return await in_batches(
            lambda: self._call(
                lambda conn: self._reseal_batch(conn, where, args, batch), transaction=True
            ),
            batch,
        )

    async def _reseal_batch(self, conn: Any, where: str, args: tuple[Any, ...], batch: int) -> int:
        # SKIP LOCKED: a row a save holds right now is left for the next batch (or run).
        rows = await conn.fetch(
            f"SELECT tenant, owner, thread_id, key_id, facts_sealed, facts FROM thread_memory"
            f" WHERE {where} LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
            *args,
            timeout=self.query_timeout,
        )
        updates: list[tuple[Any, ...]] = []
        for row in rows:
            scope = (row["tenant"], row["owner"], row["thread_id"])
            text = self._facts_text(row, *scope)
            sealed = self.keyring.seal(text, context=facts_context(*scope))
            updates.append((*scope, sealed.key_id, sealed.blob))
        if updates:
            await conn.executemany(
                "UPDATE thread_memory SET facts = NULL, key_id = $4, facts_sealed = $5"
                f" WHERE {_WHERE}",
                updates,
                timeout=self.query_timeout,
            )
        return len(rows)
