"""Properties of the pool's visibility (memory/pool.py, rules 1–8) over random pools.

Pools hold facts and pinned entries with random audiences, tenants, roles and thread access
records (some missing), and observations in up to four levels over random earlier entries —
plus back edges (cycles), missing sources, invalidations and retractions. A deliberately naive
reference (no memo, an explicit path for cycles, written from the rules, not from the module)
must agree with ``visible`` for every entry and reader, and ``visible_ids`` must equal the
per-entry check. On top: no visible entry has a source its reader cannot see.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory.pool import (
    EntryMeta,
    EntrySource,
    Layer,
    Reader,
    Source,
    ThreadAccess,
    ThreadSource,
    can_widen,
    visible,
    visible_ids,
)

NOW = datetime(2026, 5, 1, tzinfo=UTC)
USERS = ("u0", "u1", "u2", "u3")
ROLES = ("r1", "r2")
AUDIENCE_TAGS = (*(f"for:person:{u}" for u in USERS), "for:role", "for:channel:c1")

SETTINGS = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,  # the same examples on every run, so CI never flakes
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
QUICK = settings(SETTINGS, max_examples=120)


# ------------------------------------------------------------------ the naive reference


def ref_current(e: EntryMeta) -> bool:
    return e.invalidated_at is None and not e.retracted


def ref_visible(pool: dict[str, EntryMeta], eid: str, r: Reader, path: frozenset[str]) -> bool:
    e = pool.get(eid)
    if e is None or e.id != eid or e.retracted:
        return False
    tenants = {t.removeprefix("tenant:") for t in e.tags if t.startswith("tenant:")}
    if tenants != {r.tenant}:
        return False
    if not any(
        t == f"for:person:{r.user_id}" or (t == "for:role" and e.role_id in r.roles) for t in e.tags
    ):
        return False
    threads = [s for s in e.sources if isinstance(s, ThreadSource)]
    entries = [s for s in e.sources if isinstance(s, EntrySource)]
    if e.layer == "fact" and (entries or not threads):
        return False
    if e.layer == "observation" and (threads or not entries):
        return False
    if e.layer == "pinned" and entries:
        return False
    for t in threads:
        records = [a for a in e.access if (a.thread_id, a.item_id) == (t.thread_id, t.item_id)]
        if not records or any(r.user_id not in a.users for a in records):
            return False
    inner = path | {eid}
    for s in entries:
        d = pool.get(s.entry_id)
        if d is None or d.role_id != e.role_id or s.entry_id in inner or not ref_current(d):
            return False
        if not ref_visible(pool, s.entry_id, r, inner):
            return False
    return True


# ------------------------------------------------------------------ random pools


@st.composite
def pools(draw: st.DrawFn) -> dict[str, EntryMeta]:
    pool: dict[str, EntryMeta] = {}
    # Each pool has a noise level: how often an entry gets something that hides it (another
    # tenant, role or audience, a missing record, a reader absent, a retraction…). Quiet pools
    # have deep chains that are visible, so one wrong source is what must hide them.
    noise = draw(st.sampled_from((2, 8, 25, 50)))

    def odd() -> bool:
        return draw(st.integers(0, 99)) < noise

    def common(eid: str) -> dict[str, object]:
        audience = frozenset({"for:role"})
        if odd():
            audience = draw(st.frozensets(st.sampled_from(AUDIENCE_TAGS), max_size=3))
        tenants: tuple[str, ...] = ("t1",)
        if odd():
            tenants = draw(st.sampled_from([("t2",), (), ("t1", "t2")]))
        return {
            "id": eid,
            "role_id": "r2" if odd() else "r1",
            "tags": audience | {f"tenant:{t}" for t in tenants} | {"topic"},
            "created_at": NOW,
            "invalidated_at": NOW if odd() else None,
            "retracted": odd(),
        }

    for n in range(draw(st.integers(1, 8))):
        eid = f"f{n}"
        layer: Layer = "pinned" if odd() else "fact"
        sources: list[Source] = []
        access: list[ThreadAccess] = []
        count = 0 if odd() else draw(st.integers(1, 3))
        for k in range(count):
            src = ThreadSource(draw(st.sampled_from(("th1", "th2"))), f"{eid}-i{k}")
            sources.append(src)
            if odd():
                continue  # the access record is missing
            users = frozenset(USERS)
            if odd():
                users = draw(st.frozensets(st.sampled_from(USERS), max_size=4))
            access.append(ThreadAccess(src.thread_id, src.item_id, users))
        pool[eid] = EntryMeta(
            layer=layer, sources=tuple(sources), access=tuple(access),
            **common(eid),  # type: ignore[arg-type]
        )  # fmt: skip

    below = list(pool)
    for level in range(1, 5):
        made: list[str] = []
        for n in range(draw(st.integers(0, 4))):
            eid = f"o{level}.{n}"
            deps = draw(st.lists(st.sampled_from(below), min_size=1, max_size=3, unique=True))
            if odd() or draw(st.integers(0, 9)) == 0:  # missing, self cycle, sideways cycle
                bad = draw(st.sampled_from(("missing", eid, *made)))
                deps.insert(draw(st.integers(0, len(deps))), bad)
            pool[eid] = EntryMeta(
                layer="observation", sources=tuple(EntrySource(d) for d in deps),
                confidence=draw(st.floats(0, 1)), **common(eid),  # type: ignore[arg-type]
            )  # fmt: skip
            made.append(eid)
        below += made

    # Back edges: an earlier observation also cites a later one (a cycle across levels).
    observations = [k for k in pool if k.startswith("o")]
    if len(observations) > 1 and draw(st.integers(0, 3)) == 0:
        early, late = sorted(draw(st.lists(st.sampled_from(observations), min_size=2,
                                            max_size=2, unique=True)))  # fmt: skip
        cited = list(pool[early].sources)
        cited.insert(draw(st.integers(0, len(cited))), EntrySource(late))
        pool[early] = replace(pool[early], sources=tuple(cited))
    return pool


readers = st.builds(
    Reader,
    st.sampled_from(USERS),
    st.sampled_from(("t1",) * 6 + ("t2",)),
    st.sampled_from([frozenset({"r1"})] * 4 + [frozenset(), frozenset(ROLES), frozenset({"r2"})]),
)


# ------------------------------------------------------------------ properties


@SETTINGS
@given(pool=pools(), who=st.lists(readers, min_size=1, max_size=4))
def test_visibility_equals_the_naive_reference(
    pool: dict[str, EntryMeta], who: list[Reader]
) -> None:
    for r in who:
        expected = {eid for eid in pool if ref_visible(pool, eid, r, frozenset())}
        assert visible_ids(r, pool) == expected
        assert {eid for eid in pool if visible(eid, r, pool)} == expected
        current = {eid for eid in expected if ref_current(pool[eid])}
        assert visible_ids(r, pool, current_only=True) == current


@QUICK
@given(pool=pools(), r=readers)
def test_no_visible_entry_has_a_source_its_reader_cannot_see(
    pool: dict[str, EntryMeta], r: Reader
) -> None:
    shown = visible_ids(r, pool)
    for eid in shown:
        e = pool[eid]
        for s in e.sources:
            if isinstance(s, EntrySource):
                assert s.entry_id in shown and ref_current(pool[s.entry_id])
                assert pool[s.entry_id].role_id == e.role_id
            else:
                records = [
                    a for a in e.access if (a.thread_id, a.item_id) == (s.thread_id, s.item_id)
                ]
                assert records and all(r.user_id in a.users for a in records)


@QUICK
@given(pool=pools(), data=st.data())
def test_a_widening_that_is_allowed_opens_the_entry_to_everyone_it_names(
    pool: dict[str, EntryMeta], data: st.DataObject
) -> None:
    eid = data.draw(st.sampled_from(sorted(pool)))
    entry = pool[eid]
    new = data.draw(st.frozensets(st.sampled_from(AUDIENCE_TAGS[:-1]), min_size=1, max_size=2))
    role_users = data.draw(st.frozensets(st.sampled_from(USERS), max_size=4))
    if not can_widen(entry, new, pool, tenant="t1", role_users=role_users):
        return
    widened = replace(entry, tags=entry.tags | new)
    after = {**pool, eid: widened}
    named = {t.removeprefix("for:person:") for t in new if t.startswith("for:person:")}
    if "for:role" in new:
        named |= role_users
    for user in named:
        assert visible(eid, Reader(user, "t1", frozenset({entry.role_id})), after)
