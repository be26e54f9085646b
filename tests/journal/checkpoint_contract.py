"""The checkpoint store contract (rules 1–4 of ``journal/checkpoints.py``), one suite for every
backend.

Subclass ``CheckpointStoreContract`` with ``journal`` and ``checkpoints`` fixtures (the journal
holds the events checkpoints summarise); ``test_checkpoint_contract.py`` does so per backend.
"""

from __future__ import annotations

import asyncio

import pytest

from journal.checkpoints import MAX_SUMMARY_CHARS, Checkpoint, CheckpointStore, NewCheckpoint
from journal.errors import CheckpointConflict
from journal.events import ThreadRef
from journal.store import JournalStore
from tests.journal.builders import THREAD, append_all, conversation


def new(
    from_seq: int,
    to_seq: int,
    previous: Checkpoint | None = None,
    *,
    summary: str | None = None,
    checksum: str | None = None,
) -> NewCheckpoint:
    return NewCheckpoint(
        from_seq=from_seq,
        to_seq=to_seq,
        summary=summary if summary is not None else f"User: said things {from_seq}…{to_seq}",
        checksum=checksum or f"{from_seq:032d}{to_seq:032d}",
        previous_checksum=previous.checksum if previous is not None else None,
        summarizer="test",
    )


class CheckpointStoreContract:
    @pytest.fixture
    def journal(self) -> JournalStore:
        raise NotImplementedError("a backend's test class provides the journal")

    @pytest.fixture
    def checkpoints(self) -> CheckpointStore:
        raise NotImplementedError("a backend's test class provides the checkpoint store")

    @pytest.fixture(autouse=True)
    async def _threads(self, journal: JournalStore) -> None:
        # Checkpoints summarise a journal: give every thread used below some events.
        for thread in (THREAD, *OTHERS):
            await append_all(journal, thread, conversation(20))

    async def test_a_chain_starts_at_one_and_extends_without_gaps(
        self, checkpoints: CheckpointStore
    ) -> None:
        assert await checkpoints.latest(THREAD) is None
        first = await checkpoints.put(THREAD, new(1, 10))
        second = await checkpoints.put(THREAD, new(11, 25, first))
        assert (first.from_seq, first.to_seq, first.previous_checksum) == (1, 10, None)
        assert second.previous_checksum == first.checksum
        assert first.thread == second.thread == THREAD
        assert first.intact() and second.intact()
        assert await checkpoints.latest(THREAD) == second
        assert await checkpoints.list(THREAD) == [first, second]

    async def test_fields_round_trip(self, checkpoints: CheckpointStore) -> None:
        checkpoint = new(1, 3, summary="用户:我的目标是学会日语。\nAssistant: noted — “quotes” 🙂")
        stored = await checkpoints.put(THREAD, checkpoint)
        assert stored.content() == checkpoint
        assert stored.digest == checkpoint.digest()
        assert stored.created_at is not None
        [listed] = await checkpoints.list(THREAD)
        assert listed == stored and listed.summary == checkpoint.summary

    async def test_latest_before_a_seq(self, checkpoints: CheckpointStore) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        second = await checkpoints.put(THREAD, new(11, 20, first))
        assert await checkpoints.latest(THREAD, before_seq=21) == second
        assert await checkpoints.latest(THREAD, before_seq=20) == first
        assert await checkpoints.latest(THREAD, before_seq=11) == first
        assert await checkpoints.latest(THREAD, before_seq=10) is None

    @pytest.mark.parametrize(("from_seq", "to_seq"), [(12, 20), (5, 20), (1, 20), (2, 9)], ids=str)
    async def test_a_checkpoint_that_does_not_extend_the_chain_conflicts(
        self, checkpoints: CheckpointStore, from_seq: int, to_seq: int
    ) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        with pytest.raises(CheckpointConflict):
            await checkpoints.put(THREAD, new(from_seq, to_seq, first))
        assert await checkpoints.list(THREAD) == [first]

    async def test_the_first_checkpoint_must_start_at_one(
        self, checkpoints: CheckpointStore
    ) -> None:
        with pytest.raises(CheckpointConflict):
            await checkpoints.put(THREAD, new(2, 10))
        assert await checkpoints.latest(THREAD) is None

    async def test_previous_checksum_must_name_the_latest(
        self, checkpoints: CheckpointStore
    ) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        with pytest.raises(CheckpointConflict):
            await checkpoints.put(THREAD, new(11, 20))  # previous_checksum None
        wrong = NewCheckpoint(11, 20, "x", "c" * 64, "f" * 64, "test")
        with pytest.raises(CheckpointConflict):
            await checkpoints.put(THREAD, wrong)
        assert await checkpoints.latest(THREAD) == first

    async def test_an_identical_put_is_idempotent(self, checkpoints: CheckpointStore) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        second = await checkpoints.put(THREAD, new(11, 20, first))
        # Retried after a lost reply, or a racing compaction that computed the same thing.
        assert await checkpoints.put(THREAD, new(1, 10)) == first
        assert await checkpoints.put(THREAD, new(11, 20, first)) == second
        assert await checkpoints.list(THREAD) == [first, second]

    async def test_a_different_checkpoint_at_the_same_place_conflicts(
        self, checkpoints: CheckpointStore
    ) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        for other in (new(1, 10, summary="another text"), new(1, 12), new(1, 10, checksum="9")):
            with pytest.raises(CheckpointConflict):
                await checkpoints.put(THREAD, other)
        assert await checkpoints.list(THREAD) == [first]

    async def test_racing_puts_never_fork_the_chain(self, checkpoints: CheckpointStore) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        candidates = [new(11, 11 + i % 4, first, summary=f"run {i % 4}") for i in range(12)]
        outcomes = await asyncio.gather(
            *(checkpoints.put(THREAD, c) for c in candidates), return_exceptions=True
        )
        stored = [o for o in outcomes if isinstance(o, Checkpoint)]
        refused = [o for o in outcomes if isinstance(o, CheckpointConflict)]
        assert len(stored) + len(refused) == len(candidates)
        assert stored and len({(c.to_seq, c.summary) for c in stored}) == 1
        chain = await checkpoints.list(THREAD)
        assert chain == [first, stored[0]]

    async def test_checkpoints_are_isolated_by_tenant_user_and_thread(
        self, checkpoints: CheckpointStore
    ) -> None:
        mine = await checkpoints.put(THREAD, new(1, 10))
        for i, other in enumerate(OTHERS):
            assert await checkpoints.latest(other) is None
            theirs = await checkpoints.put(other, new(1, 5 + i))
            assert theirs.thread == other
        assert await checkpoints.list(THREAD) == [mine]
        assert await checkpoints.latest(THREAD) == mine
        assert await checkpoints.delete_thread(OTHERS[0]) == 1
        assert await checkpoints.latest(OTHERS[0]) is None
        assert await checkpoints.latest(OTHERS[1]) is not None
        assert await checkpoints.list(THREAD) == [mine]

    async def test_list_is_in_chain_order_and_bounded(self, checkpoints: CheckpointStore) -> None:
        stored: list[Checkpoint] = []
        previous = None
        for i in range(8):
            previous = await checkpoints.put(THREAD, new(i * 5 + 1, i * 5 + 5, previous))
            stored.append(previous)
        assert await checkpoints.list(THREAD, limit=3) == stored[:3]
        assert await checkpoints.list(THREAD, after_seq=10, limit=2) == stored[2:4]
        assert await checkpoints.list(THREAD, after_seq=40) == []
        assert await checkpoints.list(THREAD, limit=0) == []

    async def test_delete_thread_removes_its_chain(self, checkpoints: CheckpointStore) -> None:
        first = await checkpoints.put(THREAD, new(1, 10))
        await checkpoints.put(THREAD, new(11, 20, first))
        assert await checkpoints.delete_thread(THREAD) == 2
        assert await checkpoints.delete_thread(THREAD) == 0
        assert await checkpoints.latest(THREAD) is None
        # A new chain can start again from seq 1.
        assert (await checkpoints.put(THREAD, new(1, 4))).to_seq == 4

    async def test_summaries_and_ranges_are_bounded(self) -> None:
        with pytest.raises(ValueError):
            new(1, 2, summary="x" * (MAX_SUMMARY_CHARS + 1))
        with pytest.raises(ValueError):
            new(5, 4)
        with pytest.raises(ValueError):
            new(0, 4)


OTHERS = (
    ThreadRef("other-tenant", "alice", "t1"),
    ThreadRef("acme", "bob", "t1"),
    ThreadRef("acme", "alice", "t2"),
)
