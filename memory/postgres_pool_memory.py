"""Per-user memory over the pool on PostgreSQL: the ledger, and moving the old rows in.

Theory of operation
-------------------
``PostgresMemoryLedger`` is ``memory/pool_memory.py``'s ``MemoryLedger`` in the tables of
migration 0001 (``memory_changes``, ``memory_receipts``, ``memory_source_blocks``, keyed by
``(tenant, owner)``). Its transaction is the pool store's (``PostgresPoolStore.transaction``):
it first takes the advisory lock the old ``PostgresMemoryStore`` took on ``(tenant, owner)`` —
so an old process and a new one never decide for one user at the same time — and reads the
database clock; the ledger's rows and the pool's ``apply_in`` writes go on that connection and
commit together.

``move_entries_to_pool`` moves the rows of ``memory_entries`` (SPEC MEM, before issue 18) into
the role pools, at start:

1. A row names its user only as ``owner`` = SHA-256 of the user id. The user is found among
   the tenant's known users — memberships, threads, access tokens — whose
   SHA-256 is that owner (and whose id a ``from:`` tag can hold). A row no user matches is left
   where it is and counted, never guessed.
2. Each batch (``batch`` rows, one transaction) opens the rows with the old store's keyring,
   maps them with ``pool_entry_from`` (deleted rows become retracted entries with ``""`` as
   content, so their ids still count as deleted for a restore), writes them with the pool's
   ``apply_in`` and deletes the moved rows, all on one connection: a row is in one place.
3. Idempotent: moved rows are gone; a row whose id the role's pool already holds is left and
   counted. Only counts are returned and logged, never content.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

from memory.entries import DeletionReceipt, MemoryChange, SourceBlock
from memory.errors import MemoryUnavailable
from memory.pool import pool_entry_from
from memory.pool_store import AddEntry, PoolStore, PoolWrite, UpdateEntry
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_store import (
    _LOCK_CLASS,
    SEAL_BATCH,
    PostgresMemoryStore,
    entry_columns,
)
from memory.store import MAX_CHANGES_LISTED
from storage.postgres import CONNECTION_ERRORS

T = TypeVar("T")
log = logging.getLogger(__name__)

_OWNER = "tenant = $1 AND owner = $2"
_LOG = """
INSERT INTO memory_changes
    (tenant, owner, entry_id, role_id, action, actor, at, revision, kind, key, source_thread_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""
_BLOCK = """
INSERT INTO memory_source_blocks (tenant, owner, role_id, source_thread_id, through, reason, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
_RECEIPT = """
INSERT INTO memory_receipts (tenant, owner, receipt_id, source_thread_id, deleted, entry_ids, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""


@dataclass(frozen=True, slots=True)
class PostgresLedgerTransaction:
    pool_tx: Any
    """The asyncpg connection, in its transaction."""
    now: datetime


class PostgresMemoryLedger:
    """``MemoryLedger`` on an asyncpg pool (module docstring); ``query_timeout`` bounds each
    statement, ``acquire_timeout`` the wait for a connection."""

    def __init__(
        self, pool: Any, *, query_timeout: float = 5.0, acquire_timeout: float = 5.0
    ) -> None:
        self.pool = pool
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout

    async def _call(self, tx: Any, work: Callable[[Any], Awaitable[T]]) -> T:
        try:
            if tx is not None:
                return await work(tx.pool_tx)
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                return await work(conn)
        except CONNECTION_ERRORS as e:
            raise MemoryUnavailable(f"memory store unavailable: {type(e).__name__}") from e

    @asynccontextmanager
    async def transaction(
        self, pool: PoolStore, tenant: str, owner: str
    ) -> AsyncIterator[PostgresLedgerTransaction]:
        try:
            async with pool.transaction() as conn:
                now: datetime = await conn.fetchval(
                    "SELECT clock_timestamp() FROM"
                    " pg_advisory_xact_lock($1::int, hashtext($2 || chr(31) || $3))",
                    _LOCK_CLASS,
                    tenant,
                    owner,
                    timeout=self.query_timeout,
                )
                yield PostgresLedgerTransaction(conn, now)
        except CONNECTION_ERRORS as e:
            raise MemoryUnavailable(f"memory store unavailable: {type(e).__name__}") from e

    async def blocks(self, tx: Any, tenant: str, owner: str) -> list[SourceBlock]:
        rows = await self._call(
            tx,
            lambda conn: conn.fetch(
                f"SELECT * FROM memory_source_blocks WHERE {_OWNER} ORDER BY at",
                tenant,
                owner,
                timeout=self.query_timeout,
            ),  # fmt: skip
        )
        return [
            SourceBlock(
                r["role_id"] or None, r["source_thread_id"], r["through"], r["reason"], r["at"]
            )
            for r in rows
        ]

    async def receipts(self, tx: Any, tenant: str, owner: str) -> list[DeletionReceipt]:
        rows = await self._call(
            tx,
            lambda conn: conn.fetch(
                f"SELECT * FROM memory_receipts WHERE {_OWNER} ORDER BY at",
                tenant,
                owner,
                timeout=self.query_timeout,
            ),  # fmt: skip
        )
        return [
            DeletionReceipt(
                r["receipt_id"], r["source_thread_id"], r["deleted"], tuple(r["entry_ids"]), r["at"]
            )
            for r in rows
        ]

    async def roles(self, tx: Any, tenant: str, owner: str) -> list[str]:
        rows = await self._call(
            tx,
            lambda conn: conn.fetch(
                f"SELECT DISTINCT role_id FROM memory_changes WHERE {_OWNER} ORDER BY role_id",
                tenant,
                owner,
                timeout=self.query_timeout,
            ),  # fmt: skip
        )
        return [r["role_id"] for r in rows]

    async def role_of(self, tenant: str, owner: str, entry_id: str) -> str | None:
        role: str | None = await self._call(
            None,
            lambda conn: conn.fetchval(
                f"SELECT role_id FROM memory_changes WHERE {_OWNER} AND entry_id = $3 LIMIT 1",
                tenant,
                owner,
                entry_id,
                timeout=self.query_timeout,
            ),  # fmt: skip
        )
        return role

    async def record(
        self,
        tx: Any,
        tenant: str,
        owner: str,
        *,
        changes: Sequence[MemoryChange] = (),
        receipts: Sequence[DeletionReceipt] = (),
        blocks: Sequence[SourceBlock] = (),
    ) -> None:
        conn = tx.pool_tx
        timeout = self.query_timeout
        if receipts:
            await conn.executemany(
                _RECEIPT,
                [
                    (
                        tenant,
                        owner,
                        r.receipt_id,
                        r.source_thread_id,
                        r.deleted,
                        list(r.entry_ids),
                        r.at,
                    )
                    for r in receipts
                ],  # fmt: skip
                timeout=timeout,
            )
        if blocks:
            # role_id "" stands for "every role" (the column is NOT NULL; see migration 0001).
            await conn.executemany(
                _BLOCK,
                [
                    (tenant, owner, b.role_id or "", b.source_thread_id, b.through, b.reason, b.at)
                    for b in blocks
                ],
                timeout=timeout,
            )
        if changes:
            await conn.executemany(
                _LOG,
                [
                    (
                        tenant,
                        owner,
                        c.entry_id,
                        c.role_id,
                        c.action,
                        c.actor,
                        c.at,
                        c.revision,
                        c.kind,
                        c.key,
                        c.source_thread_id,
                    )
                    for c in changes
                ],  # fmt: skip
                timeout=timeout,
            )

    async def changes(
        self, tenant: str, owner: str, role_id: str, limit: int
    ) -> list[MemoryChange]:
        rows = await self._call(
            None,
            lambda conn: conn.fetch(
                "SELECT seq, entry_id, role_id, action, actor, at, revision, kind, key,"
                f" source_thread_id FROM memory_changes WHERE {_OWNER} AND role_id = $3"
                " ORDER BY seq DESC LIMIT $4",
                tenant,
                owner,
                role_id,
                min(limit, MAX_CHANGES_LISTED),
                timeout=self.query_timeout,
            ),  # fmt: skip
        )
        return [MemoryChange(**dict(r)) for r in rows]


# ------------------------------------------------------------------ moving the old rows in

_KNOWN_USERS = """
WITH users AS (
    SELECT tenant, user_id FROM memberships
    UNION SELECT tenant, user_id FROM threads
    UNION SELECT tenant, user_id FROM access_tokens
), owners AS (
    -- Only ids a from:<user> tag can hold (memory/pool.py system_tag); the others match no row.
    SELECT tenant, user_id, encode(sha256(convert_to(user_id, 'UTF8')), 'hex') AS owner
    FROM users WHERE user_id <> '' AND char_length(user_id) <= 200 AND user_id !~ '[[:space:]]'
)
"""


@dataclass(frozen=True, slots=True)
class MoveReport:
    """What ``move_entries_to_pool`` did: rows moved, rows of no known user, rows whose id
    the pool already holds (both left in ``memory_entries``)."""

    moved: int
    unmatched: int
    conflicting: int
    unmappable: int = 0
    """Rows of a user whose id cannot be a tag value (spaces, too long): left in place."""


async def move_entries_to_pool(
    old: PostgresMemoryStore, pool: PostgresPoolStore, *, batch: int = SEAL_BATCH
) -> MoveReport:
    """Move ``memory_entries`` into the role pools (module docstring, rules 1–3)."""
    moved = unmappable = 0
    while True:
        selected, done = await _move_batch(old, pool, batch)
        moved += done
        unmappable += selected - done
        if selected < batch or done == 0:  # done == 0: only rows left that cannot move
            break
    unmatched, conflicting = await _left_behind(old)
    if moved or unmatched or conflicting or unmappable:
        log.info(
            "memory: moved %d per-user entries into the role pools; left %d of unknown users,"
            " %d whose id the pool holds and %d whose user id makes no tag",
            moved,
            unmatched,
            conflicting,
            unmappable,
        )
    return MoveReport(moved, unmatched, conflicting, unmappable)


async def _move_batch(
    old: PostgresMemoryStore, pool: PostgresPoolStore, batch: int
) -> tuple[int, int]:
    """One batch: how many rows were selected, how many of them moved."""
    timeout = old.query_timeout
    async with pool.transaction() as conn:
        rows = await conn.fetch(
            f"{_KNOWN_USERS} SELECT {entry_columns('e')}, o.user_id FROM memory_entries e"
            " JOIN LATERAL (SELECT user_id FROM owners o WHERE o.tenant = e.tenant"
            "  AND o.owner = e.owner ORDER BY user_id LIMIT 1) o ON true"
            " WHERE NOT EXISTS (SELECT 1 FROM role_pool_entries p WHERE p.tenant = e.tenant"
            "  AND p.role_id = e.role_id AND p.id = e.id)"
            f" ORDER BY e.tenant, e.role_id, e.id LIMIT {int(batch)} FOR UPDATE OF e SKIP LOCKED",
            timeout=timeout,
        )
        by_pool: dict[tuple[str, str], list[PoolWrite]] = {}
        taken: list[Any] = []
        for row in rows:
            entry = old.entry_of(row)
            try:
                made = pool_entry_from(replace(entry, status="active"), row["user_id"])
            except ValueError:  # the user id cannot be a tag value: left in place
                continue
            assert made is not None
            taken.append(row)
            writes = by_pool.setdefault((entry.tenant, entry.role_id), [])
            if entry.status == "active":
                writes.append(AddEntry(made, _by(entry.origin)))
                continue
            writes.append(AddEntry(replace(made, content=""), "person"))
            writes.append(UpdateEntry(replace(made.meta, retracted=True), "", 1, "person"))
        for (tenant, role_id), writes in by_pool.items():
            await pool.apply_in(conn, tenant, role_id, writes)
        if taken:
            await conn.executemany(
                "DELETE FROM memory_entries WHERE tenant = $1 AND owner = $2 AND id = $3",
                [(r["tenant"], r["owner"], r["id"]) for r in taken],
                timeout=timeout,
            )
        return len(rows), len(taken)


def _by(origin: str) -> Any:
    return "person" if origin == "person" else "memory_model"


async def _left_behind(old: PostgresMemoryStore) -> tuple[int, int]:
    async with old.pool.acquire(timeout=old.acquire_timeout) as conn:
        row = await conn.fetchrow(
            f"{_KNOWN_USERS} SELECT"
            " count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM owners o WHERE o.tenant = e.tenant"
            "  AND o.owner = e.owner)) AS unmatched,"
            " count(*) FILTER (WHERE EXISTS (SELECT 1 FROM role_pool_entries p"
            "  WHERE p.tenant = e.tenant AND p.role_id = e.role_id AND p.id = e.id))"
            " AS conflicting"
            " FROM memory_entries e",
            timeout=old.query_timeout,
        )
    return int(row["unmatched"]), int(row["conflicting"])


__all__ = ["MoveReport", "PostgresMemoryLedger", "move_entries_to_pool"]
