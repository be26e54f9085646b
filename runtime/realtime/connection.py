"""RealtimeConnection: one WebSocket connection to ``/v1/realtime``.

Theory of operation
-------------------
Opening (docs/protocol.md; ``runtime.realtime.handshake``). A GA client authenticates with
``Authorization: Bearer`` (or the browser convention, the subprotocol
``openai-insecure-api-key.<token>``) and gets ``session.created`` at once; ``?model=`` picks the
agent role (id or name, else the tenant's default; a client secret's role wins). A client that
offers the ``openrealtime`` subprotocol sends a first message instead —
``openrealtime.session.start`` (token, role, thread to continue, extensions) or
``openrealtime.session.resume`` — within ``start_timeout_s`` (else 4008). Credentials never
travel in the URL. A refusal is ``protocol.Refused``: its ``error`` event, then its close code.

A start opens a new ``runtime.realtime.session.VoiceSession``, which adopts the outbox the handshake
wrote its errors to (so ``seq`` numbering is one stream). A resume runs the handshake in
``runtime.realtime.continuity`` (which also checks continuations, RES-2). If the session is live in
this process at the token's epoch, this connection claims it (``LiveSessions.claim``, one step: of
two resumes at once the later holds it, and the earlier is refused with ``resume_refused`` and
4012 — or just closed with 4012 if it was answered already) and its outbox replays what the
client missed. Otherwise the session is continued *from the journal* here: same session id,
next epoch (a copy still held elsewhere is fenced and closes with 4012), a new engine on the
same thread and a fresh outbox numbered on from the client's ``last_seq``. Nothing can be
replayed then, so ``session.resumed`` says so and carries ``reconcile``: the range to give up
and the session's user/assistant items from the journal, which the client shows instead.

The receive loop parses each client message (``runtime.realtime.protocol``) and hands it to the
engine; a bad message becomes an ``error`` event and the loop goes on (after
``max_errors_per_session`` of them, counted for the session across its connections, it closes with
4009). Everything the server sends goes through the session's outbox (``runtime.realtime.outbox``),
which numbers messages with ``seq`` in send order and drops audio frames whose generation is no
longer current — so after an interruption event no frame of that generation leaves the server. A
client that stops reading fills it and is closed with 4010.

When the loop ends the session learns what it means: ``openrealtime.session.close`` ends it for
good (its token revoked, close 1000); a close for cause (4009, 4010, 4011) ends it; a GA-only
session (no ``seq``, no token) ends with its connection; otherwise it waits for a resume
(``runtime.realtime.session``). A connection that no longer holds its session leaves it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.websockets import WebSocketDisconnect

from pipeline import events as ev
from pipeline.audio_formats import AudioFormatError
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from runtime.accounts import Principal
from runtime.errors import Disconnected, ProtocolError, Refused, SessionCloseRequested
from runtime.realtime.continuity import (
    ContinueHere,
    redeem,
    resumed_meanwhile,
    resumed_message,
)
from runtime.realtime.dispatch import handle
from runtime.realtime.handshake import UNAVAILABLE, authenticate, opening
from runtime.realtime.live import Claim
from runtime.realtime.outbox import NO_EXTENSIONS, Outbox
from runtime.realtime.protocol import (
    AudioAppend,
    AudioFrame,
    CloseCode,
    ErrorCode,
    Limits,
    SessionResume,
    SessionStart,
    decode_append,
    parse_client_message,
    unauthorized,
)
from runtime.realtime.session import VoiceSession
from runtime.realtime.transport import SEND_FAILURES, Link, WebSocketLink
from runtime.telemetry import OutboxTap

if TYPE_CHECKING:
    from runtime.services import Services

log = logging.getLogger(__name__)


FIRST_MESSAGE_PROTOCOL = "openrealtime"
"""Offered as a WebSocket subprotocol: the first message opens the session (module doc)."""


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Phase(enum.Enum):
    """Where a connection is: HANDSHAKE → (ANSWERED →) SERVING → ENDED."""

    HANDSHAKE = "handshake"
    """Until the session is opened or resumed: errors go out on the handshake's outbox."""
    ANSWERED = "answered"
    """A resume was answered (``session.resumed``); its replay, if any, is going out."""
    SERVING = "serving"
    """The receive loop runs."""
    ENDED = "ended"


_ARRIVALS = itertools.count(1)


def _no_generation(generation: int) -> bool:
    return False  # no engine yet; the session that adopts the outbox says what is current


class RealtimeConnection:
    """One connection: its handshake, then its receive loop (module doc). Over a WebSocket
    ``run`` does both; a WebRTC call (``runtime.webrtc.calls``) opens with ``open`` and serves with
    ``serve``."""

    def __init__(
        self,
        link: Link,
        services: Services,
        *,
        call_tools: Sequence[tuple[ToolSpec, ToolHandler]] = (),
    ) -> None:
        self.link = link
        self.services = services
        self.call_tools = tuple(call_tools)
        """Built-in tools of this transport for the sessions it starts (a phone call's
        ``end_call``, ``runtime.telephony.twilio_stream``)."""
        settings = services.settings
        self.limits = Limits(
            max_message_bytes=settings.max_message_bytes,
            max_audio_frame_ms=settings.max_audio_frame_ms,
        )
        self.id = f"conn_{uuid.uuid4().hex}"
        self.arrival = next(_ARRIVALS)
        """This connection's place in the order connections reached this process: of two
        resumes of one session, the one that arrived later is the client's retry
        (``runtime/realtime/live.py`` rule 3)."""
        self.principal: Principal | None = None
        self.session: VoiceSession | None = None
        """The session this connection opened, continued or resumed (``VoiceSession.holds``
        says whether it still holds it)."""
        self.phase = Phase.HANDSHAKE
        self._handshake = self._new_outbox()
        """Carries the handshake's errors (and the refusal of a resume that lost its session
        before it was answered); a session started here adopts it."""
        self._errors = 0
        """Errors sent during the handshake; the session opened here goes on counting."""
        self._task: asyncio.Task[object] | None = None
        self._close_request: _Close | None = None

    @property
    def serving(self) -> bool:
        return self.phase is Phase.SERVING

    def _new_outbox(self) -> Outbox:
        outbox = Outbox(
            send_text=self.link.send_text,
            send_bytes=self.link.send_bytes,
            is_current=_no_generation,
            max_queued=self.services.settings.max_outbound_messages,
        )
        outbox.media = self.link.media
        outbox.tap = self.services.telemetry.tap()
        return outbox

    def request_close(self, code: int, reason: str) -> None:
        """Close this connection with ``code`` from its own task (the session asks when its
        journal buffer overflows)."""
        if self._close_request is None and self._task is not None:
            self._close_request = _Close(code, reason)
            self._task.cancel()

    async def run(self) -> None:
        """Serve this connection: open a session (``session.start``, or at once for a GA
        client), continue one from the journal, or take over the live one it resumes."""
        assert isinstance(self.link, WebSocketLink)
        ws = self.link.websocket
        offered = [str(p) for p in ws.scope.get("subprotocols", [])]
        first_message = FIRST_MESSAGE_PROTOCOL in offered
        chosen = FIRST_MESSAGE_PROTOCOL if first_message else None
        if chosen is None and "realtime" in offered:
            chosen = "realtime"  # the browser convention's protocol name
        await ws.accept(subprotocol=chosen)
        self._task = asyncio.current_task()
        try:
            session = await self._open(offered, first_message=first_message)
        except (Refused, _Close) as e:
            await self._close(self._refusal(e) if isinstance(e, Refused) else e)
            await self._handshake.close()
            return
        except (Disconnected, WebSocketDisconnect):
            await self._handshake.close()
            return
        except UNAVAILABLE as e:
            log.warning("realtime handshake: a store is unreachable (%s); told to retry", e)
            self._handshake.send(
                ev.error(
                    ErrorCode.SERVER_UNAVAILABLE,
                    "the server cannot reach its database right now; retry in a moment",
                    server=True,
                    retryable=True,
                )
            )
            await self._handshake.close()
            await self._close(_Close(CloseCode.TRY_AGAIN_LATER, "database unavailable"))
            return
        if session is not None:
            await self.serve(session)

    async def open(self, first: SessionStart | SessionResume) -> VoiceSession | None:
        """Open what ``first`` asks for, the principal already authenticated (a WebRTC call's
        offer carries its credentials and first message): as ``run`` does after the first
        message. Raises ``Refused``."""
        self._task = asyncio.current_task()
        if isinstance(first, SessionResume):
            return await self._resume(first)
        return await self._start(first)

    async def _open(self, offered: list[str], *, first_message: bool) -> VoiceSession | None:
        """The handshake: the session to serve (None: a resumed one, whose replay could not be
        sent, waits for the next resume)."""
        assert isinstance(self.link, WebSocketLink)
        ws = self.link.websocket
        self.principal = await authenticate(self.services, ws, offered)
        if not first_message:
            self._authenticated()
            return await self._start(
                SessionStart(
                    type="openrealtime.session.start",
                    model=ws.query_params.get("model"),
                    extensions=NO_EXTENSIONS,
                )
            )
        first = await self._await_start()
        if isinstance(first, SessionResume):
            return await self._resume(first)
        return await self._start(first)

    def _authenticated(self) -> Principal:
        if self.principal is None:
            raise unauthorized()
        return self.principal

    # ------------------------------------------------------------ start

    async def _await_start(self) -> SessionStart | SessionResume:
        try:
            async with asyncio.timeout(self.services.settings.start_timeout_s):
                while True:
                    data = await self._receive()
                    try:
                        message = parse_client_message(data, self.limits)
                    except ProtocolError as e:
                        self._protocol_error(e)
                        continue
                    if isinstance(message, SessionStart | SessionResume):
                        return message
                    self._error(
                        ErrorCode.SESSION_NOT_STARTED, "send openrealtime.session.start first"
                    )
        except TimeoutError:
            raise _Close(CloseCode.START_TIMEOUT, "no openrealtime.session.start in time") from None

    async def _start(self, start: SessionStart) -> VoiceSession:
        services = self.services
        if start.token is not None:
            self.principal = await services.authenticate(start.token, realtime=True)
        principal = self._authenticated()
        limit = services.settings.max_live_sessions_per_user
        with services.live_sessions.reserve(principal, limit=limit) as place:
            self._handshake.extensions = start.extensions
            thread, role, config = await opening(services, principal, start)
            session = VoiceSession(
                services,
                connection=self,
                outbox=self._handshake,
                principal=principal,
                thread=thread,
                role=role,
                config=config,
                limits=self.limits,
                errors=self._errors,
                call_tools=self.call_tools,
            )
            await session.issue_resume_token()
            await session.start_recording()
            place.register(session)
        self.session = session
        _name_in_telemetry(session)
        session.outbox.send(ev.SessionCreated(session.session_json()))
        session.announce_recording()
        return session

    # ------------------------------------------------------------ resume

    async def _resume(self, resume: SessionResume) -> VoiceSession | None:
        """Check the token; then take the live session over, or continue it from the journal."""
        services = self.services
        if resume.token is not None:
            self.principal = await services.authenticate(resume.token, realtime=True)
        principal = self._authenticated()
        live = services.live_sessions
        outcome = await redeem(services, principal, resume, live=live.lookup, this=None)
        if isinstance(outcome, ContinueHere):
            return await self._continue_from_journal(
                outcome, principal, resume.last_seq, outcome.fresh_token
            )
        # Taken over in one step, straight after the handshake saw it live
        # (runtime/realtime/live.py).
        claim = live.claim(resume.session_id, epoch=outcome.epoch, connection=self)
        return await self._attach(claim, resume.last_seq, outcome.fresh_token)

    async def _attach(self, claim: Claim, last_seq: int, token: str) -> VoiceSession | None:
        """Take a live session over: close the connection it had, replay what the client
        missed behind a barrier (nothing new interleaves), then go live. None when this
        connection dropped during the replay (the session waits for the next resume)."""
        link, session = self.link, claim.session
        self.session = session
        # What the handshake still has to say goes out before the answer.
        await self._handshake.flush()
        if claim.superseded is not None:
            with contextlib.suppress(Exception):
                await claim.superseded.link.close(
                    CloseCode.SUPERSEDED, "resumed by another connection"
                )
        self._check_held(session)
        replay, missing = session.resume_stream(self, last_seq)
        if session.owes_reconcile(last_seq):
            # A retry of the resume that continued this session from the journal, before the
            # new stream said anything: its client may never have got that answer, so it gets
            # the same one — the reconcile, after the journal's fence.
            try:
                await self._answer_from_journal(session, last_seq, token)
            except BaseException:
                await session.detach(self)
                raise
            session.go_live()
            self.services.telemetry.metrics.resumes.labels("journal").inc()
            return session
        try:
            reconcile = None
            if missing is not None:
                # Same answer as a journal continuation gives, for the range that is gone.
                reconcile = await session.reconcile(missing[0], missing[1])
                self._check_held(session)
            self.phase = Phase.ANSWERED
            await link.send_text(
                resumed_message(
                    session.id,
                    token,
                    replayed=len(replay),
                    missing=list(missing) if missing else None,
                    reconcile=reconcile,
                    last_seq=session.outbox.seq,
                )
            )
            self._check_held(session)
            for data in replay:
                if isinstance(data, bytes):
                    await link.send_bytes(data)
                else:
                    await link.send_text(data)
                self._check_held(session)
        except SEND_FAILURES:
            await session.detach(self)
            return None
        session.go_live()
        self.services.telemetry.metrics.resumes.labels("live").inc()
        return session

    def _check_held(self, session: VoiceSession) -> None:
        """After an await of a resume: go on only while this connection holds ``session``.
        A later resume took it over: refused (4012) if this one was not answered yet, else just
        closed (4012). It ended meanwhile (fenced, expired, revoked): closed (4012)."""
        if session.holds(self):
            return
        if session.connection is not self and self.phase is Phase.HANDSHAKE:
            raise resumed_meanwhile()
        raise _Close(CloseCode.SUPERSEDED, "resumed by another connection")

    async def _continue_from_journal(
        self, claimed: ContinueHere, principal: Principal, last_seq: int, token: str
    ) -> VoiceSession:
        """Serve a session whose outbox is not here (SPEC RES-4) under the epoch the handshake
        claimed, and tell the client what to reconcile."""
        session = VoiceSession.continued(
            self.services,
            claimed,
            connection=self,
            outbox=self._new_outbox(),
            principal=principal,
            limits=self.limits,
            last_seq=last_seq,
            errors=self._errors,
        )
        # No await from the claim to the registration: a later claim's fence finds this copy.
        self.services.live_sessions.take_over(session)
        self.session = session
        _name_in_telemetry(session)
        try:
            answered = await self._answer_from_journal(session, last_seq, token)
        except BaseException:
            # Not answered (a store failed, or a later resume took over): the session waits
            # for its client's next resume like any dropped one, expiry included.
            await session.detach(self)
            raise
        self.services.telemetry.metrics.resumes.labels("journal").inc()
        return answered

    async def _answer_from_journal(
        self, session: VoiceSession, last_seq: int, token: str
    ) -> VoiceSession:
        """Answer a resume of a session continued from the journal whose new stream has said
        nothing yet: ``session.resumed`` with ``replayed`` false, the reconcile from
        ``last_seq`` on and the session's configuration."""
        # Continuity rule 6: once the journal's fence is ours, no older copy of the session
        # adds to the thread, and everything one added is in the journal the reconcile reads.
        await session.take_over_journal()
        self._check_held(session)
        reconcile = await session.reconcile(last_seq + 1, None)
        self._check_held(session)  # fenced meanwhile, or taken over by a still later resume
        items = reconcile.get("items")
        if isinstance(items, list) and items and items[-1].get("role") == "user":
            # The old process may have died before answering: response.create answers it.
            assert session.engine is not None
            session.engine.adopt_last_input(str(items[-1]["text"]), int(items[-1]["journal_seq"]))
        # If this send fails the receive loop sees the drop and the session waits to be resumed
        # (a retry with the same token gets the same new token: runtime/realtime/resume.py rule 4).
        self.phase = Phase.ANSWERED
        with contextlib.suppress(*SEND_FAILURES):
            await self.link.send_text(
                resumed_message(
                    session.id,
                    token,
                    replayed=False,
                    missing=None,
                    reconcile=reconcile,
                    last_seq=session.outbox.seq,
                    session=session.session_json(),
                )
            )
        self._check_held(session)
        return session

    # ------------------------------------------------------------ serve

    async def serve(self, session: VoiceSession) -> None:
        """The receive loop, and what its end means for the session (module doc)."""
        self._task = asyncio.current_task()
        self.phase = Phase.SERVING
        if not session.holds(self):
            # Fenced (continued elsewhere), expired or taken over after its client had the
            # answer but before this loop began: the session's end closed no connection (none
            # was serving yet), so this one would stay open and answer nothing. The client
            # resumes again, wherever the session is now.
            await self._close(_Close(CloseCode.SUPERSEDED, "resumed by another connection"))
            return
        # Its client has had the answer to its resume: from now on a resume replays the stream
        # (a message this connection still delivers must not cross a later reconcile).
        session.continued_at = None
        close: _Close | None = None
        try:
            await self._receive_loop(session)
        except _Close as c:
            close = c
        except (Disconnected, WebSocketDisconnect):
            pass
        except asyncio.CancelledError:
            if self._close_request is None or self._task is None:
                raise
            self._task.uncancel()
            close = self._close_request
        if not session.holds(self):
            return  # fenced: a newer connection (or another process) serves this session now
        self.phase = Phase.ENDED
        if close is not None:
            session.begin_end()
            if close.code == CloseCode.NORMAL:
                await session.revoke_token()  # the client ended it: nothing to resume any more
            await self._close(close)
            await session.shutdown()
        elif not session.outbox.extensions.seq:
            # A GA-only client cannot resume (no seq, no token): the session ends with it.
            session.begin_end()
            await session.revoke_token()
            await session.shutdown()
        else:
            await session.detach(self)

    async def _close(self, close: _Close) -> None:
        with contextlib.suppress(Exception):
            await self.link.close(close.code, close.reason)

    async def _receive(self) -> str | bytes:
        return await self.link.receive()

    async def _receive_loop(self, session: VoiceSession) -> None:
        engine = session.engine
        assert engine is not None
        outbox = session.outbox
        while True:
            if outbox.overflowed:
                raise _Close(CloseCode.SLOW_CONSUMER, "client is not reading its messages")
            data = await self._receive()
            try:
                message = parse_client_message(data, self.limits)
                if isinstance(message, AudioFrame):
                    if not outbox.extensions.binary_audio:
                        raise ProtocolError(
                            ErrorCode.BINARY_NOT_NEGOTIATED,
                            "binary audio needs the binary_audio extension; "
                            "use input_audio_buffer.append",
                        )
                    await self._push_audio(session, message.pcm)
                elif isinstance(message, AudioAppend):
                    await self._push_audio(session, decode_append(message), message.event_id)
                else:
                    try:
                        await handle(session, engine, message, media=self.link.media)
                    except SessionCloseRequested:
                        raise _Close(CloseCode.NORMAL, "closed by client") from None
            except ProtocolError as e:
                self._protocol_error(e)
            except (_Close, Disconnected, WebSocketDisconnect, asyncio.CancelledError):
                raise
            except Exception:  # a bug must not end the session (and is logged, not its content)
                log.exception("voice session %s: a client message failed", session.id)
                self._error(ErrorCode.INTERNAL, "the server failed to handle this message")

    async def _push_audio(
        self, session: VoiceSession, data: bytes, event_id: str | None = None
    ) -> None:
        try:
            pcm = session.decode_input(data)
        except AudioFormatError as e:
            raise ProtocolError(ErrorCode.INVALID_AUDIO, str(e), event_id=event_id) from None
        except ProtocolError as e:
            e.event_id = event_id
            raise
        await session.hear(pcm)

    # ------------------------------------------------------------ errors

    def _protocol_error(self, error: ProtocolError) -> None:
        self._error(error.code, error.message, param=error.param, event_id=error.event_id)

    def _refusal(self, refused: Refused) -> _Close:
        """Send the refusal's error event; the close that follows (4009 instead when this was
        one error too many)."""
        try:
            self._error(
                refused.error_code, refused.message, param=refused.param, event_id=refused.event_id
            )
        except _Close as too_many:
            return too_many
        return _Close(refused.close_code, refused.close_reason)

    def _error(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ) -> None:
        """Send an ``error`` event and count it against ``max_errors_per_session``: on the
        session's stream and count once this connection serves it, on the handshake's before."""
        session = self.session if self.phase is not Phase.HANDSHAKE else None
        event = ev.error(code, message, param=param, event_id=event_id)
        if session is None:
            self._handshake.send(event)
            self._errors += 1
            errors = self._errors
        else:
            session.outbox.send(event)
            session.errors += 1
            errors = session.errors
        if errors >= self.services.settings.max_errors_per_session:
            raise _Close(CloseCode.TOO_MANY_ERRORS, "too many invalid messages")


def _name_in_telemetry(session: VoiceSession) -> None:
    """The session's outbox tap names it in traces (``runtime/telemetry.py`` rule 3)."""
    tap = session.outbox.tap
    if isinstance(tap, OutboxTap):
        tap.session_id = session.id
