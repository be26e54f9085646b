"""VoiceSession: the voice session, which outlives the connections that serve it.

Theory of operation
-------------------
A voice session serves one thread. It owns the engine (``pipeline.engine``), the outbox of
everything its client is sent (``runtime.realtime.outbox``), the journal writer that rides out an
outage (``runtime.journal_buffer``), its configuration and its resume token. A connection
(``runtime.realtime.connection``) opens it — or continues it from the journal — and then *holds* it.
From its registration until ``shutdown`` it is live in this process (``runtime.realtime.live``).

States: ``LIVE`` (held by a connection, or waiting for one) → ``ENDING`` (its end has begun;
awaits are under way) → ``ENDED`` (after ``shutdown``). Only a ``LIVE`` session can be claimed.

Rule 1 — one holder. At most one connection holds the session. A resume claims it for its
connection (``LiveSessions.claim`` → ``hold``, one synchronous step), the later claim winning;
the connection that held it before is closed with 4012 — by the one that took over if it was
serving, else by itself when it next looks (``holds``), after ``resume_refused`` if its own
resume had not been answered — and leaves the session alone.

Rule 2 — attach behind a barrier. ``resume_stream`` points the outbox at the new connection
and returns what its client missed; new messages wait behind that replay until ``go_live``.

Rule 3 — detach. When the connection drops, a session with ``seq`` waits ``resume_ttl_s`` for a
resume (its token extended as long), then ends; a claim ends the wait, even one that comes
while the token is being extended. Without ``seq`` (a GA-only client has no token) it ends with
its connection; ``openrealtime.session.close`` ends it and revokes the
token. Whoever decides that a session ends moves it to ``ENDING`` before its first await
(``begin_end``), so no resume is handed a session on its way out: it is refused like one that
is gone (``resume_refused``, 4003).

Rule 4 — fencing. ``epoch`` counts continuations from the journal
(``runtime/realtime/continuity.py`` rule 3). When the session was continued at a later epoch
elsewhere, ``fence`` ends this copy and closes the connection it still serves with 4012, leaving the
token (the new copy's) alone. Its journal writer carries the epoch (``journal/store.py`` rule 4):
once the new copy has raised the journal's fence (``BufferedJournal.take_over``) nothing this copy
appends lands, and a refused append fences it too — whether or not the claim's notification has
arrived. When the credentials that opened it are revoked, ``revoke_credentials`` ends it with 4013.

Rule 5 — one end. Every way a session finishes goes through ``shutdown`` (→ ``ENDED``):
engine, journal buffer, outbox, registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from journal.errors import JournalUnavailable
from journal.events import ThreadRef
from journal.store import WriterFence
from pipeline import events as ev
from pipeline.audio import PCM
from pipeline.audio_formats import AudioFormat, InboundAudio
from pipeline.engine import Engine
from pipeline.engine_config import TurnFailure
from pipeline.response import ResponseOptions
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from plugins.language import zh_or_en
from runtime.accounts import Principal
from runtime.budget import unpriced_stages
from runtime.errors import ProtocolError
from runtime.journal_buffer import BufferedJournal
from runtime.realtime.continuity import ContinueHere, reconcile_from_journal
from runtime.realtime.outbox import Outbox
from runtime.realtime.protocol import (
    CloseCode,
    ErrorCode,
    Extensions,
    Limits,
    SessionUpdate,
    check_audio,
)
from runtime.realtime.resume import VoiceSessionRecord
from runtime.realtime.session_config import (
    SessionConfig,
    apply_update,
    session_json,
)
from runtime.realtime.session_engine import build_engine, session_setup
from runtime.recording import RECORDING_NOTICE, SessionRecording, start_recording
from runtime.role_agent import RoleAgentBrain, brain_of
from runtime.roles import Role
from runtime.usage import UsageMeter

if TYPE_CHECKING:
    from runtime.realtime.connection import RealtimeConnection
    from runtime.services import Services

log = logging.getLogger(__name__)


class State(enum.Enum):
    LIVE = "live"
    ENDING = "ending"
    ENDED = "ended"


def initial_config(role: Role, extensions: Extensions) -> SessionConfig:
    """The configuration a new session of ``role`` starts from (``session.start`` may change
    it before ``session.created``)."""
    return SessionConfig(
        model=role.name,
        instructions=role.instructions,
        extension_rates=extensions.events,
    )


class VoiceSession:
    """One voice session, live in this process until ``shutdown`` (module doc)."""

    def __init__(
        self,
        services: Services,
        *,
        connection: RealtimeConnection,
        outbox: Outbox,
        principal: Principal,
        thread: ThreadRef,
        role: Role,
        config: SessionConfig,
        limits: Limits,
        session_id: str | None = None,
        epoch: int = 0,
        errors: int = 0,
        call_tools: Sequence[tuple[ToolSpec, ToolHandler]] = (),
    ) -> None:
        settings = services.settings
        self.services = services
        self.call_tools = tuple(call_tools)
        """The transport's own built-in tools (a phone call's ``end_call``)."""
        self.id = session_id or f"vs_{uuid.uuid4().hex}"
        self.epoch = epoch
        """Bumped each time the session is continued from the journal (rule 4)."""
        self.principal = principal
        self.thread = thread
        self.role = role
        self.config = config
        self.limits = limits
        self.resume_token = ""
        self.errors = errors
        """Errors its client was sent so far, over all its connections (at
        ``max_errors_per_session`` the connection closes with 4009)."""
        self.connection: RealtimeConnection | None = connection
        """The connection holding the session (rule 1); None while it waits for a resume."""
        self.outbox = outbox
        outbox.is_current = self._is_current
        self.inbound = InboundAudio(config.input_format)
        """The client's audio, decoded from the session's input format."""
        self.journal = BufferedJournal(
            services.journal,
            on_outage=self._journal_outage,
            on_recovered=self._journal_recovered,
            on_overflow=self._journal_overflow,
            max_buffered=settings.max_unsaved_events,
            # Only the copy holding the session's current epoch adds to its thread (rule 4).
            fence=WriterFence(self.id, epoch),
            on_fenced=self._journal_fenced,
        )
        self.continued_at: int | None = None
        """Continued from the journal and not yet served by a connection: the ``last_seq`` its
        new stream numbers on from (``owes_reconcile``)."""
        self._journal_taken: asyncio.Future[None] | None = None
        self.state = State.LIVE
        self._expiry: asyncio.TimerHandle | None = None
        self._ending: asyncio.Task[None] | None = None
        self.engine: Engine | None = None
        self.recording: SessionRecording | None = None
        """This session's recording (``runtime.recording``), when its role records."""
        self.usage = UsageMeter(
            services.usage,
            tenant=self.thread.tenant,
            user=self.thread.user,
            role_id=self.role.id,
            session_id=self.id,
            output_rate=self.config.output_format.rate,
            cpu=services.cpu_share,
            unpriced=unpriced_stages(
                services.budget_guard,
                services.prices.paid,
                self.thread.tenant,
                own_agent=role.agent_url is not None,
            ),
        )
        """What this session uses (``runtime.usage``)."""
        self._build_engine()

    @classmethod
    def continued(
        cls,
        services: Services,
        claimed: ContinueHere,
        *,
        connection: RealtimeConnection,
        outbox: Outbox,
        principal: Principal,
        limits: Limits,
        last_seq: int,
        errors: int = 0,
    ) -> VoiceSession:
        """The session ``claimed`` continued from the journal (SPEC RES-4) under the epoch the
        handshake claimed, served as it was started (its stored extensions and configuration)."""
        options = claimed.options
        outbox.extensions = Extensions.model_validate(options.get("extensions", {}))
        # The new stream goes on from what the client has; what the old one sent after that
        # is gone with its process and comes back as journal items instead.
        outbox.seq = outbox.acked = last_seq
        config = initial_config(claimed.role, outbox.extensions)
        stored = options.get("config")
        if isinstance(stored, dict):
            with contextlib.suppress(ProtocolError):
                config = apply_update(config, stored, tool_hosts=services.settings.tool_host_set())
        session = cls(
            services,
            connection=connection,
            outbox=outbox,
            principal=principal,
            thread=claimed.thread,
            role=claimed.role,
            config=config,
            limits=limits,
            session_id=claimed.record.session_id,
            epoch=claimed.record.epoch,
            errors=errors,
        )
        session.continued_at = last_seq
        return session

    def owes_reconcile(self, last_seq: int) -> bool:
        """A resume from ``last_seq`` gets the journal's reconcile, as the continuation's own
        answer did: the session was continued from the journal, no connection has served it
        since and its new stream has said nothing (no turn under way), so its client may not
        have had that answer. Otherwise a resume replays the stream (a reconcile beside a live
        turn — or beside a message the dropped connection still delivers — would have the
        client ask for an answer already on its way)."""
        return (
            self.continued_at is not None
            and last_seq <= self.continued_at
            and self.outbox.seq == self.continued_at
            and self.engine is not None
            and not self.engine.in_turn
        )

    async def take_over_journal(self) -> None:
        """Rule 4: raise the journal's fence to this copy's epoch (once; every resume answering
        this continuation waits for the same step). Returns when no older copy can add to the
        thread any more and what they added is readable."""
        if self._journal_taken is None or (
            self._journal_taken.done() and self._journal_taken.exception() is not None
        ):
            self._journal_taken = asyncio.ensure_future(self.journal.take_over(self.thread))
        await asyncio.shield(self._journal_taken)

    @property
    def closed(self) -> bool:
        return self.state is State.ENDED

    def _is_current(self, generation: int) -> bool:
        return self.engine is not None and self.engine.is_current(generation)

    async def issue_resume_token(self) -> None:
        """Register the new session with the token store (how it was started, so another
        process can continue it) and keep its first resume token."""
        thread, settings = self.thread, self.services.settings
        self.resume_token = await self.services.resume_tokens.issue(
            VoiceSessionRecord(
                self.id,
                thread.tenant,
                thread.user,
                thread.thread_id,
                self.role.id,
                options={
                    "config": session_json(self.config),
                    "extensions": self.outbox.extensions.model_dump(),
                },
            ),
            ttl_s=settings.resume_ttl_s,
        )

    # ------------------------------------------------------------ connections (rules 1-3)

    def holds(self, connection: RealtimeConnection) -> bool:
        """Whether ``connection`` still serves this session (rule 1): it holds it, and the
        session's end has not begun."""
        return self.connection is connection and self.state is State.LIVE

    def hold(self, connection: RealtimeConnection) -> RealtimeConnection | None:
        """Rule 1, for ``LiveSessions.claim`` only (which checks the session is ``LIVE``):
        ``connection`` holds the session from now on. Returns the connection it supersedes when
        that one was serving (the caller closes it with 4012)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        previous, self.connection = self.connection, connection
        if previous is not None and previous is not connection and previous.serving:
            return previous
        return None

    def resume_stream(
        self, connection: RealtimeConnection, last_seq: int
    ) -> tuple[list[str | bytes], tuple[int, int] | None]:
        """Rule 2: the outbox writes to ``connection`` once ``go_live`` is called; until then
        new messages wait. Returns what its client missed after ``last_seq`` and the range the
        replay window no longer holds (``Outbox.replay_after``)."""
        link = connection.link
        self.outbox.attach(link.send_text, link.send_bytes, link.media)
        self._configure_playback()
        return self.outbox.replay_after(last_seq)

    def go_live(self) -> None:
        """Rule 2: the replay was sent; what waited behind it follows, then everything new."""
        self.outbox.replay_done()

    async def reconcile(self, from_seq: int, to_seq: int | None) -> dict[str, object]:
        """What the client shows instead of messages it cannot be sent again
        (``runtime/realtime/continuity.py`` rule 5)."""
        return await reconcile_from_journal(self.journal, self.thread, self.id, from_seq, to_seq)

    async def detach(self, connection: RealtimeConnection) -> None:
        """Rule 3: ``connection`` dropped; the session waits ``resume_ttl_s`` for its client
        (unless another connection holds it by now, or its end has begun)."""
        if not self.holds(connection):
            return
        self.connection = None
        self.outbox.detach()
        ttl = self.services.settings.resume_ttl_s
        try:
            await self.services.resume_tokens.extend(self.id, ttl_s=ttl)
        except Exception as e:  # the token store is best effort here; expiry still applies
            log.warning("could not extend the resume token: %s", e)
        if self.connection is None and self.state is State.LIVE:  # no resume came meanwhile
            self._expiry = asyncio.get_running_loop().call_later(ttl, self._expired)

    async def revoke_token(self) -> None:
        """The session will not be resumed: its token stops working now."""
        try:
            await self.services.resume_tokens.extend(self.id, ttl_s=0)
        except Exception as e:  # best effort: the token expires anyway
            log.warning("could not revoke the resume token: %s", e)

    # ------------------------------------------------------------ ending (rules 4-5)

    def begin_end(self) -> bool:
        """Rule 3: the session is ending; from now on no resume claims it. False when its end
        had begun already."""
        if self.state is not State.LIVE:
            return False
        self.state = State.ENDING
        return True

    def _end_with(self, ending: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if self.begin_end():
            self._ending = asyncio.ensure_future(ending())

    def _expired(self) -> None:
        self._end_with(self.shutdown)

    def _serving(self) -> RealtimeConnection | None:
        connection = self.connection
        return connection if connection is not None and connection.serving else None

    def fence(self, epoch: int) -> None:
        """Rule 4: the session was continued at ``epoch`` elsewhere: if this copy is older,
        close its connection (4012) and end it without touching the token, which is the new
        copy's."""
        if epoch > self.epoch:
            self._end_with(self._fenced)

    def revoke_credentials(self) -> None:
        """Rule 4: the token that opened this session was revoked (or its user disabled): end
        the session for good, now, and close its connection with 4013."""
        self._end_with(self._revoked)

    async def _revoked(self) -> None:
        log.info("voice session %s: its credentials were revoked; closing", self.id)
        serving = self._serving()
        if serving is not None:
            with contextlib.suppress(Exception):
                self.outbox.send(
                    ev.error(ErrorCode.CREDENTIALS_REVOKED, "this session's token was revoked")
                )
        await self.revoke_token()
        await self.shutdown()
        if serving is not None:
            with contextlib.suppress(Exception):
                await serving.link.close(CloseCode.CREDENTIALS_REVOKED, "credentials revoked")

    async def _fenced(self) -> None:
        log.info("voice session %s was resumed elsewhere; closing this copy", self.id)
        await self.shutdown()
        serving = self._serving()
        if serving is not None:
            with contextlib.suppress(Exception):
                await serving.link.close(CloseCode.SUPERSEDED, "resumed on another server")

    async def shutdown(self) -> None:
        """Rule 5: end the session for good: engine, journal buffer, outbox, registry."""
        if self.state is State.ENDED:
            return
        self.state = State.ENDED
        if self._expiry is not None:
            self._expiry.cancel()
        self.services.live_sessions.remove(self)
        if self.engine is not None:
            await self.engine.close()
        if self.recording is not None:
            await self.recording.close()
        await self.usage.close()
        if isinstance(self.brain, RoleAgentBrain):  # the deployment's brain outlives sessions
            await self.brain.aclose()
        await self.tool_gate.close()
        self.services.role_memory.turns.end(self.thread.tenant, self.thread.thread_id)
        await self.journal.close()
        await self.outbox.close()

    # ------------------------------------------------------------ configuration and input

    def update(self, message: SessionUpdate) -> None:
        """``session.update``: the new configuration applies at once (errors name the field)."""
        config = apply_update(
            self.config,
            message.session,
            event_id=message.event_id,
            tool_hosts=self.services.settings.tool_host_set(),
        )
        if config.input_format != self.config.input_format:
            self.inbound = InboundAudio(config.input_format)
        self.config = config
        self._configure_engine()
        self.outbox.send(ev.SessionUpdated(self.session_json()))

    async def hear(self, pcm: PCM) -> None:
        """Microphone audio (16 kHz PCM) from whatever carries it — the WebSocket's messages,
        a WebRTC track — the one way audio enters a session."""
        engine = self.engine
        if pcm.size and engine is not None:
            await engine.push_audio(pcm)

    def decode_input(self, data: bytes) -> PCM:
        """One chunk of client audio in the session's input format, bounded by duration,
        as pipeline audio (``AudioFormatError``, ``ProtocolError`` when it is not valid)."""
        check_audio(data, self.limits, bytes_per_second=_bytes_per_second(self.config.input_format))
        return self.inbound.decode(data)

    def session_json(self) -> dict[str, object]:
        """The GA session object; with extensions, our ids and limits under ``openrealtime``."""
        out: dict[str, object] = session_json(self.config)
        extensions = self.outbox.extensions
        if extensions.events or extensions.seq:
            out["openrealtime"] = {
                "id": self.id,
                "thread_id": self.thread.thread_id,
                "recording": None if self.recording is None else {"id": self.recording.id},
                "role": {"id": self.role.id, "name": self.role.name},
                "resume_token": self.resume_token if extensions.seq else None,
                "input_sample_rate": self.config.input_format.rate,
                "output_sample_rate": self.config.output_format.rate,
                "extensions": extensions.model_dump(),
                "limits": {
                    "max_message_bytes": self.limits.max_message_bytes,
                    "max_audio_frame_ms": self.limits.max_audio_frame_ms,
                    "max_text_chars": self.limits.max_text_chars,
                },
            }
        return out

    async def start_recording(self) -> None:
        """Record this session when its tenant may and its role says so (``runtime.recording``
        Rules 1, 2); a recording that cannot start leaves the session unrecorded, and says so."""
        services, role, thread = self.services, self.role, self.thread
        store, keyring = services.audio_store, services.keyring
        if not (role.recording_enabled and services.settings.may_record(thread.tenant)):
            return
        if store is None or keyring is None or self.engine is None:
            return
        try:
            self.recording = await start_recording(
                tenant=thread.tenant,
                owner=thread.user,
                session_id=self.id,
                thread_id=thread.thread_id,
                role_id=role.id,
                output_rate=self.config.output_format.rate,
                keyring=keyring,
                store=store,
                store_name=services.audio_store_name,
                index=services.recording_index,
                retention_days=await self._retention_days(),
                notice="audio" in self.config.output_modalities,
            )
        except Exception as e:
            log.warning("session %s: recording did not start (%s)", self.id, type(e).__name__)
            return
        self.engine.taps.append(self.recording)

    async def _retention_days(self) -> int | None:
        """The tenant's own retention period, else the deployment's (SPEC REC-4)."""
        own = await self.services.recording_index.retention_days(self.thread.tenant)
        return own if own is not None else self.services.settings.recording_retention_days

    def announce_recording(self) -> None:
        """Rules 2 and 5 of ``runtime.recording``: the client is told, after
        ``session.created``, and a voice hears the notice."""
        recording = self.recording
        if recording is None:
            return
        until = recording.recording.retain_until
        self.outbox.send(
            ev.SessionRecording(recording.id, None if until is None else until.isoformat())
        )
        if recording.waiting_for_notice and self.engine is not None:
            notice = (
                self.services.settings.recording_notice
                or RECORDING_NOTICE[zh_or_en(self.role.language)]
            )
            self.engine.create_response(ResponseOptions(say=notice, in_conversation=False))

    def _build_engine(self) -> None:
        self.brain = brain_of(self.services, self.role, self.services.plugins.brain)
        """The role's own agent (``runtime.role_agent``), else the deployment's brain."""
        self.engine, self.tool_gate = build_engine(
            self.services,
            thread=self.thread,
            role=self.role,
            config=self.config,
            journal=self.journal,
            person=self.principal.user,
            session_id=self.id,
            epoch=self.epoch,
            outbox=self.outbox,
            on_turn_failed=self._turn_failed,
            call_tools=self.call_tools,
            brain=self.brain,
            usage=self.usage,
        )
        self.engine.taps.append(self.usage)
        self._configure_engine()

    def _turn_failed(self, failure: TurnFailure) -> None:
        """Count a failed turn for the operator (the engine logged it): Prometheus by stage
        and code, and the system page's minute (SPEC RT-11)."""
        telemetry = self.services.telemetry
        telemetry.metrics.turn_failed(failure.stage, failure.code)
        telemetry.latency_window.failed(failure.stage, time.time())

    def _configure_engine(self) -> None:
        """Apply the session configuration to the engine (at start and after an update)."""
        engine, config, role = self.engine, self.config, self.role
        assert engine is not None
        engine.configure(session_setup(config, role, self.services.settings))
        self.tool_gate.set_client_tools(config.tools)
        self.tool_gate.set_mcp_servers(config.mcp_servers)
        self._configure_playback()
        self.outbox.output_format = config.output_format

    def _configure_playback(self) -> None:
        """Who plays the agent's voice decides whether a held answer's playback pauses: a
        media track the server plays out itself (WebRTC) pauses; a client pauses when it
        negotiated ``pause_playback``."""
        assert self.engine is not None
        extensions = self.outbox.extensions
        media = self.outbox.media is not None
        self.engine.set_playback(
            client_pauses=media or (extensions.events and extensions.pause_playback),
            exact=media,
        )

    # ------------------------------------------------------------ the journal buffer's news

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

    def _journal_fenced(self) -> None:
        """Rule 4: the journal refused this copy's epoch — the session was continued later
        elsewhere (before the fence's notification reached this process, or without one)."""
        self.fence(self.epoch + 1)

    def _journal_overflow(self) -> None:
        if self.connection is not None:
            self.connection.request_close(
                CloseCode.JOURNAL_UNAVAILABLE, "conversation history cannot be saved"
            )


def _bytes_per_second(fmt: AudioFormat) -> int:
    return fmt.rate * (2 if fmt.kind == "audio/pcm" else 1)
