"""The engine gives the brain its history — earlier turns, typed or spoken — within a budget,
and compacts long threads into verified summaries (SPEC J-3, J-4), with the real projector and
compactor."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence

import pytest

from journal.checkpoints import InMemoryCheckpointStore
from journal.errors import WriterFenced
from journal.events import JournalEvent, NewEvent, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.history import ConversationHistory
from plugins.contracts import HistoryTurn
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


THREAD = ThreadRef("t", "u", "th")


async def converse(
    texts: Sequence[str],
    journal: InMemoryJournalStore,
    brain: FakeBrain,
    *,
    history: ConversationHistory | None = None,
    settle_s: float = 0.0,
) -> None:
    """Type ``texts`` one response after the other into an engine on ``THREAD``."""
    sink = Sink()
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), brain, FakeTTS(ms_per_char=0.1)),
        sink=sink,
        journal=journal,
        thread=THREAD,
        persona=Persona("Be brief."),
        voice_session_id="vs_hist",
        history=history,
    )
    try:
        for turn, text in enumerate(texts):
            engine.push_text(text)
            for _ in range(300):
                if sink.done > turn:
                    break
                await asyncio.sleep(0.005)
        await asyncio.sleep(settle_s)
    finally:
        await engine.close()


async def test_long_threads_are_compacted_and_the_summary_reaches_the_brain() -> None:
    journal, checkpoints = InMemoryJournalStore(), InMemoryCheckpointStore()
    brain = FakeBrain(["Noted, that is an interesting detail about your day."])
    await converse(
        [f"Fact number {turn}: my favourite colour today is colour {turn}." for turn in range(30)],
        journal,
        brain,
        history=ConversationHistory(journal, checkpoints, context_window=700, reserved_output=100),
        settle_s=0.1,  # the last compaction runs after the response
    )
    assert await checkpoints.latest(THREAD) is not None
    last = brain.requests[-1].model_text
    assert "Summary of earlier conversation:" in last
    history = brain.requests[-1].history
    assert history[0].role == "summary"
    assert len(history) == brain.requests[-1].conversation_context.count("\n") + 1
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


class BufferingJournal(InMemoryJournalStore):
    """Keeps what is appended but answers like the session's buffer while the database is
    down: the events come back without a seq (0)."""

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        stored = await super().append(thread, events)
        return [dataclasses.replace(event, seq=0) for event in stored]


async def test_with_the_journal_down_the_brain_gets_the_buffered_history_as_turns() -> None:
    brain = FakeBrain(["Noted."])
    await converse(["My dog is called Rex.", "What is his name?"], BufferingJournal(), brain)
    last = brain.requests[-1]
    assert last.conversation_context == "User: My dog is called Rex.\nAssistant: Noted."
    assert last.history == (
        HistoryTurn("user", "My dog is called Rex."),
        HistoryTurn("assistant", "Noted."),
    )


class FencedJournal(InMemoryJournalStore):
    """A journal that refuses this copy's writes: another process continued the session."""

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        raise WriterFenced("writer vs_hist was fenced past epoch 0")


async def test_a_fenced_copy_s_refused_write_is_logged_as_expected_not_as_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An old copy of a session continued elsewhere has its user item refused by the journal's
    fence: its background write ends quietly (info, no traceback), nothing is journaled."""
    journal = FencedJournal()
    engine = Engine(
        plugins=Plugins(EnergyVAD(), FakeASR(), FakeBrain(["unused"]), FakeTTS(ms_per_char=0.1)),
        sink=Sink(),
        journal=journal,
        thread=THREAD,
        persona=Persona("Be brief."),
        voice_session_id="vs_hist",
    )
    with caplog.at_level(logging.INFO, logger="pipeline.loop"):
        engine.add_user_text("hello")
        await asyncio.sleep(0.05)
        await engine.close()
    fenced = [r for r in caplog.records if "continued elsewhere" in r.getMessage()]
    assert fenced and all(r.levelno == logging.INFO and r.exc_info is None for r in fenced)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert await journal.read(THREAD) == []
