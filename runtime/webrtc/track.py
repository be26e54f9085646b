"""The agent's voice on a WebRTC call, played out by the server (``runtime.webrtc.calls`` rule 2).

``VoiceTrack`` is the call's outbound audio track. The outbox hands it every server event first
(``runtime.realtime.transport.MediaOut``): it takes the audio deltas and notes playback control
(``openrealtime.output_audio.paused``/``resumed``) and each ``response.done``. aiortc asks it for
a frame every 20 ms; it answers with speech of the current generation, else silence, and reports
what it played to the engine as playback (the heard prefix). Audio of an interrupted generation
is dropped at once (``output_audio_buffer.cleared``); the rest of a completed answer still plays,
then ``output_audio_buffer.stopped``.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import av
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError

from pipeline import events as ev

if TYPE_CHECKING:
    from runtime.realtime.session import VoiceSession

FRAME_S = 0.020


@dataclass(slots=True)
class _Chunk:
    generation: int
    response_id: str
    pcm: np.ndarray[Any, np.dtype[np.int16]]
    offset: int = 0


@dataclass(slots=True)
class _Playing:
    generation: int
    response_id: str
    played_ms: float = 0.0


class VoiceTrack(MediaStreamTrack):
    """The agent's voice, played out by the server (rule 2)."""

    kind = "audio"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.rate = 24_000
        self._queue: deque[_Chunk] = deque()
        self._session: VoiceSession | None = None
        self._playing: _Playing | None = None
        self._paused: int | None = None
        """The generation whose playback is held (``openrealtime.output_audio.paused``)."""
        self._done: set[str] = set()
        self._completed: set[str] = set()
        """Responses that ended normally: what is left of their audio still plays."""
        self._start: float | None = None
        self._frames = 0

    # ------------------------------------------------------------ the outbox's side

    def bind(self, session: VoiceSession) -> None:
        self._session = session
        self.rate = session.config.output_format.rate

    def detach(self) -> None:
        self._session = None
        self._queue.clear()
        self._playing = None

    def take(self, event: ev.ServerEvent) -> bool:
        if isinstance(event, ev.OutputAudioDelta):
            pcm = np.frombuffer(event.delta, dtype=np.int16)
            self._queue.append(_Chunk(event.generation, event.response_id, pcm))
            return True
        if isinstance(event, ev.OutputAudioPaused):
            self._paused = event.generation
        elif isinstance(event, ev.OutputAudioResumed):
            if self._paused == event.generation:
                self._paused = None
        elif isinstance(event, ev.ResponseDone):
            self._done.add(event.response.id)
            if event.response.status == "completed":
                self._completed.add(event.response.id)
        return False

    def clear(self) -> None:
        """The client's ``output_audio_buffer.clear``: drop what is left of the answer."""
        playing = self._playing
        dropped = bool(self._queue)
        self._queue.clear()
        if playing is not None or dropped:
            response_id = playing.response_id if playing else ""
            self._playing = None
            if response_id:
                self._emit(ev.OutputAudioBufferCleared(response_id))

    # ------------------------------------------------------------ aiortc's side

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = self.clock()
        if self._start is None:
            self._start = now
        else:
            due = self._start + self._frames * FRAME_S
            if due - now > 0:
                await asyncio.sleep(due - now)
            elif now - due > 0.2:  # the loop stalled: play on from now, never in a burst
                self._start, self._frames = now, 0
        self._frames += 1
        return self._frame(self._next_samples())

    def _frame(self, samples: np.ndarray[Any, np.dtype[np.int16]]) -> av.AudioFrame:
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.time_base = fractions.Fraction(1, self.rate)
        frame.pts = self._frames * samples.size
        return frame

    def _next_samples(self) -> np.ndarray[Any, np.dtype[np.int16]]:
        """The next 20 ms: speech of the current generation, else silence (rule 2)."""
        size = int(self.rate * FRAME_S)
        out = np.zeros(size, dtype=np.int16)
        session = self._session
        if session is None:
            return out
        self._drop_stale(session)
        queue = self._queue
        if not queue or self._paused == queue[0].generation:
            self._maybe_stopped()
            return out
        head = queue[0]
        filled = 0
        while queue and filled < size and queue[0].generation == head.generation:
            chunk = queue[0]
            take = min(size - filled, chunk.pcm.size - chunk.offset)
            out[filled : filled + take] = chunk.pcm[chunk.offset : chunk.offset + take]
            filled += take
            chunk.offset += take
            if chunk.offset >= chunk.pcm.size:
                queue.popleft()
        playing = self._playing
        if playing is None or playing.generation != head.generation:
            if playing is not None:
                self._emit(ev.OutputAudioBufferStopped(playing.response_id))
            playing = self._playing = _Playing(head.generation, head.response_id)
            self._emit(ev.OutputAudioBufferStarted(head.response_id))
        playing.played_ms += 1000.0 * filled / self.rate
        engine = session.engine
        if engine is not None:
            engine.on_playback(playing.generation, playing.played_ms)
        return out

    def _stale(self, session: VoiceSession, generation: int, response_id: str) -> bool:
        """Audio of an answer that was interrupted or cancelled."""
        current = session.outbox.is_current(generation)
        return not current and response_id not in self._completed

    def _drop_stale(self, session: VoiceSession) -> None:
        queue, cleared = self._queue, None
        while queue and self._stale(session, queue[0].generation, queue[0].response_id):
            cleared = queue.popleft().response_id
        playing = self._playing
        if playing is not None and self._stale(session, playing.generation, playing.response_id):
            cleared = playing.response_id
            self._playing = None
        if cleared is not None:
            self._done.discard(cleared)
            self._emit(ev.OutputAudioBufferCleared(cleared))

    def _maybe_stopped(self) -> None:
        playing = self._playing
        if playing is not None and not self._queue and playing.response_id in self._done:
            self._done.discard(playing.response_id)
            self._completed.discard(playing.response_id)
            self._playing = None
            self._emit(ev.OutputAudioBufferStopped(playing.response_id))
        if self._playing is None and not self._queue:
            self._done.clear()  # nothing of any answer is left to play
            self._completed.clear()

    def _emit(self, event: ev.ServerEvent) -> None:
        session = self._session
        if session is not None:
            session.outbox.send(event)
