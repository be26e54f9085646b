"""The audio boundary of ``openrealtime talk``: a microphone that yields PCM16 mono frames at its
own rate, and a speaker that plays frames and says how much of each generation it has played.

Rules:

1. Two small protocols, ``Microphone`` and ``Speaker``, are all the talk client sees. The real
   ones use PortAudio through ``sounddevice`` (``portaudio.py``); the WAV-backed ones
   (``wav.py``: ``WavMicrophone``, ``CapturingSpeaker``) stand in for a sound card in tests
   and are reachable from the command line only through the explicit ``--input-wav`` /
   ``--output-wav`` options.
2. ``sounddevice`` is imported lazily (``runtime/talk/portaudio.py``, ``import_sounddevice``):
   the client imports on machines without PortAudio, and a missing library becomes
   ``PortAudioUnavailable`` naming the fix.
3. A speaker plays from a ``PlaybackBuffer``, pulled by the device (the PortAudio callback
   thread, or the capture's clock): played samples are counted per generation as they are
   pulled, so "played" means handed to the device, as in the browser's playback worklet.
   ``clear`` drops everything queued at once and returns what each generation played (and
   forgets it); ``forget`` drops one generation's count once it is over.
4. Devices run at their own rates; the talk client resamples at the edge (``StreamResampler``).
5. Bounded: the playback queue holds at most ``max_queued_s`` of audio (the server paces audio
   at most 300 ms ahead of real time, so this is never reached by a well-behaved server; the
   oldest audio goes if it is), a capture at most ``max_capture_s``, a microphone queue a few
   seconds.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import AsyncGenerator
from typing import Any, Protocol

import numpy as np

from pipeline.audio import PCM

FRAME_MS = 20
"""The microphone hands over audio in frames of this length."""


class AudioError(Exception):
    """A sound device or audio file the talk client cannot use (the message says which)."""


class PortAudioUnavailable(AudioError):
    """``sounddevice`` or the PortAudio library it loads is missing."""


class DeviceNotFound(AudioError):
    """``--input`` / ``--output`` named no device of the right direction."""


class DeviceFailed(AudioError):
    """PortAudio could not open or run a stream on the device."""


# ---------------------------------------------------------------- the two protocols


class Microphone(Protocol):
    sample_rate: int

    def frames(self) -> AsyncGenerator[PCM, None]:
        """16-bit mono frames of about ``FRAME_MS`` each, as they are captured."""
        ...

    async def close(self) -> None: ...


class Speaker(Protocol):
    sample_rate: int

    async def start(self) -> None: ...

    def push(self, generation: int, pcm: PCM) -> None:
        """Queue ``pcm`` (at ``sample_rate``) behind what is queued."""
        ...

    def clear(self) -> dict[int, float]:
        """Stop at once: drop everything queued; returns the ms played per generation (and
        starts counting afresh)."""
        ...

    def forget(self, generation: int) -> None:
        """Drop the played count of a generation that is over."""
        ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def played_ms(self, generation: int) -> float: ...

    def queued_ms(self) -> float:
        """Audio queued and not played yet (paused audio included)."""
        ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------- playback


class PlaybackBuffer:
    """The queue a speaker plays from; thread-safe (pulled from PortAudio's thread)."""

    def __init__(self, sample_rate: int, *, max_queued_s: float = 30.0) -> None:
        self.sample_rate = sample_rate
        self._max_samples = int(max_queued_s * sample_rate)
        self._lock = threading.Lock()
        self._chunks: collections.deque[tuple[int, PCM]] = collections.deque()
        self._queued = 0
        self._played: dict[int, int] = {}
        self._paused = False
        self.dropped_samples = 0
        """Samples dropped because the queue was full."""

    def push(self, generation: int, pcm: PCM) -> None:
        if pcm.size == 0:
            return
        with self._lock:
            self._chunks.append((generation, pcm))
            self._queued += pcm.size
            while self._queued > self._max_samples and len(self._chunks) > 1:
                _, old = self._chunks.popleft()
                self._queued -= old.size
                self.dropped_samples += old.size

    def pull(self, samples: int) -> tuple[PCM, list[tuple[int, int]]]:
        """``samples`` to play now (silence where nothing is queued or while paused), and which
        generation each played span came from: ``[(generation, count), …]``."""
        out = np.zeros(samples, dtype=np.int16)
        spans: list[tuple[int, int]] = []
        with self._lock:
            if self._paused:
                return out, spans
            filled = 0
            while filled < samples and self._chunks:
                generation, chunk = self._chunks[0]
                take = min(samples - filled, chunk.size)
                out[filled : filled + take] = chunk[:take]
                filled += take
                self._queued -= take
                self._played[generation] = self._played.get(generation, 0) + take
                spans.append((generation, take))
                if take == chunk.size:
                    self._chunks.popleft()
                else:
                    self._chunks[0] = (generation, chunk[take:])
        return out, spans

    def clear(self) -> dict[int, float]:
        with self._lock:
            self._chunks.clear()
            self._queued = 0
            played = {g: n * 1000.0 / self.sample_rate for g, n in self._played.items()}
            self._played.clear()
            return played

    def pause(self) -> None:
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def played_ms(self, generation: int) -> float:
        with self._lock:
            return self._played.get(generation, 0) * 1000.0 / self.sample_rate

    def queued_ms(self) -> float:
        with self._lock:
            return self._queued * 1000.0 / self.sample_rate

    def forget(self, generation: int) -> None:
        with self._lock:
            self._played.pop(generation, None)


class BufferedSpeaker:
    """The ``Speaker`` methods every speaker shares, over a ``PlaybackBuffer``."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.buffer = PlaybackBuffer(sample_rate)

    def push(self, generation: int, pcm: PCM) -> None:
        self.buffer.push(generation, pcm)

    def clear(self) -> dict[int, float]:
        return self.buffer.clear()

    def pause(self) -> None:
        self.buffer.pause()

    def resume(self) -> None:
        self.buffer.resume()

    def forget(self, generation: int) -> None:
        self.buffer.forget(generation)

    def played_ms(self, generation: int) -> float:
        return self.buffer.played_ms(generation)

    def queued_ms(self) -> float:
        return self.buffer.queued_ms()


# ---------------------------------------------------------------- resampling


class StreamResampler:
    """A streaming soxr resampler (no clicks at frame boundaries); a no-op for equal rates."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self.from_rate = from_rate
        self.to_rate = to_rate
        self._soxr: Any = None
        if from_rate != to_rate:
            import soxr  # lazily, like pipeline.audio.resample

            self._soxr = soxr.ResampleStream(from_rate, to_rate, 1, dtype="int16", quality="MQ")

    def push(self, pcm: PCM) -> PCM:
        if self._soxr is None or pcm.size == 0:
            return pcm
        return np.asarray(self._soxr.resample_chunk(pcm), dtype=np.int16)

    def flush(self) -> PCM:
        """What the resampler still holds (the end of a stream); it starts afresh after."""
        if self._soxr is None:
            return np.zeros(0, np.int16)
        tail = self._soxr.resample_chunk(np.zeros(0, np.int16), last=True)
        self._soxr.clear()
        return np.asarray(tail, dtype=np.int16)

    def reset(self) -> None:
        if self._soxr is not None:
            self._soxr.clear()
