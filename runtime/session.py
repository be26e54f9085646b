"""VoiceSession: one WebSocket connection serving one thread.

Theory of operation
-------------------
The receive loop parses each client message (``runtime.protocol``) and hands it to the engine;
a bad message becomes an ``error`` event and the loop goes on (after ``max_errors_per_session``
of them the session closes with 4009). Everything the server sends goes through one bounded
outbound queue drained by one writer task, which numbers messages with ``seq`` in send order and
drops audio frames whose generation is no longer current — so after an interruption event no
frame of that generation leaves the server. A client that stops reading fills the queue and is
closed with 4010.

Resuming (SPEC RES-1, RES-4): a connection whose first message is ``session.resume`` runs
the handshake in ``runtime.continuity`` (which also checks continuations, RES-2). If the session
is live in this process at the token's epoch, the connection is handed to it and its outbox
replays what the client missed. Otherwise the session is continued *from the journal* here: same
session id, next epoch (a copy still held elsewhere is fenced and closes with 4012), a new engine
on the same thread and a fresh outbox numbered on from the client's ``last_seq``. Nothing can be
replayed then, so ``session.resumed`` says so and carries ``reconcile``: the range to give up
and the session's user/assistant items from the journal, which the client shows instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

from starlette.websockets import WebSocket, WebSocketDisconnect

from journal.events import ThreadRef
from knowledge.tool import make_knowledge_tool
from pipeline.audio import pcm_from_bytes
from pipeline.engine import Engine, EngineSettings, Persona
from pipeline.history import ConversationHistory
from pipeline.turns import TurnSettings
from runtime.accounts import Principal
from runtime.continuity import (
    ContinueHere,
    ContinuityRefused,
    check_continuation,
    reconcile_from_journal,
    redeem,
    resumed_message,
)
from runtime.journal_buffer import BufferedJournal
from runtime.memory_hook import session_memory
from runtime.outbox import Outbox
from runtime.protocol import (
    Ack,
    AudioAppend,
    AudioCommit,
    AudioFrame,
    CloseCode,
    ErrorCode,
    InputPause,
    InputResume,
    ItemCreate,
    Limits,
    PlaybackProgress,
    ProtocolError,
    ResponseCancel,
    SessionClose,
    SessionResume,
    SessionStart,
    TurnDetection,
    decode_append,
    error_event,
    parse_client_message,
)
from runtime.resume import VoiceSessionRecord
from runtime.roles import Role

if TYPE_CHECKING:
    from runtime.services import Services

log = logging.getLogger(__name__)


class _Close(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def history_window(brain: object) -> tuple[int, int]:
    """(context window, reserved output) of the history budget for ``brain``: a small local
    model's context is smaller than the default (``context_tokens`` when it says)."""
    window = getattr(brain, "context_tokens", None)
    if not isinstance(window, int):
        return 8_192, 1_024
    return window, int(getattr(brain, "reserved_output_tokens", 256))


class VoiceSession:
    def __init__(self, websocket: WebSocket, services: Services) -> None:
        self.ws = websocket
        self.services = services
        settings = services.settings
        self.limits = Limits(
            max_message_bytes=settings.max_message_bytes,
            max_audio_frame_ms=settings.max_audio_frame_ms,
        )
        self.outbox = Outbox(
            send_text=websocket.send_text,
            send_bytes=websocket.send_bytes,
            is_current=self._is_current,
            max_queued=settings.max_outbound_messages,
        )
        self.id = f"vs_{uuid.uuid4().hex}"
        self.epoch = 0
        """Bumped each time the session is continued from the journal (see the module doc)."""
        self.thread: ThreadRef | None = None
        self.engine: Engine | None = None
        self.principal: Principal | None = None
        self._errors = 0
        self._attached = False
        self._closed = False
        self._expiry: asyncio.TimerHandle | None = None
        self._shutdown_task: asyncio.Task[None] | None = None
        self._fence_task: asyncio.Task[None] | None = None
        self._fresh_token = ""
        self._task: asyncio.Task[object] | None = None
        self._close_request: _Close | None = None
        self.journal = BufferedJournal(
            services.journal,
            on_outage=self._journal_outage,
            on_recovered=self._journal_recovered,
            on_overflow=self._journal_overflow,
            max_buffered=settings.max_unsaved_events,
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def _is_current(self, generation: int) -> bool:
        return self.engine is not None and self.engine.is_current(generation)

    async def run(self) -> None:
        """Serve a new connection: a new session (``session.start``) or, when its first
        message is ``session.resume``, hand the connection to the session it resumes."""
        ws = self.ws
        await ws.accept()
        self._task = asyncio.current_task()
        try:
            if "resume_token" in ws.query_params:
                self._error(ErrorCode.TOKEN_IN_URL, "a resume token is never sent in the URL")
                raise _Close(CloseCode.FORBIDDEN, "resume token in the URL")
            self.principal = await self.services.authenticate_header(
                ws.headers.get("authorization"), realtime=True
            )
            first = await self._await_start()
            if isinstance(first, SessionResume):
                target = await self._redeem(first)
                if target is not None:
                    # This object only did the handshake; the resumed session serves from here.
                    await self.outbox.close()
                    await target.serve_resumed(ws, first.last_seq, self._fresh_token)
                    return
                # Continued from the journal: this object is the session now.
            else:
                await self._start(first)
        except _Close as c:
            await self._close_connection(ws, c)
            await self.shutdown()
            return
        except WebSocketDisconnect:
            await self.shutdown()
            return
        await self._serve(ws)

    async def serve_resumed(self, ws: WebSocket, last_seq: int, token: str) -> None:
        """Attach a resuming connection: fence the previous one, replay what the client missed
        behind a barrier (nothing new interleaves), then go live."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        previous, self.ws = self.ws, ws
        self._task = asyncio.current_task()
        if previous is not ws and self._attached:
            with contextlib.suppress(Exception):
                await previous.close(CloseCode.SUPERSEDED, "resumed by another connection")
        self.outbox.attach(ws.send_text, ws.send_bytes)
        replay, missing = self.outbox.replay_after(last_seq)
        try:
            reconcile = None
            if missing is not None:
                # Same answer as a journal continuation gives, for the range that is gone.
                reconcile = await self._reconcile(missing[0], missing[1])
            await ws.send_text(
                resumed_message(
                    self.id,
                    token,
                    replayed=len(replay),
                    missing=list(missing) if missing else None,
                    reconcile=reconcile,
                    last_seq=self.outbox.seq,
                )
            )
            for data in replay:
                if isinstance(data, bytes):
                    await ws.send_bytes(data)
                else:
                    await ws.send_text(data)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.outbox.detach()
            await self._detach()
            return
        self.outbox.replay_done()
        await self._serve(ws)

    async def _serve(self, ws: WebSocket) -> None:
        """The receive loop of one connection, and what its end means for the session."""
        self._attached = True
        close: _Close | None = None
        try:
            await self._receive_loop()
        except _Close as c:
            close = c
        except WebSocketDisconnect:
            pass
        except asyncio.CancelledError:
            if self._close_request is None or self._task is None:
                raise
            self._task.uncancel()
            close = self._close_request
        if self.ws is not ws or self._closed:
            return  # fenced: a newer connection (or another process) serves this session now
        self._attached = False
        if close is not None:
            if close.code == CloseCode.NORMAL:
                await self._revoke()  # the client ended it: nothing to resume any more
            await self._close_connection(ws, close)
            await self.shutdown()
        else:
            self.outbox.detach()
            await self._detach()

    async def _detach(self) -> None:
        """The connection dropped: the session waits ``resume_ttl_s`` for its client."""
        if self._closed:
            return
        ttl = self.services.settings.resume_ttl_s
        try:
            await self.services.resume_tokens.extend(self.id, ttl_s=ttl)
        except Exception as e:  # the token store is best effort here; expiry still applies
            log.warning("could not extend the resume token: %s", e)
        loop = asyncio.get_running_loop()
        self._expiry = loop.call_later(
            ttl,
            lambda: self._spawn_shutdown(),  # noqa: PLW0108 - a fresh task each time
        )

    async def _revoke(self) -> None:
        try:
            await self.services.resume_tokens.extend(self.id, ttl_s=0)
        except Exception as e:  # best effort: the token expires anyway
            log.warning("could not revoke the resume token: %s", e)

    def _spawn_shutdown(self) -> None:
        self._shutdown_task = asyncio.ensure_future(self.shutdown())

    def fence(self, epoch: int) -> None:
        """The session was continued at ``epoch`` elsewhere: if this copy is older, close its
        connection (4012) and end it without touching the token, which is the new copy's."""
        if epoch <= self.epoch or self._closed or self._fence_task is not None:
            return
        self._fence_task = asyncio.ensure_future(self._fenced())

    def revoke_credentials(self) -> None:
        """The token that opened this session was revoked (or its user disabled): end the
        session for good, now, and close its connection with 4013."""
        if self._closed or self._fence_task is not None:
            return
        self._fence_task = asyncio.ensure_future(self._revoked())

    async def _revoked(self) -> None:
        log.info("voice session %s: its credentials were revoked; closing", self.id)
        attached = self._attached
        if attached:
            with contextlib.suppress(Exception):
                self.outbox.send_event(
                    error_event(ErrorCode.CREDENTIALS_REVOKED, "this session's token was revoked")
                )
        await self._revoke()
        await self.shutdown()
        if attached:
            with contextlib.suppress(Exception):
                await self.ws.close(CloseCode.CREDENTIALS_REVOKED, "credentials revoked")

    async def _fenced(self) -> None:
        log.info("voice session %s was resumed elsewhere; closing this copy", self.id)
        await self.shutdown()
        if self._attached:
            with contextlib.suppress(Exception):
                await self.ws.close(CloseCode.SUPERSEDED, "resumed on another server")

    async def shutdown(self) -> None:
        """End the session for good: engine, journal buffer, outbox, registry."""
        if self._closed:
            return
        self._closed = True
        if self._expiry is not None:
            self._expiry.cancel()
        if self.services.live_sessions.get(self.id) is self:
            del self.services.live_sessions[self.id]
        if self.engine is not None:
            await self.engine.close()
        await self.journal.close()
        await self.outbox.close()

    async def _close_connection(self, ws: WebSocket, close: _Close) -> None:
        with contextlib.suppress(Exception):
            await ws.close(close.code, close.reason)

    def _live(self, session_id: str) -> VoiceSession | None:
        """The open session live in this process under ``session_id``, if any."""
        session = self.services.live_sessions.get(session_id)
        if isinstance(session, VoiceSession) and not session._closed:
            return session
        return None

    def _refused(self, refused: ContinuityRefused) -> _Close:
        self._error(refused.error_code, refused.message)
        return _Close(refused.close_code, refused.close_reason)

    async def _redeem(self, resume: SessionResume) -> VoiceSession | None:
        """Check the token; the live session to hand the connection to, or None when this
        object has continued the session from the journal instead."""
        if resume.token is not None:
            self.principal = await self.services.authenticate(resume.token, realtime=True)
        if self.principal is None:
            self._error(ErrorCode.UNAUTHORIZED, "a valid bearer token is required")
            raise _Close(CloseCode.UNAUTHORIZED, "unauthorized")
        try:
            outcome = await redeem(
                self.services, self.principal, resume, live=self._live, this=self
            )
        except ContinuityRefused as refused:
            raise self._refused(refused) from None
        self._fresh_token = outcome.fresh_token
        if isinstance(outcome, ContinueHere):
            await self._continue_from_journal(outcome, resume.last_seq)
            return None
        assert isinstance(outcome.target, VoiceSession)
        return outcome.target

    async def _continue_from_journal(self, claimed: ContinueHere, last_seq: int) -> None:
        """Serve a session whose outbox is not here (SPEC RES-4) under the epoch the handshake
        claimed, and tell the client what to reconcile."""
        services = self.services
        # No await from the claim to the registration: a later claim's fence finds this copy.
        self.id, self.epoch = claimed.record.session_id, claimed.record.epoch
        self._build_engine(
            claimed.thread, claimed.role, claimed.output_sample_rate, claimed.detection
        )
        services.live_sessions[self.id] = self
        # The new stream goes on from what the client has; what the old one sent after that
        # is gone with its process and comes back as journal items instead.
        self.outbox.seq = self.outbox.acked = last_seq
        reconcile = await self._reconcile(last_seq + 1, None)
        if self._closed:  # fenced meanwhile by a still later resume
            raise _Close(CloseCode.SUPERSEDED, "resumed by another connection")
        # If this send fails the receive loop sees the drop and the session waits to be resumed
        # (a retry with the same token gets the same new token: runtime/resume.py rule 4).
        with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
            await self.ws.send_text(
                resumed_message(
                    self.id,
                    self._fresh_token,
                    replayed=False,
                    missing=None,
                    reconcile=reconcile,
                    last_seq=self.outbox.seq,
                    session=self._session_json(claimed.role, claimed.detection),
                )
            )

    async def _reconcile(self, from_seq: int, to_seq: int | None) -> dict[str, object]:
        assert self.thread is not None
        return await reconcile_from_journal(self.journal, self.thread, self.id, from_seq, to_seq)

    # ------------------------------------------------------------ start

    async def _await_start(self) -> SessionStart | SessionResume:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.services.settings.start_timeout_s
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Close(CloseCode.START_TIMEOUT, "no session.start in time")
            try:
                data = await asyncio.wait_for(self._receive(), remaining)
            except TimeoutError:
                raise _Close(CloseCode.START_TIMEOUT, "no session.start in time") from None
            try:
                message = parse_client_message(data, self.limits)
            except ProtocolError as e:
                self._error(e.code, e.message)
                continue
            if isinstance(message, SessionStart | SessionResume):
                return message
            self._error(ErrorCode.SESSION_NOT_STARTED, "send session.start first")

    async def _start(self, start: SessionStart) -> None:
        services = self.services
        if start.token is not None:
            self.principal = await services.authenticate(start.token, realtime=True)
        if self.principal is None:
            self._error(ErrorCode.UNAUTHORIZED, "a valid bearer token is required")
            raise _Close(CloseCode.UNAUTHORIZED, "unauthorized")
        principal = self.principal
        limit = services.settings.max_live_sessions_per_user
        if services.live_sessions_of(principal) >= limit:
            self._error(
                ErrorCode.TOO_MANY_SESSIONS,
                f"you already have {limit} live voice sessions (max_live_sessions_per_user)",
            )
            raise _Close(CloseCode.TOO_MANY_SESSIONS, "too many live sessions")
        if start.role_id is not None and not principal.may_use_role(start.role_id):
            self._error(ErrorCode.ROLE_MISMATCH, "this client secret is bound to another role")
            raise _Close(CloseCode.FORBIDDEN, "role mismatch")
        if start.requested_thread_id is None:
            role = await services.role_for(principal, start.role_id)
            if role is None:
                self._error(ErrorCode.ROLE_NOT_FOUND, f"no role {start.role_id!r}")
                raise _Close(CloseCode.FORBIDDEN, "role not found")
            thread = ThreadRef(principal.tenant, principal.user, f"th_{uuid.uuid4().hex}")
            await services.threads.create(thread.tenant, thread.user, thread.thread_id, role.id)
        else:
            try:
                thread, role = await check_continuation(services, principal, start)
            except ContinuityRefused as refused:
                raise self._refused(refused) from None
        settings = services.settings
        detection = start.turn_detection
        self._build_engine(thread, role, start.output_sample_rate, detection)
        options = {
            "output_sample_rate": start.output_sample_rate,
            "turn_detection": detection.model_dump(exclude_none=True),
        }
        resume_token = await services.resume_tokens.issue(
            VoiceSessionRecord(
                self.id, thread.tenant, thread.user, thread.thread_id, role.id, options=options
            ),
            ttl_s=settings.resume_ttl_s,
        )
        services.live_sessions[self.id] = self
        self.outbox.send_event(
            {
                "type": "session.created",
                "resume_token": resume_token,
                "session": self._session_json(role, detection),
                "limits": {
                    "max_message_bytes": self.limits.max_message_bytes,
                    "max_audio_frame_ms": self.limits.max_audio_frame_ms,
                    "max_text_chars": self.limits.max_text_chars,
                },
            }
        )

    def _session_json(self, role: Role, detection: TurnDetection) -> dict[str, object]:
        assert self.engine is not None and self.thread is not None
        return {
            "id": self.id,
            "thread_id": self.thread.thread_id,
            "role": {"id": role.id, "name": role.name},
            "input_sample_rate": 16000,
            "output_sample_rate": self.engine.settings.output_sample_rate,
            "turn_detection": detection.model_dump(),
        }

    def _build_engine(
        self, thread: ThreadRef, role: Role, output_sample_rate: int, detection: TurnDetection
    ) -> None:
        services = self.services
        settings = services.settings
        self.thread = thread
        turns = TurnSettings(
            silence_delay=(detection.silence_duration_ms or settings.silence_ms) / 1000.0,
            min_interrupt=(
                detection.min_interrupt_ms
                if detection.min_interrupt_ms is not None
                else settings.min_interrupt_ms
            )
            / 1000.0,
            auto_commit=detection.type == "server_vad",
        )
        # The knowledge tool searches the authenticated user's documents bound to this role.
        knowledge_spec, knowledge_tool = make_knowledge_tool(
            services.knowledge, tenant=thread.tenant, user=thread.user, role_id=role.id
        )
        window, reserved = history_window(services.plugins.brain)
        self.engine = Engine(
            plugins=services.plugins,
            sink=self.outbox,
            journal=self.journal,
            history=ConversationHistory(
                self.journal,
                services.checkpoints,
                projector=services.projector,
                context_window=window,
                reserved_output=reserved,
            ),
            thread=thread,
            persona=Persona(role.instructions, role.voice, role.language),
            voice_session_id=self.id,
            settings=EngineSettings(output_sample_rate=output_sample_rate, turns=turns),
            incarnation=self.epoch,
            memory=session_memory(services, thread, role, self.outbox.send_event),
            tools={knowledge_spec.name: knowledge_tool},
            tool_specs=(knowledge_spec,),
        )

    # ------------------------------------------------------------ receive

    async def _receive(self) -> str | bytes:
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        if text is not None:
            return str(text)
        return bytes(message.get("bytes") or b"")

    async def _receive_loop(self) -> None:
        engine = self.engine
        assert engine is not None
        while True:
            if self.outbox.overflowed:
                raise _Close(CloseCode.SLOW_CONSUMER, "client is not reading its messages")
            data = await self._receive()
            try:
                message = parse_client_message(data, self.limits)
                if isinstance(message, AudioAppend):
                    message = decode_append(message, self.limits)
                if isinstance(message, AudioFrame):
                    if message.pcm:
                        await engine.push_audio(pcm_from_bytes(message.pcm))
                elif isinstance(message, AudioCommit):
                    if not engine.commit():
                        raise ProtocolError(ErrorCode.COMMIT_EMPTY, "no user speech to commit")
                elif isinstance(message, ItemCreate):
                    text = "".join(part.text for part in message.item.content).strip()
                    if text:
                        engine.push_text(text)
                elif isinstance(message, ResponseCancel):
                    if not engine.cancel_response():
                        raise ProtocolError(ErrorCode.NO_RESPONSE, "no response in progress")
                elif isinstance(message, InputPause):
                    engine.pause_microphone()
                    self.outbox.send_event({"type": "openrealtime.input.paused"})
                elif isinstance(message, InputResume):
                    engine.resume_microphone()
                    self.outbox.send_event({"type": "openrealtime.input.resumed"})
                elif isinstance(message, PlaybackProgress):
                    engine.on_playback(message.generation, message.played_ms)
                elif isinstance(message, Ack):
                    self.outbox.ack(message.seq)
                elif isinstance(message, SessionClose):
                    raise _Close(CloseCode.NORMAL, "closed by client")
                elif isinstance(message, SessionStart | SessionResume):
                    raise ProtocolError(ErrorCode.SESSION_ALREADY_STARTED, "session started")
            except ProtocolError as e:
                self._error(e.code, e.message)

    def _journal_outage(self, reason: str) -> None:
        self.outbox.send_event(
            {
                "type": "error",
                "error": {
                    "type": "server_error",
                    "code": "journal_unavailable",
                    "message": f"conversation history is not being saved right now ({reason}); "
                    "it is kept and retried",
                    "retryable": True,
                },
            }
        )

    def _journal_recovered(self) -> None:
        self.outbox.send_event({"type": "openrealtime.journal.recovered"})

    def _journal_overflow(self) -> None:
        if self._close_request is None and self._task is not None:
            self._close_request = _Close(
                CloseCode.JOURNAL_UNAVAILABLE, "conversation history cannot be saved"
            )
            self._task.cancel()

    def _error(self, code: str, message: str) -> None:
        self._errors += 1
        self.outbox.send_event(error_event(code, message))
        if self._errors >= self.services.settings.max_errors_per_session:
            raise _Close(CloseCode.TOO_MANY_ERRORS, "too many invalid messages")
