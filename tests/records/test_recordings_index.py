"""The recordings index's one contract (records/recordings.py), in memory and in PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from records.recordings import (
    InMemoryRecordingIndex,
    PostgresRecordingIndex,
    Recording,
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
