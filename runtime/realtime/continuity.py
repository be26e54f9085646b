"""Continuity: going on with a conversation — continuations (SPEC RES-2), resumes (RES-1, RES-4).

Theory of operation
-------------------
Three things let a client go on where it left off; this module decides each, and
``runtime.realtime.connection.RealtimeConnection`` carries the decision out.

Rule 1 — continuation (``session.start`` with ``requested_thread_id``): allowed only when the
thread is the caller's, the role it was started with still exists (and is the one asked for, if
one is), and ``previous_voice_session_id`` appears in the thread's journal
(``check_continuation``). Someone else's thread and an unknown one are refused alike. A caller
proved by a client secret goes on only with threads and sessions of the role the secret is bound
to (``role_mismatch``; for a resume, after its token was redeemed).

Rule 2 — resume handshake (``session.resume``, ``redeem``): the token is redeemed (and rotated,
``runtime/realtime/resume.py`` rule 4). If the session is live in this process at the token's epoch
the caller takes it over (``HandOver``: ``LiveSessions.claim`` hands it to the connection in one
step) and its outbox replays what the client missed. A live copy at an older epoch is stale —
another process took the session over — and is fenced.

Rule 3 — continued from the journal: otherwise the session goes on *here* (``ContinueHere``):
same session id, same thread, next epoch. The thread and role are checked like a continuation,
then ``claim`` moves the session to the next epoch (compare-and-set). A claim lost to a
concurrent resume of the same session (e.g. the client's retry) makes the handshake look again,
at most ``RESUME_RACE_ATTEMPTS`` times; like any later connection, it then takes over.

Rule 4 — fencing order: between a successful ``claim`` and the caller registering the new copy
(``LiveSessions.take_over``) there is no await (``redeem`` returns straight after the claim and
the caller registers before its next await), so a later claim's fence always finds this copy. An
older live copy is fenced right after the claim; a *newer* one means a later resume won, and
this one is refused (4012).

Rule 5 — reconcile: when messages cannot be replayed (a journal continuation, or a replay window
that no longer reaches back far enough) the client gets ``reconcile``: the range to give up and
this session's user/assistant items as the journal has them (``reconcile_from_journal``), at most
``RECONCILE_MAX_ITEMS`` of them from the last ``RECONCILE_SCAN_EVENTS`` journal events, with the
item amendments among those folded in (``journal/amendments.py``): a deleted item is not there,
a truncated answer shows what was heard, marked interrupted.

Rule 6 — the journal handshake: a journal continuation raises the journal's writer fence to
its epoch (``VoiceSession.take_over_journal``, ``journal/store.py`` rule 4) before it reads the
journal for the reconcile. The fence waits, in PostgreSQL, for every append in flight to the
thread, and from then on the journal refuses every append of an older copy of the session
(``WriterFenced``; the refused copy fences itself). So the reconcile shows exactly what older
copies wrote, and an answer an older copy was still generating is never journaled (nor, once the
copy is fenced, spoken): only the holder of the current epoch continues a turn. No wait, no
timing: the claim's notification (``resume_tokens.watch``) only makes the old copy stop sooner.
A retry of the resume that lands on the process holding the continuation (its client never got
the answer) waits for the same fence and gets the same reconcile (``runtime.realtime.connection``);
of two resumes there, the later-arrived one holds the session (``runtime/realtime/live.py`` rule 3).

Refusals are ``ContinuityRefused``: the ``error`` event to send and the close code that follows.
``resumed_message`` builds the answer to a resume, ``openrealtime.session.resumed``, for both ways.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from journal.amendments import apply_amendments
from journal.events import EventKind, JournalEvent, ThreadRef
from pipeline.events import SessionResumed
from runtime.accounts import Principal
from runtime.errors import ContinuityRefused
from runtime.realtime.protocol import (
    CloseCode,
    ErrorCode,
    SessionResume,
    SessionStart,
    encode_event,
)
from runtime.realtime.resume import VoiceSessionRecord
from runtime.roles import Role

if TYPE_CHECKING:
    from journal.store import JournalStore
    from runtime.config import Settings
    from runtime.realtime.resume import ResumeTokenStore
    from runtime.roles import RoleStore
    from runtime.threads import ThreadStore


class ContinuityServices(Protocol):
    """What continuing a thread or redeeming a resume takes of the services."""

    settings: Settings
    threads: ThreadStore
    roles: RoleStore
    journal: JournalStore
    resume_tokens: ResumeTokenStore


RESUME_RACE_ATTEMPTS = 3
"""How often a resume looks again when a concurrent resume of the session claimed it first."""
RECONCILE_SCAN_EVENTS = 400
"""How many of the thread's last journal events a reconcile looks through."""
RECONCILE_MAX_ITEMS = 50
"""At most this many (the latest) items go into a reconcile; ``complete`` says if cut."""


class LiveSession(Protocol):
    """What the handshake needs of a session live in this process."""

    @property
    def epoch(self) -> int: ...

    def fence(self, epoch: int) -> None: ...


LiveLookup = Callable[[str], LiveSession | None]
"""The open (not closed) session live in this process under an id, or None."""


class TailReader(Protocol):
    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]: ...


@dataclass(frozen=True, slots=True)
class HandOver:
    """The session is live here at the token's epoch: hand the connection to it."""

    target: LiveSession
    fresh_token: str
    epoch: int
    """The token's epoch (the live copy's): the caller claims the session at it."""


@dataclass(frozen=True, slots=True)
class ContinueHere:
    """Continue the session from the journal under ``record.epoch`` (already claimed)."""

    record: VoiceSessionRecord
    thread: ThreadRef
    role: Role
    options: dict[str, Any]
    """What the session had negotiated (its configuration and extensions), as stored."""
    fresh_token: str


def _refuse_continuation(error_code: str, message: str) -> ContinuityRefused:
    return ContinuityRefused(error_code, message, CloseCode.FORBIDDEN, "continuation refused")


def refuse_resume(message: str, error_code: str = ErrorCode.RESUME_REFUSED) -> ContinuityRefused:
    """A resume refused with close 4003 (docs/protocol.md, *Resuming*)."""
    return ContinuityRefused(error_code, message, CloseCode.FORBIDDEN, "resume refused")


BAD_TOKEN = "this session cannot be resumed with that token"
"""The refusal of a wrong, rotated, expired or foreign token — and of a session that is ending
(it is about to be refused so anyway)."""


def resumed_meanwhile() -> ContinuityRefused:
    """This resume lost to a later one of the same session before it was answered (4012)."""
    return ContinuityRefused(
        ErrorCode.RESUME_REFUSED,
        "the session was resumed again meanwhile",
        CloseCode.SUPERSEDED,
        "resumed by another connection",
    )


async def check_continuation(
    services: ContinuityServices, principal: Principal, start: SessionStart
) -> tuple[ThreadRef, Role]:
    """Rule 1: the thread and role a ``session.start`` with ``requested_thread_id`` continues."""
    assert start.requested_thread_id is not None
    if start.previous_voice_session_id is None:
        raise _refuse_continuation(
            ErrorCode.INVALID_MESSAGE, "requested_thread_id needs previous_voice_session_id"
        )
    record = await services.threads.get(principal.tenant, principal.user, start.requested_thread_id)
    if record is None:
        # Someone else's thread and an unknown one look the same from here.
        raise _refuse_continuation(ErrorCode.THREAD_NOT_FOUND, "no such thread for this user")
    if not principal.may_use_role(record.role_id):
        raise _refuse_continuation(
            ErrorCode.ROLE_MISMATCH, "this client secret is bound to another role"
        )
    role = await services.roles.get(principal.tenant, record.role_id)
    role_name = role.name if role is not None else None
    if start.model is not None and start.model not in (record.role_id, role_name):
        raise _refuse_continuation(ErrorCode.ROLE_MISMATCH, "the thread belongs to another role")
    if role is None:
        raise _refuse_continuation(ErrorCode.ROLE_NOT_FOUND, "the thread's role was deleted")
    thread = ThreadRef(principal.tenant, principal.user, record.thread_id)
    if not await services.journal.has_session(thread, start.previous_voice_session_id):
        raise _refuse_continuation(
            ErrorCode.PREVIOUS_SESSION_UNKNOWN,
            "the previous voice session never served this thread",
        )
    return thread, role


async def redeem(
    services: ContinuityServices,
    principal: Principal,
    resume: SessionResume,
    *,
    live: LiveLookup,
    this: object,
) -> HandOver | ContinueHere:
    """Rules 2–4: redeem the token; the live session to hand over to, or the claimed record to
    continue from the journal. ``this`` is the caller's own session (never fenced here).

    On ``ContinueHere`` the caller must register the continued session
    (``LiveSessions.take_over``) before its next await (rule 4)."""
    for _attempt in range(RESUME_RACE_ATTEMPTS):
        redeemed = await services.resume_tokens.redeem(
            principal, resume.session_id, resume.resume_token,
            ttl_s=services.settings.resume_ttl_s,
        )  # fmt: skip
        if redeemed is None:
            raise refuse_resume(BAD_TOKEN)
        record, fresh_token = redeemed
        if not principal.may_use_role(record.role_id):
            raise refuse_resume(
                "this client secret is bound to another role", ErrorCode.ROLE_MISMATCH
            )
        target = live(record.session_id)
        if target is not None:
            if target.epoch == record.epoch:
                return HandOver(target, fresh_token, record.epoch)
            target.fence(record.epoch + 1)  # a stale copy another process took over
        continued = await _claim(services, principal, record, live=live, this=this)
        if continued is not None:
            return ContinueHere(*continued, fresh_token=fresh_token)
        # Another resume of this session claimed it first (e.g. the client's retry of an
        # attempt whose answer it never got): look again, and like any later connection,
        # take over from it.
    raise refuse_resume("the session is being resumed elsewhere")


async def _claim(
    services: ContinuityServices,
    principal: Principal,
    record: VoiceSessionRecord,
    *,
    live: LiveLookup,
    this: object,
) -> tuple[VoiceSessionRecord, ThreadRef, Role, dict[str, Any]] | None:
    """Rule 3: check the thread like a continuation and claim the next epoch; None if another
    resume claimed the session first."""
    owned = await services.threads.get(principal.tenant, principal.user, record.thread_id)
    if owned is None:
        raise refuse_resume("no such thread for this user", ErrorCode.THREAD_NOT_FOUND)
    role = await services.roles.get(principal.tenant, record.role_id)
    if role is None:
        raise refuse_resume("the thread's role was deleted", ErrorCode.ROLE_NOT_FOUND)
    claimed = await services.resume_tokens.claim(record)
    if claimed is None:
        return None
    # No await from here to the caller's registration (rule 4).
    held = live(claimed.session_id)
    if held is not None and held is not this:
        if held.epoch > claimed.epoch:  # a later resume got here first after all
            raise resumed_meanwhile()
        held.fence(claimed.epoch)
    thread = ThreadRef(principal.tenant, principal.user, record.thread_id)
    return claimed, thread, role, dict(claimed.options)


async def reconcile_from_journal(
    journal: TailReader,
    thread: ThreadRef,
    session_id: str,
    from_seq: int,
    to_seq: int | None,
) -> dict[str, object]:
    """Rule 5: what a client needs when messages ``from_seq``..``to_seq`` (None: up to where the
    old stream ended, unknown here) cannot be replayed: the session's user and assistant items
    as the journal has them, oldest first, to show instead of its own — deleted items left out,
    truncated ones cut to what was heard (an amendment by any session of the thread counts)."""
    items: list[dict[str, object]] = []
    events = await journal.read_tail(thread, RECONCILE_SCAN_EVENTS)
    for event in apply_amendments(events):
        if event.voice_session_id != session_id:
            continue
        payload = event.payload
        if event.kind is EventKind.USER_INPUT:
            items.append({"journal_seq": event.seq, "role": "user",
                          "text": str(payload.get("text", ""))})  # fmt: skip
        elif event.kind is EventKind.ASSISTANT_OUTPUT:
            interrupted = bool(payload.get("interrupted"))
            items.append(
                {
                    "journal_seq": event.seq,
                    "role": "assistant",
                    # What the user heard: an interrupted answer only up to the cut.
                    "text": str(payload.get("heard_text" if interrupted else "text", "")),
                    "interrupted": interrupted,
                }
            )
    scanned_all = len(events) < RECONCILE_SCAN_EVENTS or events[0].voice_session_id != session_id
    return {
        "from_seq": from_seq,
        "to_seq": to_seq,
        "session_id": session_id,
        "thread_id": thread.thread_id,
        "items": items[-RECONCILE_MAX_ITEMS:],
        "complete": scanned_all and len(items) <= RECONCILE_MAX_ITEMS,
    }


def resumed_message(
    session_id: str,
    resume_token: str,
    *,
    replayed: int | bool,
    missing: list[int] | None,
    reconcile: dict[str, object] | None,
    last_seq: int,
    session: dict[str, object] | None = None,
) -> str:
    """``openrealtime.session.resumed`` (docs/protocol.md, *Resuming*), encoded: the one
    message outside the numbered stream. ``replayed`` is False and ``session`` is given when
    the session was continued from the journal (rule 3)."""
    event = SessionResumed(
        session_id=session_id,
        resume_token=resume_token,
        replayed=replayed,
        missing=(missing[0], missing[1]) if missing else None,
        reconcile=reconcile,
        last_seq=last_seq,
        session=session,
    )
    return encode_event(event, event_id=f"event_resumed_{last_seq}", seq=None, extensions=True)
