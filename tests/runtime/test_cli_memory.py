"""``openrealtime memory rotate-key``: a new key in the key file, every row re-encrypted under
it (the old rows open meanwhile), then ``--retire`` drops the old key once no row uses it."""

from __future__ import annotations

import argparse
import base64
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory.crypto import KEY_FILE_NAME, Keyring, load_key_file
from memory.entries import MemoryDraft
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import PoolLocks
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_role_records import PostgresRoleRecords
from memory.postgres_store import PostgresMemoryStore
from memory.postgres_thread_store import PostgresThreadMemoryStore
from memory.role_records import RoleMemorySettings
from memory.thread_memory import ThreadMemory, remember
from runtime.cli import memory as cli_memory
from runtime.config import Settings
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]


def _memory(pg_pool: Any, keyring: Keyring) -> PoolMemoryStore:
    """Per-user memory as the server keeps it: entries of the role pools."""
    pools = PostgresPoolStore(pg_pool, keyring=keyring, locks=PoolLocks())
    return PoolMemoryStore(pools, PostgresMemoryLedger(pg_pool))


def _rotate(*, retire: bool = False) -> argparse.Namespace:
    return argparse.Namespace(action="rotate-key", retire=retire, batch=2, data_dir=None)


def _rows(out: str) -> list[tuple[str, ...]]:
    lines = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert lines[0] == cli_memory.HEADER
    return [tuple(line.split("\t")) for line in lines[1:]]


async def test_rotate_key_then_retire(
    pg_pool: Any, postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(database_url=postgres_url, data_dir=tmp_path)
    path = tmp_path / KEY_FILE_NAME
    first = load_key_file(path, create=True)
    store = _memory(pg_pool, first)
    for n in range(4):
        await store.save("t", "u1", "r1", MemoryDraft("fact", f"private fact {n}"))
    # A row of the per-user store of before (its user unknown, so it was never moved).
    await PostgresMemoryStore(pg_pool, keyring=first).save(
        "t", "u1", "r1", MemoryDraft("fact", "private fact of before")
    )
    threads = PostgresThreadMemoryStore(pg_pool, keyring=first)
    noted = remember(ThreadMemory(), "plan", "private plan", "fact", "i-1", now=datetime.now(UTC))
    await threads.save("t", "u1", "th1", noted, 0)
    role_settings = RoleMemorySettings(instructions="keep health topics private")
    await PostgresRoleRecords(pg_pool, keyring=first).put_settings(
        "t", "r1", role_settings, expected=0
    )

    assert await cli_memory.run(_rotate(), settings) == 0
    rotated = load_key_file(path, create=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert rotated.active_id != first.active_id and first.active_id in rotated.key_ids
    out = capsys.readouterr().out
    rows = _rows(out)
    # 4 pool entries, 1 row of before, 1 thread memory, 1 role's memory settings
    assert ("re-encrypted", rotated.active_id, "7") in rows
    assert ("in_use", first.active_id, "0") in rows
    assert "private fact" not in out
    # The server's store, still on the first keyring, picks the new key up.
    pools = store.pool
    assert isinstance(pools, PostgresPoolStore)
    pools.reload_keyring = lambda: load_key_file(path, create=False)
    assert len(await store.list_entries("t", "u1", "r1")) == 4
    old_rows = PostgresMemoryStore(pg_pool, keyring=first)
    old_rows.reload_keyring = pools.reload_keyring
    assert len(await old_rows.list_entries("t", "u1", "r1")) == 1

    # A row written under the old key meanwhile (a server not restarted yet) …
    await _memory(pg_pool, first).save(
        "t", "u2", "r1", MemoryDraft("fact", "written by an old server")
    )
    # … is moved by --retire before the old key goes.
    assert await cli_memory.run(_rotate(retire=True), settings) == 0
    rows = _rows(capsys.readouterr().out)
    assert ("re-encrypted", rotated.active_id, "1") in rows
    assert ("retired", first.active_id, "0") in rows
    final = load_key_file(path, create=False)
    assert final.key_ids == (rotated.active_id,)
    assert len(await _memory(pg_pool, final).list_entries("t", "u1", "r1")) == 4
    assert len(await _memory(pg_pool, final).list_entries("t", "u2", "r1")) == 1
    assert len(await PostgresMemoryStore(pg_pool, keyring=final).list_entries("t", "u1", "r1")) == 1
    reopened = PostgresThreadMemoryStore(pg_pool, keyring=final)
    assert (await reopened.load("t", "u1", "th1")).facts == noted.facts
    kept = await PostgresRoleRecords(pg_pool, keyring=final).settings("t", "r1")
    assert kept.instructions == role_settings.instructions


async def test_with_configured_keys_it_re_encrypts_and_says_how_to_rotate(
    pg_pool: Any, postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    before = Settings(database_url=postgres_url, data_dir=tmp_path, memory_keys=f"old:{old}")
    after = Settings(
        database_url=postgres_url, data_dir=tmp_path, memory_keys=f"new:{new},old:{old}"
    )
    from runtime.services import memory_key_source

    store = _memory(pg_pool, memory_key_source(before).load())
    await store.save("t", "u1", "r1", MemoryDraft("fact", "I collect old maps"))
    assert await cli_memory.run(_rotate(), before) == 0
    captured = capsys.readouterr()
    assert "OPENREALTIME_MEMORY_KEYS" in captured.err and old not in captured.out + captured.err
    assert await cli_memory.run(_rotate(), after) == 0
    assert ("re-encrypted", "new", "1") in _rows(capsys.readouterr().out)
    assert await cli_memory.run(_rotate(retire=True), after) == 0
    assert ("unused", "old", "0") in _rows(capsys.readouterr().out)
    assert not (tmp_path / KEY_FILE_NAME).exists()


async def test_a_key_file_others_may_read_stops_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / KEY_FILE_NAME
    load_key_file(path, create=True)
    path.chmod(0o644)
    settings = Settings(database_url="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path)
    assert await cli_memory.run(_rotate(), settings) == 1
    assert "memory_key_config" in capsys.readouterr().err
