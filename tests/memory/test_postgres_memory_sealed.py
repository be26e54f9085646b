"""Encryption at rest in the PostgreSQL memory store (SPEC RM-8): no column of a memory table
holds the content, rows written before encryption are sealed in place on first start, and a
rotation moves every row to the new key while the old rows keep opening."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memory.crypto import Keyring
from memory.entries import MemoryDraft, content_hash, owner_key
from memory.errors import DuplicateMemory, SealBroken
from memory.postgres_store import PostgresMemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "My sister Ingrid lives in Trondheim"


async def columns_holding(conn: Any, needle: str) -> list[str]:
    """Every text, bytea, jsonb or array column of the memory tables that holds ``needle``."""
    columns = await conn.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name LIKE 'memory%'"
        " AND data_type IN ('text', 'bytea', 'jsonb', 'json', 'ARRAY', 'character varying')"
    )
    assert {c["table_name"] for c in columns} >= {"memory_entries", "memory_changes"}
    found = []
    for c in columns:
        column, table = c["column_name"], c["table_name"]
        if c["data_type"] == "bytea":
            test = f"position(convert_to($1, 'UTF8') IN {column}) > 0"
        else:
            test = f"position(lower($1) IN lower({column}::text)) > 0"
        if await conn.fetchval(f"SELECT count(*) FROM {table} WHERE {test}", needle):
            found.append(f"{table}.{column}")
    return found


async def test_no_column_of_the_memory_tables_holds_the_content(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool, keyring=Keyring.generate("k1"))
    saved = await store.save("t", "u1", "r1", MemoryDraft("relation", SECRET, key="sister"))
    assert saved.entry is not None
    edited = await store.edit(
        "t", "u1", saved.entry.id, revision=1, content=SECRET + " now", kind="fact"
    )
    await store.save("t", "u1", "r1", MemoryDraft("fact", "Ingrid is a Trondheim dentist"))
    await store.backup("t", "u1")
    async with pg_pool.acquire() as conn:
        for needle in (
            "Ingrid",
            "Trondheim",
            SECRET,
            "lives in",
        ):
            assert await columns_holding(conn, needle) == [], needle
        # The scan does find what is there: the owner key is in every table.
        assert "memory_changes.owner" in await columns_holding(conn, owner_key("u1"))
        row = await conn.fetchrow(
            "SELECT content, key_id, content_hash FROM memory_entries LIMIT 1"
        )
        assert (row["content"], row["key_id"]) == ("", "k1")
        # The hash is keyed: not the SHA-256 of the normalised content anyone could compute.
        hashes = {
            r["content_hash"] for r in await conn.fetch("SELECT content_hash FROM memory_entries")
        }
        assert content_hash(edited.content) not in hashes
    # … yet everything reads back, duplicates are still found and the export is plaintext.
    assert {e.content for e in await store.list_entries("t", "u1", "r1")} == {
        SECRET + " now",
        "Ingrid is a Trondheim dentist",
    }
    again = await store.save("t", "u1", "r1", MemoryDraft("fact", "ingrid is a trondheim dentist."))
    assert again.action == "duplicate"
    with pytest.raises(DuplicateMemory):
        await store.edit("t", "u1", edited.id, revision=2, content="Ingrid is a Trondheim dentist")
    backup = await store.backup("t", "u1")
    assert SECRET + " now" in {e.content for e in backup.entries}


async def test_a_ciphertext_moved_to_another_row_does_not_open(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool, keyring=Keyring.generate())
    a = (await store.save("t", "u1", "r1", MemoryDraft("fact", SECRET))).entry
    b = (await store.save("t", "u1", "r1", MemoryDraft("fact", "I like tea"))).entry
    assert a is not None and b is not None
    async with pg_pool.acquire() as conn:
        await conn.execute(
            "UPDATE memory_entries SET content_sealed ="
            " (SELECT content_sealed FROM memory_entries WHERE id = $1) WHERE id = $2",
            a.id,
            b.id,
        )
    with pytest.raises(SealBroken):
        await store.get("t", "u1", b.id)


@pytest.fixture
async def legacy_rows(pg_pool: Any) -> AsyncIterator[None]:
    """Rows as the store wrote them before encryption (plaintext content, SHA-256 hash)."""
    async with pg_pool.acquire() as conn:
        await conn.execute("ALTER TABLE memory_entries DROP CONSTRAINT memory_entries_no_plaintext")
        try:
            for n in range(7):
                content = f"{SECRET} (note {n})" if n else SECRET
                await conn.execute(
                    "INSERT INTO memory_entries (tenant, owner, id, role_id, kind, content,"
                    " content_hash, origin, stated_at, status, revision, created_at, updated_at)"
                    " VALUES ('t', $1, $2, 'r1', 'fact', $3, $4, 'person', $5, 'active', 1,"
                    " $5, $5)",
                    owner_key("u1"), f"mem_old{n}", content, content_hash(content), NOW,
                )  # fmt: skip
            await conn.execute(
                "INSERT INTO memory_entries (tenant, owner, id, role_id, kind, content,"
                " content_hash, origin, stated_at, status, revision, created_at, updated_at)"
                " VALUES ('t', $1, 'mem_gone', 'r1', 'fact', '', $2, 'person', $3, 'deleted',"
                " 2, $3, $3)",
                owner_key("u1"), content_hash(""), NOW,
            )  # fmt: skip
        finally:
            await conn.execute(
                "ALTER TABLE memory_entries ADD CONSTRAINT memory_entries_no_plaintext"
                " CHECK (content = '') NOT VALID"
            )
    yield


@pytest.mark.usefixtures("legacy_rows")
async def test_plaintext_rows_are_sealed_in_place_in_batches(pg_pool: Any) -> None:
    store = PostgresMemoryStore(pg_pool, keyring=Keyring.generate("k1"))
    # Before sealing, old rows read and count as duplicates (the plain hash is still asked).
    assert len(await store.list_entries("t", "u1", "r1")) == 7
    assert (await store.save("t", "u1", "r1", MemoryDraft("fact", SECRET))).action == "duplicate"
    assert await store.seal_plaintext(batch=3) == 7
    assert await store.seal_plaintext(batch=3) == 0  # idempotent
    assert await store.key_ids_in_use() == {"k1": 7}
    async with pg_pool.acquire() as conn:
        assert await columns_holding(conn, SECRET) == []
        # Every row now meets the check the migration left NOT VALID.
        await conn.execute(
            "ALTER TABLE memory_entries VALIDATE CONSTRAINT memory_entries_no_plaintext"
        )
    entries = await store.list_entries("t", "u1", "r1")
    assert sorted(e.content for e in entries)[0] == SECRET
    assert (await store.save("t", "u1", "r1", MemoryDraft("fact", SECRET))).action == "duplicate"


async def test_rotation_moves_every_row_and_old_rows_open_meanwhile(pg_pool: Any) -> None:
    old = Keyring.generate("k1")
    first = PostgresMemoryStore(pg_pool, keyring=old)
    for n in range(5):
        await first.save("t", "u1", "r1", MemoryDraft("fact", f"fact number {n}"))
    new = old.with_new_active_key("k2")
    second = PostgresMemoryStore(pg_pool, keyring=new)
    await second.save("t", "u1", "r1", MemoryDraft("fact", "fact under the new key"))
    # Mixed keys: every row opens, and a duplicate under the old key is still found.
    assert len(await second.list_entries("t", "u1", "r1")) == 6
    dup = await second.save("t", "u1", "r1", MemoryDraft("fact", "Fact number 3"))
    assert dup.action == "duplicate"
    assert await second.key_ids_in_use() == {"k1": 5, "k2": 1}
    # A process still on the old keyring picks the new key up when it meets it.
    reloading = PostgresMemoryStore(pg_pool, keyring=old, reload_keyring=lambda: new)
    assert len(await reloading.list_entries("t", "u1", "r1")) == 6
    assert await second.rotate(batch=2) == 5
    assert await second.rotate(batch=2) == 0
    assert await second.key_ids_in_use() == {"k2": 6}
    retired = PostgresMemoryStore(pg_pool, keyring=new.without({"k1"}))
    contents = {e.content for e in await retired.list_entries("t", "u1", "r1")}
    assert contents == {f"fact number {n}" for n in range(5)} | {"fact under the new key"}
    assert (await retired.save("t", "u1", "r1", MemoryDraft("fact", "fact number 0"))).action == (
        "duplicate"
    )
