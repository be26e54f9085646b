"""The pool store contract (``memory/pool_store.py`` rules 1–10) on both stores
(``pool_store``: in memory and PostgreSQL), and what only PostgreSQL can show: no plaintext in
any column of the pool tables."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory.crypto import Keyring, Sealed
from memory.errors import DuplicateMemory, InvalidMemory, StaleRevision
from memory.pool import (
    FOR_ROLE,
    EntryMeta,
    EntrySource,
    ForeignEntry,
    PoolEntry,
    Reader,
    Source,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from memory.pool_store import (
    AddEntry,
    InMemoryPoolStore,
    InvalidateEntry,
    PoolLocks,
    PoolStore,
    WideningRefused,
)
from memory.postgres_pool_store import PostgresPoolStore

T = "t1"
ROLE = "role_a"
NOW = datetime(2026, 5, 1, tzinfo=UTC)
ALICE = Reader("alice", T, frozenset({ROLE}))
BOB = Reader("bob", T, frozenset({ROLE}))


def fact(
    id: str,
    *,
    users: tuple[str, ...] = ("alice",),
    thread: str = "th1",
    topics: tuple[str, ...] = (),
    role: str = ROLE,
    tenant: str = T,
    content: str | None = None,
) -> PoolEntry:
    source = ThreadSource(thread, f"item-{id}")
    tags = {tenant_tag(tenant), thread_tag(thread), *topics}
    tags |= {from_tag(users[0]), *(for_person_tag(u) for u in users)}
    meta = EntryMeta(
        id=id, role_id=role, layer="fact", tags=frozenset(tags), sources=(source,),
        created_at=NOW + timedelta(seconds=len(id)),
        access=(ThreadAccess(thread, source.item_id, frozenset(users)),),
    )  # fmt: skip
    return PoolEntry(meta, content if content is not None else f"secret content of {id}")


def observation(
    id: str, sources: tuple[str, ...], *, users: tuple[str, ...] = ("alice",)
) -> PoolEntry:
    srcs: tuple[Source, ...] = tuple(EntrySource(s) for s in sources)
    tags = frozenset({tenant_tag(T), *(for_person_tag(u) for u in users)})
    meta = EntryMeta(
        id=id, role_id=ROLE, layer="observation", tags=tags, sources=srcs,
        created_at=NOW + timedelta(minutes=1, seconds=len(id)), confidence=0.7,
    )  # fmt: skip
    return PoolEntry(meta, f"concluded {id}")


def ids(entries: list[PoolEntry]) -> set[str]:
    return {e.meta.id for e in entries}


async def test_round_trip_returns_content_and_metadata(pool_store: PoolStore) -> None:
    added = await pool_store.add(fact("f1", topics=("travel",)), "memory_model")
    assert added.version == 1
    (got,) = await pool_store.read_visible(T, ROLE, ALICE)
    assert got.content == "secret content of f1"
    assert got.meta == added
    meta = await pool_store.load_meta(T, ROLE)
    assert meta == {"f1": added}
    with pytest.raises(DuplicateMemory):
        await pool_store.add(fact("f1"), "memory_model")


async def test_every_call_is_scoped_by_tenant_and_role(pool_store: PoolStore) -> None:
    await pool_store.add(fact("f1"), "memory_model")
    await pool_store.add(fact("f1", role="role_b", content="other role"), "memory_model")
    await pool_store.add(fact("f1", tenant="t2", content="other tenant"), "memory_model")
    assert set(await pool_store.load_meta(T, ROLE)) == {"f1"}
    (b,) = await pool_store.read_visible(T, "role_b", Reader("alice", T, frozenset({"role_b"})))
    assert b.content == "other role"
    assert await pool_store.read_visible("t2", ROLE, ALICE) == []  # alice of t1 in t2's pool
    (own,) = await pool_store.read_visible(T, ROLE, ALICE)
    assert own.content == "secret content of f1"
    assert await pool_store.purge(T, "role_b", thread_tag("th1")) == 1
    assert set(await pool_store.load_meta(T, ROLE)) == {"f1"}
    assert set(await pool_store.load_meta("t2", ROLE)) == {"f1"}
    wrong = fact("f2")
    wrong = replace(wrong, meta=replace(wrong.meta, tags=wrong.meta.tags | {tenant_tag("t2")}))
    with pytest.raises(InvalidMemory):
        await pool_store.add(wrong, "memory_model")
    bad_topic = replace(wrong, meta=replace(fact("f3").meta, tags=fact("f3").meta.tags | {"A B"}))
    with pytest.raises(InvalidMemory):
        await pool_store.add(bad_topic, "memory_model")


async def test_read_visible_applies_the_visibility_rules_and_tag_filters(
    pool_store: PoolStore,
) -> None:
    await pool_store.add(fact("a1", topics=("food",)), "memory_model")
    await pool_store.add(fact("a2", topics=("travel",)), "memory_model")
    await pool_store.add(fact("ab", users=("alice", "bob"), thread="th2"), "memory_model")
    await pool_store.add(fact("b1", users=("bob",), thread="th3"), "memory_model")
    await pool_store.add(observation("o1", ("a1", "ab")), "memory_model")
    await pool_store.add(observation("o2", ("ab",), users=("alice", "bob")), "memory_model")
    # bob could not see a1: an observation resting on it may not name him.
    with pytest.raises(WideningRefused):
        await pool_store.add(observation("o3", ("a1",), users=("bob",)), "memory_model")
    with pytest.raises(WideningRefused):  # for:role needs the role's users
        role_wide = fact("r1")
        role_wide = replace(
            role_wide, meta=replace(role_wide.meta, tags=role_wide.meta.tags | {FOR_ROLE})
        )
        await pool_store.add(role_wide, "memory_model")

    assert ids(await pool_store.read_visible(T, ROLE, ALICE)) == {"a1", "a2", "ab", "o1", "o2"}
    assert ids(await pool_store.read_visible(T, ROLE, BOB)) == {"ab", "b1", "o2"}
    assert ids(await pool_store.read_visible(T, ROLE, ALICE, tags=["food"])) == {"a1"}
    assert ids(await pool_store.read_visible(T, ROLE, BOB, tags=["food"])) == set()
    assert ids(await pool_store.read_visible(T, ROLE, BOB, tags=[thread_tag("th2")])) == {"ab"}
    stranger = Reader("carol", T, frozenset({ROLE}))
    assert await pool_store.read_visible(T, ROLE, stranger) == []

    # An invalidated source: history for those allowed, the conclusion on it hidden.
    await pool_store.invalidate(T, ROLE, "a1", NOW + timedelta(days=1), by="person")
    assert ids(await pool_store.read_visible(T, ROLE, ALICE)) == {"a1", "a2", "ab", "o2"}
    current = await pool_store.read_visible(T, ROLE, ALICE, current_only=True)
    assert ids(current) == {"a2", "ab", "o2"}


class CountingKeyring(Keyring):
    opened: list[bytes]

    def open(self, sealed: Sealed, *, context: bytes) -> str:
        self.opened.append(context)
        return super().open(sealed, context=context)


async def test_only_the_visible_entries_are_opened(request: pytest.FixtureRequest) -> None:
    keyring = CountingKeyring.generate("count")
    keyring.opened = []
    store: PoolStore = InMemoryPoolStore(keyring=keyring, locks=PoolLocks())
    for name in ("a1", "a2"):
        await store.add(fact(name), "memory_model")
    await store.add(fact("b1", users=("bob",)), "memory_model")
    await store.read_visible(T, ROLE, ALICE)
    assert len(keyring.opened) == 2
    assert all(b"b1" not in c for c in keyring.opened)
    keyring.opened.clear()
    await store.load_meta(T, ROLE)
    await store.purge(T, ROLE, thread_tag("th1"))
    assert keyring.opened == []


async def test_only_the_visible_entries_are_opened_on_postgres(pg_pool: Any) -> None:
    keyring = CountingKeyring.generate("count")
    keyring.opened = []
    store = PostgresPoolStore(pg_pool, keyring=keyring, locks=PoolLocks())
    for name in ("a1", "a2"):
        await store.add(fact(name), "memory_model")
    await store.add(fact("b1", users=("bob",)), "memory_model")
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"a1", "a2"}
    assert len(keyring.opened) == 2
    keyring.opened.clear()
    await store.load_meta(T, ROLE)
    assert await store.purge(T, ROLE, thread_tag("th1")) == 3
    assert keyring.opened == []


async def test_updates_are_compare_and_set_on_the_version(pool_store: PoolStore) -> None:
    first = await pool_store.add(fact("f1", topics=("food",)), "memory_model")
    moved = replace(first, tags=(first.tags - {"food"}) | {"travel"})
    second = await pool_store.update(moved, "new words", expected_version=1, by="memory_model")
    assert second.version == 2
    with pytest.raises(StaleRevision) as stale:
        await pool_store.update(moved, None, expected_version=1, by="person")
    assert stale.value.current_revision == 2
    with pytest.raises(StaleRevision):
        await pool_store.invalidate(T, ROLE, "f1", NOW, by="person", expected_version=1)
    third = await pool_store.update(
        replace(second, tags=second.tags | {"food"}), None, expected_version=2, by="person"
    )
    (got,) = await pool_store.read_visible(T, ROLE, ALICE)
    assert got.meta == third and got.content == "new words"
    # Widening through an update is checked like an add: bob never saw th1's item.
    with pytest.raises(WideningRefused):
        await pool_store.update(
            replace(third, tags=third.tags | {for_person_tag("bob")}),
            None, expected_version=3, by="memory_model",
        )  # fmt: skip
    gone = await pool_store.invalidate(T, ROLE, "f1", NOW, by="person", expected_version=3)
    with pytest.raises(InvalidMemory):  # an update cannot revive it
        await pool_store.update(
            replace(gone, invalidated_at=None), None, expected_version=4, by="person"
        )


async def test_a_person_may_turn_a_fact_into_a_pinned_entry_without_sources_only(
    pool_store: PoolStore,
) -> None:
    first = await pool_store.add(fact("f1"), "memory_model")
    unlinked = replace(
        first, layer="pinned", sources=(), access=(), tags=first.tags - {"thread:th1"}
    )
    for refused, by in (
        (unlinked, "memory_model"),  # only a person's edit unlinks
        (replace(unlinked, sources=first.sources, access=first.access), "person"),
        (replace(unlinked, tags=unlinked.tags | {for_person_tag("bob")}), "person"),
        (replace(first, layer="observation", confidence=0.5), "person"),
    ):
        with pytest.raises(InvalidMemory):
            await pool_store.update(refused, None, expected_version=1, by=by)  # type: ignore[arg-type]
    pinned = await pool_store.update(unlinked, "edited", expected_version=1, by="person")
    assert (pinned.layer, pinned.sources, pinned.version) == ("pinned", (), 2)
    (got,) = await pool_store.read_visible(T, ROLE, ALICE)
    assert got.meta == pinned and got.content == "edited"
    with pytest.raises(InvalidMemory):  # and never back
        await pool_store.update(first, None, expected_version=2, by="person")


async def test_read_tagged_is_read_visible_with_one_tag(pool_store: PoolStore) -> None:
    def tagged(entry: PoolEntry) -> PoolEntry:
        return PoolEntry(replace(entry.meta, tags=entry.meta.tags | {"mood"}), entry.content)

    await pool_store.add(fact("f1"), "memory_model")
    await pool_store.add(fact("f2", users=("alice", "bob"), thread="th2"), "memory_model")
    await pool_store.add(tagged(observation("o1", ("f1",))), "memory_model")
    await pool_store.add(tagged(observation("o2", ("f2",))), "memory_model")
    await pool_store.forget(T, ROLE, ALICE, "f2")  # o2 now rests on what alice cannot see
    await pool_store.add(tagged(fact("f3", users=("bob",), thread="th3")), "memory_model")
    for reader in (ALICE, BOB):
        for current_only in (False, True):
            expected = await pool_store.read_visible(
                T, ROLE, reader, tags=("mood",), current_only=current_only
            )
            got = await pool_store.read_tagged(T, ROLE, reader, "mood", current_only=current_only)
            assert got == expected
    assert ids(await pool_store.read_tagged(T, ROLE, ALICE, "mood")) == {"o1"}
    await pool_store.invalidate(T, ROLE, "f1", NOW, by="person")
    assert await pool_store.read_tagged(T, ROLE, ALICE, "mood") == []
    assert set(await pool_store.load_meta_matching(T, ROLE, tag="mood")) == {"o1", "o2", "f3"}
    assert set(await pool_store.load_meta_matching(T, ROLE, ids=["f1", "nope"])) == {"f1"}
    assert await pool_store.load_meta_matching(T, "role_b", tag="mood") == {}


async def test_forget_retracts_mine_and_refuses_a_foreign_entry(pool_store: PoolStore) -> None:
    await pool_store.add(fact("mine"), "memory_model")
    await pool_store.add(fact("shared", users=("alice", "bob")), "memory_model")
    await pool_store.add(fact("bobs", users=("bob",)), "memory_model")
    with pytest.raises(ForeignEntry):
        await pool_store.forget(T, ROLE, ALICE, "bobs")
    with pytest.raises(ForeignEntry):
        await pool_store.forget(T, ROLE, ALICE, "no-such-entry")
    retracted = await pool_store.forget(T, ROLE, ALICE, "mine")
    assert retracted.retracted and retracted.version == 2
    narrowed = await pool_store.forget(T, ROLE, ALICE, "shared")
    assert not narrowed.retracted and for_person_tag("alice") not in narrowed.tags
    assert ids(await pool_store.read_visible(T, ROLE, ALICE)) == set()
    assert ids(await pool_store.read_visible(T, ROLE, BOB)) == {"shared", "bobs"}
    with pytest.raises(ForeignEntry):
        await pool_store.forget(T, ROLE, ALICE, "mine")  # already gone for her


async def test_purge_by_thread_removes_what_derives_from_it(pool_store: PoolStore) -> None:
    await pool_store.add(fact("f1", thread="th1"), "memory_model")
    await pool_store.add(fact("f2", thread="th2"), "memory_model")
    await pool_store.add(fact("f3", thread="th2"), "memory_model")
    await pool_store.add(observation("o1", ("f1",)), "memory_model")
    await pool_store.add(observation("o2", ("o1", "f2")), "memory_model")
    await pool_store.add(observation("o3", ("o2",)), "memory_model")
    await pool_store.add(observation("o4", ("f3",)), "memory_model")
    with pytest.raises(InvalidMemory):
        await pool_store.purge(T, ROLE, "travel")
    with pytest.raises(InvalidMemory):
        await pool_store.purge(T, ROLE, for_person_tag("alice"))
    assert await pool_store.purge(T, ROLE, thread_tag("th1")) == 4
    assert set(await pool_store.load_meta(T, ROLE)) == {"f2", "f3", "o4"}
    assert {c.entry_id for c in await pool_store.change_log(T, ROLE, ALICE)} == {"f2", "f3", "o4"}
    assert await pool_store.purge(T, ROLE, thread_tag("th1")) == 0
    assert await pool_store.purge(T, ROLE, from_tag("alice")) == 3
    assert await pool_store.purge(T, ROLE, tenant_tag(T)) == 0


async def test_change_log_shows_only_entries_the_reader_may_see(pool_store: PoolStore) -> None:
    await pool_store.apply(
        T, ROLE, [AddEntry(fact("a1"), "memory_model", note="learned from the budget talk")]
    )
    await pool_store.add(fact("b1", users=("bob",)), "person")
    await pool_store.invalidate(T, ROLE, "a1", NOW, by="person")
    alice = await pool_store.change_log(T, ROLE, ALICE)
    assert [(c.entry_id, c.version, c.action, c.by) for c in alice] == [
        ("a1", 1, "add", "memory_model"),
        ("a1", 2, "invalidate", "person"),
    ]
    assert alice[0].note == "learned from the budget talk" and alice[1].note is None
    assert [c.entry_id for c in await pool_store.change_log(T, ROLE, BOB)] == ["b1"]
    assert len(await pool_store.change_log(T, ROLE, ALICE, limit=1)) == 1
    await pool_store.forget(T, ROLE, ALICE, "a1")  # retracted: hidden, and so is its history
    assert await pool_store.change_log(T, ROLE, ALICE) == []


async def test_apply_in_rolls_back_with_the_outer_transaction(pool_store: PoolStore) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with pool_store.transaction() as tx:
            await pool_store.apply_in(tx, T, ROLE, [AddEntry(fact("f1"), "memory_model")])
            await pool_store.apply_in(
                tx, T, ROLE, [AddEntry(observation("o1", ("f1",)), "memory_model")]
            )
            raise Boom
    assert await pool_store.load_meta(T, ROLE) == {}
    assert await pool_store.change_log(T, ROLE, ALICE) == []

    async with pool_store.transaction() as tx:
        added = await pool_store.apply_in(tx, T, ROLE, [AddEntry(fact("f1"), "memory_model")])
        assert [m.id for m in added] == ["f1"]
        with pytest.raises(StaleRevision):  # planned against what the transaction wrote
            await pool_store.apply_in(
                tx, T, ROLE, [InvalidateEntry("f1", NOW, "person", expected_version=2)]
            )
    assert set(await pool_store.load_meta(T, ROLE)) == {"f1"}


async def test_no_plaintext_in_any_column_of_the_pool_tables(pg_pool: Any) -> None:
    store = PostgresPoolStore(pg_pool, locks=PoolLocks())
    secret = "Alice's budget is 4200 euros"
    note = "noted: the budget talk of Tuesday"
    await store.apply(T, ROLE, [AddEntry(fact("f1", content=secret), "memory_model", note=note)])
    await store.update(
        (await store.load_meta(T, ROLE))["f1"], secret + "!", expected_version=1, by="person"
    )
    (got,) = await store.read_visible(T, ROLE, ALICE)
    assert got.content == secret + "!"
    for table in ("role_pool_entries", "role_pool_changes"):
        rows = await pg_pool.fetch(f"SELECT t::text AS row FROM {table} t")
        assert rows
        for row in rows:
            for needle in (secret, note, "budget", "4200"):
                assert needle not in row["row"]
                assert needle.encode().hex() not in row["row"]
    # A ciphertext moved to another row does not open there.
    await store.add(fact("f2"), "memory_model")
    await pg_pool.execute(
        "UPDATE role_pool_entries SET content_sealed ="
        " (SELECT content_sealed FROM role_pool_entries WHERE id = 'f1') WHERE id = 'f2'"
    )
    from memory.errors import SealBroken

    with pytest.raises(SealBroken):
        await store.read_visible(T, ROLE, ALICE)


async def test_a_store_sees_what_another_process_wrote(pg_pool: Any) -> None:
    reader_side = PostgresPoolStore(pg_pool, locks=PoolLocks())
    writer_side = PostgresPoolStore(pg_pool, locks=PoolLocks())
    await writer_side.add(fact("f1"), "memory_model")
    assert ids(await reader_side.read_visible(T, ROLE, ALICE)) == {"f1"}  # now cached
    await writer_side.add(fact("f2"), "memory_model")
    assert ids(await reader_side.read_visible(T, ROLE, ALICE)) == {"f1", "f2"}
    await writer_side.forget(T, ROLE, ALICE, "f1")
    assert ids(await reader_side.read_visible(T, ROLE, ALICE)) == {"f2"}
    assert await writer_side.purge(T, ROLE, thread_tag("th1")) == 2
    assert await reader_side.read_visible(T, ROLE, ALICE) == []
    assert await reader_side.load_meta(T, ROLE) == {}
