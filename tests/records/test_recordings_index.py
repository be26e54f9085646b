"""The recordings index's one contract (records/recordings.py), in memory and in PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from memory.crypto import Sealed
from records.recordings import (
    InMemoryRecordingIndex,
    PostgresRecordingIndex,
    Recording,
    RecordingBeingDeleted,
    RecordingIndex,
)
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]  # fixtures

START = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "postgres"])
def index(request: pytest.FixtureRequest) -> RecordingIndex:
    if request.param == "memory":
        return InMemoryRecordingIndex()
    return PostgresRecordingIndex(request.getfixturevalue("pg_pool"))


def recording(rec: str, *, tenant: str = "t1", owner: str = "ann", minute: int = 0) -> Recording:
    return Recording(
        tenant, rec, owner, f"vs_{rec}", "th_1", "role_1", "local", "k1",
        START + timedelta(minutes=minute),
    )  # fmt: skip


async def test_a_recording_is_kept_its_progress_noted_and_read_back(index: RecordingIndex) -> None:
    await index.add(recording("rec_a"))
    await index.progress("t1", "rec_a", duration_ms=1500, size_bytes=4096, key_id="k1")
    ended = START + timedelta(minutes=5)
    await index.progress(
        "t1", "rec_a", duration_ms=300_000, size_bytes=9000, key_id="k2", ended_at=ended
    )
    got = await index.get("t1", "rec_a")
    assert got is not None
    assert (got.duration_ms, got.size_bytes, got.key_id, got.ended_at) == (
        300_000,
        9000,
        "k2",
        ended,
    )
    assert got.to_json()["duration_ms"] == 300_000 and got.protected is False


async def test_reads_are_scoped_by_tenant_and_owner(index: RecordingIndex) -> None:
    await index.add(recording("rec_a", minute=1))
    await index.add(recording("rec_b", owner="bo", minute=0))
    await index.add(recording("rec_c", tenant="t2"))
    assert await index.get("t2", "rec_a") is None
    assert [r.id for r in await index.of_thread("t1", "ann", "th_1")] == ["rec_a"]
    assert [r.id for r in await index.of_thread("t1", None, "th_1")] == ["rec_b", "rec_a"]
    assert [r.id for r in await index.of_thread("t2", None, "th_1")] == ["rec_c"]


def kept(rec: str, *, days: int, protected: bool = False) -> Recording:
    return dataclasses.replace(
        recording(rec), retain_until=START + timedelta(days=days), protected=protected
    )


async def test_expired_recordings_are_claimed_longest_expired_first_never_a_protected_one(
    index: RecordingIndex,
) -> None:
    await index.add(kept("rec_a", days=2))
    await index.add(kept("rec_b", days=1))
    await index.add(kept("rec_c", days=1, protected=True))
    await index.add(kept("rec_d", days=30))
    await index.add(recording("rec_e"))  # kept until deleted
    now = START + timedelta(days=3)
    claimed = await index.claim_expired(now, 10)
    assert [r.id for r in claimed] == ["rec_b", "rec_a"]
    assert all(r.deleting_since == now for r in claimed)
    later = await index.claim_expired(now + timedelta(hours=1), 10)  # a run died: again
    assert [r.deleting_since for r in later] == [now, now]


async def test_a_claimed_row_goes_with_its_receipt_once(index: RecordingIndex) -> None:
    await index.add(kept("rec_a", days=1))
    now = START + timedelta(days=2)
    assert await index.remove("t1", "rec_a", reason="expired", at=now) is None  # not claimed
    await index.claim_expired(now, 10)
    receipt = await index.remove("t1", "rec_a", reason="expired", at=now)
    assert receipt is not None and (receipt.recording_id, receipt.reason) == ("rec_a", "expired")
    assert receipt.deleted_at == now and receipt.owner == "ann"
    assert await index.remove("t1", "rec_a", reason="expired", at=now) is None
    assert await index.get("t1", "rec_a") is None
    assert await index.receipt("t1", "rec_a") == receipt
    assert await index.receipt("t2", "rec_a") is None


async def test_a_hold_is_put_on_and_lifted_but_never_on_a_recording_being_deleted(
    index: RecordingIndex,
) -> None:
    await index.add(kept("rec_a", days=1))
    await index.add(kept("rec_b", days=1))
    held = await index.set_protected("t1", "rec_a", True)
    assert held is not None and held.protected
    assert await index.set_protected("t2", "rec_a", True) is None  # another tenant's
    await index.claim_expired(START + timedelta(days=2), 10)
    with pytest.raises(RecordingBeingDeleted):
        await index.set_protected("t1", "rec_b", True)
    lifted = await index.set_protected("t1", "rec_a", False)
    assert lifted is not None and not lifted.protected


async def test_a_timeline_is_kept_with_its_row_and_goes_with_it(index: RecordingIndex) -> None:
    await index.add(recording("rec_a"))
    assert await index.timeline("t1", "rec_a") is None
    first, later = Sealed("k1", b"\x01sealed"), Sealed("k2", b"\x02later")
    await index.progress("t1", "rec_a", duration_ms=10, size_bytes=1, key_id="k1", timeline=first)
    await index.progress("t1", "rec_a", duration_ms=20, size_bytes=2, key_id="k1")  # none: kept
    assert await index.timeline("t1", "rec_a") == first
    await index.progress("t1", "rec_a", duration_ms=30, size_bytes=3, key_id="k1", timeline=later)
    assert await index.timeline("t1", "rec_a") == later
    assert await index.timeline("t2", "rec_a") is None  # another tenant's read finds nothing
    await index.schedule_deletion("t1", "rec_a", at=START, reason="requested")
    assert [r.id for r in await index.claim_expired(START, 10)] == ["rec_a"]
    await index.remove("t1", "rec_a", reason="requested", at=START)
    assert await index.timeline("t1", "rec_a") is None


async def test_a_tenants_retention_moves_its_recordings_but_no_scheduled_deletion(
    index: RecordingIndex,
) -> None:
    await index.add(recording("rec_a", minute=0))
    await index.add(recording("rec_b", minute=10))
    await index.add(recording("rec_c", tenant="t2"))
    await index.add(recording("rec_d", minute=20))
    asked = START + timedelta(hours=1)
    assert await index.schedule_deletion("t1", "rec_d", at=asked, reason="requested")
    assert await index.retention_days("t1") is None
    moved = await index.set_retention_days("t1", 7, effective=7, at=START)
    assert moved == 2 and await index.retention_days("t1") == 7
    a, b, c, d = [await index.get(t, r) for t, r in
                  [("t1", "rec_a"), ("t1", "rec_b"), ("t2", "rec_c"), ("t1", "rec_d")]]  # fmt: skip
    assert a is not None and a.retain_until == START + timedelta(days=7)
    assert b is not None and b.retain_until == START + timedelta(days=7, minutes=10)
    assert c is not None and c.retain_until is None  # another tenant's
    assert d is not None and d.retain_until == asked  # its owner asked for it to go sooner
    assert await index.retention_days("t2") is None
    # Back to the deployment's (none here): kept until deleted.
    assert await index.set_retention_days("t1", None, effective=None, at=START) == 2
    a = await index.get("t1", "rec_a")
    assert a is not None and a.retain_until is None and await index.retention_days("t1") is None
