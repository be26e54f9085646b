"""Conversation records (SPEC CONV-1 … CONV-4, RES-3): the transcripts the history page shows.

Theory of operation
-------------------
A record is the browser's copy of one conversation, saved in *segments* through
``POST /api/conversations``. It is display data only: the model's history always comes from the
thread's journal, never from a record (CONV-2). A record remembers which runtime thread and voice
session it came from (``thread_id``, ``voice_session_id``, ``role_id``) so the history page can
offer "continue this conversation" (RES-3) — never the resume token.

Rules every ``RecordStore`` keeps (the contract suite, ``tests/runtime/records_contract.py``,
checks them against each store):

1. Scope: a record belongs to one (tenant, user); its id is chosen by the page and unique per
   user. Another user's record is invisible: reads find nothing, and writing the same id makes a
   record of the writer's own.
2. Segments: a segment writes its messages at ``start_index, start_index + 1, …``, replacing
   messages already stored at those indexes and keeping later ones, so ``message_count`` becomes
   ``max(message_count, start_index + len(messages))``. It may not leave a gap
   (``start_index <= message_count``, else ``SegmentGap``), holds at most
   ``max_segment_messages`` messages and ``max_segment_bytes`` UTF-8 bytes of message text
   (``SegmentTooLarge``), and a record never holds more than ``max_messages``
   (``ConversationTooLong``).
3. Versions: each accepted segment adds one to the record's ``version``. A segment names the
   version it was built on (``base_version``; 0 creates the record). Another version raises
   ``VersionConflict`` carrying the current one and writes nothing; a ``base_version`` above 0
   for a record that does not exist raises ``RecordNotFound`` (deleted, or never saved).
4. Idempotency: a segment carries an idempotency key. A key already accepted for the record with
   the same content returns the first write's result and writes nothing, however the two writes
   race; with other content it raises ``IdempotencyKeyReused``. The key is checked before the
   version, so a retry whose first attempt succeeded is not a conflict. Keys are kept
   ``key_retention_s`` seconds (and go with their record).
5. Runtime ids: ``thread_id``, ``voice_session_id``, ``role_id`` and ``title`` keep the latest
   value sent (absent = unchanged). A record's thread never changes once set
   (``ThreadMismatch``): "continue" keeps the thread, a new conversation is a new record.
6. A failed write changes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

MESSAGE_ROLES = frozenset({"user", "assistant"})


# ----------------------------------------------------------------------------- errors


class RecordError(Exception):
    """A segment or request the store refuses (the caller's input, not our failure)."""

    code = "record_error"
    status = 422


class RecordNotFound(RecordError):
    code = "conversation_not_found"
    status = 404


class VersionConflict(RecordError):
    code = "version_conflict"
    status = 409

    def __init__(self, current_version: int) -> None:
        super().__init__(f"the conversation is at version {current_version}")
        self.current_version = current_version


class IdempotencyKeyReused(RecordError):
    code = "idempotency_key_reused"
    status = 422


class SegmentTooLarge(RecordError):
    status = 413

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ConversationTooLong(RecordError):
    code = "conversation_too_long"
    status = 413


class SegmentGap(RecordError):
    code = "segment_gap"
    status = 422


class ThreadMismatch(RecordError):
    code = "thread_mismatch"
    status = 409


class RecordsUnavailable(Exception):
    """The record store cannot be reached right now; the same request may be retried."""

    code = "records_unavailable"
    retryable = True


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordLimits:
    max_segment_messages: int = 100
    max_segment_bytes: int = 256 * 1024
    """UTF-8 bytes of message text in one segment."""
    max_messages: int = 100_000
    """Messages in one conversation."""
    max_list: int = 1000
    """Records one ``recent`` call returns at most."""
    key_retention_s: float = 7 * 24 * 3600.0
    """How long an idempotency key is remembered."""


@dataclass(frozen=True, slots=True)
class RecordMessage:
    role: str
    text: str
    at: datetime | None = None

    def __post_init__(self) -> None:
        if self.role not in MESSAGE_ROLES:
            raise ValueError(f"message role must be one of {sorted(MESSAGE_ROLES)}")
        if "\x00" in self.text:
            raise ValueError("message text cannot hold NUL characters")
        try:
            self.text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError("message text is not valid Unicode (a lone surrogate)") from e
        if self.at is not None and self.at.tzinfo is None:
            object.__setattr__(self, "at", self.at.replace(tzinfo=UTC))


@dataclass(frozen=True, slots=True)
class StoredMessage:
    index: int
    role: str
    text: str
    at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    record_id: str
    idempotency_key: str
    base_version: int
    start_index: int
    messages: tuple[RecordMessage, ...] = ()
    thread_id: str | None = None
    voice_session_id: str | None = None
    role_id: str | None = None
    title: str | None = None

    def __post_init__(self) -> None:
        if self.base_version < 0 or self.start_index < 0:
            raise ValueError("base_version and start_index are never negative")
        for name in ("record_id", "idempotency_key", "thread_id", "voice_session_id", "role_id"):
            value = getattr(self, name)
            if value is not None and not value:
                raise ValueError(f"{name} cannot be empty")
        if any("\x00" in (v or "") for v in (self.title, self.record_id, self.idempotency_key)):
            raise ValueError("text fields cannot hold NUL characters")

    @property
    def text_bytes(self) -> int:
        return sum(len(m.text.encode("utf-8")) for m in self.messages)

    def fingerprint(self) -> str:
        """SHA-256 of everything the segment asks for (the idempotency key aside)."""
        content = {
            "record_id": self.record_id,
            "base_version": self.base_version,
            "start_index": self.start_index,
            "messages": [
                [m.role, m.text, None if m.at is None else m.at.astimezone(UTC).isoformat()]
                for m in self.messages
            ],
            "thread_id": self.thread_id,
            "voice_session_id": self.voice_session_id,
            "role_id": self.role_id,
            "title": self.title,
        }
        canonical = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class WriteResult:
    record_id: str
    version: int
    message_count: int


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    tenant: str
    user: str
    id: str
    title: str | None
    role_id: str | None
    thread_id: str | None
    voice_session_id: str | None
    message_count: int
    version: int
    created_at: datetime
    updated_at: datetime


def check_segment(segment: Segment, limits: RecordLimits) -> None:
    """The per-segment limits (rule 2), checked before any storage is touched."""
    if len(segment.messages) > limits.max_segment_messages:
        raise SegmentTooLarge(
            "segment_too_many_messages",
            f"a segment holds at most {limits.max_segment_messages} messages, "
            f"got {len(segment.messages)}",
        )
    size = segment.text_bytes
    if size > limits.max_segment_bytes:
        raise SegmentTooLarge(
            "segment_too_large",
            f"a segment holds at most {limits.max_segment_bytes} bytes of UTF-8 text, got {size}",
        )


def plan_write(
    segment: Segment, limits: RecordLimits, *, exists: bool, version: int, message_count: int,
    thread_id: str | None,
) -> int:  # fmt: skip
    """Rules 2, 3 and 5 against the record's current state; the new message count."""
    if not exists and segment.base_version > 0:
        raise RecordNotFound("no such conversation")
    if segment.base_version != version:
        raise VersionConflict(version)
    if segment.start_index > message_count:
        raise SegmentGap(
            f"start_index {segment.start_index} would leave a gap after message {message_count}"
        )
    new_count = max(message_count, segment.start_index + len(segment.messages))
    if new_count > limits.max_messages:
        raise ConversationTooLong(f"a conversation holds at most {limits.max_messages} messages")
    if thread_id is not None and segment.thread_id not in (None, thread_id):
        raise ThreadMismatch("this conversation belongs to another thread")
    return new_count


class RecordStore(Protocol):
    limits: RecordLimits

    async def write(self, tenant: str, user: str, segment: Segment) -> WriteResult:
        """Apply one segment (rules 2–6)."""
        ...

    async def get(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        """The user's record; None for an unknown id or someone else's."""
        ...

    async def recent(self, tenant: str, user: str, *, limit: int = 100) -> list[ConversationRecord]:
        """The user's records, most recently updated first, at most ``min(limit, max_list)``."""
        ...

    async def messages(
        self, tenant: str, user: str, record_id: str, *, from_index: int = 0,
        limit: int | None = None,
    ) -> list[StoredMessage]:  # fmt: skip
        """The record's messages from ``from_index`` in order (empty for an unknown record)."""
        ...

    async def delete(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        """Remove the record with its messages and keys; the record as it was, or None."""
        ...

    async def ids_for_thread(self, tenant: str, user: str, thread_id: str) -> list[str]:
        """Ids of the user's records that name this thread."""
        ...


# ----------------------------------------------------------------------------- in memory


@dataclass
class _Stored:
    record: ConversationRecord
    messages: list[StoredMessage] = field(default_factory=list)
    keys: dict[str, tuple[str, WriteResult, float]] = field(default_factory=dict)


class InMemoryRecordStore:
    """Records for tests and runs without a database. Same rules as the PostgreSQL store."""

    def __init__(self, limits: RecordLimits | None = None) -> None:
        self.limits = limits or RecordLimits()
        self._records: dict[tuple[str, str, str], _Stored] = {}
        self._lock = asyncio.Lock()

    async def write(self, tenant: str, user: str, segment: Segment) -> WriteResult:
        check_segment(segment, self.limits)
        async with self._lock:
            stored = self._records.get((tenant, user, segment.record_id))
            now_mono = time.monotonic()
            if stored is not None:
                horizon = now_mono - self.limits.key_retention_s
                for key in [k for k, v in stored.keys.items() if v[2] < horizon]:
                    del stored.keys[key]
                known = stored.keys.get(segment.idempotency_key)
                if known is not None:
                    if known[0] != segment.fingerprint():
                        raise IdempotencyKeyReused(
                            "this idempotency key was used for another segment"
                        )
                    return known[1]
            record = stored.record if stored is not None else None
            new_count = plan_write(
                segment, self.limits,
                exists=record is not None,
                version=0 if record is None else record.version,
                message_count=0 if record is None else record.message_count,
                thread_id=None if record is None else record.thread_id,
            )  # fmt: skip
            now = datetime.now(UTC)
            if stored is None or record is None:
                record = ConversationRecord(
                    tenant, user, segment.record_id, None, None, None, None, 0, 0, now, now
                )
                stored = _Stored(record)
                self._records[(tenant, user, segment.record_id)] = stored
            for offset, message in enumerate(segment.messages):
                index = segment.start_index + offset
                item = StoredMessage(index, message.role, message.text, message.at)
                if index < len(stored.messages):
                    stored.messages[index] = item
                else:
                    stored.messages.append(item)
            stored.record = replace(
                record,
                title=segment.title if segment.title is not None else record.title,
                role_id=segment.role_id if segment.role_id is not None else record.role_id,
                thread_id=segment.thread_id if segment.thread_id is not None else record.thread_id,
                voice_session_id=(
                    segment.voice_session_id
                    if segment.voice_session_id is not None
                    else record.voice_session_id
                ),
                message_count=new_count,
                version=record.version + 1,
                updated_at=now,
            )
            result = WriteResult(segment.record_id, record.version + 1, new_count)
            stored.keys[segment.idempotency_key] = (segment.fingerprint(), result, now_mono)
            return result

    async def get(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        stored = self._records.get((tenant, user, record_id))
        return None if stored is None else stored.record

    async def recent(self, tenant: str, user: str, *, limit: int = 100) -> list[ConversationRecord]:
        mine = [s.record for (t, u, _), s in self._records.items() if t == tenant and u == user]
        mine.sort(key=lambda r: (r.updated_at, r.id), reverse=True)
        return mine[: max(0, min(limit, self.limits.max_list))]

    async def messages(
        self, tenant: str, user: str, record_id: str, *, from_index: int = 0,
        limit: int | None = None,
    ) -> list[StoredMessage]:  # fmt: skip
        stored = self._records.get((tenant, user, record_id))
        if stored is None:
            return []
        start = max(from_index, 0)
        end = None if limit is None else start + max(limit, 0)
        return stored.messages[start:end]

    async def delete(self, tenant: str, user: str, record_id: str) -> ConversationRecord | None:
        async with self._lock:
            stored = self._records.pop((tenant, user, record_id), None)
        return None if stored is None else stored.record

    async def ids_for_thread(self, tenant: str, user: str, thread_id: str) -> list[str]:
        return sorted(
            record_id
            for (t, u, record_id), s in self._records.items()
            if t == tenant and u == user and s.record.thread_id == thread_id
        )
