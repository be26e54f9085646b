"""Preemptive response through the engine, in virtual time (TT-2): the brain starts during the
endpoint wait; nothing is sent or journaled before the commit; a changed transcript discards the
work; only read-only tools run before the commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.turn_commands import TurnSettings
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolSpec
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from tests.pipeline.test_engine_hold import Sink, feed, silence, tone, until
from tests.virtual_time import in_virtual_time

SEARCH = ToolSpec("knowledge_search", "Search.", {"type": "object"}, read_only=True)
ORDER = ToolSpec("place_order", "Order.", {"type": "object"})


class ToolBrain:
    """Calls ``tool`` once, then answers with the result; each call is recorded."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if not request.tool_results:
            yield BrainDelta(tool_call=ToolCall(f"call_{len(self.requests)}", self.tool, {}))
            return
        yield BrainDelta(text=f"Found: {request.tool_results[-1].content}.")


def engine_for(
    asr: list[str], brain: Any, *, tools: dict[str, Any] | None = None
) -> tuple[Engine, Sink, InMemoryJournalStore, ThreadRef]:
    sink, journal, thread = Sink(), InMemoryJournalStore(), ThreadRef("t", "u", "th")
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(asr), brain, FakeTTS(ms_per_char=5)),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Be brief."),
        voice_session_id="vs_pre",
        # Silence alone ends the turn here (the cues would shorten the wait for some texts).
        settings=EngineSettings(turns=TurnSettings(silence_delay=0.8, transcript_cues=False)),
        clock=asyncio.get_running_loop().time,
        tools=tools,
        tool_specs=(SEARCH, ORDER),
    )
    return engine, sink, journal, thread


@in_virtual_time
async def test_the_brain_starts_in_the_endpoint_wait_and_its_answer_waits_for_the_commit() -> None:
    brain = FakeBrain(["It is sunny."], token_delay=0.05)
    engine, sink, journal, thread = engine_for(["what is the weather"], brain)
    try:
        await feed(engine, tone(600))
        stopped_talking = asyncio.get_running_loop().time()
        await feed(engine, silence(600))  # the VAD's end, then most of the 0.8 s wait
        assert len(brain.requests) == 1  # already thinking …
        before_commit = [e["type"] for _, e in sink.events]
        assert before_commit == ["input_audio_buffer.speech_started",
                                 "input_audio_buffer.speech_stopped"]  # fmt: skip
        assert await journal.read(thread) == []  # … and nothing is journaled yet
        first_audio = await until(sink, "response.output_audio.delta")
        committed = sink.of("input_audio_buffer.committed")[0][0]
        await until(sink, "response.done")
        assert len(brain.requests) == 1  # reused, not asked again
        # The answer's first audio comes with the commit: the brain's 3 tokens × 50 ms
        # were spent while the user was still deciding whether to go on.
        assert first_audio - committed < 0.01
        assert committed - stopped_talking > 0.75  # the silence delay after the VAD's end
        kinds = [e.kind for e in await journal.read(thread)]
        assert kinds == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
    finally:
        await engine.close()


@in_virtual_time
async def test_speech_resuming_discards_the_preemptive_answer() -> None:
    brain = FakeBrain(["Answer one.", "Answer two."])
    engine, sink, journal, thread = engine_for(["what is the", "what is the weather"], brain)
    try:
        await feed(engine, tone(600))
        await feed(engine, silence(500))  # a pause inside the turn: speculation, preemption
        assert len(brain.requests) == 1
        await feed(engine, tone(400))  # … the user goes on
        await feed(engine, silence(1200))
        await until(sink, "response.done")
        assert len(brain.requests) == 2
        assert brain.requests[1].current_input == "what is the weather"
        done = sink.of("response.done")[0][1]["response"]
        assert done["output_text"] == "Answer two."
        users = [
            e.payload["text"] for e in await journal.read(thread) if e.kind is EventKind.USER_INPUT
        ]
        assert users == ["what is the weather"]
    finally:
        await engine.close()


@in_virtual_time
async def test_a_read_only_search_runs_once_and_is_journaled_only_after_the_commit() -> None:
    searches: list[dict[str, Any]] = []

    async def search(arguments: dict[str, Any]) -> str:
        searches.append(arguments)
        return "returns within 7 days"

    brain = ToolBrain("knowledge_search")
    engine, sink, journal, thread = engine_for(
        ["how do returns work"], brain, tools={"knowledge_search": search}
    )
    try:
        await feed(engine, tone(600))
        await feed(engine, silence(600))
        assert len(searches) == 1 and await journal.read(thread) == []
        await until(sink, "response.done")
        assert len(searches) == 1 and len(brain.requests) == 2
        kinds = [e.kind for e in await journal.read(thread)]
        assert kinds == [EventKind.USER_INPUT, EventKind.TOOL_CALL, EventKind.TOOL_RESULT,
                         EventKind.ASSISTANT_OUTPUT]  # fmt: skip
        assert (
            sink.of("response.done")[0][1]["response"]["output_text"]
            == "Found: returns within 7 days."
        )
    finally:
        await engine.close()


@in_virtual_time
async def test_a_tool_with_effects_never_runs_before_the_commit() -> None:
    orders: list[float] = []

    async def place_order(arguments: dict[str, Any]) -> str:
        orders.append(asyncio.get_running_loop().time())
        return "order 42"

    brain = ToolBrain("place_order")
    engine, sink, journal, thread = engine_for(
        ["order a pizza"], brain, tools={"place_order": place_order}
    )
    try:
        await feed(engine, tone(600))
        await feed(engine, silence(600))
        assert orders == [] and len(brain.requests) == 1  # stopped at the call
        await until(sink, "response.done")
        committed = sink.of("input_audio_buffer.committed")[0][0]
        assert len(orders) == 1 and orders[0] >= committed  # run once, after the commit
        assert sink.of("response.done")[0][1]["response"]["output_text"] == "Found: order 42."
    finally:
        await engine.close()
