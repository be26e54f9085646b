"""VoiceSession: one WebSocket connection serving one thread.

Theory of operation
-------------------
Opening (docs/protocol.md). A GA client authenticates with ``Authorization: Bearer`` (or the
browser convention, the subprotocol ``openai-insecure-api-key.<token>``) and gets
``session.created`` at once; ``?model=`` picks the agent role (id or name, else the tenant's
default; a client secret's role wins). A client that offers the ``openrealtime`` subprotocol
sends a first message instead — ``openrealtime.session.start`` (token, role, thread to continue,
extensions) or ``openrealtime.session.resume`` — within ``start_timeout_s`` (else 4008).
Credentials never travel in the URL.

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
import base64
import binascii
import contextlib
import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from journal.errors import JournalUnavailable
from journal.events import ThreadRef
from knowledge.tool import make_knowledge_tool
from pipeline import events as ev
from pipeline.audio_formats import AudioFormat, AudioFormatError, InboundAudio
from pipeline.engine import Engine, EngineSettings, Persona, ResponseOptions
from pipeline.history import ConversationHistory
from pipeline.items import ItemNotFound
from pipeline.turns import TurnSettings
from runtime.accounts import Principal
from runtime.continuity import (
    ContinueHere,
    check_continuation,
    reconcile_from_journal,
    redeem,
    resumed_message,
)
from runtime.journal_buffer import BufferedJournal
from runtime.memory_hook import session_memory
from runtime.outbox import NO_EXTENSIONS, Outbox
from runtime.protocol import (
    Ack,
    AudioAppend,
    AudioClear,
    AudioCommit,
    AudioFrame,
    CloseCode,
    ErrorCode,
    Extensions,
    FunctionCallOutputIn,
    InputPause,
    InputResume,
    ItemCreate,
    ItemDelete,
    ItemRetrieve,
    ItemTruncate,
    Limits,
    MessageIn,
    OutputAudioBufferClear,
    PlaybackProgress,
    ProtocolError,
    Refused,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionResume,
    SessionStart,
    SessionUpdate,
    check_audio,
    decode_append,
    parse_client_message,
    unauthorized,
)
from runtime.resume import VoiceSessionRecord
from runtime.roles import Role
from runtime.session_config import (
    GA_VOICES,
    SessionConfig,
    TurnDetectionConfig,
    apply_update,
    session_json,
)

if TYPE_CHECKING:
    from runtime.services import Services

log = logging.getLogger(__name__)


FIRST_MESSAGE_PROTOCOL = "openrealtime"
"""Offered as a WebSocket subprotocol: the first message opens the session (module doc)."""
_KEY_PROTOCOL = "openai-insecure-api-key."
_SECRET_QUERY_KEYS = ("resume_token", "token", "api_key", "access_token", "key")


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
        self.config = SessionConfig()
        self.role: Role | None = None
        self.resume_token = ""
        self._inbound = InboundAudio(self.config.input_format)
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
        offered = [str(p) for p in ws.scope.get("subprotocols", [])]
        first_message = FIRST_MESSAGE_PROTOCOL in offered
        chosen = FIRST_MESSAGE_PROTOCOL if first_message else None
        if chosen is None and "realtime" in offered:
            chosen = "realtime"  # the browser convention's protocol name
        await ws.accept(subprotocol=chosen)
        self._task = asyncio.current_task()
        try:
            if any(key in ws.query_params for key in _SECRET_QUERY_KEYS):
                raise Refused(
                    ErrorCode.TOKEN_IN_URL,
                    "credentials are never sent in the URL",
                    CloseCode.FORBIDDEN,
                    "credentials in the URL",
                )
            self.principal = await self.services.authenticate_header(
                ws.headers.get("authorization"), realtime=True
            )
            key = next((p for p in offered if p.startswith(_KEY_PROTOCOL)), None)
            if self.principal is None and key is not None:
                self.principal = await self.services.authenticate(
                    key.removeprefix(_KEY_PROTOCOL), realtime=True
                )
            if not first_message:
                self._authenticated()
                await self._start(
                    SessionStart(
                        type="openrealtime.session.start",
                        model=ws.query_params.get("model"),
                        extensions=NO_EXTENSIONS,
                    )
                )
                await self._serve(ws)
                return
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
        except (Refused, _Close) as e:
            await self._close_connection(ws, self._refusal(e) if isinstance(e, Refused) else e)
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
        elif not self.outbox.extensions.seq:
            # A GA-only client cannot resume (no seq, no token): the session ends with it.
            await self._revoke()
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
                self.outbox.send(
                    ev.error(ErrorCode.CREDENTIALS_REVOKED, "this session's token was revoked")
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
        self.services.live_sessions.remove(self)
        if self.engine is not None:
            await self.engine.close()
        await self.journal.close()
        await self.outbox.close()

    async def _close_connection(self, ws: WebSocket, close: _Close) -> None:
        with contextlib.suppress(Exception):
            await ws.close(close.code, close.reason)

    def _authenticated(self) -> Principal:
        if self.principal is None:
            raise unauthorized()
        return self.principal

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

    async def _redeem(self, resume: SessionResume) -> VoiceSession | None:
        """Check the token; the live session to hand the connection to, or None when this
        object has continued the session from the journal instead."""
        if resume.token is not None:
            self.principal = await self.services.authenticate(resume.token, realtime=True)
        principal = self._authenticated()
        live = self.services.live_sessions
        outcome = await redeem(self.services, principal, resume, live=live.lookup, this=self)
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
        options = claimed.options
        self.outbox.extensions = Extensions.model_validate(options.get("extensions", {}))
        self.role = claimed.role
        self.config = self._stored_config(claimed.role, options.get("config"))
        self._inbound = InboundAudio(self.config.input_format)
        self._build_engine(claimed.thread, claimed.role)
        services.live_sessions.take_over(self)
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
                    session=self._session_json(),
                )
            )

    def _stored_config(self, role: Role, stored: object) -> SessionConfig:
        config = self._initial_config(role, self.outbox.extensions)
        if isinstance(stored, dict):
            with contextlib.suppress(ProtocolError):
                config = apply_update(config, stored)
        return config

    async def _reconcile(self, from_seq: int, to_seq: int | None) -> dict[str, object]:
        assert self.thread is not None
        return await reconcile_from_journal(self.journal, self.thread, self.id, from_seq, to_seq)

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

    def _initial_config(self, role: Role, extensions: Extensions) -> SessionConfig:
        return SessionConfig(
            model=role.name,
            instructions=role.instructions,
            extension_rates=extensions.events,
        )

    async def _start(self, start: SessionStart) -> None:
        services = self.services
        if start.token is not None:
            self.principal = await services.authenticate(start.token, realtime=True)
        principal = self._authenticated()
        limit = services.settings.max_live_sessions_per_user
        with services.live_sessions.reserve(principal, limit=limit) as place:
            thread, role, config = await self._opening(principal, start)
            self.role = role
            self.config = config
            self._inbound = InboundAudio(config.input_format)
            self._build_engine(thread, role)
            self.resume_token = await services.resume_tokens.issue(
                VoiceSessionRecord(
                    self.id,
                    thread.tenant,
                    thread.user,
                    thread.thread_id,
                    role.id,
                    options=self._stored_options(),
                ),
                ttl_s=services.settings.resume_ttl_s,
            )
            place.register(self)
        self.outbox.send(ev.SessionCreated(self._session_json()))

    async def _opening(
        self, principal: Principal, start: SessionStart
    ) -> tuple[ThreadRef, Role, SessionConfig]:
        """The thread (new, or the one continued), role and configuration ``start`` asks for."""
        services = self.services
        self.outbox.extensions = start.extensions
        bound = principal.bound_role_id
        model = start.model
        if bound is not None:
            # A client secret's role wins; a first message naming another is refused (GA
            # SDKs always send some model name, so theirs is not held against them).
            if model is not None and not self._ga and not principal.may_use_role(model):
                raise Refused(
                    ErrorCode.ROLE_MISMATCH,
                    "this client secret is bound to another role",
                    CloseCode.FORBIDDEN,
                    "role mismatch",
                )
            model = bound
        if start.requested_thread_id is None:
            role = await self._role_for(
                model, strict=bound is not None or start.model is not None and not self._ga
            )
            if role is None:
                raise Refused(
                    ErrorCode.ROLE_NOT_FOUND,
                    f"no role {model!r}",
                    CloseCode.FORBIDDEN,
                    "role not found",
                )
            thread = ThreadRef(principal.tenant, principal.user, f"th_{uuid.uuid4().hex}")
            await services.threads.create(thread.tenant, thread.user, thread.thread_id, role.id)
        else:
            thread, role = await check_continuation(
                services, principal, start.model_copy(update={"model": model})
            )
        config = self._initial_config(role, start.extensions)
        if start.session is not None:
            try:
                config = apply_update(config, start.session, event_id=start.event_id)
            except ProtocolError as e:
                raise Refused(
                    e.code,
                    e.message,
                    CloseCode.FORBIDDEN,
                    "invalid session configuration",
                    param=e.param,
                    event_id=e.event_id,
                ) from None
        return thread, role, config

    @property
    def _ga(self) -> bool:
        """A GA-only client (no extensions negotiated)."""
        return not self.outbox.extensions.events

    async def _role_for(self, model: str | None, *, strict: bool) -> Role | None:
        """The role ``model`` names (id, then name); unknown names fall back to the tenant's
        default for GA clients (whose SDKs always send some model name) unless ``strict``."""
        assert self.principal is not None
        services = self.services
        if model:
            role = await services.roles.get(self.principal.tenant, model)
            if role is None:
                role = next(
                    (
                        r
                        for r in await services.roles.list(self.principal.tenant)
                        if r.name == model
                    ),
                    None,
                )
            if role is not None or strict:
                return role
        return await services.role_for(self.principal, None)

    def _stored_options(self) -> dict[str, object]:
        return {
            "config": session_json(self.config),
            "extensions": self.outbox.extensions.model_dump(),
        }

    def _session_json(self) -> dict[str, object]:
        """The GA session object; with extensions, our ids and limits under ``openrealtime``."""
        out: dict[str, object] = session_json(self.config)
        extensions = self.outbox.extensions
        if (extensions.events or extensions.seq) and self.thread is not None and self.role:
            out["openrealtime"] = {
                "id": self.id,
                "thread_id": self.thread.thread_id,
                "role": {"id": self.role.id, "name": self.role.name},
                "resume_token": self.resume_token if self.outbox.extensions.seq else None,
                "input_sample_rate": self.config.input_format.rate,
                "output_sample_rate": self.config.output_format.rate,
                "extensions": self.outbox.extensions.model_dump(),
                "limits": {
                    "max_message_bytes": self.limits.max_message_bytes,
                    "max_audio_frame_ms": self.limits.max_audio_frame_ms,
                    "max_text_chars": self.limits.max_text_chars,
                },
            }
        return out

    def _turn_settings(self, detection: TurnDetectionConfig) -> TurnSettings:
        settings = self.services.settings
        base = TurnSettings()
        chosen = detection.silence_duration_ms
        silence = (settings.silence_ms if chosen is None else chosen) / 1000.0
        complete, incomplete = base.complete_delay, base.incomplete_delay
        if detection.type == "semantic_vad":
            # Eagerness scales how long the end-of-turn model lets a pause run.
            scale = {"low": 1.6, "medium": 1.0, "auto": 1.0, "high": 0.6}[detection.eagerness]
            silence, complete, incomplete = silence * scale, complete * scale, incomplete * scale
        return TurnSettings(
            silence_delay=silence,
            complete_delay=complete,
            incomplete_delay=incomplete,
            min_interrupt=(
                settings.min_interrupt_ms / 1000.0 if detection.interrupt_response else 3600.0
            ),
            auto_commit=detection.type != "none",
        )

    def _build_engine(self, thread: ThreadRef, role: Role) -> None:
        services = self.services
        self.thread = thread
        config = self.config
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
            persona=Persona(config.instructions, role.voice, role.language),
            voice_session_id=self.id,
            settings=EngineSettings(
                output_sample_rate=config.output_format.rate,
                turns=self._turn_settings(config.turn_detection),
            ),
            incarnation=self.epoch,
            memory=session_memory(services, thread, role, self.outbox.send),
            tools={knowledge_spec.name: knowledge_tool},
            tool_specs=(knowledge_spec,),
        )
        self._configure_engine()

    def _configure_engine(self) -> None:
        """Apply the session configuration to the engine (at start and after an update)."""
        engine, config, role = self.engine, self.config, self.role
        assert engine is not None and role is not None
        voice = role.voice if config.voice in GA_VOICES else config.voice
        engine.persona = dataclasses.replace(
            engine.persona, instructions=config.instructions, voice=voice
        )
        engine.audio_out = "audio" in config.output_modalities
        engine.client_tools = config.tools if config.tool_choice != "none" else ()
        engine.auto_respond = config.turn_detection.create_response
        engine.coordinator.settings = self._turn_settings(config.turn_detection)
        detection = config.turn_detection
        engine.idle_timeout_s = (
            detection.idle_timeout_ms / 1000.0 if detection.idle_timeout_ms is not None else None
        )
        engine.tune_listening(
            threshold=detection.threshold, prefix_padding_ms=detection.prefix_padding_ms
        )
        if engine.settings.output_sample_rate != config.output_format.rate:
            engine.settings = dataclasses.replace(
                engine.settings, output_sample_rate=config.output_format.rate
            )
        self.outbox.output_format = config.output_format

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
                if isinstance(message, AudioFrame):
                    if not self.outbox.extensions.binary_audio:
                        raise ProtocolError(
                            ErrorCode.BINARY_NOT_NEGOTIATED,
                            "binary audio needs the binary_audio extension; "
                            "use input_audio_buffer.append",
                        )
                    await self._push_audio(message.pcm)
                elif isinstance(message, AudioAppend):
                    await self._push_audio(decode_append(message), message.event_id)
                else:
                    await self._handle(engine, message)
            except ProtocolError as e:
                self._protocol_error(e)
            except (_Close, WebSocketDisconnect, asyncio.CancelledError):
                raise
            except Exception:  # a bug must not end the session (and is logged, not its content)
                log.exception("voice session %s: a client message failed", self.id)
                self._error(ErrorCode.INTERNAL, "the server failed to handle this message")

    async def _push_audio(self, data: bytes, event_id: str | None = None) -> None:
        assert self.engine is not None
        fmt = self.config.input_format
        try:
            check_audio(data, self.limits, bytes_per_second=_bytes_per_second(fmt))
            pcm = self._inbound.decode(data)
        except AudioFormatError as e:
            raise ProtocolError(ErrorCode.INVALID_AUDIO, str(e), event_id=event_id) from None
        except ProtocolError as e:
            e.event_id = event_id
            raise
        if pcm.size:
            await self.engine.push_audio(pcm)

    async def _handle(self, engine: Engine, message: object) -> None:
        """One client message other than audio (docs/protocol.md, event by event)."""
        outbox = self.outbox
        event_id = getattr(message, "event_id", None)
        try:
            if isinstance(message, SessionUpdate):
                self._update(message)
            elif isinstance(message, AudioCommit):
                if not engine.commit():
                    raise ProtocolError(ErrorCode.COMMIT_EMPTY, "no user speech to commit")
            elif isinstance(message, AudioClear):
                engine.clear_input()
                outbox.send(ev.InputAudioBufferCleared())
            elif isinstance(message, ItemCreate):
                await self._create_item(engine, message)
            elif isinstance(message, ItemRetrieve):
                outbox.send(ev.ItemRetrieved(engine.item(message.item_id)))
            elif isinstance(message, ItemDelete):
                await engine.delete_item(message.item_id)
            elif isinstance(message, ItemTruncate):
                await engine.truncate_item(message.item_id, message.audio_end_ms)
            elif isinstance(message, ResponseCreate):
                engine.create_response(self._response_options(message))
            elif isinstance(message, ResponseCancel):
                if not engine.cancel_response():
                    raise ProtocolError(ErrorCode.NO_RESPONSE, "no response in progress")
            elif isinstance(message, OutputAudioBufferClear):
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED,
                    "output_audio_buffer.clear is for WebRTC; over WebSocket stop playback "
                    "and send conversation.item.truncate",
                )
            elif isinstance(message, InputPause):
                engine.pause_microphone()
                outbox.send(ev.InputPaused())
            elif isinstance(message, InputResume):
                engine.resume_microphone()
                outbox.send(ev.InputResumed())
            elif isinstance(message, PlaybackProgress):
                engine.on_playback(message.generation, message.played_ms)
            elif isinstance(message, Ack):
                outbox.ack(message.seq)
            elif isinstance(message, SessionClose):
                raise _Close(CloseCode.NORMAL, "closed by client")
            elif isinstance(message, SessionStart | SessionResume):
                raise ProtocolError(ErrorCode.SESSION_ALREADY_STARTED, "session started")
        except ItemNotFound as e:
            raise ProtocolError(
                ErrorCode.ITEM_NOT_FOUND, str(e), param="item_id", event_id=event_id
            ) from None
        except ValueError as e:  # only a truncation past the item's audio raises it
            raise ProtocolError(
                ErrorCode.INVALID_VALUE, str(e), param="audio_end_ms", event_id=event_id
            ) from None
        except ProtocolError as e:
            e.event_id = e.event_id or event_id
            raise

    def _update(self, message: SessionUpdate) -> None:
        config = apply_update(self.config, message.session, event_id=message.event_id)
        if config.input_format != self.config.input_format:
            self._inbound = InboundAudio(config.input_format)
        self.config = config
        self._configure_engine()
        self.outbox.send(ev.SessionUpdated(self._session_json()))

    async def _create_item(self, engine: Engine, message: ItemCreate) -> None:
        item = message.item
        if isinstance(item, FunctionCallOutputIn):
            engine.add_function_output(item.call_id, item.output, item.id)
            return
        assert isinstance(item, MessageIn)
        if item.role != "user":
            raise ProtocolError(
                ErrorCode.UNSUPPORTED,
                f"{item.role} items are not supported; add user messages "
                "(instructions go in session.update)",
                param="item.role",
            )
        parts: list[str] = []
        for part in item.content:
            if part.type == "input_text" and part.text is not None:
                parts.append(part.text)
            elif part.type == "input_audio" and part.audio is not None:
                parts.append(await self._transcribe_item(part.audio))
            else:
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED,
                    f"a user message holds input_text or input_audio, not {part.type}",
                    param="item.content",
                )
        text = " ".join(p.strip() for p in parts if p.strip())
        if not text:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE, "the message is empty", param="item.content"
            )
        engine.add_user_text(text, item.id)

    async def _transcribe_item(self, audio: str) -> str:
        """An ``input_audio`` part (base64 in the session's input format), transcribed."""
        assert self.engine is not None
        try:
            data = base64.b64decode(audio, validate=True)
            decoder = InboundAudio(self.config.input_format)
            pcm = np.concatenate((decoder.decode(data), decoder.flush()))
        except (binascii.Error, ValueError) as e:
            raise ProtocolError(
                ErrorCode.INVALID_AUDIO, f"input_audio: {e}", param="item.content"
            ) from None
        transcript = await self.services.plugins.asr.transcribe(
            pcm, language=self.engine.persona.language
        )
        return transcript.text

    def _response_options(self, message: ResponseCreate) -> ResponseOptions:
        params = message.response
        if params is None:
            return ResponseOptions()
        audio = None
        if params.output_modalities is not None:
            audio = "audio" in params.output_modalities
        input_text = None
        if params.input:
            texts = [
                part.text or ""
                for item in params.input
                if isinstance(item, MessageIn)
                for part in item.content
                if part.type == "input_text"
            ]
            input_text = " ".join(t for t in texts if t) or None
        return ResponseOptions(
            instructions=params.instructions,
            audio=audio,
            in_conversation=params.conversation != "none",
            input_text=input_text,
        )

    def _journal_outage(self, reason: str) -> None:
        self.outbox.send(
            ev.error(
                JournalUnavailable.code,
                f"conversation history is not being saved right now ({reason}); "
                "it is kept and retried",
                server=True,
                retryable=True,
            )
        )

    def _journal_recovered(self) -> None:
        self.outbox.send(ev.JournalRecovered())

    def _journal_overflow(self) -> None:
        if self._close_request is None and self._task is not None:
            self._close_request = _Close(
                CloseCode.JOURNAL_UNAVAILABLE, "conversation history cannot be saved"
            )
            self._task.cancel()

    def _protocol_error(self, error: ProtocolError) -> None:
        self._error(error.code, error.message, param=error.param, event_id=error.event_id)

    def _error(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ) -> None:
        self._errors += 1
        self.outbox.send(ev.error(code, message, param=param, event_id=event_id))
        if self._errors >= self.services.settings.max_errors_per_session:
            raise _Close(CloseCode.TOO_MANY_ERRORS, "too many invalid messages")


def _bytes_per_second(fmt: AudioFormat) -> int:
    return fmt.rate * (2 if fmt.kind == "audio/pcm" else 1)
