"""Role memory's records on PostgreSQL: the ``RoleRecords`` contract of ``memory/role_records.py``.

Theory of operation
-------------------
Tables live in ``memory/migrations/0007_role_records.sql``: ``role_memory_settings`` (one row
per role), ``role_memory_confessions``, ``role_memory_enrichments`` and ``role_memory_calls``.

1. Plain and sealed: ids, times, journal positions, entry ids, the memory model's name, the
   budget and costs are plaintext columns, so listing, ownership checks and ``spent_micros``
   never decrypt. Every text — privacy instructions, confession text and answer, enrichment
   text and original, call request and response — is sealed with the keyring under
   ``row_context(table, column, tenant, role, …, id)`` (``record_context``), the key id in the
   row's ``key_id``. A ciphertext copied to another row, column, thread or user does not open.
2. Settings are compare-and-set in one statement: ``expected = 0`` is an insert that only
   succeeds when the role has no row (``ON CONFLICT DO NOTHING``), any other ``expected`` an
   ``UPDATE … WHERE revision = expected``. No row written → ``StaleRevision`` with the current
   revision.
3. Lists are ordered by the table's identity ``seq`` (insertion order, as in memory), cut to
   the newest ``min(limit, MAX_RECORDS_LISTED)`` in SQL, then returned oldest first.
4. ``spent_micros`` sums ``cost_micros`` in SQL; a NULL cost (usage unknown) adds nothing.
5. ``rotate`` re-seals, in batches of one transaction each, every row not under the active key
   (``FOR UPDATE SKIP LOCKED``: a row being written is left for the next batch);
   ``key_ids_in_use`` counts rows per key id (``openrealtime memory rotate-key``).
6. Every statement names ``tenant`` and is bounded by ``query_timeout``; the wait for a
   connection by ``acquire_timeout``. Connection failures and timeouts become
   ``MemoryUnavailable``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from memory.crypto import Keyring, Sealed, row_context
from memory.errors import MemoryUnavailable, StaleRevision
from memory.role_records import (
    MAX_RECORDS_LISTED,
    Budget,
    Confession,
    Enrichment,
    ModelCall,
    RoleMemorySettings,
)
from storage.postgres import PooledCalls, in_batches

T = TypeVar("T")

SETTINGS_TABLE = "role_memory_settings"
CONFESSIONS_TABLE = "role_memory_confessions"
ENRICHMENTS_TABLE = "role_memory_enrichments"
CALLS_TABLE = "role_memory_calls"
RESEAL_BATCH = 500
"""Rows one ``rotate`` transaction re-seals."""


@dataclass(frozen=True, slots=True)
class SealedTable:
    """One table's sealed columns and the plaintext columns their contexts name (rule 1)."""

    name: str
    sealed: tuple[str, ...]
    """Column names without ``_sealed``."""
    context: tuple[str, ...]
    """Columns named by each sealed column's context, after the table and column."""
    key: tuple[str, str] = ("tenant", "id")
    """The primary key."""


TABLES = (
    SealedTable(SETTINGS_TABLE, ("instructions",), ("tenant", "role_id"), ("tenant", "role_id")),
    SealedTable(
        CONFESSIONS_TABLE, ("text", "answer"), ("tenant", "role_id", "thread_id", "user_id", "id")
    ),
    SealedTable(ENRICHMENTS_TABLE, ("text", "original"), ("tenant", "role_id", "thread_id", "id")),
    SealedTable(CALLS_TABLE, ("request", "response"), ("tenant", "role_id", "id")),
)
_BY_NAME = {t.name: t for t in TABLES}


def record_context(table: str, column: str, row: Any) -> bytes:
    """Associated data of ``row``'s sealed ``column`` in ``table`` (any mapping with the
    table's context columns; a ``None`` thread id counts as empty)."""
    spec = _BY_NAME[table]
    return row_context(table, column, *(str(row[c] or "") for c in spec.context))


_INSERT_SETTINGS = f"""
INSERT INTO {SETTINGS_TABLE} (tenant, role_id, memory_model, concurrency, budget_period,
    budget_limit_micros, revision, key_id, instructions_sealed)
VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8)
ON CONFLICT (tenant, role_id) DO NOTHING
RETURNING revision
"""
_UPDATE_SETTINGS = f"""
UPDATE {SETTINGS_TABLE} SET memory_model = $3, concurrency = $4, budget_period = $5,
    budget_limit_micros = $6, revision = revision + 1, key_id = $7, instructions_sealed = $8,
    updated_at = clock_timestamp()
WHERE tenant = $1 AND role_id = $2 AND revision = $9
RETURNING revision
"""


class PostgresRoleRecords:
    """``RoleRecords`` on an asyncpg pool whose database has migration 0007 applied.

    ``keyring`` seals every text (default: ``process_keyring``, tests only).
    """

    def __init__(
        self,
        pool: Any,
        *,
        keyring: Keyring | None = None,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        from memory.postgres_store import process_keyring

        self.pool = pool
        self.keyring = keyring if keyring is not None else process_keyring()
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool,
            acquire_timeout=acquire_timeout,
            unavailable=MemoryUnavailable,
            what="role memory records",
        )

    def _seal(self, table: str, column: str, row: dict[str, Any], text: str) -> Sealed:
        return self.keyring.seal(text, context=record_context(table, column, row))

    def _open(self, table: str, column: str, row: Any) -> str:
        sealed = Sealed(row["key_id"], row[f"{column}_sealed"])
        return self.keyring.open(sealed, context=record_context(table, column, row))

    # ------------------------------------------------------------------ settings (rule 2)

    async def settings(self, tenant: str, role_id: str) -> RoleMemorySettings:
        row = await self._call(
            lambda conn: conn.fetchrow(
                f"SELECT * FROM {SETTINGS_TABLE} WHERE tenant = $1 AND role_id = $2",
                tenant,
                role_id,
                timeout=self.query_timeout,
            )  # fmt: skip
        )
        if row is None:
            return RoleMemorySettings()
        budget = None
        if row["budget_period"] is not None:
            budget = Budget(row["budget_period"], row["budget_limit_micros"])
        return RoleMemorySettings(
            memory_model=row["memory_model"],
            instructions=self._open(SETTINGS_TABLE, "instructions", row),
            concurrency=row["concurrency"],
            budget=budget,
            revision=row["revision"],
        )

    async def put_settings(
        self, tenant: str, role_id: str, settings: RoleMemorySettings, *, expected: int
    ) -> RoleMemorySettings:
        key = {"tenant": tenant, "role_id": role_id}
        sealed = self._seal(SETTINGS_TABLE, "instructions", key, settings.instructions)
        budget = settings.budget

        args = (
            tenant, role_id, settings.memory_model, settings.concurrency,
            budget.period if budget else None, budget.limit_micros if budget else None,
            sealed.key_id, sealed.blob,
        )  # fmt: skip

        async def work(conn: Any) -> int | None:
            if expected == 0:
                inserted: int | None = await conn.fetchval(
                    _INSERT_SETTINGS, *args, timeout=self.query_timeout
                )
                return inserted
            updated: int | None = await conn.fetchval(
                _UPDATE_SETTINGS, *args, expected, timeout=self.query_timeout
            )
            return updated

        revision = await self._call(work)
        if revision is None:
            current = await self.settings(tenant, role_id)
            raise StaleRevision("the settings changed since they were read", current.revision)
        return replace(settings, revision=revision)

    # ------------------------------------------------------------------ records

    async def add_confession(self, confession: Confession) -> None:
        c = confession
        row = {"tenant": c.tenant, "role_id": c.role_id, "thread_id": c.thread_id,
               "user_id": c.user, "id": c.id}  # fmt: skip
        text = self._seal(CONFESSIONS_TABLE, "text", row, c.text)
        answer = self._seal(CONFESSIONS_TABLE, "answer", row, c.answer)
        await self._call(
            lambda conn: conn.execute(
                f"INSERT INTO {CONFESSIONS_TABLE} (tenant, role_id, id, thread_id, user_id,"
                " turn_seq, answered_by, at, key_id, text_sealed, answer_sealed)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                c.tenant,
                c.role_id,
                c.id,
                c.thread_id,
                c.user,
                c.seq,
                c.answered_by,
                c.at,
                text.key_id,
                text.blob,
                answer.blob,
                timeout=self.query_timeout,
            )  # fmt: skip
        )

    async def _newest(self, table: str, where: str, args: tuple[Any, ...], limit: int) -> list[Any]:
        limit = min(limit, MAX_RECORDS_LISTED)
        if limit <= 0:
            return []
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT * FROM {table} WHERE {where} ORDER BY seq DESC LIMIT {int(limit)}",
                *args,
                timeout=self.query_timeout,
            )
        )
        return list(reversed(rows))

    async def confessions(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Confession]:
        rows = await self._newest(
            CONFESSIONS_TABLE, "tenant = $1 AND thread_id = $2", (tenant, thread_id), limit
        )
        return [
            Confession(
                id=r["id"],
                tenant=r["tenant"],
                role_id=r["role_id"],
                thread_id=r["thread_id"],
                user=r["user_id"],
                seq=r["turn_seq"],
                text=self._open(CONFESSIONS_TABLE, "text", r),
                answer=self._open(CONFESSIONS_TABLE, "answer", r),
                answered_by=r["answered_by"],
                at=r["at"],
            )  # fmt: skip
            for r in rows
        ]

    async def add_enrichment(self, enrichment: Enrichment) -> None:
        e = enrichment
        row = {"tenant": e.tenant, "role_id": e.role_id, "thread_id": e.thread_id, "id": e.id}
        text = self._seal(ENRICHMENTS_TABLE, "text", row, e.text)
        original = self._seal(ENRICHMENTS_TABLE, "original", row, e.original)
        await self._call(
            lambda conn: conn.execute(
                f"INSERT INTO {ENRICHMENTS_TABLE} (tenant, role_id, id, thread_id, turn_seq,"
                " entry_ids, at, key_id, text_sealed, original_sealed)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                e.tenant,
                e.role_id,
                e.id,
                e.thread_id,
                e.seq,
                list(e.entry_ids),
                e.at,
                text.key_id,
                text.blob,
                original.blob,
                timeout=self.query_timeout,
            )  # fmt: skip
        )

    async def enrichments(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Enrichment]:
        rows = await self._newest(
            ENRICHMENTS_TABLE, "tenant = $1 AND thread_id = $2", (tenant, thread_id), limit
        )
        return [
            Enrichment(
                id=r["id"],
                tenant=r["tenant"],
                role_id=r["role_id"],
                thread_id=r["thread_id"],
                seq=r["turn_seq"],
                text=self._open(ENRICHMENTS_TABLE, "text", r),
                original=self._open(ENRICHMENTS_TABLE, "original", r),
                entry_ids=tuple(r["entry_ids"]),
                at=r["at"],
            )  # fmt: skip
            for r in rows
        ]

    async def log_call(self, call: ModelCall) -> None:
        c = call
        row = {"tenant": c.tenant, "role_id": c.role_id, "id": c.id}
        request = self._seal(CALLS_TABLE, "request", row, c.request)
        response = self._seal(CALLS_TABLE, "response", row, c.response)
        await self._call(
            lambda conn: conn.execute(
                f"INSERT INTO {CALLS_TABLE} (tenant, role_id, id, purpose, model, cost_micros,"
                " thread_id, at, key_id, request_sealed, response_sealed)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                c.tenant,
                c.role_id,
                c.id,
                c.purpose,
                c.model,
                c.cost_micros,
                c.thread_id,
                c.at,
                request.key_id,
                request.blob,
                response.blob,
                timeout=self.query_timeout,
            )  # fmt: skip
        )

    async def spent_micros(self, tenant: str, role_id: str, *, since: datetime) -> int:
        total = await self._call(
            lambda conn: conn.fetchval(
                f"SELECT coalesce(sum(cost_micros), 0) FROM {CALLS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND at >= $3",
                tenant,
                role_id,
                since,
                timeout=self.query_timeout,
            )  # fmt: skip
        )
        return int(total)

    async def calls(
        self, tenant: str, role_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[ModelCall]:
        rows = await self._newest(
            CALLS_TABLE, "tenant = $1 AND role_id = $2", (tenant, role_id), limit
        )
        return [
            ModelCall(
                id=r["id"],
                tenant=r["tenant"],
                role_id=r["role_id"],
                purpose=r["purpose"],
                model=r["model"],
                request=self._open(CALLS_TABLE, "request", r),
                response=self._open(CALLS_TABLE, "response", r),
                cost_micros=r["cost_micros"],
                thread_id=r["thread_id"],
                at=r["at"],
            )  # fmt: skip
            for r in rows
        ]

    async def forget_role(self, tenant: str, role_id: str) -> int:
        async def work(conn: Any) -> int:
            total = 0
            for table in TABLES:
                status = await conn.execute(
                    f"DELETE FROM {table.name} WHERE tenant = $1 AND role_id = $2",
                    tenant, role_id, timeout=self.query_timeout,
                )  # fmt: skip
                total += int(status.rpartition(" ")[2])
            return total

        return await self._call(work, transaction=True)

    # ------------------------------------------------------------------ key rotation (rule 5)

    async def seal_plaintext(self, *, batch: int = RESEAL_BATCH) -> int:
        """Nothing to seal: these tables were sealed from their first row."""
        return 0

    async def rotate(self, *, batch: int = RESEAL_BATCH) -> int:
        """Re-seal every row not under the active key; how many rows moved."""
        total = 0
        for table in TABLES:
            work = functools.partial(self._reseal_batch, table=table, batch=batch)
            total += await in_batches(functools.partial(self._call, work, transaction=True), batch)
        return total

    async def _reseal_batch(self, conn: Any, *, table: SealedTable, batch: int) -> int:
        rows = await conn.fetch(
            f"SELECT * FROM {table.name} WHERE key_id <> $1"
            f" LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
            self.keyring.active_id,
            timeout=self.query_timeout,
        )
        for row in rows:
            blobs: list[bytes] = []
            key_id = self.keyring.active_id
            for column in table.sealed:
                text = self._open(table.name, column, row)
                sealed = self.keyring.seal(text, context=record_context(table.name, column, row))
                blobs.append(sealed.blob)
                key_id = sealed.key_id
            sets = ", ".join(f"{c}_sealed = ${i + 4}" for i, c in enumerate(table.sealed))
            first, second = table.key
            await conn.execute(
                f"UPDATE {table.name} SET key_id = $3, {sets}"
                f" WHERE {first} = $1 AND {second} = $2",
                row[first], row[second], key_id, *blobs, timeout=self.query_timeout,
            )  # fmt: skip
        return len(rows)

    async def key_ids_in_use(self) -> dict[str, int]:
        """Rows per key id over every table of this store."""

        async def work(conn: Any) -> dict[str, int]:
            found: dict[str, int] = {}
            for table in TABLES:
                rows = await conn.fetch(
                    f"SELECT key_id, count(*) AS n FROM {table.name} GROUP BY key_id",
                    timeout=self.query_timeout,
                )
                for r in rows:
                    found[r["key_id"]] = found.get(r["key_id"], 0) + int(r["n"])
            return found

        return await self._call(work)


__all__ = ["TABLES", "PostgresRoleRecords", "record_context"]
