"""The server's memory keyring (``runtime/services.py``): the first start on PostgreSQL makes
the 0600 key file and the store seals under it; a key file others may read stops the start."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from memory.crypto import KEY_FILE_NAME, load_key_file
from memory.entries import MemoryDraft
from memory.errors import KeyConfigError
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import PoolLocks
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore
from runtime.config import Settings
from runtime.services import open_services
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]


async def test_the_first_start_makes_the_key_file_and_seals_under_it(
    pg_pool: Any, postgres_url: str, tmp_path: Path
) -> None:
    settings = Settings(database_url=postgres_url, data_dir=tmp_path, knowledge_semantic=False)
    services = await open_services(settings, plugins=fake_plugins())
    try:
        path = tmp_path / KEY_FILE_NAME
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        await services.memory.save("t", "u1", "r1", MemoryDraft("fact", "I like green tea"))
    finally:
        await services.close()
    keyring = load_key_file(path, create=False)
    async with pg_pool.acquire() as conn:
        row = await conn.fetchrow("SELECT key_id FROM role_pool_entries")
    assert row["key_id"] == keyring.active_id
    reread = PoolMemoryStore(
        PostgresPoolStore(pg_pool, keyring=keyring, locks=PoolLocks()),
        PostgresMemoryLedger(pg_pool),
    )
    assert [e.content for e in await reread.list_entries("t", "u1", "r1")] == ["I like green tea"]


async def test_a_key_file_others_may_read_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / KEY_FILE_NAME
    load_key_file(path, create=True)
    path.chmod(0o644)
    settings = Settings(storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    with pytest.raises(KeyConfigError, match="chmod 600"):
        await open_services(settings, plugins=fake_plugins())
