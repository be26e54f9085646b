"""HTTP API for conversation records (SPEC CONV-1 … CONV-4, RES-3): ``/api/conversations``.

Every route serves the bearer token's (tenant, user) only. Another user's record answers 404
exactly like an unknown one, for reads, writes (``base_version > 0``) and deletes; a write with
``base_version`` 0 and the same id makes a record of the caller's own. The rules of segments,
versions and idempotency keys are those of ``runtime/records.py``; the routes are documented in
``docs/http_api.md``.

``continuable`` answers "would the runtime accept a continuation from this record?" with the same
checks the voice session makes (SPEC RES-2): the record names a thread and a voice session, the
thread is this user's, its role still exists and the journal holds a turn of that session.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal, cast

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, NaiveDatetime, ValidationError

from journal.errors import JournalUnavailable
from journal.events import ThreadRef
from memory.errors import MemoryUnavailable
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.records import (
    ConversationRecord,
    RecordError,
    RecordMessage,
    RecordsUnavailable,
    Segment,
    StoredMessage,
    VersionConflict,
)
from runtime.services import Services

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/conversations", tags=["conversations"])

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
"""Record ids, idempotency keys and runtime ids: 1–128 characters, UUIDs and ``th_…`` fit."""

MAX_TITLE_CHARS = 200
BODY_OVERHEAD_BYTES = 64 * 1024
"""A segment's request body may be ``2 × max_segment_bytes`` plus this (JSON around the text)."""

NO_RUNTIME_IDS = "recorded before runtime ids were kept"
THREAD_UNKNOWN = "the runtime does not know this conversation's thread"
ROLE_DELETED = "the conversation's role was deleted"
JOURNAL_GONE = "the runtime journal no longer holds this conversation (erased, or not kept)"


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    text: str
    at: AwareDatetime | NaiveDatetime | None = None
    """When the message was said; a time without a zone is taken as UTC."""


class SegmentIn(BaseModel):
    """One segment (no extra fields: a resume token can never ride along)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN)
    idempotency_key: str = Field(pattern=ID_PATTERN)
    base_version: int = Field(ge=0, le=2**62)
    start_index: int = Field(ge=0, le=10**9)
    messages: list[MessageIn]
    thread_id: str | None = Field(default=None, pattern=ID_PATTERN)
    voice_session_id: str | None = Field(default=None, pattern=ID_PATTERN)
    role_id: str | None = Field(default=None, pattern=ID_PATTERN)
    title: str | None = Field(default=None, max_length=MAX_TITLE_CHARS)


def record_json(
    record: ConversationRecord, *, continuable: bool, reason: str | None,
    voice_session_id: str | None,
) -> dict[str, Any]:  # fmt: skip
    return {
        "id": record.id,
        "title": record.title,
        "role_id": record.role_id,
        "thread_id": record.thread_id,
        "voice_session_id": voice_session_id,
        "message_count": record.message_count,
        "version": record.version,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "continuable": continuable,
        "view_only_reason": reason,
    }


def message_json(message: StoredMessage) -> dict[str, Any]:
    return {
        "index": message.index,
        "role": message.role,
        "text": message.text,
        "at": None if message.at is None else message.at.isoformat(),
    }


def limits_json(services: Services) -> dict[str, int]:
    limits = services.records.limits
    return {
        "max_segment_messages": limits.max_segment_messages,
        "max_segment_bytes": limits.max_segment_bytes,
        "max_messages": limits.max_messages,
    }


async def continuation(
    services: Services, record: ConversationRecord
) -> tuple[bool, str | None, str | None]:
    """(continuable, view-only reason, voice session to continue from) for a record.

    The voice session is the record's; if that one never reached the journal (a session that
    was continued and then left before its first turn), the thread's latest journaled session
    stands in for it — the thread is this user's, so nothing leaks.
    """
    if record.thread_id is None or record.voice_session_id is None:
        return False, NO_RUNTIME_IDS, record.voice_session_id
    thread = await services.threads.get(record.tenant, record.user, record.thread_id)
    if thread is None:
        return False, THREAD_UNKNOWN, record.voice_session_id
    if await services.roles.get(record.tenant, thread.role_id) is None:
        return False, ROLE_DELETED, record.voice_session_id
    ref = ThreadRef(record.tenant, record.user, record.thread_id)
    if await services.journal.has_session(ref, record.voice_session_id):
        return True, None, record.voice_session_id
    tail = await services.journal.read_tail(ref, 1)
    if tail and tail[0].voice_session_id is not None:
        return True, None, tail[0].voice_session_id
    return False, JOURNAL_GONE, record.voice_session_id


async def _record_view(services: Services, record: ConversationRecord) -> dict[str, Any]:
    continuable, reason, session = await continuation(services, record)
    return record_json(record, continuable=continuable, reason=reason, voice_session_id=session)


def _refusal(error: RecordError) -> ApiError:
    refusal = ApiError(error.status, error.code, str(error))
    if isinstance(error, VersionConflict):
        cast(dict[str, Any], refusal.detail)["current_version"] = error.current_version
    return refusal


def _unavailable(error: RecordsUnavailable) -> ApiError:
    log.warning("conversation records unavailable: %s", error)
    return ApiError(503, error.code, "conversation records cannot be reached; retry")


async def _read_body(request: Request, cap: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``cap`` bytes."""
    too_large = ApiError(
        413, "segment_too_large", f"a segment's request body is at most {cap} bytes"
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _invalid(error: ValidationError) -> ApiError:
    problems = error.errors()
    for problem in problems:
        name = str(problem["loc"][-1]) if problem["loc"] else ""
        if problem["type"] == "extra_forbidden" and "token" in name.lower():
            return ApiError(
                422,
                "token_not_accepted",
                f"{name}: conversation records never store a resume token or other credential",
            )
    if not problems:
        return ApiError(422, "invalid_request", "invalid segment")
    first = problems[0]
    where = ".".join(str(p) for p in first["loc"])
    return ApiError(422, "invalid_request", f"{where}: {first['msg']}")


@router.get("", dependencies=[allow(Policy.MEMBER)])
async def list_conversations(
    who: Caller, services: ServicesDep, limit: int = Query(default=100, ge=1, le=1000)
) -> dict[str, Any]:
    try:
        records = await services.records.recent(who.tenant, who.user, limit=limit)
    except RecordsUnavailable as e:
        raise _unavailable(e) from e
    return {
        "conversations": [await _record_view(services, r) for r in records],
        "limits": limits_json(services),
    }


@router.get("/{record_id}", dependencies=[allow(Policy.MEMBER)])
async def get_conversation(
    record_id: str,
    who: Caller,
    services: ServicesDep,
    from_index: int = Query(default=0, ge=0),
    limit: int | None = Query(default=None, ge=1),
) -> dict[str, Any]:
    try:
        record = await services.records.get(who.tenant, who.user, record_id)
        if record is None:
            raise ApiError(404, "conversation_not_found", "no such conversation")
        messages = await services.records.messages(
            who.tenant, who.user, record_id, from_index=from_index, limit=limit
        )
    except RecordsUnavailable as e:
        raise _unavailable(e) from e
    view = await _record_view(services, record)
    view["messages"] = [message_json(m) for m in messages]
    return view


@router.post("", dependencies=[allow(Policy.MEMBER)])
async def write_segment(request: Request, who: Caller, services: ServicesDep) -> dict[str, Any]:
    limits = services.records.limits
    body = await _read_body(request, 2 * limits.max_segment_bytes + BODY_OVERHEAD_BYTES)
    try:
        data = SegmentIn.model_validate_json(body)
    except ValidationError as e:
        raise _invalid(e) from None
    try:
        segment = Segment(
            record_id=data.id,
            idempotency_key=data.idempotency_key,
            base_version=data.base_version,
            start_index=data.start_index,
            messages=tuple(RecordMessage(m.role, m.text, m.at) for m in data.messages),
            thread_id=data.thread_id,
            voice_session_id=data.voice_session_id,
            role_id=data.role_id,
            title=data.title,
        )
    except ValueError as e:
        raise ApiError(422, "invalid_request", str(e)) from None
    try:
        result = await services.records.write(who.tenant, who.user, segment)
    except RecordError as e:
        raise _refusal(e) from None
    except RecordsUnavailable as e:
        raise _unavailable(e) from e
    return {
        "id": result.record_id,
        "version": result.version,
        "message_count": result.message_count,
    }


def _thread_in_use(services: Services, thread: ThreadRef) -> bool:
    """Whether a voice session of this process serves the thread (connected or awaiting
    resume)."""
    return any(
        session.engine is not None and session.engine.thread == thread
        for session in list(services.live_sessions.values())
    )


@router.delete("/{record_id}", dependencies=[allow(Policy.MEMBER)])
async def delete_conversation(
    record_id: str,
    who: Caller,
    services: ServicesDep,
    erase_journal: bool = False,
    delete_recordings: bool = False,
) -> dict[str, Any]:
    """Delete a record (SPEC CONV-4): memories sourced from its thread go, the thread's journal
    goes when asked, its recordings are scheduled for deletion when asked (SPEC REC-5: the
    expiry job deletes them, each leaving a receipt), and the answer says what was kept and
    why. Nothing is removed when the request is refused — a recording of the thread under a
    legal hold refuses it (409 ``recording_protected``), so the record stays for a retry once
    the hold is lifted."""
    records = services.records
    try:
        record = await records.get(who.tenant, who.user, record_id)
        if record is None:
            raise ApiError(404, "conversation_not_found", "no such conversation")
        others: list[str] = []
        if record.thread_id is not None:
            others = [
                i
                for i in await records.ids_for_thread(who.tenant, who.user, record.thread_id)
                if i != record.id
            ]
    except RecordsUnavailable as e:
        raise _unavailable(e) from e
    thread = None if record.thread_id is None else ThreadRef(who.tenant, who.user, record.thread_id)
    recordings = (
        []
        if thread is None
        else await services.recording_index.of_thread(who.tenant, who.user, thread.thread_id)
    )
    if any(r.protected for r in recordings):
        raise ApiError(
            409,
            "recording_protected",
            "a recording of this conversation is under a legal hold; nothing was deleted: "
            "retry once the hold is lifted",
        )
    if erase_journal and thread is not None and not others and _thread_in_use(services, thread):
        raise ApiError(
            409,
            "thread_in_use",
            "a voice session is still serving this conversation; end it before erasing its journal",
        )
    kept: list[dict[str, str]] = []
    memories_removed = 0
    receipt_id: str | None = None
    journal_events_removed = 0
    if thread is None:
        kept.append({"what": "memories", "why": "the record has no runtime thread id to trace"})
        if erase_journal:
            kept.append({"what": "runtime journal", "why": "the record names no runtime thread"})
    elif others:
        why = (
            f"{len(others)} other conversation record(s) still use this thread "
            f"({', '.join(others[:5])})"
        )
        kept.append({"what": "memories", "why": why})
        kept.append({"what": "runtime journal", "why": why})
    else:
        try:
            receipt = await services.memory.delete_source(who.tenant, who.user, thread.thread_id)
        except MemoryUnavailable as e:
            raise ApiError(
                503, e.code, "the memory store cannot be reached; nothing was deleted: retry"
            ) from e
        memories_removed = receipt.deleted
        receipt_id = receipt.receipt_id
        if erase_journal:
            try:
                journal_events_removed = await services.journal.delete_thread(thread)
                await services.checkpoints.delete_thread(thread)
            except JournalUnavailable as e:
                log.warning("journal erase failed: %s", e)
                raise ApiError(
                    503,
                    e.code,
                    "the runtime journal cannot be reached; the record is kept (its memories "
                    "were removed): retry",
                ) from e
        else:
            kept.append(
                {
                    "what": "runtime journal",
                    "why": "not asked to erase it (erase_journal=false)",
                }
            )
    scheduled: list[str] = []
    if recordings and delete_recordings and not others:
        now = datetime.now(UTC)
        for recording in recordings:
            if await services.recording_index.schedule_deletion(
                who.tenant, recording.id, at=now, reason="requested"
            ):
                scheduled.append(recording.id)
    elif recordings:
        why = (
            "not asked to delete them (delete_recordings=false): kept until they expire"
            if not delete_recordings
            else f"{len(others)} other conversation record(s) still use this thread"
        )
        kept.append({"what": "recordings", "why": why})
    try:
        await records.delete(who.tenant, who.user, record_id)
    except RecordsUnavailable as e:
        raise _unavailable(e) from e
    return {
        "deleted": True,
        "memories_removed": memories_removed,
        "receipt_id": receipt_id,
        "journal_events_removed": journal_events_removed,
        "recordings_scheduled": scheduled,
        "kept": kept,
    }
