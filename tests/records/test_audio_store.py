"""The audio stores' one contract (records/audio_store.py), and what rests on disk."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.crypto import Keyring
from memory.errors import SealBroken
from records.audio_store import (
    AudioStore,
    InMemoryAudioStore,
    LocalAudioStore,
    open_pieces,
    seal_piece,
)
from records.s3_store import S3AudioStore, S3Unavailable, s3_client

MARKER = b"PLAINTEXT-RECORDING-MARKER " * 40


def resting(root: Path) -> list[tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mode."""
    return [(p.read_bytes(), p.stat().st_mode) for p in root.rglob("*") if p.is_file()]


def new_id() -> str:
    return f"rec_{uuid.uuid4().hex}"


S3_SERVER = "OPENREALTIME_TEST_S3_ENDPOINT"
"""An S3-compatible server for the S3 store's leg of the contract (with ``…_BUCKET``, and AWS
credentials in boto3's usual places). None runs on this machine kind (no Docker engine, no
MinIO package): without one the leg is skipped with this reason — never mocked."""


def s3_store() -> S3AudioStore:
    endpoint, bucket = os.environ.get(S3_SERVER), os.environ.get("OPENREALTIME_TEST_S3_BUCKET")
    if not endpoint or not bucket:
        pytest.skip(
            f"no S3-compatible server for the tests: set {S3_SERVER} and "
            "OPENREALTIME_TEST_S3_BUCKET (the S3 store is never tested against a mock)"
        )
    client = s3_client(endpoint_url=endpoint, region=os.environ.get("AWS_DEFAULT_REGION"))
    return S3AudioStore(client, bucket, prefix=f"test-{uuid.uuid4().hex}/")


@pytest.fixture(params=["local", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AudioStore]:
    if request.param == "s3":
        yield s3_store()
    elif request.param == "local":
        yield LocalAudioStore(tmp_path / "recordings")
    else:
        yield InMemoryAudioStore()


async def test_pieces_read_back_in_order_the_last_of_each_number_kept(store: AudioStore) -> None:
    keyring, recording = Keyring.generate(), new_id()
    for index, data in ((1, b"one"), (0, b"head?"), (2, b"two"), (0, b"head")):
        await store.put(recording, index, seal_piece(keyring, "t1", recording, index, data))
    pieces = await store.read(recording)
    assert [index for index, _ in pieces] == [0, 1, 2]
    assert open_pieces(keyring, "t1", recording, pieces) == b"headonetwo"


async def test_a_piece_opens_only_for_its_tenant_recording_and_number(store: AudioStore) -> None:
    keyring, recording, other = Keyring.generate(), new_id(), new_id()
    await store.put(recording, 0, seal_piece(keyring, "t1", recording, 0, b"audio"))
    (piece,) = await store.read(recording)
    for tenant, rec, index in (("t2", recording, 0), ("t1", other, 0), ("t1", recording, 1)):
        with pytest.raises(SealBroken):
            open_pieces(keyring, tenant, rec, [(index, piece[1])])


async def test_delete_removes_everything_and_says_whether_anything_was_there(
    store: AudioStore,
) -> None:
    keyring, recording = Keyring.generate(), new_id()
    await store.put(recording, 0, seal_piece(keyring, "t1", recording, 0, b"x"))
    assert await store.delete(recording) is True
    assert await store.read(recording) == []
    assert await store.delete(recording) is False


async def test_pieces_survive_a_key_rotation(store: AudioStore) -> None:
    old = Keyring.generate()
    recording = new_id()
    await store.put(recording, 0, seal_piece(old, "t1", recording, 0, b"before"))
    rotated = old.with_new_active_key()
    await store.put(recording, 1, seal_piece(rotated, "t1", recording, 1, b" after"))
    assert open_pieces(rotated, "t1", recording, await store.read(recording)) == b"before after"


def test_recording_ids_are_checked_before_they_name_a_directory(tmp_path: Path) -> None:
    store = LocalAudioStore(tmp_path)
    for bad in ("../etc", "rec_../../x", "", "rec_" + "g" * 32):
        with pytest.raises(ValueError):
            store._dir(bad)


async def test_no_plaintext_rests_on_disk(tmp_path: Path) -> None:
    store, keyring, recording = LocalAudioStore(tmp_path), Keyring.generate(), new_id()
    await store.put(recording, 0, seal_piece(keyring, "t1", recording, 0, MARKER))
    files = resting(tmp_path)
    assert files and all(MARKER[:20] not in data for data, _ in files)
    assert all(mode & 0o077 == 0 for _, mode in files)


async def test_a_delete_cut_short_is_finished_by_the_next(tmp_path: Path) -> None:
    store, keyring, recording = LocalAudioStore(tmp_path), Keyring.generate(), new_id()
    for index in range(3):
        await store.put(recording, index, seal_piece(keyring, "t1", recording, index, b"x"))
    next((tmp_path / recording).iterdir()).unlink()  # the process died after one file
    assert await store.delete(recording) is True
    assert not (tmp_path / recording).exists()


async def test_no_plaintext_rests_in_the_bucket() -> None:
    store, keyring, recording = s3_store(), Keyring.generate(), new_id()
    await store.put(recording, 0, seal_piece(keyring, "t1", recording, 0, MARKER))
    objects = store._objects(recording)
    bodies = [
        store.client.get_object(Bucket=store.bucket, Key=o["Key"])["Body"].read() for o in objects
    ]
    assert bodies and all(MARKER[:20] not in body for body in bodies)
    await store.delete(recording)


def test_the_s3_store_needs_a_bucket() -> None:
    with pytest.raises(S3Unavailable, match="BUCKET"):
        S3AudioStore(object(), "")


async def test_an_in_memory_run_removes_the_recordings_an_earlier_one_left(tmp_path: Path) -> None:
    """Rule 4: their rows died with the process that made them; nothing could expire them."""
    from runtime.config import Settings
    from runtime.services import open_services
    from tests.runtime.conftest import fake_plugins

    store, keyring = LocalAudioStore(tmp_path / "data" / "recordings"), Keyring.generate()
    for recording in (new_id(), new_id()):
        await store.put(recording, 0, seal_piece(keyring, "t1", recording, 0, b"x"))
    (tmp_path / "data" / "recordings" / "notes.txt").write_text("not a recording")
    settings = Settings(storage="memory", data_dir=tmp_path / "data", port=0)
    services = await open_services(settings, plugins=fake_plugins())
    try:
        left = sorted(p.name for p in (tmp_path / "data" / "recordings").iterdir())
    finally:
        await services.close()
    assert left == ["notes.txt"]
