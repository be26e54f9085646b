"""Per-user memory (SPEC MEM-1…8) kept as entries of the role's pool (SPEC RM-1…3, issue 18).

Theory of operation
-------------------
There is one memory per role, its pool (``memory/pool_store.py``): "bot memory is the only
memory". A user's memory of a role is the part of that pool the user asked for or said:
``PoolMemoryStore`` implements the ``MemoryStore`` contract (``memory/store.py``, its rules
unchanged) once, over any ``PoolStore``, with what the pool does not hold — source blocks,
deletion receipts and MEM's change log — kept by a ``MemoryLedger`` (``memory/memory_ledger.py``;
on PostgreSQL in ``memory/postgres_pool_memory.py``, in the tables of migration 0001).

1. Mapping (``memory/pool.py`` rule 10, ``pool_entry_from``): an extracted entry is a ``fact``
   whose one source is ``ThreadSource(thread, "seq:<n>")`` with an access record naming only
   the user; a person's entry is ``pinned`` without sources; both carry ``from:<user>``,
   ``for:person:<user>``, the tenant, and the kind as a topic; ``EntryMeta.personal`` holds
   the kind, key, origin, ``stated_at`` and ``updated_at``. MEM's revision is the pool version.
2. A user's MEM view of a role is exactly the current entries the pool shows them
   (``read_tagged`` of ``from:<user>`` — ``read_visible`` of that tag — with
   ``Reader(user, tenant, {role})``) that carry ``personal``,
   ``from:<user>`` and no audience but ``for:person:<user>``. What the memory model learned,
   other users' entries and entries shared wider are never listed, changed or deleted here.
3. Every change runs in one ``MemoryLedger.transaction``: the owner's lock (``(tenant,
   owner_key(user))``: PostgreSQL's advisory lock, the old store's, so the decisions of
   ``plan_save``/``plan_restore`` see a state nobody else changes), the current entries read
   under it (``read_tagged``/``load_meta_matching`` by ``from:<user>``: what the user's entries
   cost, not the pool's size, and on the transaction's own connection, so a call holds one
   connection, never waits for a second), then the pool writes (``apply_in``,
   roles in sorted order: one lock order for every writer of several pools) and the
   ledger's rows on the same transaction. So ``delete_source`` erases the entries of every
   role of the user and writes the receipt and the tombstone in ONE transaction.
4. An edit keeps the entry's id and moves it on one version, ``pinned`` and without a source
   (``pool_store`` rule 6's one layer change); the old source is blocked (MEM-8). An extraction
   that updates a pinned entry by its key leaves it pinned, with the new source. A delete
   retracts the entry and replaces its content with ``""`` (sealed like any content): nothing
   of it survives. The ledger remembers which role each entry id is in (the change log), so
   ``get``/``edit``/``delete`` need no role.
5. Restore keeps an entry's id unless the role's pool already holds that id (another user's
   entry): then the entry takes a new id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from memory.entries import (
    MAX_ENTRIES_PER_ROLE,
    DeletionReceipt,
    ImportResult,
    MemoryChange,
    MemoryDraft,
    MemoryEntry,
    MemoryKind,
    SaveOutcome,
    check_kind,
    clean_content,
    content_hash,
    edit_block,
    edited_entry,
    erased_entry,
    expect_revision,
    new_entry_id,
    owner_key,
    plan_save,
    prepare_draft,
    saved_entry,
    source_deletion,
)
from memory.entries import Actor as MemoryActor
from memory.errors import DuplicateMemory, MemoryNotFound
from memory.memory_ledger import MemoryLedger
from memory.pool import (
    LEGACY_ITEM_PREFIX,
    EntryMeta,
    Layer,
    PoolEntry,
    Reader,
    ThreadSource,
    for_person_tag,
    from_tag,
    pool_entry_from,
)
from memory.pool_store import Actor, AddEntry, PoolStore, PoolWrite, UpdateEntry
from memory.store import MAX_CHANGES_LISTED, MemoryBackup, plan_restore

# ------------------------------------------------------------------ mapping (rules 1, 2, 4)


def is_personal(meta: EntryMeta, user: str) -> bool:
    """Rule 2: ``meta`` is an entry of ``user``'s own memory."""
    return (
        meta.personal is not None
        and from_tag(user) in meta.tags
        and meta.audience == {for_person_tag(user)}
    )


def _seq(item_id: str) -> int | None:
    raw = item_id.removeprefix(LEGACY_ITEM_PREFIX)
    return int(raw) if item_id.startswith(LEGACY_ITEM_PREFIX) and raw.isdigit() else None


def memory_entry_of(meta: EntryMeta, content: str, *, tenant: str, owner: str) -> MemoryEntry:
    """The MEM view of a pool entry of rule 2 (``content`` ``""`` for a retracted one)."""
    personal = meta.personal
    assert personal is not None
    source = next((s for s in meta.sources if isinstance(s, ThreadSource)), None)
    return MemoryEntry(
        id=meta.id, tenant=tenant, owner=owner, role_id=meta.role_id, kind=personal.kind,
        key=personal.key, content="" if meta.retracted else content, origin=personal.origin,
        source_thread_id=source.thread_id if source else None,
        source_seq=_seq(source.item_id) if source else None, stated_at=personal.stated_at,
        status="deleted" if meta.retracted else "active", revision=meta.version,
        created_at=meta.created_at, updated_at=personal.updated_at,
    )  # fmt: skip


def _pool_entry(entry: MemoryEntry, user: str) -> PoolEntry:
    made = pool_entry_from(replace(entry, status="active"), user)
    assert made is not None
    return made


def _updated_meta(entry: MemoryEntry, user: str, old: EntryMeta) -> EntryMeta:
    """Rule 4: ``old`` rewritten as ``entry`` says (content apart)."""
    fresh = _pool_entry(entry, user).meta
    layer: Layer = "pinned" if old.layer == "pinned" or not fresh.sources else "fact"
    return replace(fresh, layer=layer, created_at=old.created_at, version=old.version)


def _by(actor: MemoryActor) -> Actor:
    return "person" if actor == "person" else "memory_model"


def _change(entry: MemoryEntry, action: str, actor: MemoryActor, at: datetime) -> MemoryChange:
    return MemoryChange(
        seq=0, entry_id=entry.id, role_id=entry.role_id, action=action, actor=actor, at=at,
        revision=entry.revision, kind=entry.kind, key=entry.key,
        source_thread_id=entry.source_thread_id,
    )  # fmt: skip


# ------------------------------------------------------------------ the store


class PoolMemoryStore:
    """``MemoryStore`` over a ``PoolStore`` and a ``MemoryLedger`` (module docstring)."""

    def __init__(self, pool: PoolStore, ledger: MemoryLedger) -> None:
        self.pool = pool
        self.ledger = ledger

    async def _read(
        self, tenant: str, user: str, role_id: str, tx: Any = None
    ) -> list[MemoryEntry]:
        """Rule 2: the user's active entries of the role, oldest first (in ``tx`` if given)."""
        reader = Reader(user, tenant, frozenset({role_id}))
        found = await self.pool.read_tagged(
            tenant, role_id, reader, from_tag(user), current_only=True,
            tx=tx.pool_tx if tx is not None else None,
        )  # fmt: skip
        owner = owner_key(user)
        return [
            memory_entry_of(e.meta, e.content, tenant=tenant, owner=owner)
            for e in found
            if is_personal(e.meta, user)
        ]

    async def _deleted(self, tx: Any, tenant: str, user: str, role_id: str) -> list[MemoryEntry]:
        """The user's deleted (retracted) entries of the role, from metadata only."""
        owner = owner_key(user)
        return [
            memory_entry_of(meta, "", tenant=tenant, owner=owner)
            for meta in (await self._metas(tx, tenant, user, role_id)).values()
            if meta.retracted and is_personal(meta, user)
        ]

    async def _write(
        self, tx: Any, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        return await self.pool.apply_in(tx.pool_tx, tenant, role_id, writes)

    def _erase(self, entry: MemoryEntry, user: str, old: EntryMeta, now: datetime) -> PoolWrite:
        gone = erased_entry(entry, now)
        meta = _updated_meta(replace(gone, status="active"), user, old)
        return UpdateEntry(replace(meta, retracted=True), "", old.version, "person")

    async def _metas(self, tx: Any, tenant: str, user: str, role_id: str) -> dict[str, EntryMeta]:
        """The metadata of the user's entries of the role (every status)."""
        return await self.pool.load_meta_matching(
            tenant, role_id, tag=from_tag(user), tx=tx.pool_tx
        )

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
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            active = await self._read(tenant, user, role_id, tx)
            source = draft.source
            blocked = source is not None and any(
                b.blocks(role_id, source) for b in await self.ledger.blocks(tx, tenant, owner)
            )
            plan = plan_save(
                draft, active, blocked=blocked, active=len(active), max_entries=max_entries
            )
            entry = saved_entry(
                plan, draft, tenant=tenant, owner=owner, role_id=role_id, now=tx.now
            )
            if entry is None:
                return SaveOutcome(plan.action, plan.target)
            write: PoolWrite
            if plan.action == "created":
                write = AddEntry(_pool_entry(entry, user), _by(draft.actor))
            else:
                old = (await self._metas(tx, tenant, user, role_id))[entry.id]
                meta = _updated_meta(entry, user, old)
                write = UpdateEntry(meta, entry.content, old.version, _by(draft.actor))
            (meta,) = await self._write(tx, tenant, role_id, [write])
            entry = replace(entry, revision=meta.version)
            change = _change(entry, plan.action, draft.actor, tx.now)
            await self.ledger.record(tx, tenant, owner, changes=[change])
        return SaveOutcome(plan.action, entry)

    async def list_entries(
        self, tenant: str, user: str, role_id: str, *, limit: int | None = None
    ) -> list[MemoryEntry]:
        entries = sorted(
            await self._read(tenant, user, role_id), key=lambda e: e.updated_at, reverse=True
        )
        return entries if limit is None else entries[:limit]

    async def get(self, tenant: str, user: str, entry_id: str) -> MemoryEntry | None:
        role_id = await self.ledger.role_of(tenant, owner_key(user), entry_id)
        if role_id is None:
            return None
        return next((e for e in await self._read(tenant, user, role_id) if e.id == entry_id), None)

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
        owner = owner_key(user)
        role_id = await self.ledger.role_of(tenant, owner, entry_id)
        if role_id is None:
            raise MemoryNotFound(f"no memory {entry_id}")
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            active = await self._read(tenant, user, role_id, tx)
            entry = expect_revision(
                next((e for e in active if e.id == entry_id), None), entry_id, revision
            )
            content = clean_content(content)
            new_kind = check_kind(kind) if kind is not None else None
            digest = content_hash(content)
            if any(e.id != entry.id and content_hash(e.content) == digest for e in active):
                raise DuplicateMemory("another memory of this role already says that")
            edited = edited_entry(entry, content=content, kind=new_kind, now=tx.now)
            old = (await self._metas(tx, tenant, user, role_id))[entry.id]
            meta = _updated_meta(edited, user, old)
            await self._write(
                tx, tenant, role_id, [UpdateEntry(meta, content, old.version, "person")]
            )
            block = edit_block(entry, tx.now)
            await self.ledger.record(
                tx, tenant, owner, changes=[_change(edited, "updated", "person", tx.now)],
                blocks=[block] if block is not None else [],
            )  # fmt: skip
        return edited

    async def _erase_all(
        self, tx: Any, tenant: str, user: str, role_id: str, doomed: Sequence[MemoryEntry]
    ) -> list[MemoryEntry]:
        """Rule 4's delete of ``doomed`` (entries of ``role_id``); the erased entries."""
        if not doomed:
            return []
        metas = await self._metas(tx, tenant, user, role_id)
        writes = [self._erase(e, user, metas[e.id], tx.now) for e in doomed]
        await self._write(tx, tenant, role_id, writes)
        return [erased_entry(e, tx.now) for e in doomed]

    async def delete(self, tenant: str, user: str, entry_id: str, *, revision: int) -> None:
        owner = owner_key(user)
        role_id = await self.ledger.role_of(tenant, owner, entry_id)
        if role_id is None:
            raise MemoryNotFound(f"no memory {entry_id}")
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            active = await self._read(tenant, user, role_id, tx)
            entry = expect_revision(
                next((e for e in active if e.id == entry_id), None), entry_id, revision
            )
            gone = await self._erase_all(tx, tenant, user, role_id, [entry])
            block = edit_block(entry, tx.now)
            await self.ledger.record(
                tx, tenant, owner, changes=[_change(g, "deleted", "person", tx.now) for g in gone],
                blocks=[block] if block is not None else [],
            )  # fmt: skip

    async def clear(self, tenant: str, user: str, role_id: str) -> int:
        owner = owner_key(user)
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            active = await self._read(tenant, user, role_id, tx)
            gone = await self._erase_all(tx, tenant, user, role_id, active)
            blocks = [b for b in (edit_block(e, tx.now) for e in active) if b is not None]
            await self.ledger.record(
                tx, tenant, owner, changes=[_change(g, "deleted", "person", tx.now) for g in gone],
                blocks=blocks,
            )  # fmt: skip
        return len(active)

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> DeletionReceipt:
        owner = owner_key(user)
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            doomed: dict[str, list[MemoryEntry]] = {}
            for role_id in await self.ledger.roles(tx, tenant, owner):
                found = [
                    e
                    for e in await self._read(tenant, user, role_id, tx)
                    if e.source_thread_id == source_thread_id
                ]
                if found:
                    doomed[role_id] = found
            every = [e for entries in doomed.values() for e in entries]
            receipt, tombstone = source_deletion(source_thread_id, every, tx.now)
            await self.ledger.record(tx, tenant, owner, receipts=[receipt], blocks=[tombstone])
            gone: list[MemoryEntry] = []
            for role_id, entries in doomed.items():  # sorted: one lock order (rule 3)
                gone += await self._erase_all(tx, tenant, user, role_id, entries)
            await self.ledger.record(
                tx, tenant, owner,
                changes=[_change(g, "source_deleted", "person", tx.now) for g in gone],
            )  # fmt: skip
        return receipt

    async def changes(
        self, tenant: str, user: str, role_id: str, *, limit: int = MAX_CHANGES_LISTED
    ) -> list[MemoryChange]:
        return await self.ledger.changes(
            tenant, owner_key(user), role_id, min(limit, MAX_CHANGES_LISTED)
        )

    async def _everything(
        self, tx: Any, tenant: str, user: str, roles: Sequence[str]
    ) -> list[MemoryEntry]:
        held: list[MemoryEntry] = []
        for role_id in roles:
            held += await self._read(tenant, user, role_id, tx)
            held += await self._deleted(tx, tenant, user, role_id)
        return held

    async def backup(self, tenant: str, user: str) -> MemoryBackup:
        owner = owner_key(user)
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            roles = await self.ledger.roles(tx, tenant, owner)
            return MemoryBackup.of(
                await self._everything(tx, tenant, user, roles),
                await self.ledger.receipts(tx, tenant, owner),
                await self.ledger.blocks(tx, tenant, owner),
            )

    async def restore(self, tenant: str, user: str, backup: MemoryBackup) -> ImportResult:
        owner = owner_key(user)
        async with self.ledger.transaction(self.pool, tenant, owner) as tx:
            roles = sorted(
                {*await self.ledger.roles(tx, tenant, owner), *(e.role_id for e in backup.entries)}
            )
            plan = plan_restore(
                backup,
                tenant=tenant,
                owner=owner,
                entries=await self._everything(tx, tenant, user, roles),
                receipts=await self.ledger.receipts(tx, tenant, owner),
                blocks=await self.ledger.blocks(tx, tenant, owner),
                at=tx.now,
            )
            by_role: dict[str, list[MemoryEntry]] = {}
            for entry in plan.entries:
                by_role.setdefault(entry.role_id, []).append(entry)
            changes: list[MemoryChange] = []
            for role_id, entries in sorted(by_role.items()):  # one lock order (rule 3)
                ids = [e.id for e in entries]
                taken = set(
                    await self.pool.load_meta_matching(tenant, role_id, ids=ids, tx=tx.pool_tx)
                )
                writes: list[PoolWrite] = []
                for entry in entries:
                    if entry.id in taken:  # rule 5: another user's entry holds the id
                        entry = replace(entry, id=new_entry_id())
                    taken.add(entry.id)
                    writes.append(AddEntry(_pool_entry(entry, user), "person"))
                    changes.append(
                        _change(replace(entry, revision=1), "imported", "person", tx.now)
                    )
                await self._write(tx, tenant, role_id, writes)
            await self.ledger.record(
                tx, tenant, owner, changes=changes, receipts=plan.receipts, blocks=plan.blocks
            )
        return ImportResult(imported=len(plan.entries), skipped=plan.skipped)


__all__ = [
    "PoolMemoryStore",
    "is_personal",
    "memory_entry_of",
]
