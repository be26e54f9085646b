"""The server's per-user memory is its role pools (``runtime/services.py``): on both storages
``services.memory`` writes into ``services.pool``, and at start the PostgreSQL per-user rows of
before move in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memory.entries import MemoryDraft
from memory.pool import Reader
from memory.postgres_store import PostgresMemoryStore
from runtime.config import Settings
from runtime.services import open_services
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]


@pytest.fixture(params=["memory", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "memory":
        return Settings(storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    request.getfixturevalue("pg_pool")  # emptied tables
    url = request.getfixturevalue("postgres_url")
    return Settings(database_url=url, data_dir=tmp_path, knowledge_semantic=False)


async def test_memory_entries_are_entries_of_the_services_pool(settings: Settings) -> None:
    services = await open_services(settings, plugins=fake_plugins())
    try:
        saved = await services.memory.save("t", "alice", "r1", MemoryDraft("goal", "Learn Thai"))
        assert saved.entry is not None
        alice = await services.pool.read_visible("t", "r1", Reader("alice", "t", frozenset({"r1"})))
        assert [(e.meta.id, e.content) for e in alice] == [(saved.entry.id, "Learn Thai")]
        assert (
            await services.pool.read_visible("t", "r1", Reader("bob", "t", frozenset({"r1"}))) == []
        )
    finally:
        await services.close()


async def test_the_first_start_moves_the_rows_of_before(
    pg_pool: Any, postgres_url: str, tmp_path: Path
) -> None:
    settings = Settings(database_url=postgres_url, data_dir=tmp_path, knowledge_semantic=False)
    first = await open_services(settings, plugins=fake_plugins())  # makes the key file
    await first.close()
    assert first.keyring is not None
    old = PostgresMemoryStore(pg_pool, keyring=first.keyring)
    await old.save("t", "alice", "r1", MemoryDraft("fact", "I was here before"))
    await pg_pool.execute(
        "INSERT INTO threads (tenant, user_id, thread_id, role_id) VALUES ('t', 'alice', 'x', 'r1')"
    )
    services = await open_services(settings, plugins=fake_plugins())
    try:
        listed = await services.memory.list_entries("t", "alice", "r1")
        assert [e.content for e in listed] == ["I was here before"]
        assert await pg_pool.fetchval("SELECT count(*) FROM memory_entries") == 0
    finally:
        await services.close()
