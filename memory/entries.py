"""Long-term memory entries (SPEC MEM-1) and the rules every store applies to them.

Theory of operation
-------------------
An entry belongs to one user and one role: it is stored under ``(tenant, owner, role_id)``
where ``owner`` is the SHA-256 of the user id (``owner_key``) — the user id itself is never
stored in memory rows. An entry has a kind (preference, goal, correction, relation, fact), its
content (≤ ``MAX_ENTRY_CHARS``), an optional stable ``key`` (``birthday``, ``current_city``…),
where it came from (``origin``: extraction or person; ``source_thread_id``/``source_seq`` for
extracted entries), ``stated_at`` (when the user said it: the source event's time, or the time
of a manual change), a ``revision`` (1, then +1 on every change), a status (``active`` or
``deleted``: a deleted entry keeps its id and nothing of its content) and created/updated
times.

Saving a draft (``plan_save``, then ``saved_entry``: the same decision in every store):

1. A draft from a blocked source is refused (``blocked``): the source conversation was deleted
   (a receipt and a tombstone block it for every role, forever) or a person edited or deleted
   an entry from it (blocked for that role, for statements made up to the edit).
2. A keyed draft replaces the active entry with that key — unless its content is the same
   (``unchanged``: a re-save does not replay) or it was stated before the entry's
   ``stated_at`` (``stale``: an older transcript never overwrites a newer statement or a
   manual edit).
3. A draft from the same source event as an extracted entry of the same kind, and nearly the
   same words (``REVISED_SIMILARITY``), updates it (an ASR correction of that message), under
   the same time rule; another clause of that message is an entry of its own.
4. Exact duplicates (same normalised content in the same user×role) are merged: nothing
   changes (``duplicate``).
5. At ``MAX_ENTRIES_PER_ROLE`` active entries a new entry is refused (``full``): nothing is
   evicted behind the person's back; keyed updates still apply. A manual add raises
   ``MemoryFull``; extraction reports it in its status.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from difflib import SequenceMatcher
from typing import Literal, get_args

from memory.errors import InvalidMemory, MemoryNotFound, SensitiveContent, StaleRevision

MemoryKind = Literal["preference", "goal", "correction", "relation", "fact"]
KINDS: tuple[MemoryKind, ...] = get_args(MemoryKind)
Actor = Literal["extraction", "person"]
SaveAction = Literal["created", "updated", "unchanged", "duplicate", "stale", "blocked", "full"]

MAX_ENTRY_CHARS = 300
"""Longest entry content (characters); longer statements are not stored (never truncated)."""
MAX_ENTRIES_PER_ROLE = 100
"""Most active entries one user keeps for one role."""


def owner_key(user: str) -> str:
    """The owner partition key: SHA-256 (hex) of the user id."""
    return hashlib.sha256(user.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class MemorySource:
    """The final user message a draft was extracted from."""

    thread_id: str
    seq: int | None
    at: datetime


@dataclass(frozen=True, slots=True)
class MemoryDraft:
    kind: MemoryKind
    content: str
    key: str | None = None
    actor: Actor = "person"
    source: MemorySource | None = None


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    id: str
    tenant: str
    owner: str
    role_id: str
    kind: MemoryKind
    key: str | None
    content: str
    origin: Actor
    source_thread_id: str | None
    source_seq: int | None
    stated_at: datetime
    status: Literal["active", "deleted"]
    revision: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """One line of the change log. It never holds content, so a deletion deletes."""

    seq: int
    entry_id: str
    role_id: str
    action: str
    """created, updated, deleted, source_deleted, imported."""
    actor: Actor
    at: datetime
    revision: int
    kind: str
    key: str | None
    source_thread_id: str | None


@dataclass(frozen=True, slots=True)
class DeletionReceipt:
    receipt_id: str
    source_thread_id: str
    deleted: int
    entry_ids: tuple[str, ...]
    at: datetime


@dataclass(frozen=True, slots=True)
class SourceBlock:
    """Statements of ``source_thread_id`` made up to ``through`` (None: ever) are not extracted
    again, for ``role_id`` (None: every role)."""

    role_id: str | None
    source_thread_id: str
    through: datetime | None
    reason: Literal["deleted", "edited"]
    at: datetime

    def blocks(self, role_id: str, source: MemorySource) -> bool:
        if source.thread_id != self.source_thread_id:
            return False
        if self.role_id is not None and self.role_id != role_id:
            return False
        return self.through is None or source.at <= self.through


@dataclass(frozen=True, slots=True)
class SaveOutcome:
    action: SaveAction
    entry: MemoryEntry | None = None

    @property
    def changed(self) -> bool:
        return self.action in ("created", "updated")


@dataclass(frozen=True, slots=True)
class ImportResult:
    imported: int
    skipped: int


# ------------------------------------------------------------------ content rules

_TRAILING = " \t\r\n.。!！?？;；,，、"
_SPACES = re.compile(r"\s+")

_SENSITIVE = re.compile(
    r"password|passwd|passphrase|passcode|\bpin\b|pin code|api[ _-]?key|secret|\btoken\b"
    r"|credential|private key|access key|ssh key|security code|\bcvv\b|social security"
    r"|credit card|card number|bank account|iban"
    r"|密码|口令|密钥|秘钥|私钥|验证码|令牌|身份证|银行卡|卡号|信用卡|账号密码"
    r"|https?://|www\.|ftp://|\b[\w.-]+\.(?:com|net|org|io|cn|dev|app)/\S*"
    r"|\bsk-[A-Za-z0-9]{8,}|\bAKIA[0-9A-Z]{12,}|\bghp_[A-Za-z0-9]{10,}"
    r"|(?=[A-Za-z0-9_\-]{24,})(?=[A-Za-z_\-]*[0-9])(?=[0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{24,}"
    r"|\d(?:[ -]?\d){12,}",  # 13 digits or more: a card's length; a phone number is shorter
    re.I,
)


def is_sensitive(text: str) -> bool:
    """Passwords, keys, tokens, access links, card-like numbers: never stored (MEM-3)."""
    return _SENSITIVE.search(text) is not None


def clean_content(content: str) -> str:
    """Whitespace collapsed and trimmed; raises ``InvalidMemory``/``SensitiveContent``."""
    text = _SPACES.sub(" ", content).strip()
    if not text:
        raise InvalidMemory("memory content is empty")
    if len(text) > MAX_ENTRY_CHARS:
        raise InvalidMemory(f"memory content is longer than {MAX_ENTRY_CHARS} characters")
    if is_sensitive(text):
        raise SensitiveContent("passwords, keys and access links are never stored in memory")
    return text


def normalize(content: str) -> str:
    """What "exact duplicate" compares: NFKC, case-folded, whitespace collapsed, no trailing
    punctuation."""
    text = unicodedata.normalize("NFKC", content).casefold()
    return _SPACES.sub(" ", text).strip(_TRAILING)


def content_hash(content: str) -> str:
    return hashlib.sha256(normalize(content).encode("utf-8")).hexdigest()


def check_kind(kind: str) -> MemoryKind:
    if kind not in KINDS:
        raise InvalidMemory(f"kind must be one of {', '.join(KINDS)}")
    return kind


@dataclass(frozen=True, slots=True)
class SavePlan:
    action: SaveAction
    target: MemoryEntry | None = None
    """The entry updated (``updated``) or matched (``unchanged``, ``duplicate``, ``stale``)."""


def new_entry_id() -> str:
    return f"mem_{uuid.uuid4().hex}"


def new_receipt_id() -> str:
    return f"rcpt_{uuid.uuid4().hex}"


def prepare_draft(draft: MemoryDraft) -> MemoryDraft:
    """The draft with its content cleaned and its kind checked, before any store is touched;
    raises ``InvalidMemory``/``SensitiveContent``."""
    return replace(draft, content=clean_content(draft.content), kind=check_kind(draft.kind))


REVISED_SIMILARITY = 0.8
"""Rule 3: how alike (``difflib``'s ratio) a draft and an entry from the same source event are
when the draft is that entry's clause again, revised ("I like te" → "I like tea"); two clauses
of one message ("我是小学语文老师", "我周末喜欢去爬山") are two entries."""


def _same_source(entry: MemoryEntry, draft: MemoryDraft) -> bool:
    """``entry`` is an extracted entry of the draft's kind from the draft's source event, and
    the draft is the same clause revised (Rule 3)."""
    source = draft.source
    return (
        source is not None
        and source.seq is not None
        and entry.origin == "extraction"
        and entry.key is None
        and draft.key is None
        and entry.kind == draft.kind
        and entry.source_thread_id == source.thread_id
        and entry.source_seq == source.seq
        and SequenceMatcher(None, entry.content, draft.content).ratio() >= REVISED_SIMILARITY
    )


def plan_save(
    draft: MemoryDraft,
    candidates: Iterable[MemoryEntry],
    *,
    blocked: bool,
    active: int,
    max_entries: int = MAX_ENTRIES_PER_ROLE,
) -> SavePlan:
    """Decide what saving ``draft`` (from ``prepare_draft``) does (module docstring, rules 1–5).
    ``candidates``: active entries of the user×role — all of them, or at least every one with
    the draft's key, normalised content or source event; ``active``: how many active entries
    the user×role holds."""
    if blocked:
        return SavePlan("blocked")
    digest = content_hash(draft.content)
    found = list(candidates)
    by_key = next((e for e in found if draft.key and e.key == draft.key), None)
    by_source = next((e for e in found if _same_source(e, draft)), None)
    by_hash = next((e for e in found if content_hash(e.content) == digest), None)
    for current in (by_key, by_source):
        if current is None:
            continue
        if content_hash(current.content) == digest and current.kind == draft.kind:
            return SavePlan("unchanged", current)
        if draft.source is not None and draft.source.at < current.stated_at:
            return SavePlan("stale", current)
        if by_hash is not None and by_hash.id != current.id:
            return SavePlan("duplicate", by_hash)
        return SavePlan("updated", current)
    if by_hash is not None:
        return SavePlan("duplicate", by_hash)
    if active >= max_entries:
        return SavePlan("full")
    return SavePlan("created")


def saved_entry(
    plan: SavePlan, draft: MemoryDraft, *, tenant: str, owner: str, role_id: str, now: datetime
) -> MemoryEntry | None:
    """The entry a ``created`` or ``updated`` plan writes (stated at the source event's time,
    else ``now``); None for the plans that write nothing."""
    source = draft.source
    stated_at = source.at if source is not None else now
    if plan.action == "created":
        return MemoryEntry(
            id=new_entry_id(), tenant=tenant, owner=owner, role_id=role_id, kind=draft.kind,
            key=draft.key, content=draft.content, origin=draft.actor,
            source_thread_id=source.thread_id if source else None,
            source_seq=source.seq if source else None, stated_at=stated_at,
            status="active", revision=1, created_at=now, updated_at=now,
        )  # fmt: skip
    if plan.action == "updated":
        assert plan.target is not None
        return replace(
            plan.target, kind=draft.kind, content=draft.content, origin=draft.actor,
            source_thread_id=source.thread_id if source else None,
            source_seq=source.seq if source else None, stated_at=stated_at,
            revision=plan.target.revision + 1, updated_at=now,
        )  # fmt: skip
    return None


# ---------------------------------------- edits and deletions (rules: memory/store.py docstring)


def expect_revision(entry: MemoryEntry | None, entry_id: str, revision: int) -> MemoryEntry:
    """The active entry a person's edit or delete applies to: ``MemoryNotFound`` when there is
    none, ``StaleRevision`` when it is not at ``revision``."""
    if entry is None or entry.status != "active":
        raise MemoryNotFound(f"no memory {entry_id}")
    if entry.revision != revision:
        raise StaleRevision(
            f"memory {entry_id} is at revision {entry.revision}, not {revision}",
            entry.revision,
        )
    return entry


def edited_entry(
    entry: MemoryEntry, *, content: str, kind: MemoryKind | None, now: datetime
) -> MemoryEntry:
    """A person's edit (content cleaned, kind checked): the entry no longer has a source."""
    return replace(
        entry, kind=kind or entry.kind, content=content, origin="person",
        source_thread_id=None, source_seq=None, stated_at=now,
        revision=entry.revision + 1, updated_at=now,
    )  # fmt: skip


def erased_entry(entry: MemoryEntry, now: datetime) -> MemoryEntry:
    """A deleted entry: it keeps its id and nothing of its content."""
    return replace(entry, status="deleted", content="", revision=entry.revision + 1, updated_at=now)


def edit_block(entry: MemoryEntry, now: datetime) -> SourceBlock | None:
    """What a person's edit or delete of ``entry`` blocks: its source, for its role, for
    statements made up to ``now`` (None for an entry without a source)."""
    if entry.source_thread_id is None:
        return None
    return SourceBlock(entry.role_id, entry.source_thread_id, now, "edited", now)


def source_deletion(
    source_thread_id: str, doomed: Sequence[MemoryEntry], now: datetime
) -> tuple[DeletionReceipt, SourceBlock]:
    """The receipt and the tombstone (every role, forever) of deleting ``doomed``, the active
    entries extracted from a deleted conversation."""
    receipt = DeletionReceipt(
        new_receipt_id(), source_thread_id, len(doomed), tuple(e.id for e in doomed), now
    )
    return receipt, SourceBlock(None, source_thread_id, None, "deleted", now)
