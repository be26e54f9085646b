"""The engine gives the brain its history — earlier turns, typed or spoken — within a budget,
and compacts long threads into verified summaries (SPEC J-3, J-4), with the real projector and
compactor."""

from __future__ import annotations

import asyncio

from journal.checkpoints import InMemoryCheckpointStore
from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.history import ConversationHistory
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from tests.conversation_harness import conversation
from tests.virtual_time import in_virtual_time


class Sink:
    def __init__(self) -> None:
        self.done = 0

    def send(self, value: ServerEvent) -> None:
        event = wire(value, extensions=True)
        if event["type"] == "response.done":
            self.done += 1


async def test_long_threads_are_compacted_and_the_summary_reaches_the_brain() -> None:
    journal, checkpoints = InMemoryJournalStore(), InMemoryCheckpointStore()
    thread = ThreadRef("t", "u", "th")
    brain = FakeBrain(["Noted, that is an interesting detail about your day."])
    sink = Sink()
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), brain, FakeTTS(ms_per_char=0.1)),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Be brief."),
        voice_session_id="vs_hist",
        history=ConversationHistory(journal, checkpoints, context_window=700, reserved_output=100),
    )
    try:
        for turn in range(30):
            engine.push_text(f"Fact number {turn}: my favourite colour today is colour {turn}.")
            for _ in range(300):
                if sink.done > turn:
                    break
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)  # the last compaction runs after the response
    finally:
        await engine.close()
    assert await checkpoints.latest(thread) is not None
    last = brain.requests[-1].model_text
    assert "Summary of earlier conversation:" in last
    assert "Fact number 28" in last  # the recent turns stay verbatim
    assert "Fact number 0:" not in last  # the oldest only through the summary


@in_virtual_time
async def test_earlier_turns_reach_the_brain() -> None:
    brain = FakeBrain(["Nice to meet you, Ada.", "Your name is Ada."])
    async with conversation(brain=brain) as convo:
        convo.type("my name is Ada")
        await convo.until("response.done")
        await convo.say("what is my name?", ms=600)
        await convo.until("response.done")
    first, second = brain.requests
    assert "my name is Ada" not in first.model_text.split("Current user input:")[0]
    assert second.model_text == (
        "Recent conversation context:\n"
        "User: my name is Ada\n"
        "Assistant: Nice to meet you, Ada.\n"
        "Current user input:what is my name?"
    )
