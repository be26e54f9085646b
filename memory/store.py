"""The memory store contract (SPEC MEM-1, MEM-7, MEM-8) and its in-memory implementation.

Every call is scoped by ``(tenant, user)``; stores key rows by ``owner_key(user)``. The rules
for saving are in ``memory/entries.py`` (``plan_save``), shared by every store; the rules for
deleting and restoring are here (their code, shared too: ``edit_block``, ``erased_entry``,
``source_deletion`` in ``memory/entries.py``, ``plan_restore`` below):

- A person's edit or delete of an entry that came from a conversation blocks that source for
  the entry's role, for statements made up to that moment (MEM-8: manual edits block
  re-extraction from the old source; newer statements still count).
- ``delete_source`` (a conversation was deleted, CONV-4) deletes every active entry extracted
  from that thread, for every role, and writes a ``DeletionReceipt`` and a tombstone (a block
  for every role, forever) in the same transaction: late transcript revisions never bring the
  entries back. The receipt is written even when nothing was deleted.
- A deleted entry keeps its id and status ``deleted`` with its content erased; the change log
  never holds content.
- ``restore`` (import of an export) adds back only entries that are not known to this store,
  not deleted here or in the export (receipts, deleted ids), not from a tombstoned source, not
  duplicates, not a second value for an existing key, and within the per-role limit; it also
  takes over the export's receipts and tombstones, and records the export's deleted ids it did
  not know as a receipt with source ``""``. So restoring an older export never brings deleted
  entries back, and restoring a newer one into an empty store keeps its deletions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

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
    new_receipt_id,
    owner_key,
    plan_save,
    prepare_draft,
    saved_entry,
    source_deletion,
)
from memory.errors import DuplicateMemory, InvalidMemory

MAX_CHANGES_LISTED = 1_000
"""Most change-log lines one ``changes`` call returns."""
MAX_IMPORT_ENTRIES = 10_000
"""Most entries one import may hold."""


@dataclass(frozen=True, slots=True)
class MemoryBackup:
    """Everything a user's memory export holds (serialised by ``memory.backup``)."""

    entries: tuple[MemoryEntry, ...]
    deleted_ids: tuple[str, ...] = ()
    receipts: tuple[DeletionReceipt, ...] = ()
    blocks: tuple[SourceBlock, ...] = ()
    exported_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @classmethod
    def of(
        cls,
        entries: Iterable[MemoryEntry],
        receipts: Iterable[DeletionReceipt],
        blocks: Iterable[SourceBlock],
    ) -> MemoryBackup:
        """The backup of a store's state for one user (entries in creation order)."""
        ordered = sorted(entries, key=lambda e: e.created_at)
        return cls(
            entries=tuple(e for e in ordered if e.status == "active"),
            deleted_ids=tuple(e.id for e in ordered if e.status == "deleted"),
            receipts=tuple(receipts),
            blocks=tuple(blocks),
        )


class MemoryStore(Protocol):
    async def save(
        self,
        tenant: str,
        user: str,
        role_id: str,
        draft: MemoryDraft,
        *,
        max_entries: int = MAX_ENTRIES_PER_ROLE,
    ) -> SaveOutcome:
        """Apply ``plan_save`` to a draft (extraction or a person's add). Raises
        ``InvalidMemory``/``SensitiveContent`` for content no entry may hold."""
        ...

    async def list_entries(
        self, tenant: str, user: str, role_id: str, *, limit: int | None = None
    ) -> list[MemoryEntry]:
        """Active entries of the user×role, most recently updated first."""
        ...

    async def get(self, tenant: str, user: str, entry_id: str) -> MemoryEntry | None:
        """An active entry of this user (None for another user's or a deleted one)."""
        ...

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
        """A person's edit: unlinks the source. ``StaleRevision``, ``MemoryNotFound``,
        ``DuplicateMemory``, ``InvalidMemory``."""
        ...

    async def delete(self, tenant: str, user: str, entry_id: str, *, revision: int) -> None:
        """A person's delete. ``StaleRevision``, ``MemoryNotFound``."""
        ...

    async def clear(self, tenant: str, user: str, role_id: str) -> int:
        """A person deletes every active entry of the user×role; returns how many."""
        ...

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> DeletionReceipt:
        """Delete what was extracted from a conversation, with a receipt and a tombstone."""
        ...

    async def changes(
        self, tenant: str, user: str, role_id: str, *, limit: int = MAX_CHANGES_LISTED
    ) -> list[MemoryChange]:
        """The role's change log, newest first."""
        ...

    async def backup(self, tenant: str, user: str) -> MemoryBackup: ...

    async def restore(self, tenant: str, user: str, backup: MemoryBackup) -> ImportResult: ...


@dataclass(frozen=True, slots=True)
class RestorePlan:
    entries: list[MemoryEntry]
    """The backup's entries the store takes back (content cleaned, tenant and owner set)."""
    skipped: int
    receipts: list[DeletionReceipt]
    """Receipts to add: the backup's unknown ones, then its carried-over deletions."""
    blocks: list[SourceBlock]
    """The backup's source blocks the store does not hold yet."""


def plan_restore(
    backup: MemoryBackup,
    *,
    tenant: str,
    owner: str,
    entries: Iterable[MemoryEntry],
    receipts: list[DeletionReceipt],
    blocks: list[SourceBlock],
    at: datetime,
    max_entries: int = MAX_ENTRIES_PER_ROLE,
) -> RestorePlan:
    """What restoring ``backup`` adds to a store holding ``entries`` (every status),
    ``receipts`` and ``blocks`` for the user (module docstring); ``at``: the time of the
    receipt of carried-over deletions."""
    held = list(entries)
    known_ids = {e.id for e in held}
    carried = _carried_deletions(backup, known_ids=known_ids, receipts=receipts, at=at)
    taken, skipped = _restorable(
        backup,
        known_ids=set(known_ids),
        receipts=receipts,
        blocks=blocks,
        active=[e for e in held if e.status == "active"],
        max_entries=max_entries,
    )
    known_receipts = {r.receipt_id for r in receipts}
    new_receipts = [r for r in backup.receipts if r.receipt_id not in known_receipts]
    if carried is not None:
        new_receipts.append(carried)
    known_blocks = set(blocks)
    return RestorePlan(
        entries=[replace(e, tenant=tenant, owner=owner) for e in taken],
        skipped=skipped,
        receipts=new_receipts,
        blocks=[b for b in backup.blocks if b not in known_blocks],
    )


def _restorable(
    backup: MemoryBackup,
    *,
    known_ids: set[str],
    receipts: list[DeletionReceipt],
    blocks: list[SourceBlock],
    active: list[MemoryEntry],
    max_entries: int = MAX_ENTRIES_PER_ROLE,
) -> tuple[list[MemoryEntry], int]:
    """Which of the backup's entries a store takes back (module docstring); returns them
    (content cleaned) and how many were skipped."""
    deleted = set(backup.deleted_ids)
    for receipt in (*receipts, *backup.receipts):
        deleted.update(receipt.entry_ids)
    tombstoned = {
        b.source_thread_id
        for b in (*blocks, *backup.blocks)
        if b.reason == "deleted" and b.through is None
    }
    hashes = {(e.role_id, content_hash(e.content)) for e in active}
    keys = {(e.role_id, e.key) for e in active if e.key}
    counts: dict[str, int] = {}
    for e in active:
        counts[e.role_id] = counts.get(e.role_id, 0) + 1
    taken: list[MemoryEntry] = []
    skipped = 0
    for entry in backup.entries:
        if (
            entry.status != "active"
            or entry.id in known_ids
            or entry.id in deleted
            or (entry.source_thread_id is not None and entry.source_thread_id in tombstoned)
        ):
            skipped += 1
            continue
        try:
            content = clean_content(entry.content)
            check_kind(entry.kind)
        except InvalidMemory:
            skipped += 1
            continue
        digest = (entry.role_id, content_hash(content))
        if (
            digest in hashes
            or (entry.key and (entry.role_id, entry.key) in keys)
            or counts.get(entry.role_id, 0) >= max_entries
        ):
            skipped += 1
            continue
        hashes.add(digest)
        if entry.key:
            keys.add((entry.role_id, entry.key))
        counts[entry.role_id] = counts.get(entry.role_id, 0) + 1
        known_ids.add(entry.id)
        taken.append(replace(entry, content=content))
    return taken, skipped


def _carried_deletions(
    backup: MemoryBackup, *, known_ids: set[str], receipts: list[DeletionReceipt], at: datetime
) -> DeletionReceipt | None:
    """The backup's deleted ids this store knows nothing about, as a receipt (source thread
    ``""``: deletions carried over by an import), so a later restore of an older export into
    this store skips them too."""
    covered = set(known_ids)
    for receipt in (*receipts, *backup.receipts):
        covered.update(receipt.entry_ids)
    ids = tuple(sorted({i for i in backup.deleted_ids if i not in covered}))
    if not ids:
        return None
    return DeletionReceipt(new_receipt_id(), "", 0, ids, at)


@dataclass
class _Owner:
    entries: dict[str, MemoryEntry] = field(default_factory=dict)
    changes: list[MemoryChange] = field(default_factory=list)
    receipts: list[DeletionReceipt] = field(default_factory=list)
    blocks: list[SourceBlock] = field(default_factory=list)


class InMemoryMemoryStore:
    """``MemoryStore`` in process memory (tests, ``storage="memory"``)."""

    def __init__(self) -> None:
        self._owners: dict[tuple[str, str], _Owner] = {}
        self._seq = itertools.count(1)
        self._last = datetime.now(UTC)

    def _now(self) -> datetime:
        # Strictly increasing, so "most recently updated" is never a tie.
        now = datetime.now(UTC)
        self._last = now if now > self._last else self._last + timedelta(microseconds=1)
        return self._last

    def _owner(self, tenant: str, user: str) -> _Owner:
        return self._owners.setdefault((tenant, owner_key(user)), _Owner())

    def _active(self, owner: _Owner, role_id: str) -> list[MemoryEntry]:
        return [e for e in owner.entries.values() if e.role_id == role_id and e.status == "active"]

    def _log(
        self,
        owner: _Owner,
        entry: MemoryEntry,
        action: str,
        actor: Actor,
        at: datetime | None = None,
    ) -> None:
        owner.changes.append(
            MemoryChange(
                seq=next(self._seq),
                entry_id=entry.id,
                role_id=entry.role_id,
                action=action,
                actor=actor,
                at=at or entry.updated_at,
                revision=entry.revision,
                kind=entry.kind,
                key=entry.key,
                source_thread_id=entry.source_thread_id,
            )
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
        owner = self._owner(tenant, user)
        active = self._active(owner, role_id)
        source = draft.source
        plan = plan_save(
            draft,
            active,
            blocked=source is not None and any(b.blocks(role_id, source) for b in owner.blocks),
            active=len(active),
            max_entries=max_entries,
        )
        entry = saved_entry(
            plan, draft, tenant=tenant, owner=owner_key(user), role_id=role_id, now=self._now()
        )
        if entry is None:
            return SaveOutcome(plan.action, plan.target)
        owner.entries[entry.id] = entry
        self._log(owner, entry, plan.action, draft.actor)
        return SaveOutcome(plan.action, entry)

    async def list_entries(
        self, tenant: str, user: str, role_id: str, *, limit: int | None = None
    ) -> list[MemoryEntry]:
        owner = self._owners.get((tenant, owner_key(user)))
        if owner is None:
            return []
        entries = sorted(self._active(owner, role_id), key=lambda e: e.updated_at, reverse=True)
        return entries if limit is None else entries[:limit]

    async def get(self, tenant: str, user: str, entry_id: str) -> MemoryEntry | None:
        owner = self._owners.get((tenant, owner_key(user)))
        entry = owner.entries.get(entry_id) if owner is not None else None
        return entry if entry is not None and entry.status == "active" else None

    def _block_source(self, owner: _Owner, entry: MemoryEntry, now: datetime) -> None:
        block = edit_block(entry, now)
        if block is not None:
            owner.blocks.append(block)

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
        owner = self._owner(tenant, user)
        entry = expect_revision(owner.entries.get(entry_id), entry_id, revision)
        content = clean_content(content)
        kind = check_kind(kind) if kind is not None else None
        digest = content_hash(content)
        if any(
            e.id != entry.id and content_hash(e.content) == digest
            for e in self._active(owner, entry.role_id)
        ):
            raise DuplicateMemory("another memory of this role already says that")
        now = self._now()
        self._block_source(owner, entry, now)
        edited = edited_entry(entry, content=content, kind=kind, now=now)
        owner.entries[entry.id] = edited
        self._log(owner, edited, "updated", "person")
        return edited

    def _erase(self, owner: _Owner, entry: MemoryEntry, now: datetime) -> MemoryEntry:
        gone = erased_entry(entry, now)
        owner.entries[entry.id] = gone
        return gone

    async def delete(self, tenant: str, user: str, entry_id: str, *, revision: int) -> None:
        owner = self._owner(tenant, user)
        entry = expect_revision(owner.entries.get(entry_id), entry_id, revision)
        now = self._now()
        self._block_source(owner, entry, now)
        self._log(owner, self._erase(owner, entry, now), "deleted", "person")

    async def clear(self, tenant: str, user: str, role_id: str) -> int:
        owner = self._owner(tenant, user)
        active = self._active(owner, role_id)
        now = self._now()
        for entry in active:
            self._block_source(owner, entry, now)
            self._log(owner, self._erase(owner, entry, now), "deleted", "person")
        return len(active)

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> DeletionReceipt:
        owner = self._owner(tenant, user)
        now = self._now()
        doomed = [
            e
            for e in owner.entries.values()
            if e.status == "active" and e.source_thread_id == source_thread_id
        ]
        receipt, tombstone = source_deletion(source_thread_id, doomed, now)
        owner.receipts.append(receipt)
        owner.blocks.append(tombstone)
        for entry in doomed:
            self._log(owner, self._erase(owner, entry, now), "source_deleted", "person")
        return receipt

    async def changes(
        self, tenant: str, user: str, role_id: str, *, limit: int = MAX_CHANGES_LISTED
    ) -> list[MemoryChange]:
        owner = self._owners.get((tenant, owner_key(user)))
        if owner is None:
            return []
        mine = [c for c in owner.changes if c.role_id == role_id]
        return mine[::-1][: min(limit, MAX_CHANGES_LISTED)]

    async def backup(self, tenant: str, user: str) -> MemoryBackup:
        owner = self._owner(tenant, user)
        return MemoryBackup.of(owner.entries.values(), owner.receipts, owner.blocks)

    async def restore(self, tenant: str, user: str, backup: MemoryBackup) -> ImportResult:
        owner = self._owner(tenant, user)
        plan = plan_restore(
            backup,
            tenant=tenant,
            owner=owner_key(user),
            entries=owner.entries.values(),
            receipts=owner.receipts,
            blocks=owner.blocks,
            at=self._now(),
        )
        now = self._now()
        for entry in plan.entries:
            owner.entries[entry.id] = entry
            self._log(owner, entry, "imported", "person", now)
        owner.receipts.extend(plan.receipts)
        owner.blocks.extend(plan.blocks)
        return ImportResult(imported=len(plan.entries), skipped=plan.skipped)
