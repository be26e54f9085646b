"""memory/pool.py: tags, the visibility rules (a table, each rule hit and missed), widening,
Forget and the mapping of today's per-user memory."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memory.entries import MemoryEntry, owner_key
from memory.errors import InvalidMemory
from memory.pool import (
    FOR_ROLE,
    MAX_TOPIC_CHARS,
    MAX_TOPIC_TAGS,
    EntryMeta,
    EntrySource,
    ForeignEntry,
    ForgetChange,
    Reader,
    Source,
    ThreadAccess,
    ThreadSource,
    can_widen,
    clean_topic_tags,
    for_person_tag,
    forget_for,
    forgotten,
    from_tag,
    is_system_tag,
    merge_tags,
    pool_entry_from,
    system_tag,
    tenant_tag,
    thread_tag,
    tool_tag,
    visible,
    visible_ids,
)

NOW = datetime(2026, 5, 1, tzinfo=UTC)
ROLE = "role_a"
T = "t1"


def fact(
    id: str,
    *,
    audience: tuple[str, ...] = ("for:person:alice",),
    present: frozenset[str] | None = frozenset({"alice"}),
    tenant: str | None = T,
    sources: tuple[Source, ...] | None = None,
    role: str = ROLE,
    **kw: object,
) -> EntryMeta:
    srcs = sources if sources is not None else (ThreadSource("th1", f"i-{id}"),)
    access = tuple(
        ThreadAccess(s.thread_id, s.item_id, present)
        for s in srcs
        if isinstance(s, ThreadSource) and present is not None
    )
    tags = set(audience) | ({tenant_tag(tenant)} if tenant else set())
    return EntryMeta(
        id=id, role_id=role, layer="fact", tags=frozenset(tags), sources=srcs,
        created_at=NOW, access=access, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def obs(id: str, *deps: str, audience: tuple[str, ...] = (FOR_ROLE,), **kw: object) -> EntryMeta:
    return EntryMeta(
        id=id, role_id=ROLE, layer="observation",
        tags=frozenset({*audience, tenant_tag(T)}),
        sources=tuple(EntrySource(d) for d in deps), created_at=NOW,
        **{"confidence": 0.7, **kw},  # type: ignore[arg-type]
    )  # fmt: skip


def pinned(id: str, user: str = "alice", **kw: object) -> EntryMeta:
    return EntryMeta(
        id=id, role_id=ROLE, layer="pinned",
        tags=frozenset({from_tag(user), for_person_tag(user), tenant_tag(T)}),
        sources=(), created_at=NOW, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def reader(user: str = "alice", *, tenant: str = T, roles: tuple[str, ...] = (ROLE,)) -> Reader:
    return Reader(user, tenant, frozenset(roles))


def pool_of(*entries: EntryMeta) -> dict[str, EntryMeta]:
    return {e.id: e for e in entries}


# ------------------------------------------------------------------ tags


def test_system_tag_builders() -> None:
    assert from_tag("u1") == "from:u1"
    assert for_person_tag("u1") == "for:person:u1"
    assert tenant_tag("o1") == "tenant:o1"
    assert thread_tag("th") == "thread:th"
    assert tool_tag("search") == "tool:search"
    assert system_tag("from", "u") == "from:u"
    for bad in ("", "a b", "x" * 201):
        with pytest.raises(ValueError):
            from_tag(bad)
    with pytest.raises(ValueError):
        system_tag("owner", "u")  # type: ignore[arg-type]


def test_any_tag_with_a_colon_is_a_system_tag() -> None:
    assert is_system_tag("for:role") and is_system_tag("x:y")
    assert not is_system_tag("trip-planning")


def test_clean_topic_tags_normalises_and_drops_what_a_model_must_not_write() -> None:
    proposed = [
        "Trip Planning", "trip_planning", "testing", "for:role", "for：person：bob", "tenant:x",
        "", "  ", "--", "a--b", "中文", "x" * (MAX_TOPIC_CHARS + 1), 42, None, "ok-2",
    ]  # fmt: skip
    assert clean_topic_tags(proposed) == {"trip-planning", "testing", "ok-2"}


def test_clean_topic_tags_keeps_at_most_the_first_topics() -> None:
    tags = clean_topic_tags([f"t{i}" for i in range(MAX_TOPIC_TAGS + 5)])
    assert tags == {f"t{i}" for i in range(MAX_TOPIC_TAGS)}


def test_merge_tags_never_lets_a_model_write_a_system_tag() -> None:
    merged = merge_tags(["for:role", "testing", "from:mallory"], [for_person_tag("alice")])
    assert merged == {"testing", "for:person:alice"}
    with pytest.raises(ValueError):
        merge_tags([], ["testing"])


def test_entry_metadata_checks_layer_and_confidence() -> None:
    with pytest.raises(InvalidMemory):
        obs("o", "a", confidence=None)
    with pytest.raises(InvalidMemory):
        obs("o", "a", confidence=1.5)
    with pytest.raises(InvalidMemory):
        fact("f", confidence=0.5)
    with pytest.raises(InvalidMemory):
        replace(fact("f"), layer="note")  # type: ignore[arg-type]


# ------------------------------------------------------------------ the rules table

BASE = fact("f")

# (rule, pool, entry id, reader, visible)
RULES: list[tuple[str, dict[str, EntryMeta], str, Reader, bool]] = [
    ("1 present entry", pool_of(BASE), "f", reader(), True),
    ("1 missing entry", pool_of(BASE), "nope", reader(), False),
    ("1 stored under another id", {"g": BASE}, "g", reader(), False),
    ("2 same tenant", pool_of(BASE), "f", reader(tenant=T), True),
    ("2 other tenant", pool_of(BASE), "f", reader(tenant="t2"), False),
    ("2 no tenant tag", pool_of(fact("f", tenant=None)), "f", reader(), False),
    (
        "2 two tenants",
        pool_of(replace(BASE, tags=BASE.tags | {tenant_tag("t2")})),
        "f",
        reader(),
        False,
    ),
    ("3 no for: tag", pool_of(fact("f", audience=())), "f", reader(), False),
    ("3 for:person names the reader", pool_of(BASE), "f", reader("alice"), True),
    (
        "3 for:person names someone else",
        pool_of(fact("f", present=frozenset({"alice", "bob"}))),
        "f",
        reader("bob"),
        False,
    ),
    (
        "3 for:role, reader uses the role",
        pool_of(fact("f", audience=(FOR_ROLE,), present=frozenset({"bob"}))),
        "f",
        reader("bob"),
        True,
    ),
    (
        "3 for:role, reader does not use the role",
        pool_of(fact("f", audience=(FOR_ROLE,), present=frozenset({"bob"}))),
        "f",
        reader("bob", roles=("role_b",)),
        False,
    ),
    (
        "3 unknown for: tag names nobody",
        pool_of(fact("f", audience=("for:channel:c1",))),
        "f",
        reader(),
        False,
    ),
    ("4 fact without sources", pool_of(fact("f", sources=())), "f", reader(), False),
    (
        "4 fact citing an entry",
        pool_of(pinned("p"), fact("f", sources=(EntrySource("p"),))),
        "f",
        reader(),
        False,
    ),
    ("4 observation without sources", pool_of(obs("o")), "o", reader(), False),
    (
        "4 observation citing a thread item",
        pool_of(replace(obs("o"), sources=(ThreadSource("th1", "i1"),))),
        "o",
        reader(),
        False,
    ),
    ("4 pinned without sources", pool_of(pinned("p")), "p", reader(), True),
    (
        "4 pinned citing an entry",
        pool_of(BASE, replace(pinned("p"), sources=(EntrySource("f"),))),
        "p",
        reader(),
        False,
    ),
    (
        "5 reader absent from the thread",
        pool_of(fact("f", audience=(FOR_ROLE,), present=frozenset({"alice"}))),
        "f",
        reader("bob"),
        False,
    ),
    ("5 no access record", pool_of(fact("f", present=None)), "f", reader(), False),
    (
        "5 record for another item",
        pool_of(replace(BASE, access=(ThreadAccess("th1", "other", frozenset({"alice"})),))),
        "f",
        reader(),
        False,
    ),
    (
        "5 every source must admit the reader",
        pool_of(
            replace(
                fact("f", audience=(FOR_ROLE,)),
                sources=(ThreadSource("th1", "i1"), ThreadSource("th2", "i2")),
                access=(
                    ThreadAccess("th1", "i1", frozenset({"alice", "bob"})),
                    ThreadAccess("th2", "i2", frozenset({"alice"})),
                ),
            )
        ),
        "f",
        reader("bob"),
        False,
    ),
    (
        "6 observation over visible sources",
        pool_of(
            fact("a", audience=(FOR_ROLE,), present=frozenset({"alice", "bob"})), obs("o", "a")
        ),
        "o",
        reader("bob"),
        True,
    ),
    (
        "6 seeing one source is not enough",
        pool_of(
            fact("a", audience=(FOR_ROLE,), present=frozenset({"alice", "bob"})),
            fact("b", audience=(FOR_ROLE,), present=frozenset({"alice"})),
            obs("o", "a", "b"),
        ),
        "o",
        reader("bob"),
        False,
    ),
    (
        "6 recursively, three levels",
        pool_of(
            fact("a", audience=(FOR_ROLE,), present=frozenset({"alice"})),
            obs("o1", "a"),
            obs("o2", "o1"),
            obs("o3", "o2"),
        ),
        "o3",
        reader("bob"),
        False,
    ),
    ("6 missing source", pool_of(obs("o", "gone")), "o", reader(), False),
    (
        "6 source in another role",
        pool_of(fact("a", audience=(FOR_ROLE,), role="role_b"), obs("o", "a")),
        "o",
        reader(roles=(ROLE, "role_b")),
        False,
    ),
    ("6 self cycle", pool_of(obs("o", "o")), "o", reader(), False),
    (
        "6 two-entry cycle",
        pool_of(BASE, obs("o1", "f", "o2"), obs("o2", "o1")),
        "o1",
        reader(),
        False,
    ),
    (
        "6 depends on a cycle",
        pool_of(BASE, obs("o1", "o2"), obs("o2", "o1"), obs("top", "f", "o1")),
        "top",
        reader(),
        False,
    ),
    (
        "6 invalidated source hides the conclusion",
        pool_of(replace(BASE, invalidated_at=NOW), obs("o", "f")),
        "o",
        reader(),
        False,
    ),
    (
        "6 retracted source hides the conclusion",
        pool_of(replace(BASE, retracted=True), obs("o", "f")),
        "o",
        reader(),
        False,
    ),
    (
        "6 ownership of the conclusion opens nothing",
        pool_of(
            fact("b", audience=(FOR_ROLE,), present=frozenset({"bob"})),
            obs("o", "b", audience=("for:person:alice",)),
        ),
        "o",
        reader("alice"),
        False,
    ),
    ("7 retracted entry", pool_of(replace(BASE, retracted=True)), "f", reader(), False),
    (
        "7 invalidated entry as history",
        pool_of(replace(BASE, invalidated_at=NOW)),
        "f",
        reader(),
        True,
    ),
]


@pytest.mark.parametrize(
    ("pool", "entry_id", "who", "expected"),
    [r[1:] for r in RULES],
    ids=[r[0] for r in RULES],
)
def test_visibility_rule(
    pool: dict[str, EntryMeta], entry_id: str, who: Reader, expected: bool
) -> None:
    assert visible(entry_id, who, pool) is expected
    assert (entry_id in visible_ids(who, pool)) is expected


def test_current_only_leaves_out_invalidated_history() -> None:
    pool = pool_of(replace(BASE, invalidated_at=NOW), pinned("p"))
    assert visible("f", reader(), pool) and not visible("f", reader(), pool, current_only=True)
    assert visible_ids(reader(), pool) == {"f", "p"}
    assert visible_ids(reader(), pool, current_only=True) == {"p"}


def test_an_entry_seen_as_a_source_still_checks_its_own_tenant() -> None:
    pool = pool_of(fact("a", audience=(FOR_ROLE,), tenant="t2"), obs("o", "a"))
    assert not visible("o", reader(), pool)


# ------------------------------------------------------------------ widening


def test_widening_a_fact_needs_every_new_reader_present_in_every_source() -> None:
    f = fact("f", present=frozenset({"alice", "bob"}))
    pool = pool_of(f)
    assert can_widen(f, {for_person_tag("bob")}, pool, tenant=T, role_users=frozenset())
    assert not can_widen(f, {for_person_tag("carol")}, pool, tenant=T, role_users=frozenset())
    assert can_widen(f, {FOR_ROLE}, pool, tenant=T, role_users=frozenset({"alice", "bob"}))
    assert not can_widen(
        f, {FOR_ROLE}, pool, tenant=T, role_users=frozenset({"alice", "bob", "carol"})
    )


def test_widening_an_observation_rechecks_every_source_recursively() -> None:
    pool = pool_of(
        fact("a", audience=(FOR_ROLE,), present=frozenset({"alice", "bob"})),
        fact("b", audience=(FOR_ROLE,), present=frozenset({"alice"})),
        obs("o1", "a", audience=("for:person:alice",)),
        obs("o2", "a", "b", audience=("for:person:alice",)),
    )
    users = frozenset({"alice", "bob"})
    assert can_widen(pool["o1"], {FOR_ROLE}, pool, tenant=T, role_users=users)
    assert not can_widen(pool["o2"], {FOR_ROLE}, pool, tenant=T, role_users=users)


def test_widening_refuses_unknown_audiences_other_tenants_and_retracted_entries() -> None:
    f = fact("f", present=frozenset({"alice", "bob"}))
    pool = pool_of(f)
    none: frozenset[str] = frozenset()
    assert not can_widen(f, {"for:channel:c"}, pool, tenant=T, role_users=none)
    assert not can_widen(f, {"testing"}, pool, tenant=T, role_users=none)
    assert not can_widen(f, {for_person_tag("bob")}, pool, tenant="t2", role_users=none)
    gone = replace(f, retracted=True)
    assert not can_widen(gone, {for_person_tag("bob")}, pool, tenant=T, role_users=none)


def test_a_pinned_entry_without_sources_widens_only_to_its_asker() -> None:
    p = pinned("p", "alice")
    pool = pool_of(p)
    assert can_widen(p, {for_person_tag("alice")}, pool, tenant=T, role_users=frozenset())
    assert not can_widen(p, {FOR_ROLE}, pool, tenant=T, role_users=frozenset({"alice", "bob"}))


# ------------------------------------------------------------------ forget


def test_forget_retracts_an_entry_that_is_only_mine() -> None:
    pool = pool_of(BASE)
    change = forget_for("f", reader(), pool)
    assert change == ForgetChange("f", retract=True, remove_tags=frozenset())
    after = forgotten(BASE, change)
    assert after.retracted and after.version == BASE.version + 1
    assert not visible("f", reader(), {"f": after})


def test_forget_of_a_shared_entry_only_takes_me_out() -> None:
    shared = fact(
        "f", audience=("for:person:alice", "for:person:bob"), present=frozenset({"alice", "bob"})
    )
    pool = pool_of(shared)
    change = forget_for("f", reader("alice"), pool)
    assert change == ForgetChange("f", retract=False, remove_tags=frozenset({"for:person:alice"}))
    after = {"f": forgotten(shared, change)}
    assert not visible("f", reader("alice"), after) and visible("f", reader("bob"), after)


def test_forget_of_an_entry_i_cannot_see_is_foreign() -> None:
    pool = pool_of(fact("f", audience=("for:person:bob",), present=frozenset({"bob"})))
    with pytest.raises(ForeignEntry) as caught:
        forget_for("f", reader("alice"), pool)
    assert caught.value.code == "foreign_entry"
    with pytest.raises(ForeignEntry):
        forget_for("missing", reader("alice"), pool)


def test_forget_of_a_role_wide_entry_is_foreign() -> None:
    pool = pool_of(fact("f", audience=(FOR_ROLE,)))
    assert visible("f", reader(), pool)
    with pytest.raises(ForeignEntry):
        forget_for("f", reader(), pool)


def test_forgotten_refuses_a_change_for_another_entry() -> None:
    with pytest.raises(ValueError):
        forgotten(BASE, ForgetChange("other", retract=True, remove_tags=frozenset()))


# ------------------------------------------------------------------ migration


def memory_entry(**kw: object) -> MemoryEntry:
    fields: dict[str, object] = dict(
        id="mem_1", tenant=T, owner=owner_key("alice"), role_id=ROLE, kind="preference",
        key=None, content="I like tea", origin="extraction", source_thread_id="th9",
        source_seq=12, stated_at=NOW, status="active", revision=3, created_at=NOW,
        updated_at=NOW,
    )  # fmt: skip
    fields.update(kw)
    return MemoryEntry(**fields)  # type: ignore[arg-type]


def test_an_extracted_entry_becomes_a_fact_of_its_user_only() -> None:
    entry = pool_entry_from(memory_entry(), "alice")
    assert entry is not None and entry.content == "I like tea"
    meta = entry.meta
    assert meta.layer == "fact" and meta.id == "mem_1" and meta.role_id == ROLE
    assert meta.tags == {
        "from:alice", "for:person:alice", "tenant:t1", "thread:th9", "preference",
    }  # fmt: skip
    assert meta.sources == (ThreadSource("th9", "seq:12"),)
    assert meta.access == (ThreadAccess("th9", "seq:12", frozenset({"alice"})),)
    pool = {meta.id: meta}
    assert visible_ids(reader("alice"), pool) == {"mem_1"}
    assert visible_ids(reader("bob"), pool) == set()
    assert not can_widen(meta, {FOR_ROLE}, pool, tenant=T, role_users=frozenset({"alice", "bob"}))


def test_an_extracted_entry_without_a_source_stays_hidden() -> None:
    entry = pool_entry_from(memory_entry(source_thread_id=None, source_seq=None), "alice")
    assert entry is not None and entry.meta.sources == ()
    assert visible_ids(reader("alice"), {entry.meta.id: entry.meta}) == set()


def test_a_persons_entry_becomes_pinned_for_them() -> None:
    entry = pool_entry_from(memory_entry(origin="person", source_thread_id=None), "alice")
    assert entry is not None
    meta = entry.meta
    assert meta.layer == "pinned" and meta.sources == ()
    assert meta.tags == {"from:alice", "for:person:alice", "tenant:t1", "preference"}
    assert visible_ids(reader("alice"), {meta.id: meta}) == {"mem_1"}


def test_migration_skips_deleted_entries_and_refuses_another_users_entry() -> None:
    assert pool_entry_from(memory_entry(status="deleted", content=""), "alice") is None
    with pytest.raises(InvalidMemory):
        pool_entry_from(memory_entry(), "bob")
