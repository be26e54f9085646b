"""Moving the per-user store of before (``memory_entries``, written here by the old
``PostgresMemoryStore``) into the role pools (``memory/postgres_pool_memory.py`` rules 1–3)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from memory.crypto import Keyring
from memory.entries import MemoryDraft, MemorySource
from memory.errors import StaleRevision
from memory.pool import Reader, ThreadSource
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import PoolLocks
from memory.postgres_pool_memory import PostgresMemoryLedger, move_entries_to_pool
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_store import PostgresMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def said(content: str, thread: str, seq: int, *, key: str | None = None) -> MemoryDraft:
    return MemoryDraft("fact", content, key, "extraction", MemorySource(thread, seq, T0))


async def test_old_rows_move_into_the_pool_and_keep_every_mem_behaviour(
    pg_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    keyring = Keyring.generate("k1")
    old = PostgresMemoryStore(pg_pool, keyring=keyring)
    city = await old.save("t", "alice", "r1", said("I live in Rome", "th_a", 2, key="city"))
    manual = await old.save("t", "alice", "r1", MemoryDraft("goal", "Learn Japanese"))
    other_role = await old.save("t", "alice", "r2", said("I like jazz", "th_b", 1))
    gone = await old.save("t", "alice", "r1", MemoryDraft("fact", "I like cats"))
    tea = await old.save("t", "alice", "r1", said("I like tea", "th_d", 4))
    assert city.entry and manual.entry and other_role.entry and gone.entry and tea.entry
    await old.delete("t", "alice", gone.entry.id, revision=1)
    await old.edit("t", "alice", manual.entry.id, revision=1, content="Learn Japanese well")
    await old.edit("t", "alice", tea.entry.id, revision=1, content="I like green tea")
    await old.save("t", "bob", "r1", MemoryDraft("fact", "bob's"))
    await old.save("t", "ghost", "r1", MemoryDraft("fact", "nobody knows me"))
    await old.save("t", "two words", "r1", MemoryDraft("fact", "my id makes no tag"))
    # alice is a member; bob is known only by a thread of his; nobody knows "ghost"; "two
    # words" is known but no from: tag can hold that id.
    await pg_pool.execute("INSERT INTO tenants (id) VALUES ('t')")
    await pg_pool.execute("INSERT INTO users (id) VALUES ('alice')")
    await pg_pool.execute(
        "INSERT INTO memberships (tenant, user_id, role) VALUES ('t', 'alice', 'member')"
    )
    for user in ("bob", "two words"):
        await pg_pool.execute(
            "INSERT INTO threads (tenant, user_id, thread_id, role_id) VALUES ('t', $1, 'x', 'r1')",
            user,
        )

    pools = PostgresPoolStore(pg_pool, keyring=keyring, locks=PoolLocks())
    with caplog.at_level(logging.INFO, logger="memory.postgres_pool_memory"):
        report = await move_entries_to_pool(old, pools, batch=2)
    assert (report.moved, report.unmatched, report.conflicting) == (6, 2, 0)
    logged = caplog.text
    assert "moved 6" in logged and "Rome" not in logged and "alice" not in logged
    assert await pg_pool.fetchval("SELECT count(*) FROM memory_entries") == 2  # left in place
    again = await move_entries_to_pool(old, pools)
    assert (again.moved, again.unmatched) == (0, 2)

    memory = PoolMemoryStore(pools, PostgresMemoryLedger(pg_pool))
    listed = {e.id: e for e in await memory.list_entries("t", "alice", "r1")}
    assert set(listed) == {city.entry.id, manual.entry.id, tea.entry.id}
    moved_city = listed[city.entry.id]
    assert (moved_city.content, moved_city.key, moved_city.origin) == (
        "I live in Rome", "city", "extraction",
    )  # fmt: skip
    assert (moved_city.source_thread_id, moved_city.source_seq) == ("th_a", 2)
    assert moved_city.stated_at == city.entry.stated_at
    assert listed[manual.entry.id].content == "Learn Japanese well"
    assert [e.content for e in await memory.list_entries("t", "alice", "r2")] == ["I like jazz"]
    assert [e.content for e in await memory.list_entries("t", "bob", "r1")] == ["bob's"]
    (fact,) = [
        e.meta
        for e in await pools.read_visible("t", "r1", Reader("alice", "t", frozenset({"r1"})))
        if e.meta.id == city.entry.id
    ]
    assert fact.layer == "fact" and fact.sources == (ThreadSource("th_a", "seq:2"),)
    # The change log, the deletion and the edit's block came along.
    actions = [(c.entry_id, c.action) for c in await memory.changes("t", "alice", "r1")]
    assert actions == [
        (tea.entry.id, "updated"), (manual.entry.id, "updated"), (gone.entry.id, "deleted"),
        (tea.entry.id, "created"), (gone.entry.id, "created"), (manual.entry.id, "created"),
        (city.entry.id, "created"),
    ]  # fmt: skip
    backup = await memory.backup("t", "alice")
    assert gone.entry.id in backup.deleted_ids and gone.entry.id not in listed
    assert (await memory.save("t", "alice", "r1", said("I like tea", "th_d", 4))).action == (
        "blocked"
    )
    # A moved entry is edited like any other: its revision is the pool version (1 after the
    # move), the old revision is stale.
    with pytest.raises(StaleRevision):
        await memory.edit("t", "alice", tea.entry.id, revision=2, content="I like oolong")
    oolong = await memory.edit("t", "alice", tea.entry.id, revision=1, content="I like oolong")
    assert oolong.revision == 2
    # A newer statement of the key updates the moved entry, MEM's rules unchanged.
    later = MemorySource("th_c", 1, datetime(2027, 1, 1, tzinfo=UTC))
    newer = MemoryDraft("fact", "I live in Oslo", "city", "extraction", later)
    updated = await memory.save("t", "alice", "r1", newer)
    assert updated.action == "updated" and updated.entry is not None
    assert updated.entry.id == city.entry.id and updated.entry.revision == 2
    assert (await memory.delete_source("t", "alice", "th_b")).entry_ids == (other_role.entry.id,)
    assert await memory.list_entries("t", "alice", "r2") == []
