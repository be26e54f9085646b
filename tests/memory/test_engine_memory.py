"""The engine's memory hook: the read runs beside the input's recording and lands in the system
prompt; a slow or failing memory never blocks or fails the turn; every final user message is
handed to extraction with its journal position."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD


class Sink:
    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.statuses: list[str] = []

    def send(self, value: ServerEvent) -> None:
        event = wire(value, extensions=True)
        if event["type"] == "response.done":
            self.statuses.append(event["response"]["status"])
            self.done.set()


class ScriptedMemory:
    def __init__(self, block: str | None, *, read_delay: float = 0.0, fail: bool = False):
        self.block = block
        self.read_delay = read_delay
        self.fail = fail
        self.reads = 0
        self.finals: list[tuple[str, str, int | None, datetime]] = []

    async def read(self) -> str | None:
        self.reads += 1
        await asyncio.sleep(self.read_delay)
        if self.fail:
            raise RuntimeError("memory store down")
        return self.block

    async def on_user_final(
        self, text: str, *, thread_id: str, seq: int | None, at: datetime
    ) -> None:
        self.finals.append((text, thread_id, seq, at))
        if self.fail:
            raise RuntimeError("extraction broke")


async def one_turn(memory: ScriptedMemory, text: str = "I like tea") -> tuple[FakeBrain, Sink]:
    brain = FakeBrain(["Okay."])
    sink = Sink()
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), brain, FakeTTS(ms_per_char=0.1)),
        sink=sink,
        journal=InMemoryJournalStore(),
        thread=ThreadRef("t", "u", "th_1"),
        persona=Persona("Be brief."),
        voice_session_id="vs_mem",
        settings=EngineSettings(memory_read_timeout_s=0.2),
        memory=memory,
    )
    try:
        engine.push_text(text)
        await asyncio.wait_for(sink.done.wait(), 5)
    finally:
        await engine.close()
    return brain, sink


async def test_the_memory_block_goes_into_the_system_prompt() -> None:
    block = "note\n<memory_data>\n- I like tea\n</memory_data>"
    memory = ScriptedMemory(block, read_delay=0.05)
    brain, sink = await one_turn(memory, "What do I like?")
    assert sink.statuses == ["completed"]
    assert brain.requests[0].system == f"Be brief.\n{block}"
    assert memory.reads == 1
    [(text, thread_id, seq, at)] = memory.finals
    assert (text, thread_id, seq) == ("What do I like?", "th_1", 1)
    assert isinstance(at, datetime)


async def test_a_slow_memory_read_does_not_hold_the_turn() -> None:
    memory = ScriptedMemory("<memory_data>\n- late\n</memory_data>", read_delay=5)
    started = time.perf_counter()
    brain, sink = await one_turn(memory)
    assert time.perf_counter() - started < 2
    assert sink.statuses == ["completed"]
    assert brain.requests[0].system == "Be brief."


async def test_a_failing_memory_never_fails_the_turn() -> None:
    memory = ScriptedMemory(None, fail=True)
    brain, sink = await one_turn(memory)
    assert sink.statuses == ["completed"]
    assert brain.requests[0].system == "Be brief."
    assert len(memory.finals) == 1
