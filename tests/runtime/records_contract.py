"""The conversation record store contract (rules 1–6 of ``runtime/records.py``), one suite for
every backend.

Subclass ``RecordStoreContract`` with a ``make_store`` fixture (limits → store);
``test_records.py`` does so for the in-memory and the PostgreSQL store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from runtime.records import (
    ConversationTooLong,
    IdempotencyKeyReused,
    RecordLimits,
    RecordMessage,
    RecordNotFound,
    RecordStore,
    Segment,
    SegmentGap,
    SegmentTooLarge,
    ThreadMismatch,
    VersionConflict,
    WriteResult,
)

MakeStore = Callable[[RecordLimits], RecordStore]
T0 = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
A = ("acme", "alice")


def msgs(*texts: str, first: int = 0) -> tuple[RecordMessage, ...]:
    return tuple(
        RecordMessage("user" if (first + i) % 2 == 0 else "assistant", text, T0 + timedelta(i))
        for i, text in enumerate(texts)
    )


def seg(
    key: str, base: int, start: int, *texts: str, record: str = "r1", **fields: str | None
) -> Segment:
    return Segment(
        record_id=record,
        idempotency_key=key,
        base_version=base,
        start_index=start,
        messages=msgs(*texts, first=start),
        **fields,  # type: ignore[arg-type]
    )


class RecordStoreContract:
    @pytest.fixture
    def make_store(self) -> MakeStore:
        raise NotImplementedError("a backend's test class provides the store")

    @pytest.fixture
    def store(self, make_store: MakeStore) -> RecordStore:
        return make_store(RecordLimits())

    async def texts(
        self, store: RecordStore, record: str = "r1", who: tuple[str, str] = A
    ) -> list[str]:
        return [m.text for m in await store.messages(*who, record)]

    # ------------------------------------------------------------------ segments and versions

    async def test_segments_append_and_each_adds_a_version(self, store: RecordStore) -> None:
        first = await store.write(*A, seg("k1", 0, 0, "hello", "hi there", title="Greeting"))
        assert first == WriteResult("r1", 1, 2)
        second = await store.write(*A, seg("k2", 1, 2, "how are you?"))
        assert second == WriteResult("r1", 2, 3)
        record = await store.get(*A, "r1")
        assert record is not None
        assert (record.id, record.version, record.message_count) == ("r1", 2, 3)
        assert record.title == "Greeting"
        assert record.created_at <= record.updated_at
        stored = await store.messages(*A, "r1")
        assert [(m.index, m.role, m.text) for m in stored] == [
            (0, "user", "hello"),
            (1, "assistant", "hi there"),
            (2, "user", "how are you?"),
        ]
        assert stored[0].at == T0
        assert [m.text for m in await store.messages(*A, "r1", from_index=1, limit=1)] == [
            "hi there"
        ]

    async def test_a_segment_replaces_from_its_start_and_keeps_later_messages(
        self, store: RecordStore
    ) -> None:
        await store.write(*A, seg("k1", 0, 0, "a", "b", "c", "d"))
        result = await store.write(*A, seg("k2", 1, 1, "B", "C"))
        assert result == WriteResult("r1", 2, 4)
        assert await self.texts(store) == ["a", "B", "C", "d"]
        result = await store.write(*A, seg("k3", 2, 3, "D", "e"))
        assert result == WriteResult("r1", 3, 5)
        assert await self.texts(store) == ["a", "B", "C", "D", "e"]

    async def test_an_empty_segment_only_updates_fields(self, store: RecordStore) -> None:
        assert await store.write(*A, seg("k1", 0, 0, title="Draft")) == WriteResult("r1", 1, 0)
        result = await store.write(*A, seg("k2", 1, 0, thread_id="th_1", voice_session_id="vs_1"))
        assert result == WriteResult("r1", 2, 0)
        record = await store.get(*A, "r1")
        assert record is not None
        assert (record.title, record.thread_id, record.voice_session_id) == (
            "Draft",
            "th_1",
            "vs_1",
        )

    async def test_a_gap_is_refused(self, store: RecordStore) -> None:
        await store.write(*A, seg("k1", 0, 0, "a"))
        with pytest.raises(SegmentGap):
            await store.write(*A, seg("k2", 1, 2, "c"))
        with pytest.raises(SegmentGap):
            await store.write(*A, seg("k3", 0, 1, "b", record="r2"))
        assert await self.texts(store) == ["a"]
        assert await store.get(*A, "r2") is None

    async def test_a_stale_version_conflicts_and_writes_nothing(self, store: RecordStore) -> None:
        await store.write(*A, seg("k1", 0, 0, "a"))
        await store.write(*A, seg("k2", 1, 1, "b"))
        with pytest.raises(VersionConflict) as conflict:
            await store.write(*A, seg("k3", 1, 1, "B", "c", title="changed"))
        assert conflict.value.current_version == 2
        with pytest.raises(VersionConflict) as conflict:
            await store.write(*A, seg("k4", 0, 0, "again"))
        assert conflict.value.current_version == 2
        record = await store.get(*A, "r1")
        assert record is not None
        assert (record.version, record.message_count, record.title) == (2, 2, None)
        assert await self.texts(store) == ["a", "b"]
        # The refused keys are free: a fresh write with the current version goes through.
        assert await store.write(*A, seg("k3", 2, 1, "B", "c")) == WriteResult("r1", 3, 3)

    async def test_a_later_version_of_an_unknown_record_is_not_found(
        self, store: RecordStore
    ) -> None:
        with pytest.raises(RecordNotFound):
            await store.write(*A, seg("k1", 3, 0, "a"))
        assert await store.get(*A, "r1") is None
        assert await store.recent(*A) == []

    # ------------------------------------------------------------------ idempotency

    async def test_a_retried_segment_returns_the_first_result_and_writes_nothing(
        self, store: RecordStore
    ) -> None:
        segment = seg("k1", 0, 0, "a", "b", thread_id="th_1")
        first = await store.write(*A, segment)
        assert await store.write(*A, segment) == first
        # Even after later writes, the retry of an accepted segment is not a conflict.
        await store.write(*A, seg("k2", 1, 2, "c"))
        assert await store.write(*A, segment) == first
        record = await store.get(*A, "r1")
        assert record is not None
        assert (record.version, record.message_count) == (2, 3)
        assert await self.texts(store) == ["a", "b", "c"]

    async def test_a_key_reused_for_other_content_is_refused(self, store: RecordStore) -> None:
        await store.write(*A, seg("k1", 0, 0, "a"))
        with pytest.raises(IdempotencyKeyReused):
            await store.write(*A, seg("k1", 1, 1, "b"))
        with pytest.raises(IdempotencyKeyReused):
            await store.write(*A, seg("k1", 0, 0, "A"))
        assert await self.texts(store) == ["a"]
        # Keys belong to their record: the same key on another record is another segment.
        assert await store.write(*A, seg("k1", 0, 0, "x", record="r2")) == WriteResult("r2", 1, 1)

    async def test_concurrent_writes_with_one_key_write_once(self, store: RecordStore) -> None:
        segment = seg("k1", 0, 0, "a", "b", "c")
        results = await asyncio.gather(*(store.write(*A, segment) for _ in range(8)))
        assert set(results) == {WriteResult("r1", 1, 3)}
        follow = seg("k2", 1, 3, "d")
        results = await asyncio.gather(*(store.write(*A, follow) for _ in range(8)))
        assert set(results) == {WriteResult("r1", 2, 4)}
        assert await self.texts(store) == ["a", "b", "c", "d"]

    async def test_concurrent_writes_on_one_version_let_exactly_one_win(
        self, store: RecordStore
    ) -> None:
        await store.write(*A, seg("k0", 0, 0, "a"))
        outcomes = await asyncio.gather(
            *(store.write(*A, seg(f"w{i}", 1, 1, f"from writer {i}")) for i in range(8)),
            return_exceptions=True,
        )
        wins = [o for o in outcomes if isinstance(o, WriteResult)]
        conflicts = [o for o in outcomes if isinstance(o, VersionConflict)]
        assert wins == [WriteResult("r1", 2, 2)]
        assert len(conflicts) == 7
        assert all(c.current_version == 2 for c in conflicts)
        assert len(await self.texts(store)) == 2

    async def test_expired_keys_are_forgotten(self, make_store: MakeStore) -> None:
        store = make_store(RecordLimits(key_retention_s=0.0))
        segment = seg("k1", 0, 0, "a")
        await store.write(*A, segment)
        await asyncio.sleep(0.01)
        # The key is gone, so the retry is judged on its version like any new segment.
        with pytest.raises(VersionConflict):
            await store.write(*A, segment)

    # ------------------------------------------------------------------ limits

    async def test_segment_message_limit(self, make_store: MakeStore) -> None:
        store = make_store(RecordLimits())
        texts = [f"m{i}" for i in range(101)]
        with pytest.raises(SegmentTooLarge) as refused:
            await store.write(*A, seg("k1", 0, 0, *texts))
        assert refused.value.code == "segment_too_many_messages"
        assert await store.get(*A, "r1") is None
        assert await store.write(*A, seg("k2", 0, 0, *texts[:100])) == WriteResult("r1", 1, 100)

    async def test_segment_byte_limit_counts_utf8(self, make_store: MakeStore) -> None:
        store = make_store(RecordLimits(max_segment_bytes=1024))
        # "语" is 3 bytes in UTF-8: 341 of them + 1 ASCII byte is exactly 1024 bytes.
        exact = "语" * 341 + "x"
        assert len(exact.encode("utf-8")) == 1024
        with pytest.raises(SegmentTooLarge) as refused:
            await store.write(*A, seg("k1", 0, 0, exact, "y"))
        assert refused.value.code == "segment_too_large"
        assert await store.get(*A, "r1") is None
        assert await store.write(*A, seg("k2", 0, 0, exact)) == WriteResult("r1", 1, 1)

    async def test_conversation_message_cap(self, make_store: MakeStore) -> None:
        store = make_store(RecordLimits(max_messages=5))
        await store.write(*A, seg("k1", 0, 0, "a", "b", "c"))
        with pytest.raises(ConversationTooLong):
            await store.write(*A, seg("k2", 1, 3, "d", "e", "f"))
        # Rewriting inside the cap and filling it exactly are fine.
        assert await store.write(*A, seg("k3", 1, 2, "C", "d", "e")) == WriteResult("r1", 2, 5)
        with pytest.raises(ConversationTooLong):
            await store.write(*A, seg("k4", 2, 5, "f"))
        assert await self.texts(store) == ["a", "b", "C", "d", "e"]

    # ------------------------------------------------------------------ scope and runtime ids

    async def test_records_are_per_tenant_and_user(self, store: RecordStore) -> None:
        await store.write(*A, seg("k1", 0, 0, "alice's words", thread_id="th_a"))
        others = [("acme", "bob"), ("other", "alice")]
        for who in others:
            assert await store.get(*who, "r1") is None
            assert await store.messages(*who, "r1") == []
            assert await store.recent(*who) == []
            assert await store.ids_for_thread(*who, "th_a") == []
            assert await store.delete(*who, "r1") is None
            with pytest.raises(RecordNotFound):
                await store.write(*who, seg("k2", 1, 1, "intruder"))
            # The same id written by someone else is their own record.
            assert await store.write(*who, seg("k1", 0, 0, "mine")) == WriteResult("r1", 1, 1)
            assert await self.texts(store, who=who) == ["mine"]
        assert await self.texts(store) == ["alice's words"]
        record = await store.get(*A, "r1")
        assert record is not None and record.version == 1
        assert await store.ids_for_thread(*A, "th_a") == ["r1"]

    async def test_runtime_ids_keep_the_latest_and_the_thread_never_changes(
        self, store: RecordStore
    ) -> None:
        await store.write(
            *A, seg("k1", 0, 0, "a", thread_id="th_1", voice_session_id="vs_1", role_id="role_1")
        )
        await store.write(*A, seg("k2", 1, 1, "b", voice_session_id="vs_2", thread_id="th_1"))
        await store.write(*A, seg("k3", 2, 2, "c"))
        record = await store.get(*A, "r1")
        assert record is not None
        assert (record.thread_id, record.voice_session_id, record.role_id) == (
            "th_1",
            "vs_2",
            "role_1",
        )
        with pytest.raises(ThreadMismatch):
            await store.write(*A, seg("k4", 3, 3, "d", thread_id="th_2"))
        assert await store.ids_for_thread(*A, "th_1") == ["r1"]
        assert await store.ids_for_thread(*A, "th_2") == []

    async def test_recent_lists_the_newest_first_within_the_limit(self, store: RecordStore) -> None:
        for name in ("r1", "r2", "r3"):
            await store.write(*A, seg("k", 0, 0, name, record=name))
            await asyncio.sleep(0.002)
        await store.write(*A, seg("k2", 1, 1, "later", record="r1"))
        assert [r.id for r in await store.recent(*A)] == ["r1", "r3", "r2"]
        assert [r.id for r in await store.recent(*A, limit=2)] == ["r1", "r3"]

    async def test_delete_removes_the_record_its_messages_and_keys(
        self, store: RecordStore
    ) -> None:
        segment = seg("k1", 0, 0, "a", "b", thread_id="th_1")
        await store.write(*A, segment)
        await store.write(*A, seg("k1", 0, 0, "x", record="r2", thread_id="th_1"))
        deleted = await store.delete(*A, "r1")
        assert deleted is not None and deleted.id == "r1" and deleted.thread_id == "th_1"
        assert await store.get(*A, "r1") is None
        assert await store.messages(*A, "r1") == []
        assert await store.delete(*A, "r1") is None
        assert await store.ids_for_thread(*A, "th_1") == ["r2"]
        # Its keys went with it: the same segment makes a new record, version 1.
        assert await store.write(*A, segment) == WriteResult("r1", 1, 2)
        assert await self.texts(store, "r2") == ["x"]
