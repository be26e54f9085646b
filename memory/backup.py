"""The export document of one user's memory, and reading it back (``GET/POST /api/memory/export``,
``/import``).

::

    {"format": "openrealtime.memory", "version": 1, "exported_at": "...",
     "entries": [{id, role_id, kind, key, content, origin, source_thread_id, source_seq,
                  stated_at, revision, created_at, updated_at}],
     "deleted_entry_ids": [...],
     "receipts": [{receipt_id, source_thread_id, deleted, entry_ids, at}],
     "source_blocks": [{role_id, source_thread_id, through, reason, at}]}

The document names no user: an import always goes to the caller's own memory. Receipts,
deleted ids and source blocks travel with it so a restore can honour deletions (see
``memory/store.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from memory.entries import DeletionReceipt, MemoryEntry, SourceBlock, check_kind, owner_key
from memory.errors import InvalidMemory
from memory.store import MAX_IMPORT_ENTRIES, MemoryBackup

FORMAT = "openrealtime.memory"
VERSION = 1


def to_document(backup: MemoryBackup) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": backup.exported_at.isoformat(),
        "entries": [
            {
                "id": e.id,
                "role_id": e.role_id,
                "kind": e.kind,
                "key": e.key,
                "content": e.content,
                "origin": e.origin,
                "source_thread_id": e.source_thread_id,
                "source_seq": e.source_seq,
                "stated_at": e.stated_at.isoformat(),
                "revision": e.revision,
                "created_at": e.created_at.isoformat(),
                "updated_at": e.updated_at.isoformat(),
            }
            for e in backup.entries
        ],
        "deleted_entry_ids": list(backup.deleted_ids),
        "receipts": [
            {
                "receipt_id": r.receipt_id,
                "source_thread_id": r.source_thread_id,
                "deleted": r.deleted,
                "entry_ids": list(r.entry_ids),
                "at": r.at.isoformat(),
            }
            for r in backup.receipts
        ],
        "source_blocks": [
            {
                "role_id": b.role_id,
                "source_thread_id": b.source_thread_id,
                "through": b.through.isoformat() if b.through else None,
                "reason": b.reason,
                "at": b.at.isoformat(),
            }
            for b in backup.blocks
        ],
    }


def _str(item: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    value = item.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > 1_000:
        raise InvalidMemory(f"export document: {name} must be a non-empty string")
    return value


def _time(item: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    raw = _str(item, name, optional=optional)
    if raw is None:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError as e:
        raise InvalidMemory(f"export document: {name} is not an ISO time") from e
    if value.tzinfo is None:
        raise InvalidMemory(f"export document: {name} needs a time zone")
    return value


def _int(item: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    value = item.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidMemory(f"export document: {name} must be a non-negative integer")
    return value


def _list(document: dict[str, Any], name: str) -> list[Any]:
    value = document.get(name, [])
    if not isinstance(value, list):
        raise InvalidMemory(f"export document: {name} must be a list")
    if len(value) > MAX_IMPORT_ENTRIES:
        raise InvalidMemory(f"export document: more than {MAX_IMPORT_ENTRIES} {name}")
    if not all(isinstance(v, dict | str) for v in value):
        raise InvalidMemory(f"export document: bad item in {name}")
    return value


def _objects(document: dict[str, Any], name: str) -> Iterator[dict[str, Any]]:
    for item in _list(document, name):
        if not isinstance(item, dict):
            raise InvalidMemory(f"export document: {name} must be objects")
        yield item


def _choice(item: dict[str, Any], name: str, choices: tuple[str, str]) -> Any:
    value = item.get(name)
    if value not in choices:
        raise InvalidMemory(f"export document: {name} must be {' or '.join(choices)}")
    return value


def from_document(document: Any, *, tenant: str, user: str) -> MemoryBackup:
    """Parse an export document for ``(tenant, user)``; ``InvalidMemory`` names the bad field.
    Entry contents are checked again when restored (too long or sensitive ones are skipped)."""
    if not isinstance(document, dict):
        raise InvalidMemory("export document must be a JSON object")
    if document.get("format") != FORMAT or document.get("version") != VERSION:
        raise InvalidMemory(f"not an {FORMAT} version {VERSION} document")
    owner = owner_key(user)
    entries = []
    for item in _objects(document, "entries"):
        content = item.get("content")
        if not isinstance(content, str):
            raise InvalidMemory("export document: content must be a string")
        origin = _choice(item, "origin", ("extraction", "person"))
        entries.append(
            MemoryEntry(
                id=_str(item, "id"),
                tenant=tenant,
                owner=owner,
                role_id=_str(item, "role_id"),
                kind=check_kind(str(item.get("kind"))),
                key=_str(item, "key", optional=True),
                content=content,
                origin=origin,
                source_thread_id=_str(item, "source_thread_id", optional=True),
                source_seq=_int(item, "source_seq", optional=True),
                stated_at=_time(item, "stated_at"),
                status="active",
                revision=max(1, _int(item, "revision")),
                created_at=_time(item, "created_at"),
                updated_at=_time(item, "updated_at"),
            )
        )
    deleted = _list(document, "deleted_entry_ids")
    if not all(isinstance(d, str) for d in deleted):
        raise InvalidMemory("export document: deleted_entry_ids must be strings")
    receipts = []
    for item in _objects(document, "receipts"):
        ids = item.get("entry_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidMemory("export document: entry_ids must be strings")
        receipts.append(
            DeletionReceipt(
                receipt_id=_str(item, "receipt_id"),
                source_thread_id=_str(item, "source_thread_id"),
                deleted=_int(item, "deleted"),
                entry_ids=tuple(ids),
                at=_time(item, "at"),
            )
        )
    blocks = []
    for item in _objects(document, "source_blocks"):
        reason = _choice(item, "reason", ("deleted", "edited"))
        blocks.append(
            SourceBlock(
                role_id=_str(item, "role_id", optional=True),
                source_thread_id=_str(item, "source_thread_id"),
                through=_time(item, "through", optional=True),
                reason=reason,
                at=_time(item, "at"),
            )
        )
    return MemoryBackup(
        entries=tuple(entries),
        deleted_ids=tuple(deleted),
        receipts=tuple(receipts),
        blocks=tuple(blocks),
        exported_at=_time(document, "exported_at"),
    )
