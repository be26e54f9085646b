"""A Twilio Media Streams WebSocket (``/v1/telephony/twilio/stream``) as a realtime connection.

Theory of operation
-------------------
Rule 1. The handshake is Twilio's: ``connected``, then ``start`` (stream and call SIDs, the
        custom parameters, μ-law 8 kHz). ``start.customParameters.token`` must be a stream token
        minted for that call SID (``twilio_protocol`` rule 2), else the socket closes (1008)
        before any session exists. The session runs as the line's owner (``telephony_token``)
        with the role the token names, on a GA-only connection whose input and output are
        ``audio/pcmu``: the same sessions, journal, memory and tools as every transport.
Rule 2. One connection. ``TwilioLink`` is the connection's ``Link``: the receive loop reads
        Twilio's messages — ``media`` goes to the session as heard audio (as WebRTC's track
        does), ``mark`` reports playback, ``dtmf`` is collected into keypad entries that reach
        the agent as the caller's words (``conversation.item.create`` + ``response.create``, so
        an answer being spoken gives way), ``stop`` ends the session for good. The session's
        JSON events have no reader on a phone line and are dropped (errors are logged by code).
Rule 3. Voice is media. ``TwilioVoice`` (the link's ``MediaOut``) takes the answer's audio and
        sends it as ``media`` in pieces of at most ``MARK_EVERY_MS``, each followed by a mark
        (``twilio_protocol`` rule 3): the echoed marks are the heard prefix. An interruption
        sends ``clear`` at once. A *pause* (sound from the caller that may not be a turn, SPEC
        TT-1) clears too but keeps the audio not yet heard; ``resumed`` sends it again from
        the last heard mark, so a false interruption loses nothing.
Rule 4. Messages to Twilio go through one bounded queue and one writer task, in order; a
        Twilio that stops reading fills it and the call is dropped (1011).
Rule 5. The end: ``stop`` (the caller hung up) or ``end_call`` end the session and mark the
        call ended (``runtime.telephony.calls`` rule 2); a socket that just dropped ends this
        session and leaves the call open, and the next stream of the call continues its
        thread.
Rule 6. Hanging up is decided in code (``runtime.telephony.phone`` rule 3): once the last
        answer is done and every piece of it has been heard (its marks are back), the server
        closes the stream and Twilio's action URL answers ``<Hangup/>``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from pipeline.audio_formats import AudioFormatError
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from runtime.errors import Disconnected, ProtocolError
from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.protocol import CloseCode
from runtime.realtime.transport import MediaOut
from runtime.telephony.call_records import keep
from runtime.telephony.calls import number_digest
from runtime.telephony.phone import (
    KeypadEntry,
    keypad_events,
    keypad_wait,
    note_session_error,
    open_phone_session,
    transfer_targets,
)
from runtime.telephony.twilio_protocol import TokenRefused, read_stream_token
from runtime.telephony.twilio_voice import TwilioVoice

if TYPE_CHECKING:
    from runtime.services import Services

log = logging.getLogger(__name__)

TWILIO_STREAM_PATH = "/v1/telephony/twilio/stream"
MAX_QUEUED = 4_000
"""Messages waiting for Twilio at most (rule 4): some 200 s of answer audio with its marks."""


class TwilioLink:
    """The connection's ``Link`` on a Media Streams socket (rule 2)."""

    def __init__(
        self,
        websocket: WebSocket,
        stream_sid: str,
        *,
        keypad_gap_s: float,
        transfer_targets: tuple[str, ...] = (),
    ) -> None:
        self.websocket = websocket
        self.voice = TwilioVoice(stream_sid, self.send, transfer_targets=transfer_targets)
        self.voice.hang_up.on_heard_all = self._hang_up
        self.media: MediaOut | None = self.voice
        self.connection: RealtimeConnection | None = None
        self.keypad = KeypadEntry(keypad_gap_s)
        self.stopped = False
        """Twilio said ``stop``: the caller hung up (rule 5)."""
        self.ended_by_agent = False
        self._pending: deque[str] = deque()
        self._out: asyncio.Queue[str | None] = asyncio.Queue(MAX_QUEUED)
        self.gone = False
        self.writer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ the call's tools (rule 6)

    @property
    def call_tools(self) -> tuple[tuple[ToolSpec, ToolHandler], ...]:
        return self.voice.hang_up.call_tools(self.voice.send_tones)

    def _hang_up(self) -> None:
        self.ended_by_agent = True
        if self.connection is not None:
            self.connection.request_close(CloseCode.NORMAL, "the agent ended the call")

    # ------------------------------------------------------------ out (rule 4)

    def send(self, message: str) -> None:
        if self.gone:
            return
        try:
            self._out.put_nowait(message)
        except asyncio.QueueFull:
            log.warning("twilio stream: Twilio is not reading; the call is dropped")
            self._lost()

    def start_writer(self) -> None:
        self.writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while True:
            message = await self._out.get()
            if message is None:
                return
            try:
                await self.websocket.send_text(message)
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._lost()
                return

    def _lost(self) -> None:
        self.gone = True
        with contextlib.suppress(asyncio.QueueFull):
            self._out.put_nowait(None)

    async def send_text(self, data: str) -> None:
        note_session_error(data, "twilio stream")

    async def send_bytes(self, data: bytes) -> None:
        return None

    async def close(self, code: int, reason: str) -> None:
        await self.finish()
        with contextlib.suppress(Exception):
            await self.websocket.close(1000 if code < 4000 else 1011, reason[:100])

    async def finish(self) -> None:
        """Let the writer send what is queued, then stop it."""
        with contextlib.suppress(asyncio.QueueFull):
            self._out.put_nowait(None)
        if self.writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self.writer), 2.0)
            self.writer.cancel()

    # ------------------------------------------------------------ in (rule 2)

    async def receive(self) -> str | bytes:
        while not self._pending:
            if self.gone or self.stopped:
                raise Disconnected()
            try:
                text = await keypad_wait(self.keypad, self.websocket.receive_text)
            except (WebSocketDisconnect, RuntimeError):
                self.gone = True
                raise Disconnected() from None
            if text is None:
                self._entry(self.keypad.due(time.monotonic()))
                continue
            await self._message(text)
        return self._pending.popleft()

    async def _message(self, text: str) -> None:
        try:
            message = json.loads(text)
            kind = message["event"]
        except (ValueError, KeyError, TypeError):
            log.info("twilio stream: a message that is not Twilio's was ignored")
            return
        if kind == "media":
            await self._media(message)
        elif kind == "mark":
            name = (message.get("mark") or {}).get("name")
            if isinstance(name, str):
                self.voice.on_mark(name)
        elif kind == "dtmf":
            digit = (message.get("dtmf") or {}).get("digit")
            if isinstance(digit, str):
                self._entry(self.keypad.press(digit, time.monotonic()))
        elif kind == "stop":
            self.stopped = True

    async def _media(self, message: dict[str, Any]) -> None:
        media = message.get("media") or {}
        if media.get("track", "inbound") not in ("inbound", "inbound_track"):
            return
        connection = self.connection
        session = None if connection is None else connection.session
        if session is None or connection is None or not session.holds(connection):
            return
        try:
            pcm = session.decode_input(base64.b64decode(media.get("payload", ""), validate=True))
        except (binascii.Error, AudioFormatError, ProtocolError):
            log.info("twilio stream: a media payload that is not μ-law audio was dropped")
            return
        await session.hear(pcm)

    def _entry(self, entry: str | None) -> None:
        """A keypad entry reaches the agent as the caller's words (rule 2)."""
        if entry is not None:
            self._pending.extend(keypad_events(entry))


async def _twilio_start(websocket: WebSocket, timeout_s: float) -> dict[str, Any]:
    """Twilio's ``connected`` and ``start`` (rule 1): the start message."""
    async with asyncio.timeout(timeout_s):
        while True:
            message = json.loads(await websocket.receive_text())
            if isinstance(message, dict) and message.get("event") == "start":
                return message


async def serve_twilio_stream(websocket: WebSocket, services: Services) -> None:
    """One Media Streams socket, from Twilio's handshake to the call's end (rules 1, 5)."""
    settings = services.settings
    auth_token = settings.twilio_auth_token.get_secret_value()
    if not auth_token:
        await websocket.close(1008, "telephony is not configured")
        return
    await websocket.accept()
    try:
        start = await _twilio_start(websocket, settings.start_timeout_s)
        details = start.get("start") or {}
        call_sid = str(details.get("callSid", ""))
        stream_sid = str(start.get("streamSid") or details.get("streamSid") or "")
        params = details.get("customParameters") or {}
        grant = read_stream_token(auth_token, str(params.get("token", "")), call_sid=call_sid)
        services.phone.tokens.redeem(grant)
    except (TimeoutError, ValueError, WebSocketDisconnect, RuntimeError) as e:
        log.info("twilio stream: no valid start (%s)", type(e).__name__)
        with contextlib.suppress(Exception):
            await websocket.close(1008, "no valid start")
        return
    except TokenRefused as e:
        log.warning("twilio stream refused: %s", e.reason)
        await websocket.close(1008, "stream token refused")
        return
    principal = await services.authenticate(settings.telephony_token.get_secret_value())
    if principal is None:
        log.warning("twilio stream: telephony_token does not authenticate anyone")
        await websocket.close(1011, "telephony is misconfigured")
        return
    call = services.phone.open(
        call_sid, caller=grant.caller, called=grant.called, role_id=grant.role_id
    )
    targets = await transfer_targets(services, principal, grant.role_id)
    link = TwilioLink(
        websocket,
        stream_sid,
        keypad_gap_s=settings.telephony_keypad_gap_s,
        transfer_targets=targets,
    )
    link.start_writer()
    connection = RealtimeConnection(link, services, call_tools=link.call_tools)
    link.connection = connection
    connection.principal = principal
    services.active_sessions.add(connection.id)
    try:
        session = await open_phone_session(connection, call)
        if session is None:
            return
        link.voice.bind(session)
        call.thread_id, call.session_id = session.thread.thread_id, session.id
        await keep(services, principal, call, "twilio")
        log.info(
            "phone call %s from %s to %s: stream %d, session %s",
            call_sid, number_digest(call.caller), number_digest(call.called), call.streams,
            session.id,
        )  # fmt: skip
        await connection.serve(session)
    finally:
        services.active_sessions.discard(connection.id)
        if link.stopped or link.ended_by_agent:
            services.phone.end(call, "caller" if link.stopped else "agent")
            if link.ended_by_agent and link.voice.hang_up.transfer_to is not None:
                call.transfer_target = link.voice.hang_up.transfer_to
            await keep(services, principal, call, "twilio")
        await link.finish()
        with contextlib.suppress(Exception):
            await websocket.close(1000)
