"""The memory store on PostgreSQL: the rules of ``memory/store.py`` kept in one transaction each.

Theory of operation
-------------------
Tables live in ``memory/migrations/0001_memory.sql``. Every change to one user's memory runs in
one transaction that first takes a transaction-scoped advisory lock on ``(tenant, owner)``, so
the decisions of ``plan_save``/``plan_restore`` (count limit, stable keys, duplicates, blocks)
see a state nobody else changes until they commit; different users never wait for each other.
``delete_source`` erases the entries, writes the receipt and the tombstone in that same
transaction: either all of it happened or none of it. Times come from the database clock
(``clock_timestamp()``), the same clock as journal event times, so "older statement" compares
like with like across processes. Reads (``list``, ``get``, ``changes``) are single statements
on the partial indexes. Connection failures and timeouts become ``MemoryUnavailable``.

Encryption at rest (``memory/migrations/0003_memory_sealed.sql``, SPEC RM-8): an entry's
content is stored only as ``content_sealed`` under ``key_id`` (``memory/crypto.py``), with the
row's tenant, owner and id as associated data; the plaintext column holds ``''``. Duplicates are
found by ``content_hash``, an HMAC of the normalised content under the row's key, so a lookup
asks for the hash under every key of the keyring (a row keeps the hash of the key it is sealed
under). Kind, key, ids, source and times stay plaintext: listing, visibility and deletion need
no decryption. ``seal_plaintext`` seals rows written before encryption (run at start),
``rotate`` moves rows to the active key; both work in batches and may be run again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

from memory.crypto import Keyring, Sealed, row_context
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
    edit_block,
    edited_entry,
    erased_entry,
    expect_revision,
    normalize,
    owner_key,
    plan_save,
    prepare_draft,
    saved_entry,
    source_deletion,
)
from memory.errors import DuplicateMemory, MemoryUnavailable, UnknownKey
from memory.store import MAX_CHANGES_LISTED, MemoryBackup, plan_restore
from storage.postgres import PooledCalls, in_batches

T = TypeVar("T")

_LOCK_CLASS = 0x4D454D  # "MEM": the advisory lock namespace of this store
_COLUMNS = (
    "id, tenant, owner, role_id, kind, key, content, key_id, content_sealed, origin,"
    " source_thread_id, source_seq, stated_at, status, revision, created_at, updated_at"
)
SEAL_BATCH = 500
"""Rows sealed or re-encrypted per transaction (``seal_plaintext``, ``rotate``)."""
_OWNER = "tenant = $1 AND owner = $2"


def entry_columns(alias: str) -> str:
    """The columns an entry is read from, of the table aliased ``alias``."""
    return ", ".join(f"{alias}.{c.strip()}" for c in _COLUMNS.split(","))


def _entry(row: Any, content: str) -> MemoryEntry:
    return MemoryEntry(
        id=row["id"],
        tenant=row["tenant"],
        owner=row["owner"],
        role_id=row["role_id"],
        kind=row["kind"],
        key=row["key"],
        content=content,
        origin=row["origin"],
        source_thread_id=row["source_thread_id"],
        source_seq=row["source_seq"],
        stated_at=row["stated_at"],
        status=row["status"],
        revision=row["revision"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def entry_context(tenant: str, owner: str, entry_id: str) -> bytes:
    """The associated data of an entry's sealed content: its row and column."""
    return row_context("memory_entries", "content", tenant, owner, entry_id)


@functools.cache
def process_keyring() -> Keyring:
    """The keyring of a store built without one (tests, benchmarks): a random key that lives
    as long as the process, so nothing it sealed opens after a restart. The server always
    passes the configured keyring (``runtime/services.py``)."""
    return Keyring.generate("process")


_UPSERT = """
INSERT INTO memory_entries (id, tenant, owner, role_id, kind, key, content, key_id,
    content_sealed, content_hash, origin, source_thread_id, source_seq, stated_at, status,
    revision, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, '', $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT (tenant, owner, id) DO UPDATE SET
    kind = EXCLUDED.kind, key = EXCLUDED.key, content = '', key_id = EXCLUDED.key_id,
    content_sealed = EXCLUDED.content_sealed,
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
_RECEIPT = """
INSERT INTO memory_receipts (tenant, owner, receipt_id, source_thread_id, deleted, entry_ids, at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""


def _log_args(entry: MemoryEntry, action: str, actor: Actor, at: datetime) -> tuple[Any, ...]:
    return (
        entry.tenant, entry.owner, entry.id, entry.role_id, action, actor, at, entry.revision,
        entry.kind, entry.key, entry.source_thread_id,
    )  # fmt: skip


def _block_args(tenant: str, owner: str, b: SourceBlock) -> tuple[Any, ...]:
    # role_id "" stands for "every role" (the column is NOT NULL; see the migration).
    return (tenant, owner, b.role_id or "", b.source_thread_id, b.through, b.reason, b.at)


def _receipt_args(tenant: str, owner: str, r: DeletionReceipt) -> tuple[Any, ...]:
    return (tenant, owner, r.receipt_id, r.source_thread_id, r.deleted, list(r.entry_ids), r.at)


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
    ``keyring`` seals content (default: ``process_keyring``); ``reload_keyring`` is called once
    when a row is sealed under a key the keyring does not hold (a rotation made by another
    process, ``openrealtime memory rotate-key``).
    """

    def __init__(
        self,
        pool: Any,
        *,
        keyring: Keyring | None = None,
        reload_keyring: Callable[[], Keyring] | None = None,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        self.pool = pool
        self.keyring = keyring if keyring is not None else process_keyring()
        self.reload_keyring = reload_keyring
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool,
            acquire_timeout=acquire_timeout,
            unavailable=MemoryUnavailable,
            what="memory store",
        )

    # ------------------------------------------------------------------ sealing

    def _open(self, row: Any) -> str:
        if row["status"] != "active":
            return ""
        if row["content_sealed"] is None:
            return str(row["content"])  # written before encryption; sealed at start
        sealed = Sealed(row["key_id"], bytes(row["content_sealed"]))
        context = entry_context(row["tenant"], row["owner"], row["id"])
        try:
            return self.keyring.open(sealed, context=context)
        except UnknownKey:
            if self.reload_keyring is None:
                raise
            self.keyring = self.reload_keyring()
            return self.keyring.open(sealed, context=context)

    def _entry(self, row: Any) -> MemoryEntry:
        return _entry(row, self._open(row))

    def entry_of(self, row: Any) -> MemoryEntry:
        """The entry of a row read with ``entry_columns``, its content opened (``""`` for a
        deleted one)."""
        return self._entry(row)

    def _hash(self, e: MemoryEntry, key_id: str) -> str:
        return self.keyring.content_hash(
            normalize(e.content), scope=(e.tenant, e.owner), key_id=key_id
        )

    def _hashes(self, tenant: str, owner: str, content: str) -> list[str]:
        """What ``content_hash`` a row with ``content`` may hold: the HMAC under every key,
        and the plain SHA-256 of rows not sealed yet."""
        normal = normalize(content)
        return [*self.keyring.content_hashes(normal, scope=(tenant, owner)), content_hash(content)]

    def _entry_args(self, e: MemoryEntry) -> tuple[Any, ...]:
        if e.status == "active":
            context = entry_context(e.tenant, e.owner, e.id)
            sealed = self.keyring.seal(e.content, context=context)
            key_id: str | None = sealed.key_id
            blob: bytes | None = sealed.blob
            digest = self._hash(e, sealed.key_id)
        else:  # a deleted entry keeps nothing of its content
            key_id, blob, digest = None, None, ""
        return (
            e.id, e.tenant, e.owner, e.role_id, e.kind, e.key, key_id, blob, digest, e.origin,
            e.source_thread_id, e.source_seq, e.stated_at, e.status, e.revision, e.created_at,
            e.updated_at,
        )  # fmt: skip

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
        draft = prepare_draft(draft)
        owner = owner_key(user)
        source = draft.source
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
                " AND (e.key = $4 OR e.content_hash = ANY($5::text[])"
                "      OR (e.source_thread_id = $6 AND e.source_seq = $7))",
                tenant, owner, role_id, draft.key, self._hashes(tenant, owner, draft.content),
                source.thread_id if source else None,
                source.seq if source else None,
                source.at if source else None,
                timeout=timeout,
            )  # fmt: skip
            head = rows[0]
            plan = plan_save(
                draft,
                [self._entry(r) for r in rows if r["id"] is not None],
                blocked=bool(head["blocked"]) if source is not None else False,
                active=int(head["active"]),
                max_entries=max_entries,
            )
            entry = saved_entry(plan, draft, tenant=tenant, owner=owner, role_id=role_id, now=now)
            if entry is None:
                return SaveOutcome(plan.action, plan.target)
            await conn.execute(_UPSERT, *self._entry_args(entry), timeout=timeout)
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
            return [self._entry(r) for r in rows]

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
            return None if row is None else self._entry(row)

        return await self._call(work, transaction=False)

    async def _active_where(
        self,
        conn: Any,
        tenant: str,
        owner: str,
        column: Literal["id", "role_id", "source_thread_id"],
        value: str,
    ) -> list[MemoryEntry]:
        """The owner's active entries whose ``column`` is ``value``."""
        rows = await conn.fetch(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {_OWNER} AND {column} = $3"
            " AND status = 'active'",
            tenant,
            owner,
            value,
            timeout=self.query_timeout,
        )
        return [self._entry(r) for r in rows]

    async def _current(
        self, conn: Any, tenant: str, owner: str, entry_id: str, revision: int
    ) -> MemoryEntry:
        found = await self._active_where(conn, tenant, owner, "id", entry_id)
        return expect_revision(found[0] if found else None, entry_id, revision)

    async def _block_source(self, conn: Any, entry: MemoryEntry, now: datetime) -> None:
        block = edit_block(entry, now)
        if block is not None:
            args = _block_args(entry.tenant, entry.owner, block)
            await conn.execute(_BLOCK, *args, timeout=self.query_timeout)

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
                " AND status = 'active' AND content_hash = ANY($4::text[]) AND id <> $5",
                tenant, owner, entry.role_id, self._hashes(tenant, owner, content), entry.id,
                timeout=self.query_timeout,
            )  # fmt: skip
            if clash is not None:
                raise DuplicateMemory("another memory of this role already says that")
            await self._block_source(conn, entry, now)
            edited = edited_entry(entry, content=content, kind=new_kind, now=now)
            await conn.execute(_UPSERT, *self._entry_args(edited), timeout=self.query_timeout)
            await conn.execute(
                _LOG, *_log_args(edited, "updated", "person", now), timeout=self.query_timeout
            )
            return edited

        return await self._call(work, transaction=True)

    async def _erase(
        self, conn: Any, entries: list[MemoryEntry], now: datetime, action: str
    ) -> None:
        gone = [erased_entry(e, now) for e in entries]
        if not gone:
            return
        await conn.executemany(
            _UPSERT, [self._entry_args(e) for e in gone], timeout=self.query_timeout
        )
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
            entries = await self._active_where(conn, tenant, owner, "role_id", role_id)
            for entry in entries:
                await self._block_source(conn, entry, now)
            await self._erase(conn, entries, now, "deleted")
            return len(entries)

        return await self._call(work, transaction=True)

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> DeletionReceipt:
        owner = owner_key(user)

        async def work(conn: Any) -> DeletionReceipt:
            now = await self._lock(conn, tenant, owner)
            entries = await self._active_where(
                conn, tenant, owner, "source_thread_id", source_thread_id
            )
            receipt, tombstone = source_deletion(source_thread_id, entries, now)
            # Receipt and tombstone first, in the same transaction as the deletion.
            timeout = self.query_timeout
            await conn.execute(_RECEIPT, *_receipt_args(tenant, owner, receipt), timeout=timeout)
            await conn.execute(_BLOCK, *_block_args(tenant, owner, tombstone), timeout=timeout)
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
            [self._entry(r) for r in rows],
            [_receipt(r) for r in receipts],
            [_block(r) for r in blocks],
        )

    async def backup(self, tenant: str, user: str) -> MemoryBackup:
        owner = owner_key(user)

        async def work(conn: Any) -> MemoryBackup:
            return MemoryBackup.of(*await self._state(conn, tenant, owner))

        # A transaction: one consistent snapshot of entries, receipts and blocks.
        return await self._call(work, transaction=True)

    async def restore(self, tenant: str, user: str, backup: MemoryBackup) -> ImportResult:
        owner = owner_key(user)
        timeout = self.query_timeout

        async def work(conn: Any) -> ImportResult:
            now = await self._lock(conn, tenant, owner)
            entries, receipts, blocks = await self._state(conn, tenant, owner)
            plan = plan_restore(
                backup,
                tenant=tenant,
                owner=owner,
                entries=entries,
                receipts=receipts,
                blocks=blocks,
                at=now,
            )
            if plan.entries:
                await conn.executemany(
                    _UPSERT, [self._entry_args(e) for e in plan.entries], timeout=timeout
                )
                await conn.executemany(
                    _LOG,
                    [_log_args(e, "imported", "person", now) for e in plan.entries],
                    timeout=timeout,
                )
            if plan.receipts:
                await conn.executemany(
                    _RECEIPT,
                    [_receipt_args(tenant, owner, r) for r in plan.receipts],
                    timeout=timeout,
                )
            if plan.blocks:
                await conn.executemany(
                    _BLOCK, [_block_args(tenant, owner, b) for b in plan.blocks], timeout=timeout
                )
            return ImportResult(imported=len(plan.entries), skipped=plan.skipped)

        return await self._call(work, transaction=True)

    # ------------------------------------------------------------------ at-rest maintenance

    async def seal_plaintext(self, *, batch: int = SEAL_BATCH) -> int:
        """Seal, in batches of ``batch`` rows (one transaction each), every row written before
        encryption; returns how many. Idempotent: a sealed row holds ``''`` in ``content``."""
        return await self._reseal("content <> ''", (), batch=batch)

    async def rotate(self, *, batch: int = SEAL_BATCH) -> int:
        """Re-encrypt, in batches, every sealed row not under the active key (its hash too);
        returns how many. Rows stay readable throughout: the old keys stay in the keyring."""
        return await self._reseal(
            "content_sealed IS NOT NULL AND key_id <> $1", (self.keyring.active_id,), batch=batch
        )

    async def key_ids_in_use(self) -> dict[str, int]:
        """Sealed rows per key id (``None`` for rows still in plaintext, if any)."""

        async def work(conn: Any) -> dict[str, int]:
            rows = await conn.fetch(
                "SELECT key_id, count(*) AS n FROM memory_entries"
                " WHERE content_sealed IS NOT NULL OR content <> '' GROUP BY key_id",
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
            f"SELECT {_COLUMNS} FROM memory_entries WHERE {where}"
            f" LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
            *args,
            timeout=self.query_timeout,
        )
        updates: list[tuple[Any, ...]] = []
        for row in rows:
            entry = self._entry(row)
            if entry.status != "active":
                updates.append((entry.tenant, entry.owner, entry.id, None, None, ""))
                continue
            sealed = self.keyring.seal(
                entry.content, context=entry_context(entry.tenant, entry.owner, entry.id)
            )
            digest = self._hash(entry, sealed.key_id)
            updates.append(
                (entry.tenant, entry.owner, entry.id, sealed.key_id, sealed.blob, digest)
            )
        if updates:
            await conn.executemany(
                "UPDATE memory_entries SET content = '', key_id = $4, content_sealed = $5,"
                " content_hash = $6 WHERE tenant = $1 AND owner = $2 AND id = $3",
                updates,
                timeout=self.query_timeout,
            )
        return len(rows)
