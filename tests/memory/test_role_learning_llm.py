"""Role learning with the real local model (Qwen2.5-Coder-0.5B-Instruct): the person says a
durable fact, the agent confides, and one learning run through the server's learner
(``runtime.role_memory.RoleLearning``: the procedure, ``RoleMemoryModels``, the call log) learns
a fact visible to that person and to nobody else. Skipped when the model is not installed."""

from __future__ import annotations

import time

from journal.events import EventKind, NewEvent, ThreadRef
from journal.store import InMemoryJournalStore
from memory.learning_runs import InMemoryLearningRunStore, RunState
from memory.pool import Reader, ThreadSource
from memory.pool_store import InMemoryPoolStore, PoolLocks
from memory.role_records import InMemoryRoleRecords, RoleMemorySettings
from plugins.brain.json_model import LocalJsonModel
from plugins.brain.local_model import LocalModel
from runtime.role_memory import RoleLearning, RoleMemoryModels

THREAD = ThreadRef("t", "u1", "th")
TALK = [
    NewEvent(
        "e-1",
        EventKind.USER_INPUT,
        {"text": "Hi, I need a place for dinner tonight.", "source": "voice"},
    ),  # fmt: skip
    NewEvent(
        "e-2",
        EventKind.ASSISTANT_OUTPUT,
        {
            "text": "Sure. The Peanut House has great satay.",
            "heard_text": "",
            "interrupted": False,
            "generation": 1,
        },
    ),  # fmt: skip
    NewEvent(
        "e-3",
        EventKind.USER_INPUT,
        {"text": "I am allergic to peanuts, so no peanuts ever.", "source": "voice"},
    ),  # fmt: skip
    NewEvent(
        "e-4",
        EventKind.TOOL_CALL,
        {
            "call_id": "c1",
            "name": "confide",
            "arguments": {"text": "I suggested peanuts to someone with a peanut allergy."},
        },
    ),  # fmt: skip
]


async def test_the_local_model_learns_the_persons_fact_for_them_alone(
    local_model: LocalModel,
) -> None:
    journal, records = InMemoryJournalStore(), InMemoryRoleRecords()
    pool = InMemoryPoolStore(locks=PoolLocks())
    stored = await journal.append(THREAD, TALK)
    await records.put_settings("t", "r", RoleMemorySettings(memory_model="local"), expected=0)
    models = RoleMemoryModels({"local": LocalJsonModel(local_model)}, records)
    runs = InMemoryLearningRunStore()
    # Correctness, not speed: on a loaded machine one step took 100 s (0.5B model, ~400 prompt
    # tokens at 12 t/s, 1 t/s generated), so the step bound here is past RM-6's 2 minutes.
    learning = RoleLearning(
        models=models, runs=runs, pool=pool, journal=journal, records=records, keyring=None,
        step_timeout=300.0,
    )  # fmt: skip
    run_id = await learning.enqueue("t", "r", "th", "u1", stored[-1].seq)
    started = time.monotonic()
    await learning.learner.drain()
    seconds = time.monotonic() - started

    run = await runs.get(run_id)
    assert run.state is RunState.DONE, run.error_code
    me = Reader("u1", "t", frozenset({"r"}))
    entries = await pool.read_visible("t", "r", me)
    assert entries, "nothing learned"
    peanut = [e for e in entries if "peanut" in e.content.lower()]
    assert peanut, [e.content for e in entries]
    for entry in entries:
        assert entry.meta.layer == "fact"
        assert entry.meta.sources == (ThreadSource("th", "e-3"),) or entry.meta.sources == (
            ThreadSource("th", "e-1"),
        )
        assert {"from:u1", "for:person:u1", "tenant:t", "thread:th"} <= entry.meta.tags
    assert any(e.meta.sources == (ThreadSource("th", "e-3"),) for e in peanut)
    assert await pool.read_visible("t", "r", Reader("u2", "t", frozenset({"r"}))) == []
    (call,) = await records.calls("t", "r")
    assert call.purpose == "learn" and call.cost_micros == 0
    print(f"learning step with the local model: {seconds:.1f} s")
