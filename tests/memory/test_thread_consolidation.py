"""Consolidation with a scripted ``JsonModel``: the TM-4 rules table (each refusal with its
reason), failures (nothing processed, the failure recorded), the prompt's budget, and saving
onto the latest memory so a person's concurrent edit survives."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from journal.events import EventKind, JournalEvent, ThreadRef
from memory.thread_consolidation import (
    ConsolidationLimits,
    ConsolidationResult,
    Consolidator,
    item_of,
    save_consolidation,
)
from memory.thread_memory import FactChange, ThreadMemory, forget, remember
from memory.thread_store import InMemoryThreadMemoryStore

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
REF = ThreadRef("t", "u1", "th")


def event(id_: str, kind: str, seq: int = 1, **payload: Any) -> JournalEvent:
    return JournalEvent(REF, seq, id_, EventKind(kind), payload, None, T0)


TALK = [
    event("i-01", "user_input", 1, text="Hi, I'm planning a trip to Lisbon."),
    event("i-02", "assistant_output", 2, text="Nice! What is your budget?"),
    event("i-03", "user_input", 3, text="My budget is 1500 EUR. I prefer window seats."),
    event("i-04", "user_input", 4, text="We leave on 14 March."),
]


@dataclass
class ScriptedJsonModel:
    """Answers from a script: a string is the answer, an exception is raised, a float is a
    delay (seconds) before the next step."""

    script: list[object]
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        self.calls.append({"messages": messages, "schema": schema, "max_tokens": max_tokens,
                           "lane": lane, "background": background})  # fmt: skip
        while True:
            step = self.script.pop(0)
            if isinstance(step, float):
                await asyncio.sleep(step)
                continue
            if isinstance(step, BaseException):
                raise step
            assert isinstance(step, str)
            return step


def answer(*changes: dict[str, Any]) -> str:
    return json.dumps({"changes": list(changes)})


def upsert(key: str, content: str, *sources: str, kind: str = "fact") -> dict[str, Any]:
    return {"op": "upsert", "key": key, "content": content, "kind": kind, "sources": list(sources)}


async def consolidate(
    *script: object, memory: ThreadMemory | None = None, events: Sequence[JournalEvent] = TALK
) -> tuple[ConsolidationResult, ScriptedJsonModel]:
    model = ScriptedJsonModel(list(script))
    consolidator = Consolidator(model, limits=ConsolidationLimits(timeout_s=0.2, queue_s=0.0))
    result = await consolidator.consolidate(events, memory or ThreadMemory(), lane="th")
    return result, model


async def test_good_changes_are_accepted_and_every_item_processed() -> None:
    result, model = await consolidate(
        answer(
            upsert("Budget", "The trip budget is 1500 EUR.", "i-03"),
            upsert("departure_date", "They leave on 14 March.", "i-04", kind="decision"),
            upsert("seat", "Prefers window seats.", "i-03", kind="preference"),
        )
    )
    assert result.failure is None and result.refused == ()
    assert [c.key for c in result.accepted] == ["budget", "departure_date", "seat"]
    assert result.processed == {"i-01", "i-02", "i-03", "i-04"}
    memory = result.apply(ThreadMemory(), T0)
    assert memory.facts["budget"].sources == ("i-03",)
    assert memory.processed == result.processed and memory.revision == 1
    assert model.calls[0]["lane"] == "th"
    assert model.calls[0]["background"] is True  # learning waits for the pauses (SPEC RT-11)


PROCESSED = ThreadMemory(
    remember(ThreadMemory(), "city", "Lisbon", "fact", "i-00", now=T0).facts,
    frozenset({"i-00"}),
    1,
)
RETRACTED = forget(
    remember(ThreadMemory(), "hotel", "Hotel Avenida", "fact", "i-00", now=T0), "hotel", "c-1",
    now=T0,
)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "memory", "reason"),
    [
        (upsert("city", "Porto", "i-00"), PROCESSED, "cites_processed"),
        (upsert("city", "Porto"), PROCESSED, "cites_nothing"),
        (upsert("city", "Porto", "i-99"), PROCESSED, "cites_unknown"),
        (upsert("city", "Porto", "i-03", "i-00"), PROCESSED, "cites_processed"),
        (upsert("hotel", "Hotel Avenida again", "i-03"), RETRACTED, "retracted"),
        (
            {"op": "retract", "key": "hotel", "content": "", "kind": "fact", "sources": ["i-03"]},
            RETRACTED,
            "retracted",
        ),  # fmt: skip
        (
            {"op": "retract", "key": "nothing", "content": "", "kind": "fact", "sources": ["i-03"]},
            PROCESSED,
            "unknown_fact",
        ),  # fmt: skip
        (upsert("wifi", "The wifi password is hunter2", "i-03"), PROCESSED, "sensitive"),
        (upsert("api", "Their API key is sk-abcdefghijklmnop", "i-03"), PROCESSED, "sensitive"),
        (upsert("link", "Booking at https://u:p@x.example/b?t=1", "i-03"), PROCESSED, "sensitive"),
        (
            upsert("seat", "Prefers aisle seats.", "i-03", kind="preference"),
            PROCESSED,
            "unclear_preference",
        ),  # fmt: skip
        (
            upsert("lisbon", "Likes Lisbon a lot.", "i-01", kind="preference"),
            PROCESSED,
            "unclear_preference",
        ),  # fmt: skip
        (upsert("???", "Something", "i-03"), PROCESSED, "invalid_key"),
        (upsert("long", "x" * 501, "i-03"), PROCESSED, "too_long"),
        (upsert("blank", "   ", "i-03"), PROCESSED, "empty"),
        (upsert("city", "Lisbon", "i-03"), PROCESSED, "unchanged"),
        (upsert("budget", "The budget is 1500 EUR.", "i-01"), PROCESSED, "ungrounded"),
        (upsert("mood", "Happy.", "i-03"), PROCESSED, "ungrounded"),
    ],
)
async def test_each_bad_change_is_refused_with_its_reason(
    change: dict[str, Any], memory: ThreadMemory, reason: str
) -> None:
    result, _ = await consolidate(answer(change), memory=memory)
    assert result.accepted == ()
    assert [r for _, r in result.refused] == [reason]
    # Refusals never stop the round: the items are read.
    assert result.processed == {"i-01", "i-02", "i-03", "i-04"}


async def test_a_second_change_on_one_key_is_refused() -> None:
    result, _ = await consolidate(
        answer(
            upsert("budget", "1500 EUR", "i-03"),
            upsert("Budget", "2000 EUR", "i-04"),
        )
    )
    assert [c.content for c in result.accepted] == ["1500 EUR"]
    assert [(c.content, r) for c, r in result.refused] == [("2000 EUR", "duplicate_key")]


async def test_malformed_changes_are_dropped_and_counted() -> None:
    result, _ = await consolidate(
        json.dumps(
            {
                "changes": [
                    "nope",
                    {"op": "upsert"},
                    upsert("budget", "1500 EUR", "i-03"),
                    {"op": "delete", "key": "k", "sources": []},
                ]
            }
        )  # fmt: skip
    )
    assert [c.key for c in result.accepted] == ["budget"] and result.malformed == 3


async def test_an_answer_cut_by_max_tokens_keeps_its_complete_changes() -> None:
    whole = answer(upsert("budget", "1500 EUR", "i-03"), upsert("date", "14 March", "i-04"))
    result, _ = await consolidate(whole[: whole.rindex('"date"') + 9])
    assert result.failure is None and [c.key for c in result.accepted] == ["budget"]


@pytest.mark.parametrize(
    ("step", "failure"),
    [
        (RuntimeError("the model crashed"), "model_error"),
        (0.5, "model_timeout"),
        ("not json at all", "unparsable"),
        ('{"changes": "none"}', "unparsable"),
        ("[]", "unparsable"),
        ('{"changes": [', "unparsable"),
    ],
)
async def test_a_model_failure_processes_nothing_and_is_recorded(
    step: object, failure: str
) -> None:
    result, _ = await consolidate(step, answer())
    assert result.failure == failure
    assert result.processed == frozenset() and result.accepted == ()
    memory = result.apply(PROCESSED, T0)
    assert memory.last_failure == failure and memory.processed == PROCESSED.processed
    assert memory.revision == PROCESSED.revision + 1
    # The next turn reads the same items again, and success clears the failure.
    retried, _ = await consolidate(answer(upsert("budget", "1500 EUR", "i-03")), memory=memory)
    after = retried.apply(memory, T0)
    assert after.last_failure is None and "budget" in after.facts
    assert after.processed >= {"i-01", "i-02", "i-03", "i-04"}


async def test_cancellation_is_not_a_failure() -> None:
    model = ScriptedJsonModel([5.0, answer()])
    task = asyncio.create_task(Consolidator(model).consolidate(TALK, ThreadMemory(), lane="th"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_nothing_to_read_calls_no_model() -> None:
    events = [event("s-1", "summary", 1, text="…"), event("d-1", "item_deleted", 2, item_id="x")]
    result, model = await consolidate(events=events)
    assert model.calls == [] and result.failure is None
    assert result.processed == {"s-1", "d-1"}
    result, model = await consolidate(events=TALK, memory=ThreadMemory(
        processed=frozenset(e.event_id for e in TALK)))  # fmt: skip
    assert model.calls == [] and result.processed == frozenset()


async def test_the_prompt_shows_ids_facts_and_cuts_old_items_with_a_note() -> None:
    many = [event(f"i-{n:03}", "user_input", n, text=f"message {n} " + "word " * 60)
            for n in range(1, 40)]  # fmt: skip
    memory = remember(ThreadMemory(), "city", "Lisbon", "fact", "c-1", now=T0)
    result, model = await consolidate(answer(), memory=memory, events=many)
    prompt = model.calls[0]["messages"][-1]["content"]
    assert "- city (fact): Lisbon" in prompt
    assert len(prompt) < 4_000
    assert result.skipped > 0 and f"({result.skipped} older items left out)" in prompt
    last = prompt.rstrip().splitlines()[-1]
    assert last.startswith("user: message 39") and last.endswith("(id i-039)")
    shown = [item.id for item in result.items]
    assert shown == [f"i-{n:03}" for n in range(40 - len(shown), 40)]
    enum = model.calls[0]["schema"]["properties"]["changes"]["items"]["properties"]["sources"]
    assert enum["items"]["enum"] == shown
    # A left-out item cannot be cited, but it is marked read.
    assert result.processed == {e.event_id for e in many}


def test_items_are_the_conversational_events() -> None:
    assert item_of(event("a", "assistant_output", text="The whole answer", heard_text="The",
                         interrupted=True)).text == "The"  # type: ignore[union-attr]  # fmt: skip
    call = item_of(event("c", "tool_call", name="book", arguments={"city": "Lisbon"}))
    assert call is not None and call.text == 'book({"city": "Lisbon"})'
    result = item_of(event("r", "tool_result", name="book", content="booked"))
    assert result is not None and (result.kind, result.text) == ("tool_result", "book: booked")
    assert item_of(event("s", "summary", text="x")) is None


async def test_a_persons_concurrent_forget_survives_the_save() -> None:
    store = InMemoryThreadMemoryStore()
    start = remember(ThreadMemory(), "hotel", "Hotel Avenida", "fact", "c-1", now=T0)
    await store.save("t", "u1", "th", start, 0)
    booking = event("i-05", "user_input", 5, text="Book the Hotel Avenida for 3 nights.")
    result, _ = await consolidate(
        answer(
            upsert("hotel", "Hotel Avenida, 3 nights", "i-05"),
            upsert("budget", "1500 EUR", "i-03"),
        ),
        memory=start,
        events=[*TALK, booking],
    )
    assert len(result.accepted) == 2
    # Meanwhile a person forgets the hotel.
    forgotten = forget(start, "hotel", "c-2", now=T0)
    await store.save("t", "u1", "th", forgotten, start.revision)
    saved = await save_consolidation(store, "t", "u1", "th", result, now=T0)
    assert saved.facts["hotel"].status == "retracted"
    assert saved.facts["budget"].content == "1500 EUR"
    assert saved.revision == forgotten.revision + 1


async def test_save_reapplies_after_losing_a_race() -> None:
    store = InMemoryThreadMemoryStore()
    result, _ = await consolidate(answer(upsert("budget", "1500 EUR", "i-03")))
    real_save = store.save
    raced: list[int] = []

    async def racing_save(*args: Any) -> ThreadMemory:
        if not raced:  # a person's Remember lands between the load and the save
            raced.append(1)
            person = remember(ThreadMemory(), "city", "Lisbon", "fact", "c-1", now=T0)
            await real_save("t", "u1", "th", person, 0)
        return await real_save(*args)

    store.save = racing_save  # type: ignore[method-assign]
    saved = await save_consolidation(store, "t", "u1", "th", result, now=T0)
    assert set(saved.facts) == {"budget", "city"} and saved.revision == 2


async def test_a_second_consolidation_of_the_same_items_changes_nothing() -> None:
    store = InMemoryThreadMemoryStore()
    first, _ = await consolidate(answer(upsert("budget", "1500 EUR", "i-03")))
    second, _ = await consolidate(answer(upsert("budget", "1600 EUR", "i-03")))
    saved = await save_consolidation(store, "t", "u1", "th", first, now=T0)
    again = await save_consolidation(store, "t", "u1", "th", second, now=T0)
    assert again == saved and again.facts["budget"].content == "1500 EUR"


def test_fact_changes_are_plain_values() -> None:
    assert FactChange("retract", "k").content == "" and FactChange("retract", "k").sources == ()
