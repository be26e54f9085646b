"""Expired recordings deleted for good (records/expiry.py, SPEC REC-4): audio first, then the
row with its receipt; a legal hold wins; a process killed between the two leaves no file
without its row and the next run finishes."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

from memory.crypto import Keyring
from records.audio_store import InMemoryAudioStore, LocalAudioStore, seal_piece
from records.expiry import expire_recordings
from records.recordings import InMemoryRecordingIndex, PostgresRecordingIndex, Recording
from tests.postgres import pg_pool, postgres_url
from tests.records.test_recordings_index import START, recording

__all__ = ["pg_pool", "postgres_url"]

ROOT = Path(__file__).resolve().parents[2]
KEYRING = Keyring.generate()


def expiring(rec: str, *, days: int = 1, protected: bool = False) -> Recording:
    return dataclasses.replace(
        recording(rec), retain_until=START + timedelta(days=days), protected=protected
    )


async def stored(store: Any, rec: str) -> None:
    for index in range(3):
        await store.put(rec, index, seal_piece(KEYRING, "t1", rec, index, b"audio"))


REC_A, REC_B, REC_C = (f"rec_{c * 32}" for c in "abc")


async def test_expired_recordings_go_audio_first_then_row_with_receipt_held_ones_stay() -> None:
    index, store = InMemoryRecordingIndex(), InMemoryAudioStore()
    for rec, days, held in ((REC_A, 1, False), (REC_B, 1, True), (REC_C, 30, False)):
        await index.add(expiring(rec, days=days, protected=held))
        await stored(store, rec)
    now = START + timedelta(days=2)

    receipts = await expire_recordings(index, store, now=now)

    assert [r.recording_id for r in receipts] == [REC_A]
    assert await store.read(REC_A) == [] and await index.get("t1", REC_A) is None
    assert await index.receipt("t1", REC_A) == receipts[0]
    assert len(await store.read(REC_B)) == 3 and await index.get("t1", REC_B) is not None
    assert len(await store.read(REC_C)) == 3
    assert await expire_recordings(index, store, now=now) == []


KILLED_BETWEEN = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from datetime import datetime
    from pathlib import Path

    import asyncpg

    from records.audio_store import LocalAudioStore
    from records.expiry import expire_recordings
    from records.recordings import PostgresRecordingIndex


    class DiesAfterTheAudio(LocalAudioStore):
        async def delete(self, recording_id):
            await super().delete(recording_id)
            os.kill(os.getpid(), signal.SIGKILL)  # before the row is touched


    async def main(url, root, now):
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        index = PostgresRecordingIndex(pool)
        store = DiesAfterTheAudio(Path(root))
        await expire_recordings(index, store, now=datetime.fromisoformat(now))


    asyncio.run(main(*sys.argv[1:]))
    """
)


def run_killed(script: Path, url: str, root: Path, now: str) -> int:
    done = subprocess.run(
        [sys.executable, str(script), url, str(root), now], cwd=ROOT, timeout=60, check=False
    )
    return done.returncode


async def test_a_run_killed_between_the_audio_and_the_row_is_finished_by_the_next(
    pg_pool: Any, postgres_url: str, tmp_path: Path
) -> None:
    index, store = PostgresRecordingIndex(pg_pool), LocalAudioStore(tmp_path / "recordings")
    await index.add(expiring(REC_A))
    await stored(store, REC_A)
    now = START + timedelta(days=2)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_BETWEEN)

    code = await asyncio.to_thread(
        run_killed, script, postgres_url, tmp_path / "recordings", now.isoformat()
    )

    assert code == -signal.SIGKILL
    left = await index.get("t1", REC_A)
    assert left is not None and left.deleting_since == now  # the row: no file without it
    assert await store.read(REC_A) == []  # the audio went first
    assert await index.set_protected("t1", REC_A, False) is not None  # lifting is fine
    (receipt,) = await expire_recordings(index, store, now=now + timedelta(minutes=5))
    assert receipt.recording_id == REC_A and receipt.deleted_at == now + timedelta(minutes=5)
    assert await index.get("t1", REC_A) is None
    assert await index.receipt("t1", REC_A) == receipt
    assert not (tmp_path / "recordings" / REC_A).exists()
