"""The memory store on PostgreSQL: the rules of ``memory/store.py`` kept in one transaction each.

Theory of operation
-------------------
Tables live in ``memory/migrations/0001_memory.sql``. Every change to one user's memory runs in
one transaction that first takes a transaction-scoped advisory lock on ``(tenant, owner)``, so
the decisions of ``plan_save``/``restore_plan`` (count limit, stable keys, duplicates, blocks)
see a state nobody else changes until they commit; different users never wait for each other.
``delete_source`` erases the entries, writes the receipt and the tombstone in that same
transaction: either all of it happened or none of it. Times come from the database clock
(``clock_timestamp()``), the same clock as journal event times, so "older statement" compares
like with like across processes. Reads (``list``, ``get``, ``changes``) are single statements
on the partial indexes. Connection failures and timeouts become ``MemoryUnavailable``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from memory.entries import (
    MAX_ENTRIES_PER_ROLE,
    Actor,
    DeletionReceipt,
    ImportResult,
    MemoryChange,
    MemoryDraft,
    MemoryEntry,
    MemoryKind,
    SaveOutcome,
    SourceBlock,
    check_kind,
    clean_content,
    content_hash,
    owner_key,
    plan_save,
)
from memory.errors import (
    DuplicateMemory,
    MemoryNotFound,
    MemoryUnavailable,
    StaleRevision,
)
from memory.store import (
    MAX_CHANGES_LISTED,
    MemoryBackup,
    carried_deletions,
    new_entry_id,
    new_receipt_id,
    restore_plan,
)

T = TypeVar("T")

_LOCK_CLASS = 0x4D454D  # "MEM": the advisory lock namespace of this store
_COLUMNS = (
    "id, tenant, owner, role_id, kind, key, content, origin, source_thread_id, source_seq,"
    " stated_at, status, revision, created_at, updated_at"
)
_OWNER = "tenant = $1 AND owner = $2"
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.InterfaceError,
)


def _entry(row: Any) -> MemoryEntry:
    return MemoryEntry(
        id=row["id"],
        tenant=row["tenant"],
        owner=row["owner"],
        role_id=row["role_id"],
        kind=row["kind"],
        key=row["key"],
        content=row["content"],
        origin=row["origin"],
        source_thread_id=row["source_thread_id"],
        source_seq=row["source_seq"],
        stated_at=row["stated_at"],
        status=row["status"],
        revision=row["revision"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _entry_args(e: MemoryEntry) -> tuple[Any, ...]:
    return (
        e.id, e.tenant, e.owner, e.role_id, e.kind, e.key, e.content, content_hash(e.content),
        e.origin, e.source_thread_id, e.source_seq, e.stated_at, e.status, e.revision,
        e.created_at, e.updated_at,
    )  # fmt: skip


_UPSERT = f"""
INSERT INTO memory_entries ({_COLUMNS}, content_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, $9, $10, $11, $12, $13, $14, $15, $16, $8)
ON CONFLICT (tenant, owner, id) DO UPDATE SET
    kind = EXCLUDED.kind, key = EXCLUDED.key, content = EXCLUDED.content,
    content_hash = EXCLUDED.content_hash, origin = EXCLUDED.origin,
    source_thread_id = EXCLUDED.source_thread_id, source_seq = EXCLUDED.source_seq,
    stated_at = EXCLUDED.stated_at, status = EXCLUDED.status, revision = EXCLUDED.revision,
    updated_at = EXCLUDED.updated_at
"""
_LOG = """
INSERT INTO memory_changes
    (tenant, owner, entry_id, role_id, action, actor, at, revision, kind, key, source_thread_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
"""
_BLOCK = """
INSERT INTO memory_source_blocks (tenant, owner, role_id, source_thread_id, through, reason, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""


def _log_args(entry: MemoryEntry, action: str, actor: Actor, at: datetime) -> tuple[Any, ...]:
    return (
        entry.tenant, entry.owner, entry.id, entry.role_id, action, actor, at, entry.revision,
        entry.kind, entry.key, entry.source_thread_id,
    )  # fmt: skip


def _block(row: Any) -> SourceBlock:
    return SourceBlock(
        role_id=row["role_id"] or None,
        source_thread_id=row["source_thread_id"],
        through=row["through"],
        reason=row["reason"],
        at=row["at"],
    )


def _receipt(row: Any) -> DeletionReceipt:
    return DeletionReceipt(
        receipt_id=row["receipt_id"],
        source_thread_id=row["source_thread_id"],
        deleted=row["deleted"],
        entry_ids=tuple(row["entry_ids"]),
        at=row["at"],
    )


class PostgresMemoryStore:
    """``MemoryStore`` on an asyncpg pool whose database has the memory migration applied.

    ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a connection.
    """

    def __init__(
        self, pool: Any, *, query_timeout: float = 5.0, acquire_timeout: float = 5.0
    ) -> None:
        self.pool = pool
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout

    async def _call(self, work: Callable[[Any], Awaitable[T]], *, transaction: bool) -> T:
        """Run ``work(conn)`` on a pooled connection (in a transaction when asked: every
        change takes the owner's lock first with ``_lock``)."""
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                if not transaction:
                    return await work(conn)
                async with conn.transaction():
                    return await work(conn)
        except _UNAVAILABLE as e:
            raise MemoryUnavailable(f"memory store unavailable: {type(e).__name__}") from e

    async def _lock(self, conn: Any, tenant: str, owner: str) -> datetime:
        now: datetime = await conn.fetchval(
            "SELECT clock_timestamp() FROM"
            " pg_advisory_xact_lock($1::int, hashtext($2 || chr(31) || $3))",
            _LOCK_CLASS,
            tenant,
            owner,
            timeout=self.query_timeout,
        )
        return now

    async def save(
        self,
        tenant: str,
        user: str,
        role_id: str,
        draft: MemoryDraft,
        *,
        max_entries: int = MAX_ENTRIES_PER_ROLE,
    ) -> SaveOutcome:
        content = clean_content(draft.content)
        kind = check_kind(draft.kind)
        draft = replace(draft, content=content)
        owner = owner_key(user)
        source = draft.source
        digest = content_hash(content)
        timeout = self.query_timeout

        async def work(conn: Any) -> SaveOutcome:
            now = await self._lock(conn, tenant, owner)
            rows = await conn.fetch(
                f"SELECT {_COLUMNS},"
                " (SELECT count(*) FROM memory_entries a WHERE a.tenant = $1 AND a.owner = $2"
                "  AND a.role_id = $3 AND a.status = 'active') AS active,"
                " (SELECT EXISTS (SELECT 1 FROM memory_source_blocks b WHERE b.tenant = $1"
                "  AND b.owner = $2 AND b.source_thread_id = $6"
                "  AND (b.role_id = '' OR b.role_id = $3)"
                "  AND (b.through IS NULL OR $8 <= b.through))) AS blocked"
                " FROM (SELECT 1) one LEFT JOIN memory_entries e ON e.tenant = $1"
                " AND e.owner = $2 AND e.role_id = $3 AND e.status = 'active'"
                " AND (e.key = $4 OR e.content_hash = $5"
                "      OR (e.source_thread_id = $6 AND e.source_seq = $7))",
                tenant, owner, role_id, draft.key, digest,
                source.thread_id if source else None,
                source.seq if source else None,
                source.at if source else None,
                timeout=timeout,
            )  # fmt: skip
            head = rows[0]
            found = [_entry(r) for r in rows if r["id"] is not None]
            plan = plan_save(
                draft,
                blocked=bool(head["blocked"]) if source is not None else False,
                by_key=next((e for e in found if draft.key and e.key == draft.key), None),
                by_source=next(
                    (
                        e
                        for e in found
                        if source is not None
                        and source.seq is not None
                        and e.origin == "extraction"
                        and e.key is None
                        and draft.key is None
                        and e.kind == kind
                        and e.source_thread_id == source.thread_id
                        and e.source_seq == source.seq
                    ),
                    None,
                ),
                by_hash=next((e for e in found if content_hash(e.content) == digest), None),
                active=int(head["active"]),
                max_entries=max_entries,
            )
            stated_at = source.at if source is not None else now
            if plan.action == "created":
                entry = MemoryEntry(
                    id=new_entry_id(), tenant=tenant, owner=owner, role_id=role_id, kind=kind,
                    key=draft.key, content=content, origin=draft.actor,
                    source_thread_id=source.thread_id if source else None,
                    source_seq=source.seq if source else None, stated_at=stated_at,
                    status="active", revision=1, created_at=now, updated_at=now,
                )  # fmt: skip
            elif plan.action == "updated":
                assert plan.target is not None
                entry = replace(
                    plan.target, kind=kind, content=content, origin=draft.actor,
                    source_thread_id=source.thread_id if source else None,
                    source_seq=source.seq if source else None, stated_at=stated_at,
                    revision=plan.target.revision + 1, updated_at=now,
                )  # fmt: skip
            else:
                return SaveOutcome(plan.action, plan.target)
            await conn.execute(_UPSERT, *_entry_args(entry), timeout=timeout)
            await conn.execute(
                _LOG, *_log_args(entry, plan.action, draft.actor, now), timeout=timeout
            )
            return SaveOutcome(plan.action, entry)

        return await self._call(work, transaction=True)

    async def list_entries(
        self, tenant: str, user: str, role_id: str, *, limit: int | None = None
    ) -> list[MemoryEntry]:
        async def work(conn: Any) -> list[MemoryEntry]:
            rows = await conn.fetch(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} AND role_id = $3"
                " AND status = 'active' ORDER BY updated_at DESC LIMIT $4",
                tenant,
                owner_key(user),
                role_id,
                limit,
                timeout=self.query_timeout,
            )
            return [_entry(r) for r in rows]

        return await self._call(work, transaction=False)

    async def get(self, tenant: str, user: str, entry_id: str) -> MemoryEntry | None:
        async def work(conn: Any) -> MemoryEntry | None:
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} AND id = $3"
                " AND status = 'active'",
                tenant,
                owner_key(user),
                entry_id,
                timeout=self.query_timeout,
            )
            return None if row is None else _entry(row)

        return await self._call(work, transaction=False)

    async def _current(
        self, conn: Any, tenant: str, owner: str, entry_id: str, revision: int
    ) -> MemoryEntry:
        row = await conn.fetchrow(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} AND id = $3"
            " AND status = 'active'",
            tenant,
            owner,
            entry_id,
            timeout=self.query_timeout,
        )
        if row is None:
            raise MemoryNotFound(f"no memory {entry_id}")
        entry = _entry(row)
        if entry.revision != revision:
            raise StaleRevision(
                f"memory {entry_id} is at revision {entry.revision}, not {revision}",
                entry.revision,
            )
        return entry

    async def _block_source(self, conn: Any, entry: MemoryEntry, now: datetime) -> None:
        if entry.source_thread_id is not None:
            await conn.execute(
                _BLOCK, entry.tenant, entry.owner, entry.role_id, entry.source_thread_id,
                now, "edited", now, timeout=self.query_timeout,
            )  # fmt: skip

    async def edit(
        self,
        tenant: str,
        user: str,
        entry_id: str,
        *,
        revision: int,
        content: str,
        kind: MemoryKind | None = None,
    ) -> MemoryEntry:
        content = clean_content(content)
        new_kind = check_kind(kind) if kind is not None else None
        owner = owner_key(user)

        async def work(conn: Any) -> MemoryEntry:
            now = await self._lock(conn, tenant, owner)
            entry = await self._current(conn, tenant, owner, entry_id, revision)
            clash = await conn.fetchval(
                f"SELECT id FROM memory_entries WHERE {_OWNER} AND role_id = $3"
                " AND status = 'active' AND content_hash = $4 AND id <> $5",
                tenant, owner, entry.role_id, content_hash(content), entry.id,
                timeout=self.query_timeout,
            )  # fmt: skip
            if clash is not None:
                raise DuplicateMemory("another memory of this role already says that")
            await self._block_source(conn, entry, now)
            edited = replace(
                entry, kind=new_kind or entry.kind, content=content, origin="person",
                source_thread_id=None, source_seq=None, stated_at=now,
                revision=entry.revision + 1, updated_at=now,
            )  # fmt: skip
            await conn.execute(_UPSERT, *_entry_args(edited), timeout=self.query_timeout)
            await conn.execute(
                _LOG, *_log_args(edited, "updated", "person", now), timeout=self.query_timeout
            )
            return edited

        return await self._call(work, transaction=True)

    async def _erase(
        self, conn: Any, entries: list[MemoryEntry], now: datetime, action: str
    ) -> None:
        gone = [
            replace(e, status="deleted", content="", revision=e.revision + 1, updated_at=now)
            for e in entries
        ]
        if not gone:
            return
        await conn.executemany(_UPSERT, [_entry_args(e) for e in gone], timeout=self.query_timeout)
        await conn.executemany(
            _LOG, [_log_args(e, action, "person", now) for e in gone], timeout=self.query_timeout
        )

    async def delete(self, tenant: str, user: str, entry_id: str, *, revision: int) -> None:
        owner = owner_key(user)

        async def work(conn: Any) -> None:
            now = await self._lock(conn, tenant, owner)
            entry = await self._current(conn, tenant, owner, entry_id, revision)
            await self._block_source(conn, entry, now)
            await self._erase(conn, [entry], now, "deleted")

        await self._call(work, transaction=True)

    async def clear(self, tenant: str, user: str, role_id: str) -> int:
        owner = owner_key(user)

        async def work(conn: Any) -> int:
            now = await self._lock(conn, tenant, owner)
            rows = await conn.fetch(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} AND role_id = $3"
                " AND status = 'active'",
                tenant,
                owner,
                role_id,
                timeout=self.query_timeout,
            )
            entries = [_entry(r) for r in rows]
            for entry in entries:
                await self._block_source(conn, entry, now)
            await self._erase(conn, entries, now, "deleted")
            return len(entries)

        return await self._call(work, transaction=True)

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> DeletionReceipt:
        owner = owner_key(user)

        async def work(conn: Any) -> DeletionReceipt:
            now = await self._lock(conn, tenant, owner)
            rows = await conn.fetch(
                f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER}"
                " AND source_thread_id = $3 AND status = 'active'",
                tenant,
                owner,
                source_thread_id,
                timeout=self.query_timeout,
            )
            entries = [_entry(r) for r in rows]
            receipt = DeletionReceipt(
                new_receipt_id(), source_thread_id, len(entries), tuple(e.id for e in entries), now
            )
            # Receipt and tombstone first, in the same transaction as the deletion.
            await conn.execute(
                "INSERT INTO memory_receipts"
                " (tenant, owner, receipt_id, source_thread_id, deleted, entry_ids, at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                tenant, owner, receipt.receipt_id, source_thread_id, receipt.deleted,
                list(receipt.entry_ids), now, timeout=self.query_timeout,
            )  # fmt: skip
            await conn.execute(
                _BLOCK, tenant, owner, "", source_thread_id, None, "deleted", now,
                timeout=self.query_timeout,
            )  # fmt: skip
            await self._erase(conn, entries, now, "source_deleted")
            return receipt

        return await self._call(work, transaction=True)

    async def changes(
        self, tenant: str, user: str, role_id: str, *, limit: int = MAX_CHANGES_LISTED
    ) -> list[MemoryChange]:
        async def work(conn: Any) -> list[MemoryChange]:
            rows = await conn.fetch(
                "SELECT seq, entry_id, role_id, action, actor, at, revision, kind, key,"
                f" source_thread_id FROM memory_changes WHERE {_OWNER} AND role_id = $3"
                " ORDER BY seq DESC LIMIT $4",
                tenant,
                owner_key(user),
                role_id,
                min(limit, MAX_CHANGES_LISTED),
                timeout=self.query_timeout,
            )
            return [MemoryChange(**dict(r)) for r in rows]

        return await self._call(work, transaction=False)

    async def _state(
        self, conn: Any, tenant: str, owner: str
    ) -> tuple[list[MemoryEntry], list[DeletionReceipt], list[SourceBlock]]:
        timeout = self.query_timeout
        rows = await conn.fetch(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} ORDER BY created_at",
            tenant,
            owner,
            timeout=timeout,
        )
        receipts = await conn.fetch(
            f"SELECT * FROM memory_receipts WHERE {_OWNER} ORDER BY at", tenant, owner,
            timeout=timeout,
        )  # fmt: skip
        blocks = await conn.fetch(
            f"SELECT * FROM memory_source_blocks WHERE {_OWNER} ORDER BY at", tenant, owner,
            timeout=timeout,
        )  # fmt: skip
        return (
            [_entry(r) for r in rows],
            [_receipt(r) for r in receipts],
            [_block(r) for r in blocks],
        )

    async def backup(self, tenant: str, user: str) -> MemoryBackup:
        owner = owner_key(user)

        async def work(conn: Any) -> MemoryBackup:
            entries, receipts, blocks = await self._state(conn, tenant, owner)
            return MemoryBackup(
                entries=tuple(e for e in entries if e.status == "active"),
                deleted_ids=tuple(e.id for e in entries if e.status == "deleted"),
                receipts=tuple(receipts),
                blocks=tuple(blocks),
            )

        # A transaction: one consistent snapshot of entries, receipts and blocks.
        return await self._call(work, transaction=True)

    async def restore(self, tenant: str, user: str, backup: MemoryBackup) -> ImportResult:
        owner = owner_key(user)
        timeout = self.query_timeout

        async def work(conn: Any) -> ImportResult:
            now = await self._lock(conn, tenant, owner)
            entries, receipts, blocks = await self._state(conn, tenant, owner)
            carried = carried_deletions(
                backup, known_ids={e.id for e in entries}, receipts=receipts, at=now
            )
            taken, skipped = restore_plan(
                backup,
                known_ids={e.id for e in entries},
                receipts=receipts,
                blocks=blocks,
                active=[e for e in entries if e.status == "active"],
            )
            taken = [replace(e, tenant=tenant, owner=owner) for e in taken]
            if taken:
                await conn.executemany(_UPSERT, [_entry_args(e) for e in taken], timeout=timeout)
                await conn.executemany(
                    _LOG, [_log_args(e, "imported", "person", now) for e in taken], timeout=timeout
                )
            known = {r.receipt_id for r in receipts}
            new_receipts = [r for r in backup.receipts if r.receipt_id not in known]
            if carried is not None:
                new_receipts.append(carried)
            if new_receipts:
                await conn.executemany(
                    "INSERT INTO memory_receipts"
                    " (tenant, owner, receipt_id, source_thread_id, deleted, entry_ids, at)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    [
                        (tenant, owner, r.receipt_id, r.source_thread_id, r.deleted,
                         list(r.entry_ids), r.at)
                        for r in new_receipts
                    ],
                    timeout=timeout,
                )  # fmt: skip
            have = set(blocks)
            new_blocks = [b for b in backup.blocks if b not in have]
            if new_blocks:
                await conn.executemany(
                    _BLOCK,
                    [
                        (tenant, owner, b.role_id or "", b.source_thread_id, b.through,
                         b.reason, b.at)
                        for b in new_blocks
                    ],
                    timeout=timeout,
                )  # fmt: skip
            return ImportResult(imported=len(taken), skipped=skipped)

        return await self._call(work, transaction=True)
