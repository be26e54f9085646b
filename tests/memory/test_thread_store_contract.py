"""The thread memory store contract, run against the in-memory and the PostgreSQL store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from memory.errors import RevisionConflict
from memory.thread_memory import (
    Settings,
    ThreadMemory,
    configure,
    forget,
    record_failure,
    remember,
)
from memory.thread_store import ThreadMemoryStore

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def with_budget() -> ThreadMemory:
    return remember(
        ThreadMemory(), "budget", "The trip budget is 1500 EUR.", "fact", "i-02", now=T0
    )


async def test_a_thread_without_memory_loads_empty(thread_store: ThreadMemoryStore) -> None:
    assert await thread_store.load("t", "u1", "th") == ThreadMemory()


async def test_save_then_load_round_trips_every_field(thread_store: ThreadMemoryStore) -> None:
    memory = with_budget()
    memory = remember(memory, "Seat", "Prefers the aisle, 靠过道", "preference", "i-03",
                      now=T0 + timedelta(seconds=1))  # fmt: skip
    memory = forget(memory, "seat", "i-04", now=T0 + timedelta(seconds=2))
    memory = configure(memory, generate=False)
    memory = record_failure(memory, "model_timeout")
    memory = ThreadMemory(memory.facts, frozenset({"i-01", "i-02"}), memory.revision,
                          memory.overrides, memory.last_failure)  # fmt: skip
    saved = await thread_store.save("t", "u1", "th", memory, 0)
    assert saved == memory
    loaded = await thread_store.load("t", "u1", "th")
    assert loaded == memory
    assert loaded.facts["seat"].status == "retracted"
    assert loaded.facts["budget"].updated_at == T0


async def test_memory_is_scoped_by_tenant_user_and_thread(
    thread_store: ThreadMemoryStore,
) -> None:
    await thread_store.save("t", "u1", "th", with_budget(), 0)
    assert await thread_store.load("t", "u2", "th") == ThreadMemory()
    assert await thread_store.load("t2", "u1", "th") == ThreadMemory()
    assert await thread_store.load("t", "u1", "other") == ThreadMemory()
    # Another user's save on the same thread id is a thread of its own.
    await thread_store.save("t", "u2", "th", configure(ThreadMemory(), use=False), 0)
    assert (await thread_store.load("t", "u1", "th")).overrides.use is None


async def test_save_is_a_compare_and_set_on_revision(thread_store: ThreadMemoryStore) -> None:
    first = await thread_store.save("t", "u1", "th", with_budget(), 0)
    with pytest.raises(RevisionConflict) as raised:
        await thread_store.save("t", "u1", "th", with_budget(), 0)
    assert raised.value.current == first
    second = configure(first, use=False)
    assert await thread_store.save("t", "u1", "th", second, first.revision) == second
    with pytest.raises(RevisionConflict) as stale:
        await thread_store.save("t", "u1", "th", configure(first, use=True), first.revision)
    assert stale.value.current == second
    assert stale.value.code == "thread_conflict"


async def test_a_save_that_changes_nothing_writes_nothing(
    thread_store: ThreadMemoryStore,
) -> None:
    saved = await thread_store.save("t", "u1", "th", with_budget(), 0)
    assert await thread_store.save("t", "u1", "th", saved, saved.revision) == saved
    moved = await thread_store.save("t", "u1", "th", configure(saved, use=False), 1)
    with pytest.raises(RevisionConflict):  # a no-op at a stale revision is still stale
        await thread_store.save("t", "u1", "th", saved, saved.revision)
    saved = moved
    with pytest.raises(ValueError):
        await thread_store.save("t", "u1", "th", ThreadMemory(), saved.revision)


async def test_two_concurrent_saves_at_one_revision_exactly_one_wins(
    thread_store: ThreadMemoryStore,
) -> None:
    base = await thread_store.save("t", "u1", "th", with_budget(), 0)
    for round_ in range(5):
        a = configure(base, use=False)
        b = remember(base, f"k{round_}", "A person's concurrent edit.", "fact", "i-09", now=T0)
        results = await asyncio.gather(
            thread_store.save("t", "u1", "th", a, base.revision),
            thread_store.save("t", "u1", "th", b, base.revision),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, ThreadMemory)]
        losses = [r for r in results if isinstance(r, RevisionConflict)]
        assert len(wins) == 1 and len(losses) == 1, results
        assert losses[0].current == wins[0]
        base = await thread_store.load("t", "u1", "th")
        assert base == wins[0]


async def test_two_concurrent_first_saves_exactly_one_wins(
    thread_store: ThreadMemoryStore,
) -> None:
    results = await asyncio.gather(
        thread_store.save("t", "u1", "new", with_budget(), 0),
        thread_store.save("t", "u1", "new", configure(ThreadMemory(), generate=False), 0),
        return_exceptions=True,
    )
    assert sorted(type(r).__name__ for r in results) == ["RevisionConflict", "ThreadMemory"]


async def test_copy_keeps_facts_with_a_source_in_the_copied_history(
    thread_store: ThreadMemoryStore,
) -> None:
    memory = with_budget()
    memory = remember(memory, "date", "Leaving on 14 March.", "fact", "i-05", now=T0)
    memory = configure(memory, generate=False)
    memory = record_failure(memory, "model_timeout")
    memory = ThreadMemory(memory.facts, frozenset({"i-01", "i-02", "i-05"}), memory.revision,
                          memory.overrides, memory.last_failure)  # fmt: skip
    await thread_store.save("t", "u1", "th", memory, 0)
    fork = await thread_store.copy("t", "u1", "th", "fork", {"i-01", "i-02", "i-03"})
    assert set(fork.facts) == {"budget"}
    assert fork.processed == frozenset({"i-01", "i-02"})
    assert fork.overrides.generate is False  # a fork keeps its source's overrides
    assert fork.last_failure is None and fork.revision == 1
    assert await thread_store.load("t", "u1", "fork") == fork
    whole = await thread_store.copy("t", "u1", "th", "fork", None)
    assert set(whole.facts) == {"budget", "date"} and whole.revision == 2
    assert (await thread_store.load("t", "u1", "th")) == memory  # the source is untouched
    # Another user's thread of the same id copies as empty.
    assert (await thread_store.copy("t", "u2", "th", "fork", None)).facts == {}


async def test_delete_forgets_the_thread(thread_store: ThreadMemoryStore) -> None:
    await thread_store.save("t", "u1", "th", with_budget(), 0)
    await thread_store.save("t", "u2", "th", with_budget(), 0)
    await thread_store.delete("t", "u1", "th")
    assert await thread_store.load("t", "u1", "th") == ThreadMemory()
    assert (await thread_store.load("t", "u2", "th")).facts
    await thread_store.delete("t", "u1", "never")
    assert (await thread_store.save("t", "u1", "th", with_budget(), 0)).revision == 1


async def test_tenant_defaults_are_on_until_changed(thread_store: ThreadMemoryStore) -> None:
    assert await thread_store.get_defaults("t") == Settings(use=True, generate=True)
    await thread_store.set_defaults("t", Settings(use=True, generate=False))
    assert await thread_store.get_defaults("t") == Settings(use=True, generate=False)
    assert await thread_store.get_defaults("t2") == Settings()
    await thread_store.set_defaults("t", Settings(use=False, generate=True))
    assert await thread_store.get_defaults("t") == Settings(use=False, generate=True)
