"""The first audio sooner (issue 33 item 4): the brain's own opening words
(``BrainDelta.speak_now``) are synthesised and sent at once, not held until its model has
written the first sentence — in virtual time, through the whole engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime

import uvloop

from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent
from pipeline.loop import loop_time
from plugins.contracts import Brain, BrainDelta, BrainInput
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from tests.pipeline.test_engine_hold import Sink, until
from tests.virtual_time import in_virtual_time

MODEL_S = 2.0
"""How long the slow model takes to write its first sentence."""


class SlowModelBrain:
    """Code's opening words at once, then a model that needs ``MODEL_S`` for its sentence."""

    def __init__(self, *, speak_now: bool) -> None:
        self.speak_now = speak_now

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        yield BrainDelta(text="Okay, ", speak_now=self.speak_now)
        await asyncio.sleep(MODEL_S)
        yield BrainDelta(text="the meeting moved to Friday.")


def typed_engine(
    brain: Brain, sink: Sink, *, tts: FakeTTS | None = None, memory: InstantMemory | None = None
) -> Engine:
    """An engine on virtual time for typed turns with ``brain``."""
    return Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(["hi"]), brain, tts or FakeTTS()),
        sink=sink,
        journal=InMemoryJournalStore(),
        thread=ThreadRef("t", "u", "th"),
        persona=Persona("Be brief."),
        voice_session_id="vs_first",
        settings=EngineSettings(),
        clock=asyncio.get_running_loop().time,
        memory=memory,
    )


async def first_audio_after(speak_now: bool) -> tuple[float, list[str]]:
    sink, tts = Sink(), FakeTTS(ms_per_char=20)
    engine = typed_engine(SlowModelBrain(speak_now=speak_now), sink, tts=tts)
    try:
        asked = asyncio.get_running_loop().time()
        engine.push_text("when is the meeting?")
        first = await until(sink, "response.output_audio.delta")
        await until(sink, "response.done")
        return first - asked, list(tts.texts)
    finally:
        await engine.close()


@in_virtual_time
async def test_the_brains_opening_words_are_spoken_while_its_model_writes() -> None:
    early, said = await first_audio_after(speak_now=True)
    assert early < 0.1  # not after the model's MODEL_S
    assert said == ["Okay,", "the meeting moved to Friday."]
    held, said = await first_audio_after(speak_now=False)
    assert held > MODEL_S - 0.01  # without the mark they wait for the sentence, as before
    assert said == ["Okay, the meeting moved to Friday."]


class InstantBrain:
    """A brain faster than the loop: its whole answer, many deltas, without a pause."""

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        yield BrainDelta(text="Sure thing, here. ")
        for word in "This is the answer and it goes on for quite a few words.".split():
            yield BrainDelta(text=f"{word} ")


@in_virtual_time
async def test_the_first_sentence_is_spoken_before_a_fast_brain_writes_the_rest() -> None:
    """The synthesiser takes the first sentence as soon as it is cut: a brain that streams
    faster than the loop turns had every text delta written before the first audio (0.7–1.3 ms
    of a 2.5 ms turn in ``benchmarks.turn_overhead``)."""
    sink = Sink()
    engine = typed_engine(InstantBrain(), sink)
    try:
        engine.push_text("hello")
        await until(sink, "response.done")
    finally:
        await engine.close()
    kinds = [e["type"] for _, e in sink.events]
    first_audio = kinds.index("response.output_audio.delta")
    deltas = [i for i, kind in enumerate(kinds) if kind == "response.output_audio_transcript.delta"]
    assert len(deltas) == 14
    assert first_audio < deltas[-1]  # the rest of the text follows the first audio


def test_on_uvloop_the_engines_clock_reads_finer_than_a_millisecond() -> None:
    """uvloop's ``time()`` counts whole milliseconds, read once per iteration: the turn marks
    (``openrealtime.turn.latency``) read 2 or 3 for a 2.4 ms turn. The engine's clock on it
    moves within an iteration and stays on the loop's timeline."""

    async def read() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        first = loop_time()
        until_s = time.monotonic() + 0.0003
        while time.monotonic() < until_s:
            pass  # the same iteration, 0.3 ms later
        return first, loop_time(), loop.time()

    first, second, loops = uvloop.run(read())
    assert second - first >= 0.0003
    assert abs(second - loops) < 0.01  # the loop's timeline (it lags by its iteration)


class InstantMemory:
    """Long-term memory that answers without waiting (an in-process store)."""

    async def read(self) -> str | None:
        return "<memory_data>likes tea</memory_data>"

    async def on_user_final(
        self, text: str, *, thread_id: str, seq: int | None, at: datetime
    ) -> None:
        return None


class RoundCounter:
    """Counts the loop's rounds while it runs: one callback that schedules itself again."""

    def __init__(self) -> None:
        self.rounds = 0
        self.running = True

    def tick(self) -> None:
        self.rounds += 1
        if self.running:
            asyncio.get_running_loop().call_soon(self.tick)


@in_virtual_time
async def test_a_turn_goes_round_the_loop_few_times_before_its_first_audio() -> None:
    """Under load every round of the loop waits behind every other session's frames, so a
    turn's latency is its rounds times the round's length: the memory read, started with the
    response, cost the turn three more rounds (asyncio.wait on it) than the whole rest of it."""
    counter = RoundCounter()
    first_audio_round: list[int] = []

    class CountingSink(Sink):
        def send(self, value: ServerEvent) -> None:
            super().send(value)
            audio = self.events[-1][1]["type"] == "response.output_audio.delta"
            if audio and not first_audio_round:
                first_audio_round.append(counter.rounds)
                counter.running = False

    sink = CountingSink()
    engine = typed_engine(InstantBrain(), sink, memory=InstantMemory())
    try:
        engine.push_text("hello")
        asyncio.get_running_loop().call_soon(counter.tick)
        await until(sink, "response.done")
    finally:
        await engine.close()
    assert len(first_audio_round) == 1
    assert first_audio_round[0] <= 2  # 4 while the memory read started with the response
