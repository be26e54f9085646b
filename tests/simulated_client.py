"""The client side of a conversation in virtual time (``tests/conversation_harness.py``): its
microphone, the words in its audio, its speaker and its playback reports.

Theory of operation
-------------------
Rule 1. Virtual milliseconds. ``Clock`` counts ms from the conversation's start on the loop's
        virtual clock and keeps the client's timers, so closing cancels them all.
Rule 2. The microphone never stops, as a real client's does not: frame ``k`` (20 ms of audio,
        ``[20k, 20k + 20)``) is pushed when it has been captured, at ``20k + 20`` ms — silence
        unless the script put a sound there — until ``horizon_ms``. So the engine's input
        stream position equals the virtual time and the VAD's back-dated times are the
        script's milliseconds. Sounds lie back to back on that grid and never begin before now.
Rule 3. The words are in the audio. Speech of a phrase is a square wave whose level is that
        phrase's code (``PhraseBook``); ``SpokenWordsASR`` hears the codes present in an
        utterance, in order, so every transcript (partial, speculative, final) is what was
        said in that stretch of audio. Noise is broadband and quieter than every code.
Rule 4. The speaker plays each generation at real time as its audio arrives (a dry buffer
        stalls it), drops a generation at its interruption event, and reports playback
        through ``engine.on_playback`` as the talk page does: every ``report_every_ms``, at
        once when interrupted, and when drained — each report reaching the engine
        ``report_delay_ms`` later.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import events as ev
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.engine import Engine
from plugins.contracts import Transcript
from plugins.fakes import Faults
from tests.virtual_time import VirtualTimeLoop

FRAME_MS = 20
FRAME_SAMPLES = INPUT_SAMPLE_RATE * FRAME_MS // 1000
SILENCE: PCM = np.zeros(FRAME_SAMPLES, dtype=np.int16)

_CODE_BASE = 4000
_CODE_STEP = 16
_NOISE_PEAK = 3000  # below every code: noise never reads as words
EPS_MS = 1e-6
"""Slack when comparing computed virtual ms."""


# ---------------------------------------------------------------- words in audio (Rule 3)


class PhraseBook:
    """The phrases said in one conversation and their codes (a square wave's level)."""

    def __init__(self) -> None:
        self.phrases: list[str] = []

    def code(self, text: str) -> int:
        if text not in self.phrases:
            self.phrases.append(text)
        return self.phrases.index(text) + 1

    def speech(self, text: str, samples: int) -> PCM:
        level = _CODE_BASE + _CODE_STEP * self.code(text)
        half_period = 32  # 250 Hz at 16 kHz
        signs = np.where((np.arange(samples) // half_period) % 2 == 0, 1, -1)
        return (signs * level).astype(np.int16)

    def heard(self, audio: PCM) -> str:
        """The phrases voiced in ``audio``, in order (a phrase said twice in a row, with
        nothing but silence between, is heard once)."""
        magnitude = np.abs(audio.astype(np.int32))
        offset = magnitude - _CODE_BASE
        codes = np.where((offset > 0) & (offset % _CODE_STEP == 0), offset // _CODE_STEP, 0)
        codes = codes[magnitude > 0]  # silence does not separate, noise does
        if codes.size == 0:
            return ""
        runs = codes[np.concatenate(([True], codes[1:] != codes[:-1]))]
        return " ".join(self.phrases[c - 1] for c in runs.tolist() if 0 < c <= len(self.phrases))


class SpokenWordsASR:
    """An ASR that hears the script's phrases in the audio (Rule 3), with ``Faults``."""

    def __init__(self, book: PhraseBook, *, faults: Faults | None = None) -> None:
        self.book = book
        self.faults = faults or Faults()
        self.calls = 0

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        self.calls += 1
        await self.faults.apply("asr")
        return Transcript(text=self.book.heard(utterance), language=language or "en")


def noise_frames(ms: int, seed: int = 7) -> list[PCM]:
    rng = np.random.default_rng(seed)
    pcm = rng.integers(-_NOISE_PEAK, _NOISE_PEAK + 1, ms * INPUT_SAMPLE_RATE // 1000)
    return list(pcm.astype(np.int16).reshape(-1, FRAME_SAMPLES))


# ---------------------------------------------------------------- virtual milliseconds (Rule 1)


class Clock:
    """Virtual ms since the conversation started, and timers on them that ``close`` cancels."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        if not isinstance(self.loop, VirtualTimeLoop):
            raise TypeError(
                "a Conversation runs in virtual time: decorate the test @in_virtual_time"
            )
        self.t0 = self.loop.time()
        self._handles: set[asyncio.TimerHandle] = set()

    @property
    def now(self) -> float:
        return round((self.loop.time() - self.t0) * 1000.0, 6)

    def when(self, ms: float) -> float:
        """The loop's time at virtual ``ms``."""
        return self.t0 + ms / 1000.0

    async def sleep_until(self, ms: float) -> None:
        woken: asyncio.Future[None] = self.loop.create_future()
        handle = self.loop.call_at(self.when(ms), _resolve, woken)
        try:
            await woken
        finally:
            handle.cancel()

    def later(self, ms: float, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` at virtual ``ms`` (unless closed first)."""

        def run() -> None:
            self._handles.discard(handle)
            callback(*args)

        handle = self.loop.call_at(self.when(ms), run)
        self._handles.add(handle)

    def close(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


# ---------------------------------------------------------------- the microphone (Rule 2)


class Microphone:
    """Pushes frame ``k`` at ``20k + 20`` ms until ``horizon_ms``: the script's sounds where
    they lie, silence elsewhere."""

    def __init__(self, engine: Engine, clock: Clock, *, horizon_ms: float) -> None:
        self.engine = engine
        self.clock = clock
        self.horizon_ms = horizon_ms
        self.position_ms = 0.0
        """The end of the last frame pushed."""
        self._sounds: list[tuple[float, float, Callable[[int], PCM]]] = []
        """(start ms, end ms, frame index within the sound → PCM), in order, back to back."""
        self._tick = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self, on_stop: Callable[[], None]) -> None:
        self.task = self.clock.loop.create_task(self._run(on_stop), name="harness-microphone")

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def place(self, ms: int, at: float | None) -> float:
        """Where a sound of ``ms`` begins: at ``at`` or now, after any sound already placed,
        on the frame grid."""
        frame_count(ms)
        now = self.clock.now
        if at is not None and at < now - EPS_MS:
            raise ValueError(f"a sound at {at} ms is in the past (now {now} ms)")
        earliest = max(now if at is None else at, self._sounds[-1][1] if self._sounds else 0.0)
        return math.ceil((earliest - EPS_MS) / FRAME_MS) * FRAME_MS

    async def play(self, start: float, ms: int, frame: Callable[[int], PCM]) -> None:
        self._sounds.append((start, start + ms, frame))
        await self.reaches(start + ms)

    async def reaches(self, ms: float) -> None:
        """Until the frame ending at ``ms`` has been pushed."""
        while self.position_ms < ms - EPS_MS:
            task = self.task
            if task is None or task.done():
                self.raise_failure()
                raise AssertionError(
                    f"the microphone stopped at {self.position_ms:g} ms "
                    f"(horizon {self.horizon_ms:g} ms)"
                )
            self._tick.clear()
            await self._tick.wait()

    def raise_failure(self) -> None:
        task = self.task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            raise AssertionError("the microphone failed") from task.exception()

    def _frame(self, k: int) -> PCM:
        start_ms = k * FRAME_MS
        sounds = self._sounds
        while sounds and sounds[0][1] <= start_ms + EPS_MS:
            sounds.pop(0)
        if sounds and sounds[0][0] <= start_ms + EPS_MS:
            begin, _, frame = sounds[0]
            return frame(round((start_ms - begin) / FRAME_MS))
        return SILENCE

    async def _run(self, on_stop: Callable[[], None]) -> None:
        try:
            k = 0
            while (k + 1) * FRAME_MS <= self.horizon_ms:
                await self.clock.sleep_until((k + 1) * FRAME_MS)
                await self.engine.push_audio(self._frame(k))
                k += 1
                self.position_ms = k * FRAME_MS
                self._tick.set()
        finally:
            self._tick.set()
            on_stop()


# ---------------------------------------------------------------- the speaker (Rule 4)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    reports: bool = True
    """False: a client that never reports playback (the server estimates it)."""
    report_every_ms: float | None = 250.0
    """Periodic playback reports while playing (the talk page's ``PLAYBACK_REPORT_MS``)."""
    report_delay_ms: float = 0.0
    """How late each report reaches the engine (the network, one way)."""
    pauses: bool = True
    """Pauses playback on ``openrealtime.output_audio.paused`` until ``resumed`` (the talk
    page does); False: a GA client that plays out its buffer."""


@dataclass(slots=True)
class Playback:
    """What the client's player did with one generation's audio (virtual ms)."""

    generation: int
    updated_at: float
    played_ms: float = 0.0
    buffered_ms: float = 0.0
    stopped_at: float | None = None
    """When the client dropped it (its interruption event)."""
    audio_done: bool = False
    drained_at: float | None = None
    reported_ms: float | None = None
    paused: bool = False
    """Held: a possible false interruption (``openrealtime.output_audio.paused``)."""

    def advance(self, now: float) -> None:
        if self.stopped_at is None and not self.paused:
            step = min(now - self.updated_at, self.buffered_ms)
            self.played_ms += step
            self.buffered_ms -= step
        self.updated_at = now

    @property
    def playing(self) -> bool:
        return self.stopped_at is None and self.drained_at is None and not self.paused


@dataclass(frozen=True, slots=True)
class Report:
    at: float
    """Virtual ms the client sent it (it reaches the engine ``report_delay_ms`` later)."""
    generation: int
    played_ms: float


class SimulatedClient:
    """The client's speaker: plays each generation at real time and reports playback."""

    def __init__(
        self, engine: Engine, clock: Clock, settings: ClientSettings, *, horizon_ms: float
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.settings = settings
        self.horizon_ms = horizon_ms
        self.playback: dict[int, Playback] = {}
        self.reports: list[Report] = []
        self._generations: dict[str, int] = {}

    def start(self) -> None:
        every = self.settings.report_every_ms
        if every is not None and self.settings.reports:
            self.clock.later(every, self._periodic_reports, 1)

    def receive(self, event: ev.ServerEvent, audio_ms: float) -> None:
        now = self.clock.now
        if isinstance(event, ev.OutputAudioDelta):
            self._generations[event.response_id] = event.generation
            playback = self.playback.get(event.generation)
            if playback is None:
                playback = self.playback[event.generation] = Playback(event.generation, now)
            if playback.stopped_at is None:
                playback.advance(now)
                playback.buffered_ms += audio_ms
        elif isinstance(event, ev.OutputAudioDone):
            playback = self._playing(self._generations.get(event.response_id))
            if playback is not None:
                playback.advance(now)
                playback.audio_done = True
                self.clock.later(now + playback.buffered_ms, self._check_drained, playback)
        elif isinstance(event, (ev.OutputAudioPaused, ev.OutputAudioResumed)):
            playback = self._playing(event.generation)
            if playback is not None and self.settings.pauses:
                playback.advance(now)
                playback.paused = isinstance(event, ev.OutputAudioPaused)
                if not playback.paused and playback.audio_done:
                    self.clock.later(now + playback.buffered_ms, self._check_drained, playback)
        elif isinstance(event, ev.ResponseInterrupted):
            playback = self._playing(event.generation)
            if playback is not None:
                playback.advance(now)
                playback.stopped_at = now
                playback.buffered_ms = 0.0
                self._report(playback)

    def _playing(self, generation: int | None) -> Playback | None:
        playback = self.playback.get(generation) if generation is not None else None
        return playback if playback is not None and playback.stopped_at is None else None

    def _check_drained(self, playback: Playback) -> None:
        now = self.clock.now
        playback.advance(now)
        if playback.playing and playback.buffered_ms <= EPS_MS:
            playback.drained_at = now
            self._report(playback)

    def _periodic_reports(self, tick: int) -> None:
        every = self.settings.report_every_ms
        assert every is not None
        now = self.clock.now
        for playback in self.playback.values():
            if playback.playing:
                playback.advance(now)
                if playback.played_ms != playback.reported_ms:
                    self._report(playback)
        if (tick + 1) * every <= self.horizon_ms:
            self.clock.later((tick + 1) * every, self._periodic_reports, tick + 1)

    def _report(self, playback: Playback) -> None:
        if not self.settings.reports:
            return
        now = self.clock.now
        playback.reported_ms = played = playback.played_ms
        self.reports.append(Report(now, playback.generation, played))
        self.clock.later(
            now + self.settings.report_delay_ms,
            self.engine.on_playback,
            playback.generation,
            played,
        )


def frame_count(ms: int) -> int:
    """How many frames a sound of ``ms`` fills (a whole number, or ``ValueError``)."""
    if ms <= 0 or ms % FRAME_MS:
        raise ValueError(f"sounds last a whole number of {FRAME_MS} ms frames, not {ms} ms")
    return ms // FRAME_MS


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = [
    "EPS_MS",
    "FRAME_MS",
    "FRAME_SAMPLES",
    "ClientSettings",
    "Clock",
    "Microphone",
    "PhraseBook",
    "Playback",
    "Report",
    "SimulatedClient",
    "SpokenWordsASR",
    "frame_count",
    "noise_frames",
]
