"""memory/pool.py's ``PoolIndex`` (the fast ``visible_ids``) against the plain per-entry
``visible`` on large generated pools — noise, missing sources, self, sideways and back-edge
cycles, invalidations, retractions, entries stored before their sources — and its reuse for a
mapping that has not changed (and only then)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memory.pool import (
    INDEX_CACHE_SIZE,
    EntryMeta,
    EntrySource,
    Layer,
    PoolIndex,
    Reader,
    Source,
    ThreadAccess,
    ThreadSource,
    forget_for,
    forgotten,
    pool_index,
    visible,
    visible_ids,
)

NOW = datetime(2026, 5, 1, tzinfo=UTC)
USERS = ("u0", "u1", "u2", "u3", "u4")
ROLES = ("r1", "r2")
READERS = [
    Reader(user, tenant, roles)
    for user in USERS
    for tenant in ("t1", "t2")
    for roles in (frozenset({"r1"}), frozenset(), frozenset(ROLES))
]


def generated_pool(seed: int, *, facts: int = 1_500, levels: int = 4) -> dict[str, EntryMeta]:
    rng = random.Random(seed)

    def odd(percent: int = 6) -> bool:
        return rng.randrange(100) < percent

    def common(eid: str) -> dict[str, object]:
        audience = {"for:role"}
        if odd(15):
            audience = set(rng.sample([*(f"for:person:{u}" for u in USERS), "for:role",
                                       "for:channel:c1"], rng.randint(0, 3)))  # fmt: skip
        tenants = ["t1"]
        if odd():
            tenants = rng.choice([["t2"], [], ["t1", "t2"]])
        return {
            "id": eid if not odd(1) else f"{eid}-other",
            "role_id": "r2" if odd(3) else "r1",
            "tags": frozenset(audience | {f"tenant:{t}" for t in tenants} | {"topic"}),
            "created_at": NOW,
            "invalidated_at": NOW if odd() else None,
            "retracted": odd(3),
        }

    pool: dict[str, EntryMeta] = {}
    for n in range(facts):
        eid = f"f{n}"
        layer: Layer = "pinned" if odd() else "fact"
        sources: list[Source] = []
        access: list[ThreadAccess] = []
        for k in range(0 if odd(3) else rng.randint(1, 3)):
            src = ThreadSource(f"th{rng.randrange(20)}", f"{eid}-i{k}")
            sources.append(src)
            if odd(3):
                continue  # the access record is missing
            users = frozenset(USERS) if not odd(20) else frozenset(rng.sample(USERS, 3))
            access.append(ThreadAccess(src.thread_id, src.item_id, users))
        if odd(1):
            sources.append(EntrySource(f"f{rng.randrange(facts)}"))  # a fact with an entry source
        pool[eid] = EntryMeta(
            layer=layer, sources=tuple(sources), access=tuple(access),
            **common(eid),  # type: ignore[arg-type]
        )  # fmt: skip
    below = list(pool)
    for level in range(1, levels + 1):
        made: list[str] = []
        for n in range(facts * (levels + 1 - level) // levels):
            eid = f"o{level}.{n}"
            deps = rng.sample(below, rng.randint(1, 3))
            if odd(3):
                deps.append(rng.choice(["missing", eid, *made[-5:]]))
            pool[eid] = EntryMeta(
                layer="observation", sources=tuple(EntrySource(d) for d in deps),
                confidence=0.5, **common(eid),  # type: ignore[arg-type]
            )  # fmt: skip
            made.append(eid)
        below += made
    observations = [k for k in pool if k.startswith("o")]
    for _ in range(len(observations) // 100):  # back edges: cycles across levels
        early, late = sorted(rng.sample(observations, 2))
        pool[early] = replace(pool[early], sources=(*pool[early].sources, EntrySource(late)))
    return pool


def per_entry(reader: Reader, pool: dict[str, EntryMeta], *, current_only: bool) -> set[str]:
    return {eid for eid in pool if visible(eid, reader, pool, current_only=current_only)}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("stored", ["learned order", "shuffled"])
def test_the_index_agrees_with_the_per_entry_check(seed: int, stored: str) -> None:
    pool = generated_pool(seed)
    if stored == "shuffled":  # observations before their sources: the depth-first walk decides
        keys = list(pool)
        random.Random(seed).shuffle(keys)
        pool = {key: pool[key] for key in keys}
    index = PoolIndex(pool)
    for reader in READERS:
        for current_only in (False, True):
            expected = per_entry(reader, pool, current_only=current_only)
            assert visible_ids(reader, pool, current_only=current_only) == expected
            assert index.visible_ids(reader, current_only=current_only) == expected
            assert visible_ids(reader, index, current_only=current_only) == expected
    # The pools are rich enough to prove something: some readers see much, none sees all.
    shown = [len(visible_ids(reader, index)) for reader in READERS]
    assert max(shown) > len(pool) // 5 and max(shown) < len(pool)


def test_a_long_chain_and_a_long_cycle_do_not_exhaust_the_stack() -> None:
    def obs(eid: str, dep: str) -> EntryMeta:
        return EntryMeta(
            id=eid, role_id="r1", layer="observation", tags=frozenset({"for:role", "tenant:t1"}),
            sources=(EntrySource(dep),), created_at=NOW, confidence=0.5,
        )  # fmt: skip

    fact = EntryMeta(
        id="f", role_id="r1", layer="pinned", tags=frozenset({"for:role", "tenant:t1"}),
        sources=(), created_at=NOW,
    )  # fmt: skip
    chain = {f"c{n}": obs(f"c{n}", f"c{n - 1}" if n else "f") for n in range(5_000)}
    cycle = {f"y{n}": obs(f"y{n}", f"y{(n + 1) % 5_000}") for n in range(5_000)}
    pool = {"f": fact, **dict(reversed(chain.items())), **cycle}
    assert visible_ids(Reader("u", "t1", frozenset({"r1"})), pool) == {"f", *chain}


def test_a_changed_mapping_gets_a_new_index_and_an_unchanged_one_its_old() -> None:
    pool = generated_pool(4, facts=200)
    reader = max(READERS, key=lambda r: len(visible_ids(r, pool)))
    first = pool_index(pool)
    assert pool_index(pool) is first
    assert pool_index(first) is first
    # Forget replaces an entry under the same id: same keys, same length, another value.
    eid = next(
        e
        for e in sorted(visible_ids(reader, pool))
        if f"for:person:{reader.user_id}" in pool[e].tags
    )
    pool[eid] = forgotten(pool[eid], forget_for(eid, reader, pool))
    assert pool_index(pool) is not first
    assert visible_ids(reader, pool) == per_entry(reader, pool, current_only=False)
    # An equal copy of the entry is not the same entry: rebuilt, never trusted.
    pool[eid] = replace(pool[eid])
    before = pool_index(pool)
    pool[eid] = replace(pool[eid])
    assert pool_index(pool) is not before
    del pool[eid]
    assert eid not in pool_index(pool)
    assert visible_ids(reader, pool) == per_entry(reader, pool, current_only=False)


def test_the_index_cache_is_bounded() -> None:
    pools = [generated_pool(seed, facts=20) for seed in range(INDEX_CACHE_SIZE + 3)]
    first = pool_index(pools[0])
    for pool in pools[1:]:
        pool_index(pool)
    assert pool_index(pools[0]) is not first


@pytest.mark.parametrize("seed", [4, 5])
def test_an_extended_index_agrees_with_a_new_one(seed: int) -> None:
    full = generated_pool(seed, facts=200)
    keys = [key for key, meta in full.items() if key == meta.id]
    cut = len(keys) * 2 // 3
    pool = {key: full[key] for key in keys[:cut]}
    index: PoolIndex = PoolIndex(pool)
    rng = random.Random(seed)
    derived = rebuilt = 0
    rest = keys[cut:]
    while rest:
        size = rng.randint(1, 6)
        chunk, rest = rest[:size], rest[size:]
        added = [full[key] for key in chunk]
        pool.update((meta.id, meta) for meta in added)
        extended = index.extended(added)
        if extended is None:
            rebuilt += 1
            index = PoolIndex(pool)
            continue
        derived += 1
        assert tuple(extended) == tuple(pool) and extended.indexes(pool)
        for reader in READERS[::5]:
            expected = per_entry(reader, pool, current_only=True)
            assert extended.visible_ids(reader, current_only=True) == expected
        index = extended
    # The generated pool cites missing ids and later entries on purpose (those rebuild);
    # appending what was learned after its sources is derived.
    assert derived > 10 and rebuilt > 0
    assert index.extended([full[keys[0]]]) is None  # an update is never derived
