"""The journal store contract (rules 1–4 of ``journal/store.py``), one suite for every backend.

Subclass ``JournalStoreContract`` with a ``store`` fixture; ``test_store_contract.py`` does so
for each store.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from journal.errors import EventConflict, WriterFenced
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.store import JournalStore, WriterFence

THREAD = ThreadRef("acme", "alice", "t1")


def user_input(event_id: str, text: str = "hello", session: str | None = None) -> NewEvent:
    return NewEvent(
        event_id, EventKind.USER_INPUT, {"text": text, "source": "voice"}, voice_session_id=session
    )


def assistant(event_id: str, text: str = "hi there") -> NewEvent:
    payload: dict[str, Any] = {
        "text": text,
        "heard_text": text[:3],
        "interrupted": True,
        "generation": 2,
    }
    return NewEvent(event_id, EventKind.ASSISTANT_OUTPUT, payload)


def seqs(events: list[JournalEvent]) -> list[int]:
    return [e.seq for e in events]


class JournalStoreContract:
    @pytest.fixture
    def store(self) -> JournalStore:
        raise NotImplementedError("a backend's test class provides the store")

    async def test_seq_starts_at_one_and_has_no_gaps(self, store: JournalStore) -> None:
        first = await store.append(THREAD, [user_input("e1")])
        second = await store.append(THREAD, [assistant("e2"), user_input("e3"), assistant("e4")])
        third = await store.append(THREAD, [user_input("e5")])
        assert seqs(first) == [1]
        assert seqs(second) == [2, 3, 4]
        assert seqs(third) == [5]
        stored = await store.read(THREAD)
        assert stored == first + second + third
        assert [e.event_id for e in stored] == ["e1", "e2", "e3", "e4", "e5"]
        assert all(e.thread == THREAD for e in stored)

    async def test_events_keep_kind_payload_and_session(self, store: JournalStore) -> None:
        payload: dict[str, Any] = {
            "call_id": "c1",
            "name": "lookup",
            "arguments": {"q": "naïve café 東京", "n": 3, "ratio": 0.25, "flags": [True, None]},
        }
        event = NewEvent("e1", EventKind.TOOL_CALL, payload, voice_session_id="vs1")
        [appended] = await store.append(THREAD, [event])
        [read] = await store.read(THREAD)
        assert read == appended
        assert read.kind is EventKind.TOOL_CALL
        assert read.payload == payload
        assert read.voice_session_id == "vs1"
        assert read.created_at is not None
        assert read.fingerprint() == event.fingerprint()

    async def test_item_ids_and_item_amendments_are_stored_like_any_event(
        self, store: JournalStore
    ) -> None:
        said: dict[str, Any] = {"text": "hi", "source": "text", "item_id": "item_1"}
        events = [
            NewEvent("e1", EventKind.USER_INPUT, said),
            NewEvent("e2", EventKind.ITEM_TRUNCATED, {"item_id": "item_1", "heard_text": "h"}),
            NewEvent("e3", EventKind.ITEM_DELETED, {"item_id": "item_1"}, voice_session_id="vs1"),
        ]
        appended = await store.append(THREAD, events)
        assert await store.append(THREAD, events) == appended  # idempotent, like any event
        read = await store.read(THREAD)
        assert read == appended
        kinds = [EventKind.USER_INPUT, EventKind.ITEM_TRUNCATED, EventKind.ITEM_DELETED]
        assert [e.kind for e in read] == kinds
        assert [e.payload for e in read] == [e.payload for e in events]
        assert await store.has_session(THREAD, "vs1")

    async def test_empty_batch_appends_nothing(self, store: JournalStore) -> None:
        assert await store.append(THREAD, []) == []
        assert seqs(await store.append(THREAD, [user_input("e1")])) == [1]

    async def test_threads_are_isolated_by_tenant_user_and_thread(
        self, store: JournalStore
    ) -> None:
        others = [
            ThreadRef("other-tenant", "alice", "t1"),
            ThreadRef("acme", "bob", "t1"),
            ThreadRef("acme", "alice", "t2"),
        ]
        await store.append(THREAD, [user_input("e1", session="vs1"), assistant("e2")])
        for i, other in enumerate(others):
            # The same event id in another thread is another event.
            [event] = await store.append(other, [user_input("e1", text=f"other {i}")])
            assert event.seq == 1
            assert event.thread == other
        assert [e.payload["text"] for e in await store.read(THREAD)] == ["hello", "hi there"]
        for i, other in enumerate(others):
            assert [e.payload["text"] for e in await store.read(other)] == [f"other {i}"]
            assert seqs(await store.read_tail(other, 5)) == [1]
            assert not await store.has_session(other, "vs1")
        assert await store.read(ThreadRef("acme", "alice", "nope")) == []
        assert await store.delete_thread(others[0]) == 1
        assert seqs(await store.read(THREAD)) == [1, 2]
        assert seqs(await store.read(others[1])) == [1]

    async def test_retried_append_returns_the_stored_events(self, store: JournalStore) -> None:
        batch = [user_input("e1"), assistant("e2")]
        first = await store.append(THREAD, batch)
        again = await store.append(THREAD, batch)
        assert again == first
        assert [e.created_at for e in again] == [e.created_at for e in first]
        # Partly stored: stored ids keep their seq, new ones follow.
        mixed = await store.append(THREAD, [assistant("e2"), user_input("e3")])
        assert seqs(mixed) == [2, 3]
        assert seqs(await store.read(THREAD)) == [1, 2, 3]

    async def test_same_id_twice_in_a_batch_is_one_event(self, store: JournalStore) -> None:
        stored = await store.append(THREAD, [user_input("e1"), user_input("e1"), assistant("e2")])
        assert seqs(stored) == [1, 1, 2]
        assert seqs(await store.read(THREAD)) == [1, 2]

    @pytest.mark.parametrize(
        "changed",
        [
            user_input("e1", text="something else"),
            NewEvent("e1", EventKind.SUMMARY, {"text": "hello", "source": "voice"}),
            user_input("e1", session="vs-other"),
        ],
        ids=["payload", "kind", "session"],
    )
    async def test_same_id_with_other_content_conflicts(
        self, store: JournalStore, changed: NewEvent
    ) -> None:
        await store.append(THREAD, [user_input("e1")])
        with pytest.raises(EventConflict):
            await store.append(THREAD, [changed])
        assert seqs(await store.read(THREAD)) == [1]

    async def test_a_conflicting_batch_writes_nothing(self, store: JournalStore) -> None:
        await store.append(THREAD, [user_input("e1")])
        with pytest.raises(EventConflict):
            await store.append(
                THREAD, [assistant("e2"), user_input("e1", text="changed"), assistant("e3")]
            )
        with pytest.raises(EventConflict):
            await store.append(THREAD, [assistant("e4"), assistant("e4", text="changed")])
        assert [e.event_id for e in await store.read(THREAD)] == ["e1"]
        # Nothing was consumed: the next append takes seq 2, and the refused ids are free.
        assert seqs(await store.append(THREAD, [assistant("e2"), assistant("e4")])) == [2, 3]

    async def test_concurrent_appenders_get_contiguous_unmixed_batches(
        self, store: JournalStore
    ) -> None:
        rng = random.Random(7)
        plans = [
            [[assistant(f"w{w}-b{b}-e{i}") for i in range(rng.randint(1, 5))] for b in range(4)]
            for w in range(20)
        ]

        async def writer(batches: list[list[NewEvent]]) -> list[list[JournalEvent]]:
            out = []
            for batch in batches:
                out.append(await store.append(THREAD, batch))
                await asyncio.sleep(0)
            return out

        results = await asyncio.gather(*(writer(p) for p in plans))
        total = sum(len(batch) for plan in plans for batch in plan)
        for plan, stored_batches in zip(plans, results, strict=True):
            for batch, stored in zip(plan, stored_batches, strict=True):
                assert [e.event_id for e in stored] == [e.event_id for e in batch]
                first = stored[0].seq
                assert seqs(stored) == list(range(first, first + len(batch)))
        everything = await store.read(THREAD)
        assert seqs(everything) == list(range(1, total + 1))
        assert len({e.event_id for e in everything}) == total

    async def test_read_after_seq_and_limit(self, store: JournalStore) -> None:
        await store.append(THREAD, [user_input(f"e{i}") for i in range(1, 11)])
        assert seqs(await store.read(THREAD, after_seq=7)) == [8, 9, 10]
        assert seqs(await store.read(THREAD, after_seq=2, limit=3)) == [3, 4, 5]
        assert seqs(await store.read(THREAD, limit=2)) == [1, 2]
        assert seqs(await store.read(THREAD, limit=0)) == []
        assert await store.read(THREAD, after_seq=10) == []
        assert await store.read(THREAD, after_seq=99, limit=5) == []

    async def test_read_tail(self, store: JournalStore) -> None:
        assert await store.read_tail(THREAD, 3) == []
        await store.append(THREAD, [user_input(f"e{i}") for i in range(1, 8)])
        tail = await store.read_tail(THREAD, 3)
        assert seqs(tail) == [5, 6, 7]
        assert [e.event_id for e in tail] == ["e5", "e6", "e7"]
        assert seqs(await store.read_tail(THREAD, 50)) == list(range(1, 8))
        assert await store.read_tail(THREAD, 0) == []

    async def test_has_session(self, store: JournalStore) -> None:
        assert not await store.has_session(THREAD, "vs1")
        await store.append(THREAD, [user_input("e1", session="vs1"), assistant("e2")])
        await store.append(THREAD, [user_input("e3", session="vs2")])
        assert await store.has_session(THREAD, "vs1")
        assert await store.has_session(THREAD, "vs2")
        assert not await store.has_session(THREAD, "vs3")

    async def test_delete_thread(self, store: JournalStore) -> None:
        assert await store.delete_thread(THREAD) == 0
        await store.append(THREAD, [user_input("e1", session="vs1"), assistant("e2")])
        await store.append(THREAD, [user_input("e3")])
        assert await store.delete_thread(THREAD) == 3
        assert await store.read(THREAD) == []
        assert await store.read_tail(THREAD, 5) == []
        assert not await store.has_session(THREAD, "vs1")
        assert await store.delete_thread(THREAD) == 0
        # A thread appended to after deletion starts again at seq 1; old ids are free.
        assert seqs(await store.append(THREAD, [assistant("e2"), user_input("e9")])) == [1, 2]

    # ------------------------------------------------------------ rule 4: writer fences

    async def test_a_fenced_writer_s_older_epoch_appends_nothing(self, store: JournalStore) -> None:
        old, new = WriterFence("vs_1", 0), WriterFence("vs_1", 1)
        await store.append_fenced(THREAD, [user_input("a", session="vs_1")], old)
        await store.fence(THREAD, new)
        with pytest.raises(WriterFenced):
            await store.append_fenced(THREAD, [assistant("b"), assistant("c")], old)
        stored = await store.append_fenced(THREAD, [assistant("d")], new)
        assert seqs(stored) == [2]
        assert [e.event_id for e in await store.read(THREAD)] == ["a", "d"]

    async def test_a_fence_only_rises_and_binds_only_its_writer_and_thread(
        self, store: JournalStore
    ) -> None:
        await store.fence(THREAD, WriterFence("vs_1", 3))
        await store.fence(THREAD, WriterFence("vs_1", 1))  # lower: changes nothing
        with pytest.raises(WriterFenced):
            await store.append_fenced(THREAD, [user_input("a")], WriterFence("vs_1", 2))
        await store.append_fenced(THREAD, [user_input("b")], WriterFence("vs_1", 3))
        await store.append_fenced(THREAD, [user_input("c")], WriterFence("vs_2", 0))
        other = ThreadRef(THREAD.tenant, THREAD.user, "t2")
        await store.append_fenced(other, [user_input("d")], WriterFence("vs_1", 0))
        await store.append(THREAD, [user_input("e")])  # a plain append is never fenced
        assert [e.event_id for e in await store.read(THREAD)] == ["b", "c", "e"]

    async def test_a_fenced_retry_of_an_append_that_landed_returns_what_is_stored(
        self, store: JournalStore
    ) -> None:
        old = WriterFence("vs_1", 0)
        first = await store.append_fenced(THREAD, [user_input("a")], old)
        await store.fence(THREAD, WriterFence("vs_1", 1))
        again = await store.append_fenced(THREAD, [user_input("a")], old)
        assert seqs(again) == seqs(first) == [1]
        with pytest.raises(WriterFenced):  # one new event in the batch: refused whole
            await store.append_fenced(THREAD, [user_input("a"), assistant("b")], old)
        assert len(await store.read(THREAD)) == 1

    async def test_a_fence_on_a_thread_with_no_events_holds(self, store: JournalStore) -> None:
        await store.fence(THREAD, WriterFence("vs_1", 1))
        with pytest.raises(WriterFenced):
            await store.append_fenced(THREAD, [user_input("a")], WriterFence("vs_1", 0))
        assert await store.read(THREAD) == []
