"""Thread memory at rest (SPEC RM-8 applied to TM): no column holds a fact, rows written before
encryption are sealed in place on start, and a rotation moves every row to the new key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memory.crypto import Keyring
from memory.entries import owner_key
from memory.errors import SealBroken
from memory.postgres_thread_store import PostgresThreadMemoryStore, facts_json
from memory.thread_memory import ThreadMemory, remember

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
SECRET = "The surprise party for Ingrid is in Trondheim"


def memory_with_secret() -> ThreadMemory:
    return remember(ThreadMemory(), "party", SECRET, "fact", "i-07", now=T0)


async def holding(conn: Any, needle: str) -> list[str]:
    """Every text, bytea or jsonb column of ``thread_memory`` that holds ``needle``."""
    columns = await conn.fetch(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = 'thread_memory'"
        " AND data_type IN ('text', 'bytea', 'jsonb', 'ARRAY')"
    )
    found = []
    for c in columns:
        column = c["column_name"]
        if c["data_type"] == "bytea":
            test = f"position(convert_to($1, 'UTF8') IN {column}) > 0"
        else:
            test = f"position(lower($1) IN lower({column}::text)) > 0"
        if await conn.fetchval(f"SELECT count(*) FROM thread_memory WHERE {test}", needle):
            found.append(column)
    return found


async def test_no_column_holds_a_fact_and_the_facts_still_load(pg_pool: Any) -> None:
    store = PostgresThreadMemoryStore(pg_pool, keyring=Keyring.generate("k1"))
    saved = await store.save("t", "u1", "th_sealed", memory_with_secret(), 0)
    await store.copy("t", "u1", "th_sealed", "th_copy", None)
    async with pg_pool.acquire() as conn:
        for needle in ("Ingrid", "Trondheim", "party", SECRET):
            assert await holding(conn, needle) == [], needle
        # The scan finds what is there: the owner key stays plain.
        assert "owner" in await holding(conn, owner_key("u1"))
    assert await store.load("t", "u1", "th_sealed") == saved
    assert (await store.load("t", "u1", "th_copy")).facts["party"].content == SECRET


async def test_a_ciphertext_moved_to_another_thread_does_not_open(pg_pool: Any) -> None:
    store = PostgresThreadMemoryStore(pg_pool, keyring=Keyring.generate("k1"))
    await store.save("t", "u1", "th_a", memory_with_secret(), 0)
    other = remember(ThreadMemory(), "seat", "Prefers the aisle", "preference", "i-01", now=T0)
    await store.save("t", "u1", "th_b", other, 0)
    async with pg_pool.acquire() as conn:
        await conn.execute(
            "UPDATE thread_memory SET facts_sealed = (SELECT facts_sealed FROM thread_memory"
            " WHERE thread_id = 'th_a' AND tenant = 't'), key_id = 'k1'"
            " WHERE thread_id = 'th_b' AND tenant = 't'"
        )
    with pytest.raises(SealBroken):
        await store.load("t", "u1", "th_b")


async def test_rows_from_before_encryption_are_sealed_then_rotated(pg_pool: Any) -> None:
    old = Keyring.generate("k1")
    store = PostgresThreadMemoryStore(pg_pool, keyring=old)
    memory = memory_with_secret()
    async with pg_pool.acquire() as conn:  # a row as the store wrote it before 0009
        await conn.execute("ALTER TABLE thread_memory DROP CONSTRAINT thread_memory_no_plaintext")
        await conn.execute(
            "INSERT INTO thread_memory (tenant, owner, thread_id, revision, facts, processed)"
            " VALUES ('t_old', $1, 'th_old', 1, $2::jsonb, $3)",
            owner_key("u1"),
            facts_json(memory),
            ["i-07"],
        )
        await conn.execute(
            "ALTER TABLE thread_memory ADD CONSTRAINT thread_memory_no_plaintext"
            " CHECK (facts IS NULL) NOT VALID"
        )
    assert (await store.load("t_old", "u1", "th_old")).facts == memory.facts
    assert await store.seal_plaintext() >= 1
    assert await store.seal_plaintext() == 0
    async with pg_pool.acquire() as conn:
        assert await holding(conn, "Ingrid") == []
        await conn.execute(
            "ALTER TABLE thread_memory VALIDATE CONSTRAINT thread_memory_no_plaintext"
        )
    rotated = PostgresThreadMemoryStore(pg_pool, keyring=old.with_new_active_key("k2"))
    assert await rotated.rotate() >= 1
    assert (await rotated.key_ids_in_use()).get("k1", 0) == 0
    assert (await rotated.load("t_old", "u1", "th_old")).facts == memory.facts
