"""The audio boundary of ``openrealtime talk``: a microphone that yields PCM16 mono frames at its
own rate, and a speaker that plays frames and says how much of each generation it has played.

Rules:

1. Two small protocols, ``Microphone`` and ``Speaker``, are all the talk client sees. The real
   ones use PortAudio through ``sounddevice``; the WAV-backed ones (``WavMicrophone``,
   ``CapturingSpeaker``) stand in for a sound card in tests and are reachable from the command
   line only through the explicit ``--input-wav`` / ``--output-wav`` options.
2. ``sounddevice`` is imported lazily, in ``import_sounddevice``: this module imports on machines
   without PortAudio, and a missing library becomes ``PortAudioUnavailable`` naming the fix.
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

import asyncio
import collections
import contextlib
import threading
import time
import wave
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
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


def import_sounddevice() -> ModuleType:
    """``sounddevice``, or ``PortAudioUnavailable`` saying how to get PortAudio."""
    try:
        import sounddevice
    except (ImportError, OSError) as e:  # OSError: the wheel is there, libportaudio is not
        raise PortAudioUnavailable(
            f"PortAudio is not available ({e}). On Debian/Ubuntu: apt-get install libportaudio2; "
            "on macOS and Windows the sounddevice wheel (pip install sounddevice) bundles it."
        ) from e
    module: ModuleType = sounddevice
    return module


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


# ---------------------------------------------------------------- WAV-backed (tests)


def read_wav(path: Path) -> tuple[PCM, int]:
    """A 16-bit WAV file as mono PCM (channels averaged) and its rate."""
    try:
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise AudioError(f"{path}: only 16-bit PCM WAV files are supported")
            channels = wav.getnchannels()
            rate = wav.getframerate()
            data = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    except (OSError, EOFError, wave.Error) as e:
        raise AudioError(f"{path}: cannot read it as a WAV file ({e})") from e
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    return data.astype(np.int16), rate


def write_wav(path: Path, pcm: PCM, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.astype("<i2").tobytes())


class WavMicrophone:
    """A microphone playing a tape at real-time pace, then silence (a real microphone never
    ends). ``append`` adds more to the tape: tests speak on cue with it."""

    def __init__(self, pcm: PCM | None = None, sample_rate: int = 16_000) -> None:
        self.sample_rate = sample_rate
        self._frame = sample_rate * FRAME_MS // 1000
        self._tape: collections.deque[PCM] = collections.deque()
        self._closed = asyncio.Event()
        self.frames_captured = 0
        if pcm is not None:
            self.append(pcm)

    @classmethod
    def from_file(cls, path: Path) -> WavMicrophone:
        pcm, rate = read_wav(path)
        return cls(pcm, rate)

    def append(self, pcm: PCM) -> None:
        for start in range(0, pcm.size, self._frame):
            frame = pcm[start : start + self._frame]
            if frame.size < self._frame:
                frame = np.concatenate([frame, np.zeros(self._frame - frame.size, np.int16)])
            self._tape.append(frame)

    @property
    def tape_ms(self) -> float:
        """What is left on the tape."""
        return len(self._tape) * FRAME_MS

    async def frames(self) -> AsyncGenerator[PCM, None]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        silence = np.zeros(self._frame, dtype=np.int16)
        while not self._closed.is_set():
            self.frames_captured += 1
            yield self._tape.popleft() if self._tape else silence
            delay = start + self.frames_captured * FRAME_MS / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def close(self) -> None:
        self._closed.set()


class CapturingSpeaker(BufferedSpeaker):
    """A speaker without a sound card: a clock pulls from the buffer at real-time pace, as a
    device would, and what was played is kept — per generation and as one recording (written
    to ``path`` at close, if given) — up to ``max_capture_s``."""

    def __init__(
        self,
        sample_rate: int = 24_000,
        *,
        path: Path | None = None,
        max_capture_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(sample_rate)
        self.path = path
        self.clock = clock
        self._max_samples = int(max_capture_s * sample_rate)
        self.recording: list[PCM] = []
        self.captured: dict[int, list[PCM]] = {}
        self._recorded = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._play(), name="capturing-speaker")

    async def _play(self) -> None:
        started = self.clock()
        pulled = 0
        while True:
            await asyncio.sleep(FRAME_MS / 1000)
            due = int((self.clock() - started) * self.sample_rate) - pulled
            if due <= 0:
                continue
            pcm, spans = self.buffer.pull(due)
            pulled += due
            self._keep(pcm, spans)

    def _keep(self, pcm: PCM, spans: list[tuple[int, int]]) -> None:
        if self._recorded >= self._max_samples:
            return
        self.recording.append(pcm)
        self._recorded += pcm.size
        offset = 0
        for generation, count in spans:
            self.captured.setdefault(generation, []).append(pcm[offset : offset + count])
            offset += count

    def played_audio(self, generation: int) -> PCM:
        parts = self.captured.get(generation, [])
        return np.concatenate(parts) if parts else np.zeros(0, np.int16)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.path is not None:
            parts = self.recording or [np.zeros(0, np.int16)]
            write_wav(self.path, np.concatenate(parts), self.sample_rate)


# ---------------------------------------------------------------- PortAudio (sounddevice)


@dataclass(frozen=True, slots=True)
class AudioDevice:
    index: int
    name: str
    host_api: str
    max_input_channels: int
    max_output_channels: int
    default_sample_rate: int

    def describe(self, *, default_input: int, default_output: int) -> str:
        marks = ("<" if self.index == default_input else " ") + (
            ">" if self.index == default_output else " "
        )
        return (
            f"{marks} {self.index:3d}  {self.name} ({self.host_api}; "
            f"{self.max_input_channels} in, {self.max_output_channels} out, "
            f"{self.default_sample_rate} Hz)"
        )


def list_devices() -> tuple[list[AudioDevice], int, int]:
    """The PortAudio devices, and the indexes of the default input and output (-1: none)."""
    sd = import_sounddevice()
    try:
        host_apis = [str(api["name"]) for api in sd.query_hostapis()]
        listed = sd.query_devices()
        default_input, default_output = (int(i) for i in sd.default.device)
    except sd.PortAudioError as e:
        raise DeviceFailed(f"PortAudio cannot list the devices: {e}") from e
    devices = [
        AudioDevice(
            index=int(d["index"]),
            name=str(d["name"]),
            host_api=host_apis[int(d["hostapi"])],
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_sample_rate=int(d["default_samplerate"]),
        )
        for d in listed
    ]
    return devices, default_input, default_output


def pick_device(devices: list[AudioDevice], spec: str | None, *, kind: str, default: int) -> int:
    """The device ``spec`` names (an index, or a case-insensitive name substring) among those
    with channels of ``kind`` (``input`` or ``output``); the default device when None."""
    usable = [
        d for d in devices if (d.max_input_channels if kind == "input" else d.max_output_channels)
    ]
    if spec is None:
        if any(d.index == default for d in usable):
            return default
        if usable:
            return usable[0].index
        raise DeviceNotFound(f"no {kind} device found (see --list-devices)")
    if spec.strip().isdigit():
        index = int(spec)
        if any(d.index == index for d in usable):
            return index
        raise DeviceNotFound(f"no {kind} device with index {index} (see --list-devices)")
    matches = [d for d in usable if spec.lower() in d.name.lower()]
    if not matches:
        raise DeviceNotFound(f"no {kind} device matches {spec!r} (see --list-devices)")
    return matches[0].index


def _device_info(sd: ModuleType, device: int) -> Any:
    try:
        return sd.query_devices(device)
    except (sd.PortAudioError, ValueError) as e:
        raise DeviceNotFound(f"no sound device {device} ({e}); see --list-devices") from e


class SoundDeviceMicrophone:
    """A PortAudio input stream at the device's default rate, mono PCM16, in ``FRAME_MS``
    blocks handed from PortAudio's thread to the event loop through a bounded queue."""

    def __init__(self, device: int, *, max_queued_frames: int = 100) -> None:
        self._sd = import_sounddevice()
        info = _device_info(self._sd, device)
        self.device = device
        self.sample_rate = int(info["default_samplerate"])
        self._queue: asyncio.Queue[PCM] = asyncio.Queue(max_queued_frames)
        self._stream: Any = None
        self.overruns = 0

    async def frames(self) -> AsyncGenerator[PCM, None]:
        loop = asyncio.get_running_loop()

        def deliver(pcm: PCM) -> None:
            if self._queue.full():  # the loop fell behind: drop the oldest frame
                self._queue.get_nowait()
                self.overruns += 1
            self._queue.put_nowait(pcm)

        def callback(indata: Any, frames: int, time_info: Any, status: Any) -> None:
            pcm = np.frombuffer(bytes(indata), dtype="<i2").astype(np.int16)
            with contextlib.suppress(RuntimeError):  # the loop closed under us
                loop.call_soon_threadsafe(deliver, pcm)

        try:
            self._stream = self._sd.RawInputStream(
                device=self.device,
                samplerate=self.sample_rate,
                channels=1,
                dtype="int16",
                blocksize=self.sample_rate * FRAME_MS // 1000,
                callback=callback,
            )
            self._stream.start()
        except self._sd.PortAudioError as e:
            raise DeviceFailed(f"cannot open the microphone (device {self.device}): {e}") from e
        while True:
            yield await self._queue.get()

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None


class SoundDeviceSpeaker(BufferedSpeaker):
    """A PortAudio output stream at the device's default rate; its callback pulls from the
    playback buffer (silence when there is nothing to play)."""

    def __init__(self, device: int) -> None:
        self._sd = import_sounddevice()
        info = _device_info(self._sd, device)
        super().__init__(int(info["default_samplerate"]))
        self.device = device
        self._stream: Any = None

    async def start(self) -> None:
        def callback(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
            pcm, _ = self.buffer.pull(frames)
            outdata[:] = pcm.astype("<i2").tobytes()

        try:
            self._stream = self._sd.RawOutputStream(
                device=self.device,
                samplerate=self.sample_rate,
                channels=1,
                dtype="int16",
                latency="low",
                callback=callback,
            )
            self._stream.start()
        except self._sd.PortAudioError as e:
            raise DeviceFailed(f"cannot open the speaker (device {self.device}): {e}") from e

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None
