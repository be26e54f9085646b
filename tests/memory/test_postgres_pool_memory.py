"""What only PostgreSQL can prove of per-user memory over the pool (``memory/pool_memory.py``
rule 3, ``memory/postgres_pool_memory.py``): the receipt, the tombstone and the deletion commit
together or not at all; concurrent saves — from two processes' stores — never pass the per-role
limit or duplicate a key; the ledger's rows hold the hashed user id only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from memory.entries import MemoryDraft, MemorySource, owner_key
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import PoolLocks
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def said(content: str, thread: str, at: datetime, key: str | None = None) -> MemoryDraft:
    return MemoryDraft("fact", content, key, "extraction", MemorySource(thread, 1, at))


def store(pg_pool: Any) -> PoolMemoryStore:
    """One process's store (its own pool locks, as another process would have)."""
    return PoolMemoryStore(
        PostgresPoolStore(pg_pool, locks=PoolLocks()), PostgresMemoryLedger(pg_pool)
    )


async def test_a_failed_receipt_write_deletes_nothing(pg_pool: Any) -> None:
    memory = store(pg_pool)
    await memory.save("t", "u1", "r1", said("I like tea", "th_a", T0))
    await memory.save("t", "u1", "r2", said("I like jazz", "th_a", T0))
    await pg_pool.execute(
        "CREATE FUNCTION refuse_receipt() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'receipt refused'; END $$;"
        " CREATE TRIGGER refuse_receipt BEFORE INSERT ON memory_receipts"
        " FOR EACH ROW EXECUTE FUNCTION refuse_receipt();"
    )
    try:
        with pytest.raises(asyncpg.RaiseError):
            await memory.delete_source("t", "u1", "th_a")
        for role in ("r1", "r2"):
            assert len(await memory.list_entries("t", "u1", role)) == 1
        assert await pg_pool.fetchval("SELECT count(*) FROM memory_source_blocks") == 0
        assert await pg_pool.fetchval("SELECT count(*) FROM role_pool_entries WHERE retracted") == 0
    finally:
        await pg_pool.execute(
            "DROP TRIGGER refuse_receipt ON memory_receipts; DROP FUNCTION refuse_receipt();"
        )
    receipt = await memory.delete_source("t", "u1", "th_a")
    assert receipt.deleted == 2
    assert await pg_pool.fetchval("SELECT count(*) FROM role_pool_entries WHERE retracted") == 2
    assert await pg_pool.fetchval(
        "SELECT count(*) FROM memory_source_blocks WHERE through IS NULL AND role_id = ''"
    ) == 1  # fmt: skip


async def test_concurrent_saves_keep_the_limit_and_one_value_per_key(pg_pool: Any) -> None:
    stores = (store(pg_pool), store(pg_pool))
    outcomes = await asyncio.gather(
        *(stores[n % 2].save("t", "u1", "r1", MemoryDraft("fact", f"fact {n}"), max_entries=5)
          for n in range(20))
    )  # fmt: skip
    assert sorted(o.action for o in outcomes).count("created") == 5
    assert len(await stores[0].list_entries("t", "u1", "r1")) == 5
    keyed = await asyncio.gather(
        *(stores[n % 2].save("t", "u1", "r2", said(f"I live in city {n}", f"th_{n}",
                                                   T0 + timedelta(minutes=n), key="current_city"))
          for n in range(10))
    )  # fmt: skip
    assert sum(o.action == "created" for o in keyed) == 1
    [entry] = await stores[1].list_entries("t", "u1", "r2")
    # Whatever order they ran in, the newest statement is the one kept.
    assert entry.content == "I live in city 9"


async def test_the_ledger_is_keyed_by_the_hashed_user_id(pg_pool: Any) -> None:
    memory = store(pg_pool)
    await memory.save("t", "alice@example.com", "r1", said("I like tea", "th_a", T0))
    await memory.delete_source("t", "alice@example.com", "th_b")
    for table in ("memory_changes", "memory_receipts", "memory_source_blocks"):
        rows = await pg_pool.fetch(f"SELECT row_to_json(x)::text AS j FROM {table} x")
        assert rows and all("alice@example.com" not in r["j"] for r in rows)
        assert all(owner_key("alice@example.com") in r["j"] for r in rows)
    # The pool names its user by the from:/for:person: tags (SPEC RM-1): that is who may see it.
    tags = await pg_pool.fetchval("SELECT tags FROM role_pool_entries")
    assert {"from:alice@example.com", "for:person:alice@example.com"} <= set(tags)
