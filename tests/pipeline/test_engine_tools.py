"""The engine runs the brain through the shared tool loop and journals calls and results."""

from __future__ import annotations

import asyncio
from typing import Any

from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, Persona, Plugins
from pipeline.events import ServerEvent, wire
from plugins.brain.local import KNOWLEDGE_TOOL, LocalBrain
from plugins.contracts import ToolSpec
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD


class Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def send(self, value: ServerEvent) -> None:
        event = wire(value, extensions=True)
        self.events.append(event)


async def test_tool_calls_and_results_are_journaled_and_answered() -> None:
    queries: list[str] = []

    async def knowledge_search(arguments: dict[str, Any]) -> str:
        queries.append(arguments["query"])
        return (
            "[source: Shop returns]\n<untrusted_knowledge>Returns are accepted within 7 days "
            "of delivery.</untrusted_knowledge>"
        )

    sink, journal = Sink(), InMemoryJournalStore()
    thread = ThreadRef("t", "u", "th")
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), LocalBrain(), FakeTTS(ms_per_char=1)),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Answer from the documents."),
        voice_session_id="vs_test",
        tools={"knowledge_search": knowledge_search},
        tool_specs=(
            ToolSpec(
                KNOWLEDGE_TOOL,
                "Search the documents bound to this role.",
                {"type": "object", "properties": {"query": {"type": "string"}}},
            ),
        ),
    )
    try:
        engine.push_text("How long do I have to return an item?")
        for _ in range(200):
            if any(e["type"] == "response.done" for e in sink.events):
                break
            await asyncio.sleep(0.01)
    finally:
        await engine.close()
    assert queries == ["How long do I have to return an item?"]
    kinds = [e.kind for e in await journal.read(thread)]
    assert kinds == [
        EventKind.USER_INPUT,
        EventKind.TOOL_CALL,
        EventKind.TOOL_RESULT,
        EventKind.ASSISTANT_OUTPUT,
    ]
    done = next(e for e in sink.events if e["type"] == "response.done")
    assert "7 days" in done["response"]["output_text"]


async def test_a_server_tool_runs_after_the_turns_input_and_its_call_are_journaled() -> None:
    """What confide relies on: when a server tool runs, the turn's user input and the call are
    in the journal; ``on_turn_end`` comes only once the response has ended."""
    sink, journal = Sink(), InMemoryJournalStore()
    thread = ThreadRef("t", "u", "th")
    seen: list[list[EventKind]] = []
    ended: list[int] = []

    async def knowledge_search(arguments: dict[str, Any]) -> str:
        seen.append([e.kind for e in await journal.read(thread)])
        assert not ended
        return "No relevant knowledge found."

    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), LocalBrain(), FakeTTS(ms_per_char=1)),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Answer from the documents."),
        voice_session_id="vs_test",
        tools={"knowledge_search": knowledge_search},
        tool_specs=(ToolSpec(KNOWLEDGE_TOOL, "Search.", {"type": "object"}),),
        on_turn_end=lambda: ended.append(len(sink.events)),
    )
    try:
        engine.push_text("How long do I have to return an item?")
        for _ in range(200):
            if ended:
                break
            await asyncio.sleep(0.01)
    finally:
        await engine.close()
    assert seen == [[EventKind.USER_INPUT, EventKind.TOOL_CALL]]
    assert ended
    done_at = next(i for i, e in enumerate(sink.events) if e["type"] == "response.done")
    assert ended[0] > done_at  # after the response's end was sent


async def test_an_interrupted_response_ends_its_turn_too() -> None:
    sink, journal = Sink(), InMemoryJournalStore()
    ended: list[str] = []
    engine = Engine(
        plugins=Plugins(
            EnergyVAD(), FakeASR(), FakeBrain(["one two three four five six"], token_delay=0.05),
            FakeTTS(ms_per_char=1),
        ),
        sink=sink,
        journal=journal,
        thread=ThreadRef("t", "u", "th"),
        persona=Persona(""),
        voice_session_id="vs_test",
        on_turn_end=lambda: ended.append("end"),
    )  # fmt: skip
    try:
        engine.push_text("Tell me a story.")
        for _ in range(200):
            if any(e["type"] == "response.created" for e in sink.events):
                break
            await asyncio.sleep(0.01)
        assert not ended
        engine.cancel_response()
        for _ in range(200):
            if ended:
                break
            await asyncio.sleep(0.01)
    finally:
        await engine.close()
    assert ended
    done = next(e for e in sink.events if e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"


async def test_every_response_ends_its_turn_exactly_once() -> None:
    """A completed answer told the engine's owner twice: its finalisation and its end both
    did."""
    sink, ended = Sink(), []
    engine = Engine(
        plugins=Plugins(
            EnergyVAD(), FakeASR(), FakeBrain(["Yes.", "Sure."]), FakeTTS(ms_per_char=1)
        ),
        sink=sink,
        journal=InMemoryJournalStore(),
        thread=ThreadRef("t", "u", "th"),
        persona=Persona(""),
        voice_session_id="vs_test",
        on_turn_end=lambda: ended.append(len(sink.events)),
    )

    async def done(count: int) -> None:
        for _ in range(400):
            if sum(e["type"] == "response.done" for e in sink.events) >= count:
                return
            await asyncio.sleep(0.01)

    try:
        engine.push_text("Is it open?")
        await done(1)
        engine.push_text("And tomorrow?")
        await done(2)
    finally:
        await engine.close()  # every task of both responses has ended
    assert len(ended) == 2
