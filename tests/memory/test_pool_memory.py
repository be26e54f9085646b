"""Per-user memory as entries of the role pool (``memory/pool_memory.py`` rules 1–5), on both
pool stores: what the pool holds for a user's memory, who sees it, what an edit, a delete and a
purge do to it, and that MEM calls never touch what the memory model learned. The MEM contract
itself runs on the same store in ``test_store_contract.py``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from memory.crypto import Sealed
from memory.entries import MemoryChange, MemoryDraft, MemorySource
from memory.memory_ledger import InMemoryMemoryLedger, MemoryLedger
from memory.pool import (
    FOR_ROLE,
    EntryMeta,
    PoolEntry,
    Reader,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import AddEntry, InMemoryPoolStore, PoolLocks, PoolStore, content_context
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore

T = "t"
ROLE = "r1"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALICE = Reader("alice", T, frozenset({ROLE}))
BOB = Reader("bob", T, frozenset({ROLE}))


@dataclass
class Setup:
    pool: PoolStore
    ledger: MemoryLedger
    memory: PoolMemoryStore


@pytest.fixture(params=["memory", "postgres"])
def setup(request: pytest.FixtureRequest) -> Setup:
    pool: PoolStore
    ledger: MemoryLedger
    if request.param == "memory":
        pool, ledger = InMemoryPoolStore(locks=PoolLocks()), InMemoryMemoryLedger()
    else:
        pg = request.getfixturevalue("pg_pool")
        pool, ledger = PostgresPoolStore(pg, locks=PoolLocks()), PostgresMemoryLedger(pg)
    return Setup(pool, ledger, PoolMemoryStore(pool, ledger))


def said(content: str, thread: str = "th_a", seq: int = 3) -> MemoryDraft:
    return MemoryDraft("preference", content, None, "extraction", MemorySource(thread, seq, T0))


def learned(entry_id: str, user: str, *, audience: frozenset[str]) -> PoolEntry:
    """What the memory model learns from ``user``'s thread (no per-user attributes)."""
    source = ThreadSource("th_a", "item-1")
    tags = {from_tag(user), tenant_tag(T), thread_tag("th_a"), *audience}
    meta = EntryMeta(
        id=entry_id, role_id=ROLE, layer="fact", tags=frozenset(tags), sources=(source,),
        created_at=T0, access=(ThreadAccess("th_a", "item-1", frozenset({"alice", "bob"})),),
    )  # fmt: skip
    return PoolEntry(meta, f"learned {entry_id}")


async def test_a_users_memory_is_pool_entries_only_they_see(setup: Setup) -> None:
    extracted = await setup.memory.save(T, "alice", ROLE, said("I like tea"))
    pinned = await setup.memory.save(T, "alice", ROLE, MemoryDraft("goal", "Learn Japanese"))
    assert extracted.entry is not None and pinned.entry is not None
    seen = {e.meta.id: e for e in await setup.pool.read_visible(T, ROLE, ALICE)}
    assert set(seen) == {extracted.entry.id, pinned.entry.id}
    fact = seen[extracted.entry.id]
    assert fact.content == "I like tea" and fact.meta.layer == "fact"
    assert fact.meta.sources == (ThreadSource("th_a", "seq:3"),)
    assert fact.meta.access == (ThreadAccess("th_a", "seq:3", frozenset({"alice"})),)
    assert fact.meta.tags == {
        "from:alice", "for:person:alice", "tenant:t", "thread:th_a", "preference",
    }  # fmt: skip
    assert fact.meta.personal is not None and fact.meta.personal.origin == "extraction"
    manual = seen[pinned.entry.id].meta
    assert (manual.layer, manual.sources, manual.access) == ("pinned", (), ())
    assert manual.tags == {"from:alice", "for:person:alice", "tenant:t", "goal"}
    # Another user of the same role sees none of it, in the pool or in their memory.
    assert await setup.pool.read_visible(T, ROLE, BOB) == []
    assert await setup.memory.list_entries(T, "bob", ROLE) == []
    assert await setup.memory.get(T, "bob", extracted.entry.id) is None


async def test_an_edit_unlinks_the_source_and_keeps_the_id(setup: Setup) -> None:
    created = await setup.memory.save(T, "alice", ROLE, said("I like tea"))
    assert created.entry is not None
    edited = await setup.memory.edit(
        T, "alice", created.entry.id, revision=1, content="I like green tea", kind="fact"
    )
    (got,) = await setup.pool.read_visible(T, ROLE, ALICE)
    assert got.meta.id == created.entry.id and got.meta.version == edited.revision == 2
    assert (got.meta.layer, got.meta.sources, got.meta.access) == ("pinned", (), ())
    assert got.meta.tags == {"from:alice", "for:person:alice", "tenant:t", "fact"}
    assert got.content == "I like green tea"
    assert got.meta.personal is not None and got.meta.personal.origin == "person"


async def test_a_delete_retracts_and_erases_the_content(setup: Setup) -> None:
    created = await setup.memory.save(T, "alice", ROLE, said("I like tea"))
    assert created.entry is not None
    await setup.memory.delete(T, "alice", created.entry.id, revision=1)
    assert await setup.pool.read_visible(T, ROLE, ALICE) == []
    meta = (await setup.pool.load_meta(T, ROLE))[created.entry.id]
    assert meta.retracted and meta.version == 2
    backup = await setup.memory.backup(T, "alice")
    assert backup.entries == () and backup.deleted_ids == (created.entry.id,)
    if isinstance(setup.pool, PostgresPoolStore):
        row = await setup.pool.pool.fetchrow(
            "SELECT key_id, content_sealed FROM role_pool_entries WHERE id = $1", meta.id
        )
        sealed = Sealed(row["key_id"], row["content_sealed"])
        opened = setup.pool.keyring.open(sealed, context=content_context(T, ROLE, meta.id))
        assert opened == ""


async def test_a_purge_by_the_users_tag_removes_their_memory(setup: Setup) -> None:
    await setup.memory.save(T, "alice", ROLE, said("I like tea"))
    await setup.memory.save(T, "alice", ROLE, MemoryDraft("goal", "Learn Japanese"))
    await setup.memory.save(T, "bob", ROLE, MemoryDraft("goal", "Learn Korean"))
    assert await setup.pool.purge(T, ROLE, from_tag("alice")) == 2
    assert await setup.memory.list_entries(T, "alice", ROLE) == []
    assert [e.content for e in await setup.memory.list_entries(T, "bob", ROLE)] == ["Learn Korean"]


async def test_mem_calls_never_touch_what_the_memory_model_learned(setup: Setup) -> None:
    shared = learned("e_role", "alice", audience=frozenset({FOR_ROLE}))
    own = learned("e_own", "alice", audience=frozenset({for_person_tag("alice")}))
    both = frozenset({"alice", "bob"})
    await setup.pool.apply(T, ROLE, [AddEntry(shared, "memory_model", role_users=both)])
    await setup.pool.add(own, "memory_model")
    mine = await setup.memory.save(T, "alice", ROLE, said("I like tea"))
    assert mine.entry is not None
    assert [e.id for e in await setup.memory.list_entries(T, "alice", ROLE)] == [mine.entry.id]
    assert await setup.memory.get(T, "alice", "e_own") is None
    receipt = await setup.memory.delete_source(T, "alice", "th_a")
    assert receipt.entry_ids == (mine.entry.id,)
    assert await setup.memory.clear(T, "alice", ROLE) == 0
    left = await setup.pool.read_visible(T, ROLE, ALICE)
    assert {e.meta.id: e.meta.version for e in left} == {"e_role": 1, "e_own": 1}


class FailingLedger(InMemoryMemoryLedger):
    """Fails writing the change-log lines of a deletion (after the pool writes were planned)."""

    async def record(self, tx: Any, tenant: str, owner: str, **rows: Any) -> None:
        changes: list[MemoryChange] = list(rows.get("changes", ()))
        if any(c.action == "source_deleted" for c in changes):
            raise RuntimeError("disk full")
        await super().record(tx, tenant, owner, **rows)


class FailingPostgresLedger(PostgresMemoryLedger):
    async def record(self, tx: Any, tenant: str, owner: str, **rows: Any) -> None:
        changes: list[MemoryChange] = list(rows.get("changes", ()))
        if any(c.action == "source_deleted" for c in changes):
            raise RuntimeError("disk full")
        await super().record(tx, tenant, owner, **rows)


async def test_delete_source_is_one_transaction_over_every_role(setup: Setup) -> None:
    for role in ("r1", "r2"):
        await setup.memory.save(T, "alice", role, said(f"I like tea in {role}"))
    ledger: MemoryLedger
    if isinstance(setup.pool, PostgresPoolStore):
        ledger = FailingPostgresLedger(setup.pool.pool)
    else:
        assert isinstance(setup.ledger, InMemoryMemoryLedger)
        ledger = FailingLedger()
        ledger.__dict__.update(setup.ledger.__dict__)  # the same rows, a failing writer
    failing = PoolMemoryStore(setup.pool, ledger)
    with pytest.raises(RuntimeError):
        await failing.delete_source(T, "alice", "th_a")
    # Nothing happened: no entry erased in any role, no receipt, no tombstone.
    for role in ("r1", "r2"):
        assert len(await setup.memory.list_entries(T, "alice", role)) == 1
    backup = await setup.memory.backup(T, "alice")
    assert (backup.receipts, backup.blocks) == ((), ())
    receipt = await setup.memory.delete_source(T, "alice", "th_a")
    assert receipt.deleted == 2
    for role in ("r1", "r2"):
        assert await setup.memory.list_entries(T, "alice", role) == []


async def test_no_plaintext_content_in_any_column_after_save_edit_delete(pg_pool: Any) -> None:
    pool = PostgresPoolStore(pg_pool, locks=PoolLocks())
    memory = PoolMemoryStore(pool, PostgresMemoryLedger(pg_pool))
    secrets = ("Alice's budget is 4200 euros", "Alice saves for a Vespa")
    first = await memory.save(T, "alice", ROLE, said(secrets[0]))
    assert first.entry is not None
    edited = await memory.edit(T, "alice", first.entry.id, revision=1, content=secrets[1])
    await memory.delete(T, "alice", edited.id, revision=edited.revision)
    again = await memory.save(T, "alice", ROLE, MemoryDraft("fact", secrets[0]))
    assert again.action == "created"
    tables = ("role_pool_entries", "role_pool_changes", "memory_changes", "memory_receipts",
              "memory_source_blocks", "memory_entries")  # fmt: skip
    for table in tables:
        for row in await pg_pool.fetch(f"SELECT t::text AS row FROM {table} t"):
            for needle in ("budget", "euros", "Vespa"):  # never in hex: no false alarm
                assert needle not in row["row"]


async def test_list_is_newest_first_across_edits_and_extraction(setup: Setup) -> None:
    one = await setup.memory.save(T, "alice", ROLE, MemoryDraft("fact", "one"))
    await setup.memory.save(T, "alice", ROLE, said("two", seq=5))
    assert one.entry is not None
    await setup.memory.edit(T, "alice", one.entry.id, revision=1, content="one, again")
    listed = await setup.memory.list_entries(T, "alice", ROLE)
    assert [e.content for e in listed] == ["one, again", "two"]
    assert listed[0].updated_at > listed[1].updated_at


async def test_a_mem_call_holds_one_connection(pg_pool: Any, postgres_url: str) -> None:
    """Reads and writes of one call go on its transaction's connection: with a pool of one
    connection nothing waits for a second (which would time out as ``MemoryUnavailable``)."""
    one = await asyncpg.create_pool(postgres_url, min_size=1, max_size=1)
    try:
        pools = PostgresPoolStore(one, locks=PoolLocks(), acquire_timeout=1.0)
        memory = PoolMemoryStore(pools, PostgresMemoryLedger(one, acquire_timeout=1.0))
        created = await memory.save(T, "alice", ROLE, said("I like tea"))
        assert created.entry is not None
        edited = await memory.edit(T, "alice", created.entry.id, revision=1, content="I like chai")
        await memory.save(T, "alice", "r2", said("I like jazz"))
        assert (await memory.delete_source(T, "alice", "th_a")).deleted == 1
        await memory.delete(T, "alice", edited.id, revision=edited.revision)
        assert (await memory.restore(T, "bob", await memory.backup(T, "alice"))).imported == 0
    finally:
        await one.close()
