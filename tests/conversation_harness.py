"""Whole conversations in virtual time: the engine on scripted plugins and a simulated client.

Theory of operation
-------------------
Rule 1. One clock. A ``Conversation`` runs on a ``VirtualTimeLoop`` (``in_virtual_time``) and
        the engine gets ``clock=loop.time``: its timers, the pacer's sleeps, the watchdogs and the
        coordinator all run on the virtual clock. Times in a script and in its assertions are
        virtual milliseconds since the conversation started.
Rule 2. The client is simulated as a real one behaves (``tests/simulated_client.py``): its
        microphone streams 20 ms frames without pause, the words said are in the audio (the
        harness's ASR hears them), its speaker plays the answer at real time and reports
        playback like the talk page.
Rule 3. Every server event is recorded with its virtual ms, in order. ``until`` waits for the
        next matching event after a cursor (as ``RealtimeClient.wait_for``); ``at``,
        ``events``, ``interrupted_at`` and ``journal`` read what happened.
Rule 4. Fail fast. Every wait is bounded in virtual time (``within_ms``); the microphone stops at
        ``horizon_ms``, after which a conversation in which nothing can happen any more raises
        ``VirtualTimeDeadlock`` instead of hanging (and a loop spinning at one instant raises
        ``VirtualTimeSpin``). Leaving the ``conversation`` block closes the engine (no task left
        running) and fails the test if an engine task logged an error or audio of a generation
        followed its interruption event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline import events as ev
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.turn_commands import TurnSettings
from plugins.contracts import ASR, TTS, VAD, Brain, Endpointer
from plugins.fakes import FakeBrain, FakeTTS, Faults
from plugins.vad.energy import EnergyVAD
from tests.simulated_client import (
    EPS_MS,
    FRAME_MS,
    FRAME_SAMPLES,
    ClientSettings,
    Clock,
    Microphone,
    PhraseBook,
    SimulatedClient,
    SpokenWordsASR,
    frame_count,
    noise_frames,
)

# ---------------------------------------------------------------- what the server sent (Rule 3)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One server event and when (virtual ms) the engine sent it."""

    at: float
    index: int
    event: ev.ServerEvent
    audio_ms: float = 0.0
    """Milliseconds of audio in an ``output_audio.delta``."""

    @property
    def type(self) -> str:
        return self.event.TYPE

    @property
    def wire(self) -> dict[str, Any]:
        return ev.wire(self.event, extensions=True)

    def __getitem__(self, key: str) -> Any:
        return self.wire[key]

    @property
    def generation(self) -> int | None:
        event = self.event
        if isinstance(event, ev.OutputAudioDelta | ev.ResponseInterrupted | ev.TurnLatency):
            return event.generation
        if isinstance(event, ev.ResponseCreated | ev.ResponseDone):
            return event.response.generation
        return None


# ---------------------------------------------------------------- the conversation


class Conversation:
    """A running engine with its microphone and client, the script's API and what was sent."""

    def __init__(
        self,
        *,
        plugins: Plugins,
        book: PhraseBook,
        settings: EngineSettings,
        client: ClientSettings,
        horizon_ms: float,
    ) -> None:
        self.clock = Clock()
        self.book = book
        self.store = InMemoryJournalStore()
        self.engine = Engine(
            plugins=plugins,
            sink=self,
            journal=self.store,
            thread=ThreadRef("tenant", "user", "thread"),
            persona=Persona("Be brief."),
            voice_session_id="vs_harness",
            settings=settings,
            clock=self.clock.loop.time,
        )
        self.engine.responder.defaults.client_pauses_playback = client.pauses
        self.microphone = Microphone(self.engine, self.clock, horizon_ms=horizon_ms)
        self.client = SimulatedClient(self.engine, self.clock, client, horizon_ms=horizon_ms)
        self.recorded: list[Recorded] = []
        self.violations: list[str] = []
        self.errors: list[logging.LogRecord] = []
        self._cursor = 0
        self._arrived = asyncio.Event()
        self._interrupted: set[int] = set()

    def start(self) -> None:
        self.microphone.start(on_stop=self._arrived.set)
        self.client.start()

    async def close(self) -> None:
        """Stop the microphone and the client, close the engine: no task is left running."""
        self.clock.close()
        await self.microphone.close()
        await self.engine.close()

    @property
    def now(self) -> float:
        """Virtual ms since the conversation started."""
        return self.clock.now

    # ------------------------------------------------------------ the script: the microphone

    async def say(self, text: str, *, ms: int, at: float | None = None) -> None:
        """The user says ``text`` for ``ms`` (from the next frame, or from virtual ``at``);
        returns when its last frame has been pushed."""
        pcm = self.book.speech(text, frame_count(ms) * FRAME_SAMPLES)
        start = self.microphone.place(ms, at)
        await self.microphone.play(
            start, ms, lambda k: pcm[k * FRAME_SAMPLES : (k + 1) * FRAME_SAMPLES]
        )

    async def noise(self, ms: int, *, at: float | None = None, seed: int = 7) -> None:
        """A sound without words (a cough, a door) for ``ms``."""
        frames = noise_frames(frame_count(ms) * FRAME_MS, seed)
        start = self.microphone.place(ms, at)
        await self.microphone.play(start, ms, lambda k: frames[k])

    async def silence(self, ms: int) -> None:
        """The microphone hears nothing for the next ``ms`` (after any sound placed)."""
        start = self.microphone.place(ms, None)
        await self.microphone.reaches(start + ms)

    async def wait(self, *, until_ms: float) -> None:
        """Let virtual time run (the microphone streams on) until ``until_ms``."""
        if until_ms < self.now - EPS_MS:
            raise ValueError(f"{until_ms} ms is in the past (now {self.now} ms)")
        await self.clock.sleep_until(until_ms)

    # ------------------------------------------------------------ the script: the client

    def type(self, text: str) -> None:
        """The user types ``text`` (a complete turn, answered at once)."""
        self.engine.push_text(text)

    def commit(self) -> bool:
        return self.engine.commit()

    def cancel(self) -> bool:
        return self.engine.cancel_response()

    def pause_microphone(self) -> None:
        self.engine.pause_microphone()

    def resume_microphone(self) -> None:
        self.engine.resume_microphone()

    # ------------------------------------------------------------ the sink (Rule 3)

    def send(self, event: ev.ServerEvent) -> None:
        now = self.now
        audio_ms = 0.0
        if isinstance(event, ev.OutputAudioDelta):
            audio_ms = len(event.delta) / 2 * 1000.0 / self.engine.settings.output_sample_rate
            if event.generation in self._interrupted:
                self.violations.append(
                    f"audio of generation {event.generation} at {now} ms after its interruption"
                )
        elif isinstance(event, ev.ResponseInterrupted):
            self._interrupted.add(event.generation)
        self.recorded.append(Recorded(now, len(self.recorded), event, audio_ms))
        self._arrived.set()
        self.client.receive(event, audio_ms)

    # ------------------------------------------------------------ reading what happened

    async def until(
        self,
        type: str,
        *,
        where: Callable[[Recorded], bool] | None = None,
        within_ms: float = 30_000.0,
    ) -> Recorded:
        """The next event of ``type`` (matching ``where``) after the cursor; moves the cursor
        past it. Fails after ``within_ms`` of virtual time."""
        try:
            async with asyncio.timeout(within_ms / 1000.0):
                while True:
                    for index in range(self._cursor, len(self.recorded)):
                        recorded = self.recorded[index]
                        if recorded.type == type and (where is None or where(recorded)):
                            self._cursor = index + 1
                            return recorded
                    self.microphone.raise_failure()
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            seen = ", ".join(f"{r.type}@{r.at:g}" for r in self.recorded[-8:])
            raise AssertionError(
                f"no {type} within {within_ms:g} ms (now {self.now:g} ms); last events: {seen}"
            ) from None

    def events(self, type: str | None = None, *, generation: int | None = None) -> list[Recorded]:
        return [
            r
            for r in self.recorded
            if (type is None or r.type == type)
            and (generation is None or r.generation == generation)
        ]

    def at(self, type: str, *, nth: int = 0, generation: int | None = None) -> float:
        """Virtual ms of the ``nth`` event of ``type`` (of ``generation``)."""
        found = self.events(type, generation=generation)
        if len(found) <= nth:
            raise AssertionError(f"only {len(found)} {type} event(s); wanted #{nth}")
        return found[nth].at

    def first_audio_at(self, generation: int) -> float:
        return self.at(ev.OutputAudioDelta.TYPE, generation=generation)

    def audio(self, generation: int) -> list[Recorded]:
        return self.events(ev.OutputAudioDelta.TYPE, generation=generation)

    def audio_sent_ms(self, generation: int) -> float:
        return sum(r.audio_ms for r in self.audio(generation))

    def interrupted_at(self, generation: int | None = None) -> float:
        """Virtual ms at which an answer (``generation``, else the first) was cut off by the
        user. Every barge-in timing is read here: when sound during an answer first pauses
        playback (TT-1), this is the one place to change."""
        found = self.events(ev.ResponseInterrupted.TYPE, generation=generation)
        if not found:
            raise AssertionError(f"no answer was interrupted (generation {generation})")
        return found[0].at

    def done(self, generation: int) -> dict[str, Any]:
        """The ``response`` of the generation's ``response.done``."""
        found = self.events(ev.ResponseDone.TYPE, generation=generation)
        if not found:
            raise AssertionError(f"generation {generation} has no response.done")
        response: dict[str, Any] = found[0]["response"]
        return response

    def generations(self) -> list[int]:
        """The generations that were answered (``response.created``), in order."""
        return [g for r in self.events(ev.ResponseCreated.TYPE) if (g := r.generation)]

    async def journal(self) -> list[dict[str, Any]]:
        """The thread's journal events as ``{"kind": …, **payload}``."""
        events = await self.store.read(self.engine.thread)
        return [{"kind": e.kind, **e.payload} for e in events]


class _ErrorLog(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@asynccontextmanager
async def conversation(
    *,
    brain: Brain | None = None,
    tts: TTS | None = None,
    vad: VAD | None = None,
    asr: ASR | None = None,
    asr_faults: Faults | None = None,
    endpointer: Endpointer | None = None,
    turns: TurnSettings | None = None,
    settings: EngineSettings | None = None,
    client: ClientSettings | None = None,
    idle_timeout_s: float | None = None,
    horizon_ms: float = 120_000.0,
    expect_errors: bool = False,
) -> AsyncIterator[Conversation]:
    """A conversation on a fresh engine — the energy VAD, ``SpokenWordsASR`` (with
    ``asr_faults``), ``FakeBrain`` and ``FakeTTS`` at 40 ms per character unless given — with an
    in-memory journal and the simulated client; closed when the block ends (Rule 4). Needs
    ``in_virtual_time``."""
    book = PhraseBook()
    settings = settings or EngineSettings()
    if turns is not None:
        settings = replace(settings, turns=turns)
    plugins = Plugins(
        vad or EnergyVAD(),
        asr or SpokenWordsASR(book, faults=asr_faults),
        brain or FakeBrain(),
        tts or FakeTTS(ms_per_char=40.0),
        endpointer,
    )
    convo = Conversation(
        plugins=plugins,
        book=book,
        settings=settings,
        client=client or ClientSettings(),
        horizon_ms=horizon_ms,
    )
    convo.engine.idle_timeout_s = idle_timeout_s
    handler = _ErrorLog(convo.errors)
    logger = logging.getLogger("pipeline")
    logger.addHandler(handler)
    convo.start()
    try:
        yield convo
    finally:
        await convo.close()
        logger.removeHandler(handler)
    if convo.errors and not expect_errors:
        first = convo.errors[0].exc_info
        raise AssertionError(
            "engine errors: " + "; ".join(r.getMessage() for r in convo.errors)
        ) from (first[1] if first else None)
    if convo.violations:
        raise AssertionError("; ".join(convo.violations))


__all__ = ["FRAME_MS", "ClientSettings", "Conversation", "Recorded", "conversation"]
