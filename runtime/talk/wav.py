"""The sound card's stand-ins: a WAV-backed microphone and a capturing speaker, for tests and
for ``--input-wav`` / ``--output-wav`` (runtime/talk/audio.py, rule 1)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
import wave
from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import numpy as np

from pipeline.audio import PCM
from runtime.talk.audio import FRAME_MS, AudioError, BufferedSpeaker


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
