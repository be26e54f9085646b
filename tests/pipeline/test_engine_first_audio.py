"""The first audio sooner (issue 33 item 4): the brain's own opening words
(``BrainDelta.speak_now``) are synthesised and sent at once, not held until its model has
written the first sentence — in virtual time, through the whole engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from plugins.contracts import BrainDelta, BrainInput
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


async def first_audio_after(speak_now: bool) -> tuple[float, list[str]]:
    sink, tts = Sink(), FakeTTS(ms_per_char=20)
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(["hi"]), SlowModelBrain(speak_now=speak_now), tts),
        sink=sink,
        journal=InMemoryJournalStore(),
        thread=ThreadRef("t", "u", "th"),
        persona=Persona("Be brief."),
        voice_session_id="vs_first",
        settings=EngineSettings(),
        clock=asyncio.get_running_loop().time,
    )
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
