"""The memory store contract (SPEC MEM-1, MEM-7, MEM-8), kept by ``memory/pool_memory.py``.

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

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from memory.entries import (
    MAX_ENTRIES_PER_ROLE,
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
    new_receipt_id,
)
from memory.errors import InvalidMemory

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
