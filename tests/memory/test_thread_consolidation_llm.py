"""Consolidation with the real local model (Qwen2.5-Coder-0.5B-Instruct): one call over a short
conversation learns the budget with a valid citation. Loaded once for the session (``local_model``
in ``tests/memory/conftest.py``); skipped, with the reason, when the model's packages are not
installed (``make`` installs them)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from journal.events import EventKind, JournalEvent, ThreadRef
from memory.thread_consolidation import ConsolidationLimits, Consolidator
from memory.thread_memory import ThreadMemory, render_block
from plugins.brain.json_model import LocalJsonModel
from plugins.brain.local_model import LocalModel

pytestmark = pytest.mark.skipif(
    LocalModel.unavailable_reason() is not None,
    reason=f"local model not installed: {LocalModel.unavailable_reason()}",
)

REF = ThreadRef("t", "u1", "th")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TEXTS = [
    ("i-01", "user_input", "Hi, I want to plan a weekend trip to Lisbon."),
    ("i-02", "assistant_output", "Happy to help. What is your budget, and when do you go?"),
    ("i-03", "user_input", "My budget is 1500 euros, and we leave on the 14th of March."),
    ("i-04", "assistant_output", "Got it: 1500 euros, leaving on March 14."),
]
TALK = [
    JournalEvent(REF, seq, id_, EventKind(kind), {"text": text}, None, T0)
    for seq, (id_, kind, text) in enumerate(TEXTS, 1)
]


async def test_the_local_model_learns_the_budget_with_its_source(local_model: LocalModel) -> None:
    # Correctness, not speed, is tested here (benchmarks.thread_memory measures the time): the
    # bound only stops a hung run. Alone the call takes ~5–10 s; beside the other worker's
    # processes on two cores CI once took over 120 s, so the bound is the other model tests'.
    limits = ConsolidationLimits(timeout_s=300)
    consolidator = Consolidator(LocalJsonModel(local_model), limits=limits)
    result = await consolidator.consolidate(TALK, ThreadMemory(), lane="th")
    assert result.failure is None
    budget = [c for c in result.accepted if "1500" in c.content]
    assert budget, (result.accepted, result.refused)
    assert "i-03" in budget[0].sources
    assert all(set(c.sources) <= {"i-01", "i-02", "i-03", "i-04"} for c in result.accepted)
    memory = result.apply(ThreadMemory(), T0)
    assert memory.processed == {"i-01", "i-02", "i-03", "i-04"}
    assert "1500" in render_block(memory.facts.values())
