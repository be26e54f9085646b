"""What only the PostgreSQL memory store has to prove: the receipt, the tombstone and the
deletion commit together or not at all; concurrent saves never pass the per-role limit or
duplicate a key; no row holds the user id."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from memory.entries import MemoryDraft, MemorySource, owner_key
from memory.postgres_store import PostgresMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def said(content: str, thread: str, at: datetime, key: str | None = None) -> MemoryDraft:
    return MemoryDraft("fact", content, key, "extraction", MemorySource(thread, 1, at))


async def test_a_failed_receipt_write_deletes_nothing(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool)
    await store.save("t", "u1", "r1", said("I like tea", "th_a", T0))
    async with pg_pool.acquire() as conn:
        await conn.execute(
            "CREATE FUNCTION refuse_receipt() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'receipt refused'; END $$;"
            " CREATE TRIGGER refuse_receipt BEFORE INSERT ON memory_receipts"
            " FOR EACH ROW EXECUTE FUNCTION refuse_receipt();"
        )
    try:
        with pytest.raises(asyncpg.RaiseError):
            await store.delete_source("t", "u1", "th_a")
        assert [e.content for e in await store.list_entries("t", "u1", "r1")] == ["I like tea"]
        async with pg_pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM memory_source_blocks") == 0
    finally:
        async with pg_pool.acquire() as conn:
            await conn.execute(
                "DROP TRIGGER refuse_receipt ON memory_receipts; DROP FUNCTION refuse_receipt();"
            )
    receipt = await store.delete_source("t", "u1", "th_a")
    assert receipt.deleted == 1
    async with pg_pool.acquire() as conn:
        row = await conn.fetchrow("SELECT deleted, entry_ids FROM memory_receipts")
        assert (row["deleted"], len(row["entry_ids"])) == (1, 1)
        assert await conn.fetchval(
            "SELECT count(*) FROM memory_source_blocks WHERE through IS NULL AND role_id = ''"
        ) == 1  # fmt: skip
        erased = await conn.fetchrow("SELECT status, content FROM memory_entries")
        assert (erased["status"], erased["content"]) == ("deleted", "")


async def test_concurrent_saves_keep_the_limit_and_one_value_per_key(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool)
    outcomes = await asyncio.gather(
        *(store.save("t", "u1", "r1", MemoryDraft("fact", f"fact {n}"), max_entries=5)
          for n in range(20))
    )  # fmt: skip
    assert sorted(o.action for o in outcomes).count("created") == 5
    assert len(await store.list_entries("t", "u1", "r1")) == 5
    keyed = await asyncio.gather(
        *(store.save("t", "u1", "r2", said(f"I live in city {n}", f"th_{n}",
                                            T0 + timedelta(minutes=n), key="current_city"))
          for n in range(10))
    )  # fmt: skip
    assert sum(o.action == "created" for o in keyed) == 1
    [entry] = await store.list_entries("t", "u1", "r2")
    # Whatever order they ran in, the newest statement is the one kept.
    assert entry.content == "I live in city 9"


async def test_rows_are_keyed_by_the_hashed_user_id(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool)
    await store.save("t", "alice@example.com", "r1", said("I like tea", "th_a", T0))
    await store.delete_source("t", "alice@example.com", "th_b")
    async with pg_pool.acquire() as conn:
        for table in ("memory_entries", "memory_changes", "memory_receipts"):
            rows = await conn.fetch(f"SELECT row_to_json(x)::text AS j FROM {table} x")
            assert rows and all("alice@example.com" not in r["j"] for r in rows)
            assert all(owner_key("alice@example.com") in r["j"] for r in rows)
