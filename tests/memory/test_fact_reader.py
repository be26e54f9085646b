"""The background fact reader over both stores: a session hands over a statement and goes on;
the entry arrives under the session's owner, replaces the older value of a keyed attribute,
and outlives the session; a switched-off memory, a full queue and a failing model store
nothing and stop nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

from memory.entries import MemorySource
from memory.fact_reader import FactRead, FactReader
from memory.session import SessionMemory
from memory.store import MemoryStore
from tests.runtime.role_memory_fakes import ScriptedMemoryModel

AT = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def said(attribute: str, value: str) -> str:
    return json.dumps({"attribute": attribute, "value": value})


async def switched_on() -> bool:
    return True


def session(store: MemoryStore, reader: FactReader, user: str = "ana") -> SessionMemory:
    return SessionMemory(
        store, tenant="t", user=user, role_id="r", language="en", is_enabled=switched_on,
        facts=reader,
    )  # fmt: skip


async def contents(store: MemoryStore, user: str = "ana") -> list[str]:
    return [entry.content for entry in await store.list_entries("t", user, "r")]


async def test_a_statement_the_patterns_missed_is_read_in_the_background(
    store: MemoryStore,
) -> None:
    model = ScriptedMemoryModel([said("job", "teach piano")])
    reader = FactReader(model, store)
    memory = session(store, reader)

    await memory.on_user_final("I teach piano to kids.", thread_id="th", seq=3, at=AT)
    await reader.drained()

    assert await contents(store) == ["My job: teach piano"]
    (call,) = model.calls
    assert call["background"] is True  # SPEC RT-11: it yields to every person's turn
    assert await contents(store, "bob") == []
    await reader.close()


async def test_what_the_patterns_found_is_not_read_again(store: MemoryStore) -> None:
    model = ScriptedMemoryModel()
    reader = FactReader(model, store)

    await session(store, reader).on_user_final("My name is Ana.", thread_id="th", seq=1, at=AT)
    await reader.drained()

    assert model.calls == []
    assert await contents(store) == ["My name is Ana"]
    await reader.close()


async def test_a_clause_the_patterns_left_beside_one_they_found_is_read(store: MemoryStore) -> None:
    model = ScriptedMemoryModel([said("job", "teach maths")])
    reader = FactReader(model, store)

    text = "I'm Priya and I teach maths at a secondary school."
    await session(store, reader).on_user_final(text, thread_id="th", seq=1, at=AT)
    await reader.drained()

    (call,) = model.calls
    assert call["messages"][-1]["content"] == "I teach maths at a secondary school"
    assert sorted(await contents(store)) == ["My job: teach maths", "My name is Priya"]
    await reader.close()


async def test_a_later_value_of_the_same_attribute_replaces_the_older(store: MemoryStore) -> None:
    model = ScriptedMemoryModel([said("current_city", "Porto"), said("current_city", "Valencia")])
    reader = FactReader(model, store)
    memory = session(store, reader)

    await memory.on_user_final("These days my home base is Porto.", thread_id="th", seq=1, at=AT)
    await reader.drained()
    await memory.on_user_final(
        "Scratch that, my home base is Valencia now.", thread_id="th", seq=2, at=AT
    )
    await reader.drained()

    assert await contents(store) == ["I live in Valencia"]
    await reader.close()


async def test_the_read_outlives_the_session_that_handed_it_over(store: MemoryStore) -> None:
    gate = asyncio.Event()
    model = ScriptedMemoryModel([gate, said("job", "teach piano")])
    reader = FactReader(model, store)
    task = asyncio.create_task(
        session(store, reader).on_user_final("I teach piano.", thread_id="th", seq=1, at=AT)
    )
    await task  # the session's part is done at once: the turn never waits for the model
    assert len(model.calls) <= 1 and await contents(store) == []

    gate.set()
    await reader.drained()
    assert await contents(store) == ["My job: teach piano"]
    await reader.close()


async def test_memory_switched_off_before_the_save_stores_nothing(store: MemoryStore) -> None:
    gate = asyncio.Event()
    model = ScriptedMemoryModel([gate, said("job", "teach piano")])
    reader = FactReader(model, store)
    switched = [True]

    async def is_enabled() -> bool:
        return switched[0]

    source = MemorySource("th", 1, AT)
    reader.offer(FactRead("t", "ana", "r", "I teach piano", source, is_enabled))
    switched[0] = False
    gate.set()
    await reader.drained()

    assert await contents(store) == []
    await reader.close()


async def test_a_failing_model_and_a_full_queue_stop_nothing(store: MemoryStore) -> None:
    gate = asyncio.Event()
    model = ScriptedMemoryModel([gate, RuntimeError("model down"), said("job", "teach piano")])
    reader = FactReader(model, store, max_waiting=2)
    source = MemorySource("th", 1, AT)

    offered = [
        reader.offer(FactRead("t", "ana", "r", text, source, switched_on))
        for text in ("I sing", "I teach piano", "I dance")
    ]
    gate.set()
    await reader.drained()

    assert offered == [True, True, False]
    assert (reader.counters.failed, reader.counters.dropped) == (1, 1)
    assert await contents(store) == ["My job: teach piano"]
    await reader.close()
    assert reader.offer(FactRead("t", "ana", "r", "I swim", source, switched_on)) is False
