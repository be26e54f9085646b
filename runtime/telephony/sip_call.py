"""One SIP call as a realtime connection: its voice (``SipVoice``) and its link (``SipLink``).

Rules
-----
1. The call's session is a phone session (``runtime.telephony.phone`` rule 1) in the codec the
   SDP chose (``audio/pcmu`` or ``audio/pcma``). The caller's RTP audio, released by the
   jitter buffer (``runtime.telephony.rtp`` rule 3), goes to the session as heard audio, in
   order, through one bounded queue (a session that stops taking it loses the oldest audio,
   never the call).
2. The agent's voice is paced by the call's RTP clock: ``SipVoice`` is the link's ``MediaOut``
   and holds the answer's audio; each 20 ms tick takes one frame of it, and what has been sent
   is what the caller heard (the engine learns it as playback: the heard prefix, to 20 ms plus
   the phone's own jitter buffer). Barge-in drops what is left at once — the next tick is
   silence; a pause (``openrealtime.output_audio.paused``) holds it, ``resumed`` plays it on.
   Audio of an answer that is no longer current and did not complete (cancelled, replaced) is
   dropped when it comes up, whatever event said so — as the WebRTC track does.
3. Keypad tones (RFC 4733 events, or SIP INFO ``application/dtmf-relay``) are collected into
   entries and reach the agent as the caller's words (``phone`` rule 2).
4. The end: a BYE from the caller ends the session for good; the agent hangs up in code after
   words that take leave (``phone`` rule 3) — once the last frame of its goodbye has been
   sent, plus ``HANG_UP_TAIL_S`` for the phone to play it, the server sends BYE. A session that
   closes for any other reason (drain, an error) hangs up too: RTP has no resume.
5. ``transfer_call`` (``phone`` rule 4): after the announcing answer has been sent, the call is
   REFERred to the target; once the far end accepted and reported the new call up, the server
   hangs up. A transfer the far end refuses leaves the call as it was (the caller can go on).
   ``send_dtmf`` sends RFC 4733 events on the call's RTP clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import numpy as np

from pipeline import events as ev
from pipeline.audio_formats import AudioFormatError, alaw_encode, ulaw_encode
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from runtime.errors import Disconnected, ProtocolError
from runtime.realtime.protocol import CloseCode
from runtime.realtime.transport import MediaOut
from runtime.telephony.calls import Ender
from runtime.telephony.phone import (
    SAMPLES_PER_20MS,
    HangUp,
    KeypadEntry,
    keypad_events,
    keypad_wait,
    note_session_error,
)
from runtime.telephony.sip_message import PCMA

if TYPE_CHECKING:
    from runtime.realtime.connection import RealtimeConnection
    from runtime.realtime.session import VoiceSession

log = logging.getLogger(__name__)

HANG_UP_TAIL_S = 0.3
"""After the last frame of a goodbye, the time the phone has to play it before BYE (rule 4)."""
MAX_HEARD_BACKLOG = 100
"""Frames of the caller's audio waiting for the session at most (2 s; rule 1)."""
_FRAME_BYTES = SAMPLES_PER_20MS * 2


class SipVoice:
    """The agent's voice on a SIP call (rule 2): ``take``s the answer's audio (PCM16 at 8 kHz),
    gives the RTP clock one G.711 frame per tick (``next_frame``)."""

    def __init__(self, codec: int, *, transfer_targets: tuple[str, ...] = ()) -> None:
        self.codec = codec
        self._session: VoiceSession | None = None
        self._queue: deque[tuple[int, str, bytearray]] = deque()
        self._completed: set[str] = set()
        """Answers that ended normally: what is left of their audio still plays."""
        self._generation: int | None = None
        self._played_ms = 0.0
        self._paused: int | None = None
        self.hang_up = HangUp(transfer_targets)
        self.sent_frames = 0

    def bind(self, session: VoiceSession) -> None:
        self._session = session

    def detach(self) -> None:
        self._session = None
        self._queue.clear()

    def take(self, event: ev.ServerEvent) -> bool:
        if isinstance(event, ev.OutputAudioDelta):
            session = self._session
            if session is not None and session.outbox.is_current(event.generation):
                if self._queue and self._queue[-1][0] == event.generation:
                    self._queue[-1][2].extend(event.delta)
                else:
                    chunk = (event.generation, event.response_id, bytearray(event.delta))
                    self._queue.append(chunk)
            return True
        if isinstance(event, ev.OutputAudioPaused):
            self._paused = event.generation
        elif isinstance(event, ev.OutputAudioResumed):
            if self._paused == event.generation:
                self._paused = None
        elif isinstance(event, ev.ResponseInterrupted):
            self._drop(event.generation)
        elif isinstance(event, ev.ResponseDone) and event.response.status == "completed":
            self._completed.add(event.response.id)
        if self.hang_up.note(event) and not self._queue:
            self.hang_up.heard_all()
        return False

    def clear(self) -> None:
        self._queue.clear()

    def _drop(self, generation: int) -> None:
        self._queue = deque(chunk for chunk in self._queue if chunk[0] != generation)
        if self._paused == generation:
            self._paused = None

    def _drop_stale(self) -> None:
        session, queue = self._session, self._queue
        while queue and session is not None:
            generation, response_id, _ = queue[0]
            if session.outbox.is_current(generation) or response_id in self._completed:
                return
            queue.popleft()
            if self._paused == generation:
                self._paused = None

    def next_frame(self) -> bytes | None:
        """The answer's next 20 ms as G.711, or None: nothing to say (rule 2)."""
        self._drop_stale()
        queue = self._queue
        if not queue or self._paused == queue[0][0]:
            if not queue:
                self._completed.clear()
                self.hang_up.heard_all()
            return None
        generation, _, pcm = queue[0]
        frame = bytes(pcm[:_FRAME_BYTES])
        del pcm[:_FRAME_BYTES]
        if not pcm:
            queue.popleft()
        if len(frame) < _FRAME_BYTES:
            frame += bytes(_FRAME_BYTES - len(frame))
        if generation != self._generation:
            self._generation, self._played_ms = generation, 0.0
        self._played_ms += 20.0
        self.sent_frames += 1
        session = self._session
        if session is not None and session.engine is not None:
            session.engine.on_playback(generation, self._played_ms)
        samples = np.frombuffer(frame, np.int16)
        return alaw_encode(samples) if self.codec == PCMA else ulaw_encode(samples)


class SipLink:
    """The connection's ``Link`` on a SIP call (rules 1, 3, 4). ``hang_up`` sends the BYE."""

    def __init__(
        self,
        voice: SipVoice,
        *,
        keypad_gap_s: float,
        hang_up: Callable[[], None],
        transfer: Callable[[str], Awaitable[bool]],
        send_digits: Callable[[str], None],
    ) -> None:
        self.voice = voice
        self.media: MediaOut | None = voice
        self.connection: RealtimeConnection | None = None
        self.keypad = KeypadEntry(keypad_gap_s)
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        """Client events for the session; "" once the call is over."""
        self._heard: deque[bytes] = deque(maxlen=MAX_HEARD_BACKLOG)
        self._heard_ready = asyncio.Event()
        self._hang_up = hang_up
        self._transfer = transfer
        self._send_digits = send_digits
        self._transferring: asyncio.Task[None] | None = None
        self.ended_by: Ender | None = None
        """``caller`` (BYE) or ``agent``: the call is over (rule 4)."""
        self._hearing: asyncio.Task[None] | None = None
        voice.hang_up.on_heard_all = self._agent_hangs_up

    @property
    def call_tools(self) -> tuple[tuple[ToolSpec, ToolHandler], ...]:
        return self.voice.hang_up.call_tools(self._send_digits)

    # ------------------------------------------------------------ in (rules 1, 3)

    def heard(self, payload: bytes) -> None:
        """The caller's G.711 audio, from the RTP clock (rule 1)."""
        self._heard.append(payload)
        self._heard_ready.set()

    def start_hearing(self, session: VoiceSession) -> None:
        self._hearing = asyncio.ensure_future(self._hear(session))

    async def _hear(self, session: VoiceSession) -> None:
        while True:
            await self._heard_ready.wait()
            self._heard_ready.clear()
            while self._heard:
                payload = self._heard.popleft()
                try:
                    pcm = session.decode_input(payload)
                except (AudioFormatError, ProtocolError):
                    continue
                await session.hear(pcm)

    def digit(self, digit: str) -> None:
        self._entry(self.keypad.press(digit, time.monotonic()))

    def _entry(self, entry: str | None) -> None:
        if entry is not None:
            for message in keypad_events(entry):
                self._inbox.put_nowait(message)

    def caller_hung_up(self) -> None:
        if self.ended_by is None:
            self.ended_by = "caller"
        self._inbox.put_nowait("")

    async def receive(self) -> str | bytes:
        while True:
            if self.ended_by is not None and self._inbox.empty():
                raise Disconnected()
            message = await keypad_wait(self.keypad, self._inbox.get)
            if message is None:  # a keypad entry's pause ended
                self._entry(self.keypad.due(time.monotonic()))
                continue
            if message == "":
                raise Disconnected()
            return message

    # ------------------------------------------------------------ out (rule 4)

    async def send_text(self, data: str) -> None:
        note_session_error(data, "sip call")

    async def send_bytes(self, data: bytes) -> None:
        return None

    def _agent_hangs_up(self) -> None:
        target = self.voice.hang_up.transfer_to
        if target is not None:
            self._transferring = asyncio.ensure_future(self._put_through(target))
            return
        if self.ended_by is None:
            self.ended_by = "agent"
        asyncio.get_running_loop().call_later(HANG_UP_TAIL_S, self._close_session)

    async def _put_through(self, target: str) -> None:
        """Rule 5: REFER, then the call is over — or, refused, it goes on."""
        await asyncio.sleep(HANG_UP_TAIL_S)
        if await self._transfer(target):
            if self.ended_by is None:
                self.ended_by = "agent"
            self._close_session()
        else:
            self.voice.hang_up.resume()
            self.voice.hang_up.on_heard_all = self._agent_hangs_up

    def _close_session(self) -> None:
        if self.connection is not None:
            self.connection.request_close(CloseCode.NORMAL, "the agent ended the call")
        self._inbox.put_nowait("")

    async def close(self, code: int, reason: str) -> None:
        """The session closed the link: the call is over (rule 4)."""
        if self.ended_by is None:
            self.ended_by = "agent"
        if self.ended_by != "caller":
            self._hang_up()
        await self.finish()

    async def finish(self) -> None:
        if self._transferring is not None and self._transferring is not asyncio.current_task():
            self._transferring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._transferring
        if self._hearing is not None:
            self._hearing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._hearing
            self._hearing = None
