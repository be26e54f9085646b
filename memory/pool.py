"""One memory pool per role, shared safely: entries, tags and who sees what (SPEC RM-1…3, RM-7).

Theory of operation
-------------------
A role has one pool of entries. An entry (``PoolEntry``) is its metadata (``EntryMeta``) and
its content; every check here reads metadata only — tags, sources, the access records kept
when the entry was learned — so a store can load ``EntryMeta`` without decrypting anything and
decrypt only the entries a reader is shown. Everything is pure: values in, a verdict or a new
value out.

An entry has a layer: a ``fact`` happened in a thread (its sources are journal items,
``ThreadSource``), an ``observation`` was concluded from other entries (its sources are those
entries, ``EntrySource``; it carries a confidence 0..1), a ``pinned`` entry is something a
person asked to remember (usually no source at all). When a fact is learned the people who were
present for each source item are recorded (``ThreadAccess``: the users allowed to see that
item); those records never leave the server.

Tags with a colon are the system's (``from:<user>``, ``for:person:<user>``, ``for:role``,
``tenant:<id>``, ``thread:<id>``, ``tool:<name>``); only code builds them (``system_tag`` and
friends). Every other tag is a topic a model chose: ``clean_topic_tags`` keeps lowercase ASCII
letters, digits and single dashes (at most ``MAX_TOPIC_CHARS`` each, ``MAX_TOPIC_TAGS`` per
entry) and drops anything else — a colon above all — and ``merge_tags`` joins a model's topics to
code's system tags, so a model can never write a system tag and so never change who sees an entry.

Who may see an entry (``visible``, ``visible_ids``; a ``Reader`` is a user id, a tenant and the
roles the user may use). Nothing else — a reason, a model's instruction, who owns the role, the
layer — is an input, so nothing else can open an entry:

1. The entry is in the pool under its own id; anything else is a missing entry, and a missing
   entry is hidden. A source in another role counts as missing (a pool is one role's).
2. Tenants never mix: the entry has at least one ``tenant:`` tag and every one of them names the
   reader's tenant.
3. Audience: a ``for:`` tag must name the reader — ``for:person:<reader>``, or ``for:role`` when
   the reader may use the entry's role. No ``for:`` tag: nobody. Unknown ``for:`` tags name nobody.
4. Sources by layer: a fact has at least one source and only thread sources; an observation at
   least one source and only entry sources; a pinned entry only thread sources, possibly none.
   Any other shape is hidden.
5. Every thread source needs an access record (same thread and item) that lists the reader. A
   missing record hides the entry: access is proved, never assumed.
6. Every entry source must be visible to the reader (rules 1–7, recursively) *and* current
   (neither invalidated nor retracted). Seeing one source never opens the others or the
   conclusion. A source that is missing, in another role, or reached again along its own chain
   (a cycle) hides the entry — and every entry that depends on it.
7. A retracted entry is hidden. An invalidated entry stays visible as history to those allowed,
   but it is not current: ``current_only=True`` (what memory use reads) leaves it out.

``visible`` decides one entry (memoised; an iterative depth-first walk, so a long chain cannot
exhaust the stack). ``visible_ids`` answers rules 1–7 for a whole pool through a ``PoolIndex``:
what no reader changes (ids, retraction, tenants, source shapes, access records that admit
nobody, entry sources that are missing, foreign, not current or cyclic) is decided once per
pool version, so a reader costs a few set operations and, when something is hidden from them,
one pass over the observations in source order. A store passes its ``PoolIndex``; any other
mapping gets the index last built for it while it holds the very same entries.

8. Widening (``can_widen``) — adding ``for:`` tags — is allowed only when every user of the new
   audience could see every source of the entry (rules 5–6 for that user). A pinned entry
   without sources is its asker's: it can be widened only to the people who asked
   (its ``from:`` users). A retracted entry cannot be widened.
9. Forget (``forget_for``, RM-7) takes back the reader's own part: an entry the reader cannot
   see (rules 1–7) is ``ForeignEntry`` (409); one whose only ``for:`` tag is the reader's
   ``for:person`` becomes retracted; one that also names others loses the reader's
   ``for:person`` tag. An entry the reader sees only through ``for:role`` is shared with the
   whole role and not the reader's to forget (``ForeignEntry``; a purge by system tag removes
   such entries).
10. Today's per-user memory maps into the pool without widening anything
    (``pool_entry_from``): an extracted entry becomes a fact for its user, with its source
    thread recorded as seen by that user only (per-user extraction reads only the user's own
    final messages); a person's own entry becomes pinned for that user. Deleted entries are not
    carried over. What per-user memory keeps beside an entry (kind, stable key, origin, when it
    was stated and last changed) rides along as ``EntryMeta.personal`` (``PersonalMemory``):
    plaintext metadata, never content, and None on every entry the memory model learns.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal, get_args

from memory.entries import Actor as MemoryActor
from memory.entries import MemoryEntry, MemoryKind, owner_key
from memory.errors import InvalidMemory, MemoryStoreError

Layer = Literal["fact", "observation", "pinned"]
LAYERS: tuple[Layer, ...] = get_args(Layer)
SystemTagKind = Literal["from", "for:person", "tenant", "thread", "tool"]
SYSTEM_TAG_KINDS: tuple[SystemTagKind, ...] = get_args(SystemTagKind)

FOR_ROLE = "for:role"
"""The audience tag of every user of the entry's role."""
FOR_PREFIX = "for:"
FOR_PERSON_PREFIX = "for:person:"
TENANT_PREFIX = "tenant:"

MAX_TOPIC_CHARS = 40
"""Longest topic tag (characters); a longer proposal is dropped, never cut."""
MAX_TOPIC_TAGS = 8
"""Most topic tags on one entry; proposals past it are dropped (first ones kept)."""
MAX_SYSTEM_TAG_VALUE_CHARS = 200
LEGACY_ITEM_PREFIX = "seq:"
"""Item id of a migrated source: per-user memory kept the journal position, not the item id."""

_TOPIC = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_TOPIC_SEPARATORS = re.compile(r"[\s_]+")


class ForeignEntry(MemoryStoreError):
    """The entry is not the reader's to change: they cannot see it, or it is shared with the
    whole role (409)."""

    code = "foreign_entry"


# ------------------------------------------------------------------ sources and access


@dataclass(frozen=True, slots=True)
class ThreadSource:
    """A journal item of a thread that a fact (or pinned entry) rests on."""

    thread_id: str
    item_id: str


@dataclass(frozen=True, slots=True)
class EntrySource:
    """Another entry of the same pool that an observation rests on."""

    entry_id: str


Source = ThreadSource | EntrySource


@dataclass(frozen=True, slots=True)
class ThreadAccess:
    """Who was present for one source item when the entry was learned: ``users`` may see it."""

    thread_id: str
    item_id: str
    users: frozenset[str]


# ------------------------------------------------------------------ tags


def system_tag(kind: SystemTagKind, value: str) -> str:
    """``<kind>:<value>``; ``ValueError`` for an unknown kind or an empty, spaced or too long
    value (a bug in the caller, never model input)."""
    if kind not in SYSTEM_TAG_KINDS:
        raise ValueError(f"unknown system tag kind {kind!r}")
    if not value or len(value) > MAX_SYSTEM_TAG_VALUE_CHARS or any(c.isspace() for c in value):
        raise ValueError(f"bad {kind} tag value")
    return f"{kind}:{value}"


def from_tag(user: str) -> str:
    return system_tag("from", user)


def for_person_tag(user: str) -> str:
    return system_tag("for:person", user)


def tenant_tag(tenant: str) -> str:
    return system_tag("tenant", tenant)


def thread_tag(thread_id: str) -> str:
    return system_tag("thread", thread_id)


def tool_tag(name: str) -> str:
    return system_tag("tool", name)


def is_system_tag(tag: str) -> bool:
    """Any tag with a colon belongs to the system."""
    return ":" in tag


def clean_topic_tags(proposed: Iterable[object]) -> frozenset[str]:
    """The topic tags a model proposed, made safe: NFKC, lower case, spaces and underscores as
    dashes; anything that is not a string, holds a colon (full-width too) or is not
    lowercase ASCII letters, digits and single dashes within ``MAX_TOPIC_CHARS`` is dropped;
    duplicates merge; at most ``MAX_TOPIC_TAGS``, first ones kept."""
    kept: list[str] = []
    for tag in proposed:
        if not isinstance(tag, str):
            continue
        text = unicodedata.normalize("NFKC", tag).strip().lower()
        if ":" in text:
            continue
        text = _TOPIC_SEPARATORS.sub("-", text)
        if len(text) > MAX_TOPIC_CHARS or _TOPIC.fullmatch(text) is None or text in kept:
            continue
        kept.append(text)
        if len(kept) == MAX_TOPIC_TAGS:
            break
    return frozenset(kept)


def merge_tags(model_topics: Iterable[object], system_tags: Iterable[str]) -> frozenset[str]:
    """A model's topics (cleaned: its colon tags are dropped) with code's system tags;
    ``ValueError`` when code passes a tag without a colon as a system tag."""
    system = frozenset(system_tags)
    for tag in system:
        if not is_system_tag(tag):
            raise ValueError(f"{tag!r} is not a system tag")
    return clean_topic_tags(model_topics) | system


# ------------------------------------------------------------------ entries


@dataclass(frozen=True, slots=True)
class PersonalMemory:
    """What per-user memory (SPEC MEM-1…8) keeps beside a pool entry it wrote (rule 10): the
    entry's kind, stable key, origin, when the user stated it and when it last changed.
    Plaintext metadata like the rest of ``EntryMeta``; no check of visibility reads it."""

    kind: MemoryKind
    key: str | None
    origin: MemoryActor
    stated_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """Everything about an entry but its content: what the visibility checks read."""

    id: str
    role_id: str
    layer: Layer
    tags: frozenset[str]
    sources: tuple[Source, ...]
    created_at: datetime
    access: tuple[ThreadAccess, ...] = ()
    confidence: float | None = None
    invalidated_at: datetime | None = None
    retracted: bool = False
    version: int = 1
    personal: PersonalMemory | None = None
    """Per-user memory's attributes (rule 10); None for what the memory model learns."""
    # Derived once from the fields above (rules 2–5), so a pool-wide check costs a few
    # attribute reads per entry.
    _tenants: frozenset[str] = field(init=False, repr=False, compare=False)
    _persons: frozenset[str] = field(init=False, repr=False, compare=False)
    _for_role: bool = field(init=False, repr=False, compare=False)
    _gate: frozenset[str] | None = field(init=False, repr=False, compare=False)
    """Users every thread source admits; None: no thread source to pass."""
    _entry_deps: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise InvalidMemory(f"layer must be one of {', '.join(LAYERS)}")
        if self.layer == "observation":
            if self.confidence is None or not 0.0 <= self.confidence <= 1.0:
                raise InvalidMemory("an observation has a confidence between 0 and 1")
        elif self.confidence is not None:
            raise InvalidMemory("only observations have a confidence")
        tenants = frozenset(t[len(TENANT_PREFIX) :] for t in self.tags if t.startswith("tenant:"))
        persons = frozenset(
            t[len(FOR_PERSON_PREFIX) :] for t in self.tags if t.startswith(FOR_PERSON_PREFIX)
        )
        threads = [s for s in self.sources if isinstance(s, ThreadSource)]
        deps = tuple(s.entry_id for s in self.sources if isinstance(s, EntrySource))
        gate: frozenset[str] | None = None
        if self.layer == "fact" and (deps or not threads):
            gate = frozenset()
        elif self.layer == "observation" and (threads or not deps):
            gate = frozenset()
        elif self.layer == "pinned" and deps:
            gate = frozenset()
        else:
            for source in threads:
                admitted = _admitted(self.access, source)
                gate = admitted if gate is None else gate & admitted
        set_ = object.__setattr__
        set_(self, "_tenants", tenants)
        set_(self, "_persons", persons)
        set_(self, "_for_role", FOR_ROLE in self.tags)
        set_(self, "_gate", gate)
        set_(self, "_entry_deps", deps)

    @property
    def current(self) -> bool:
        """Neither invalidated nor retracted."""
        return self.invalidated_at is None and not self.retracted

    @property
    def audience(self) -> frozenset[str]:
        """The ``for:`` tags."""
        return frozenset(t for t in self.tags if t.startswith(FOR_PREFIX))


def _admitted(access: tuple[ThreadAccess, ...], source: ThreadSource) -> frozenset[str]:
    users: frozenset[str] | None = None
    for record in access:
        if record.thread_id == source.thread_id and record.item_id == source.item_id:
            users = record.users if users is None else users & record.users
    return users if users is not None else frozenset()


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """An entry of a role's pool: its metadata and its content (opaque to every check here)."""

    meta: EntryMeta
    content: str


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads: a user of a tenant and the roles that user may use."""

    user_id: str
    tenant: str
    roles: frozenset[str]


# ------------------------------------------------------------------ visibility


class _Visibility:
    """Rules 1–7 for one reader over one pool, each entry decided once."""

    __slots__ = ("_memo", "_pool", "_reader")

    def __init__(self, reader: Reader, pool: Mapping[str, EntryMeta]) -> None:
        self._reader = reader
        self._pool = pool
        self._memo: dict[str, bool] = {}

    def _local(self, entry_id: str, meta: EntryMeta | None) -> bool:
        """Rules 1–5 and the retraction of rule 7: everything but the entry sources."""
        reader = self._reader
        if meta is None or meta.id != entry_id or meta.retracted:
            return False
        tenants = meta._tenants
        if len(tenants) != 1 or reader.tenant not in tenants:
            return False
        if reader.user_id not in meta._persons and not (
            meta._for_role and meta.role_id in reader.roles
        ):
            return False
        gate = meta._gate
        return gate is None or reader.user_id in gate

    def readable(self, root: str) -> bool:
        """Rules 1–7 for ``root`` (history included)."""
        memo = self._memo
        known = memo.get(root)
        if known is not None:
            return known
        meta = self._pool.get(root)
        if not self._local(root, meta):
            memo[root] = False
            return False
        assert meta is not None
        if not meta._entry_deps:
            memo[root] = True
            return True
        return self._walk(meta)

    def sources_readable(self, meta: EntryMeta) -> bool:
        """Rules 4–6 for ``meta`` alone: its own audience and tenant are not asked."""
        gate = meta._gate
        if gate is not None and self._reader.user_id not in gate:
            return False
        return all(self._current_dep(meta, dep) for dep in meta._entry_deps)

    def _current_dep(self, parent: EntryMeta, dep_id: str) -> bool:
        dep = self._pool.get(dep_id)
        if dep is None or dep.id == parent.id or dep.role_id != parent.role_id:
            return False
        return dep.current and self.readable(dep_id)

    def _walk(self, root: EntryMeta) -> bool:
        """Rule 6 from ``root`` (which passed rules 1–5): a depth-first walk of entry sources
        with an explicit stack; a source met again on the path is a cycle."""
        memo, pool = self._memo, self._pool
        path: list[tuple[EntryMeta, Iterator[str]]] = [(root, iter(root._entry_deps))]
        on_path = {root.id}
        while path:
            meta, pending = path[-1]
            verdict: bool | None = True
            for dep_id in pending:
                dep = pool.get(dep_id)
                # What depends on where it is cited from is never memoised for the source.
                if (
                    dep is None
                    or dep.role_id != meta.role_id
                    or not dep.current
                    or dep_id in on_path
                ):
                    verdict = False
                    break
                known = memo.get(dep_id)
                if known is True:
                    continue
                if known is False or not self._local(dep_id, dep):
                    memo[dep_id] = False
                    verdict = False
                    break
                path.append((dep, iter(dep._entry_deps)))
                on_path.add(dep_id)
                verdict = None
                break
            if verdict is None:
                continue
            if verdict:
                path.pop()
                on_path.discard(meta.id)
                memo[meta.id] = True
            else:
                # Every entry on the path needs the one that failed.
                for failed, _ in path:
                    memo[failed.id] = False
                path.clear()
        return memo[root.id]


def visible(
    entry_id: str,
    reader: Reader,
    pool: Mapping[str, EntryMeta],
    *,
    current_only: bool = False,
) -> bool:
    """Whether ``reader`` may see ``entry_id`` (module docstring, rules 1–7);
    ``current_only``: and it is neither invalidated nor retracted."""
    if not _Visibility(reader, pool).readable(entry_id):
        return False
    return not current_only or pool[entry_id].current


def visible_ids(
    reader: Reader, pool: Mapping[str, EntryMeta], *, current_only: bool = False
) -> set[str]:
    """The ids ``reader`` may see in ``pool`` (rules 1–7). A ``PoolIndex`` is read as it is;
    any other mapping through the index built for it (``pool_index``)."""
    return pool_index(pool).visible_ids(reader, current_only=current_only)


# ------------------------------------------------------------------ the pool index

_NO_IDS: frozenset[str] = frozenset()
INDEX_CACHE_SIZE = 8
"""Pools whose index ``pool_index`` keeps (the least recently used goes first)."""

_Kind = tuple[str, str]
"""An entry's role and (single) tenant: an entry source must have its citer's."""


class PoolIndex(Mapping[str, EntryMeta]):
    """A pool (a snapshot of the mapping given) with everything rules 1–6 ask that no reader
    changes decided once, so one reader's ``visible_ids`` is a few set operations.

    Built once per pool version. An entry that fails for every reader is left out: rules 1–2
    and 4–5 alone (wrong id, retracted, not exactly one tenant, a bad source shape, access
    records that admit nobody), no ``for:`` tag that can name anyone, or an entry source that
    is missing, in another role or tenant, not current, reached again along its own chain, or
    itself left out. The rest is indexed by tenant and audience (``for:person`` users,
    ``for:role`` roles) and by the users its access records admit; observations are kept in
    an order that puts every source before what cites it.

    A reader's visible set is then their audience in their tenant, minus the entries whose
    records do not admit them, minus — one pass in that order, only when something in the
    tenant is not shown — every observation that cites an entry not shown. The index is a
    ``Mapping``, so it can be passed wherever a pool is; it never changes once built.
    """

    __slots__ = (
        "_awaited",
        "_citable",
        "_entries",
        "_gates",
        "_ids",
        "_invalidated",
        "_keys",
        "_observations",
        "_order",
        "_persons",
        "_roles",
        "_sound",
        "_values",
    )

    def __init__(self, pool: Mapping[str, EntryMeta]) -> None:
        entries = dict(pool)
        self._entries = entries
        self._keys = tuple(entries)
        self._values = tuple(entries.values())
        self._ids = tuple(map(id, self._values))
        sound, order = _sound(entries)
        persons: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        roles: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        gates: defaultdict[frozenset[str], list[str]] = defaultdict(list)
        counts: dict[str, int] = {}
        invalidated: list[str] = []
        last_tenant, last_role, count = "", "", 0
        role_ids: list[str] = []
        for meta in sound:
            key = meta.id
            (tenant,) = meta._tenants
            if tenant != last_tenant:
                counts[last_tenant] = count
                last_tenant, count = tenant, counts.get(tenant, 0)
                last_role = ""
            count += 1
            if meta._persons:
                for user in meta._persons:
                    persons[tenant, user].append(key)
            if meta._for_role:
                if meta.role_id != last_role:
                    last_role = meta.role_id
                    role_ids = roles[tenant, last_role]
                role_ids.append(key)
            if meta._gate is not None:
                gates[meta._gate].append(key)
            if meta.invalidated_at is not None:
                invalidated.append(key)
        counts[last_tenant] = count
        self._persons = {key: frozenset(ids) for key, ids in persons.items()}
        self._roles = {key: frozenset(ids) for key, ids in roles.items()}
        self._gates = tuple((gate, frozenset(ids)) for gate, ids in gates.items())
        self._sound = counts
        self._invalidated = frozenset(invalidated)
        self._order = tuple(order)
        self._observations = frozenset(key for key, _ in order)
        self._citable = frozenset(m.id for m in sound if m.invalidated_at is None)
        # Ids cited but not in the pool: one arriving may settle what waits for it.
        self._awaited = frozenset(
            dep for meta in entries.values() for dep in meta._entry_deps if dep not in entries
        )

    def extended(self, added: Iterable[EntryMeta]) -> PoolIndex | None:
        """The index of this pool with ``added`` appended (in order), derived without
        rebuilding — or None when that is not simple, and the caller builds a new index: an
        id already in the pool (an update), an id something in the pool cites and waits for
        (its arrival may make the waiting entries sound), or an observation citing an id not in
        the pool (it may arrive later, and ``_sound``'s walk would then settle both). An observation
        citing an entry that is there but not sound and current is hidden from everyone, as
        ``_sound`` decides for entries appended last."""
        new = object.__new__(PoolIndex)
        entries = dict(self._entries)
        persons = dict(self._persons)
        roles = dict(self._roles)
        gates = dict(self._gates)
        counts = dict(self._sound)
        order = list(self._order)
        citable = set(self._citable)
        observations = set(self._observations)
        invalidated = set(self._invalidated)
        for meta in added:
            key = meta.id
            if key in entries or key in self._awaited:
                return None
            entries[key] = meta
            tenants, gate = meta._tenants, meta._gate
            if (
                meta.retracted
                or len(tenants) != 1
                or (gate is not None and not gate)
                or not (meta._for_role or meta._persons)
            ):
                continue  # no reader could see it: in the mapping, not indexed
            (tenant,) = tenants
            deps = meta._entry_deps
            if deps:
                if any(dep_id not in entries for dep_id in deps):
                    return None
                if not all(
                    dep_id in citable
                    and entries[dep_id].role_id == meta.role_id
                    and entries[dep_id]._tenants == tenants
                    for dep_id in deps
                ):
                    continue  # cites something no one may rest on: hidden from everyone
                order.append((key, deps))
                observations.add(key)
            for user in meta._persons:
                persons[tenant, user] = persons.get((tenant, user), _NO_IDS) | {key}
            if meta._for_role:
                roles[tenant, meta.role_id] = roles.get((tenant, meta.role_id), _NO_IDS) | {key}
            if gate is not None:
                gates[gate] = gates.get(gate, _NO_IDS) | {key}
            counts[tenant] = counts.get(tenant, 0) + 1
            if meta.invalidated_at is None:
                citable.add(key)
            else:
                invalidated.add(key)
        new._entries = entries
        new._keys = tuple(entries)
        new._values = tuple(entries.values())
        new._ids = tuple(map(id, new._values))
        new._persons = persons
        new._roles = roles
        new._gates = tuple(gates.items())
        new._sound = counts
        new._invalidated = frozenset(invalidated)
        new._order = tuple(order)
        new._observations = frozenset(observations)
        new._citable = frozenset(citable)
        new._awaited = self._awaited  # every added entry's sources are in the pool
        return new

    def __getitem__(self, entry_id: str) -> EntryMeta:
        return self._entries[entry_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def indexes(self, pool: Mapping[str, EntryMeta]) -> bool:
        """Whether this index is of exactly ``pool``: the same ids in the same order, naming
        the very same ``EntryMeta`` objects (held here, so no other object can take their
        ``id``)."""
        return (
            len(pool) == len(self._keys)
            and tuple(pool) == self._keys
            and tuple(map(id, pool.values())) == self._ids
        )

    def visible_ids(self, reader: Reader, *, current_only: bool = False) -> set[str]:
        """The ids ``reader`` may see (rules 1–7); ``current_only``: invalidated ones left out."""
        tenant, user = reader.tenant, reader.user_id
        shown = set(self._persons.get((tenant, user), _NO_IDS))
        roles = self._roles
        for role in reader.roles:
            shown |= roles.get((tenant, role), _NO_IDS)
        if not shown:
            return shown
        shut = [ids for gate, ids in self._gates if user not in gate]
        if shut:
            shown.difference_update(*shut)
        if len(shown) < self._sound[tenant] and not shown.isdisjoint(self._observations):
            # Something is not shown: what cites it must go too, sources first.
            has_all, hide = shown.issuperset, shown.discard
            for key, deps in self._order:
                if key in shown and not has_all(deps):
                    hide(key)
        if current_only:
            shown -= self._invalidated
        return shown


def _sound(
    entries: dict[str, EntryMeta],
) -> tuple[list[EntryMeta], list[tuple[str, tuple[str, ...]]]]:
    """The entries some reader could see (those ``PoolIndex`` keeps) and the observations
    among them with their sources, every source before what cites it.

    One pass in pool order settles an entry whose sources were all settled (and current, in
    its role and tenant) before it — the usual order: an observation is learned after what it
    rests on. The rest go through an iterative depth-first walk, as in ``_Visibility._walk``,
    where a source met again on the path is a cycle."""
    local: dict[str, EntryMeta] = {}
    sound: list[EntryMeta] = []
    order: list[tuple[str, tuple[str, ...]]] = []
    citable: dict[tuple[str, str], set[str]] = {}
    """Settled, sound and current entries by role and tenant: what such an entry may cite."""
    later: list[EntryMeta] = []
    last_role, last_tenant = "", ""
    can_cite: set[str] = set()
    for key, meta in entries.items():
        tenants, gate = meta._tenants, meta._gate
        if (
            meta.id != key
            or meta.retracted
            or len(tenants) != 1
            or (gate is not None and not gate)
            or not (meta._for_role or meta._persons)
        ):
            continue
        local[key] = meta
        (tenant,) = tenants
        if meta.role_id != last_role or tenant != last_tenant:
            last_role, last_tenant = meta.role_id, tenant
            can_cite = citable.setdefault((last_role, tenant), set())
        deps = meta._entry_deps
        if deps:
            if not can_cite.issuperset(deps):
                later.append(meta)
                continue
            order.append((key, deps))
        sound.append(meta)
        if meta.invalidated_at is None:
            can_cite.add(key)

    done: set[str] = set()
    unsound: set[str] = set()
    for root in later:
        if root.id in done or root.id in unsound:
            continue
        (tenant,) = root._tenants
        can_cite = citable.setdefault((root.role_id, tenant), set())
        path: list[tuple[EntryMeta, Iterator[str]]] = [(root, iter(root._entry_deps))]
        on_path = {root.id}
        while path:
            meta, pending = path[-1]
            holds: bool | None = True
            for dep_id in pending:
                dep = local.get(dep_id)
                if (
                    dep is None
                    or dep_id in on_path
                    or dep_id in unsound
                    or dep.role_id != meta.role_id
                    or dep.invalidated_at is not None
                    or dep._tenants != meta._tenants
                ):
                    holds = False
                    break
                if dep_id in can_cite:
                    continue
                path.append((dep, iter(dep._entry_deps)))
                on_path.add(dep_id)
                holds = None
                break
            if holds is None:
                continue
            if holds:
                path.pop()
                on_path.discard(meta.id)
                sound.append(meta)
                order.append((meta.id, meta._entry_deps))
                done.add(meta.id)
                if meta.invalidated_at is None:
                    can_cite.add(meta.id)
            else:
                unsound.update(failed.id for failed, _ in path)
                path.clear()
    return sound, order


_index_cache: dict[int, PoolIndex] = {}
_index_cache_lock = threading.Lock()


def pool_index(pool: Mapping[str, EntryMeta]) -> PoolIndex:
    """``pool`` itself when it is a ``PoolIndex``; else the index last built for this mapping
    if nothing in it changed since (``PoolIndex.indexes``), or a new one (kept for the next
    call, at most ``INDEX_CACHE_SIZE`` pools)."""
    if isinstance(pool, PoolIndex):
        return pool
    key = id(pool)
    with _index_cache_lock:
        index = _index_cache.pop(key, None)
    if index is None or not index.indexes(pool):
        index = PoolIndex(pool)
    with _index_cache_lock:
        _index_cache.pop(key, None)
        _index_cache[key] = index
        while len(_index_cache) > INDEX_CACHE_SIZE:
            del _index_cache[next(iter(_index_cache))]
    return index


def audience_users(audience: Iterable[str], *, role_users: frozenset[str]) -> frozenset[str] | None:
    """The users ``for:`` tags name (``for:role``: ``role_users``); None when a tag is not a
    ``for:`` tag this module knows (it names nobody it can check)."""
    users: set[str] = set()
    for tag in audience:
        if tag == FOR_ROLE:
            users |= role_users
        elif tag.startswith(FOR_PERSON_PREFIX) and len(tag) > len(FOR_PERSON_PREFIX):
            users.add(tag[len(FOR_PERSON_PREFIX) :])
        else:
            return None
    return frozenset(users)


def can_widen(
    entry: EntryMeta,
    new_audience: Iterable[str],
    pool: Mapping[str, EntryMeta],
    *,
    tenant: str,
    role_users: frozenset[str],
) -> bool:
    """Whether ``new_audience`` (``for:`` tags to add) may be added to ``entry``: every user it
    names could see every source (rule 8). ``role_users``: the users of the entry's role."""
    users = audience_users(new_audience, role_users=role_users)
    if users is None or entry.retracted or entry._tenants != {tenant}:
        return False
    if not entry.sources:
        askers = {t[len("from:") :] for t in entry.tags if t.startswith("from:")}
        return users <= askers
    roles = frozenset({entry.role_id})
    return all(
        _Visibility(Reader(user, tenant, roles), pool).sources_readable(entry) for user in users
    )


# ------------------------------------------------------------------ forget


@dataclass(frozen=True, slots=True)
class ForgetChange:
    """What a person's Forget does to one entry: retract it, or drop their ``for:person`` tag."""

    entry_id: str
    retract: bool
    remove_tags: frozenset[str]


def forget_for(entry_id: str, reader: Reader, pool: Mapping[str, EntryMeta]) -> ForgetChange:
    """The change ``reader``'s Forget of ``entry_id`` makes (rule 9); ``ForeignEntry`` when it
    is not theirs to forget."""
    if not visible(entry_id, reader, pool):
        raise ForeignEntry(f"no memory {entry_id} of yours")
    meta = pool[entry_id]
    mine = for_person_tag(reader.user_id)
    if mine not in meta.tags:
        raise ForeignEntry(f"memory {entry_id} is shared with the whole role")
    if meta.audience == {mine}:
        return ForgetChange(entry_id, retract=True, remove_tags=frozenset())
    return ForgetChange(entry_id, retract=False, remove_tags=frozenset({mine}))


def forgotten(meta: EntryMeta, change: ForgetChange) -> EntryMeta:
    """``meta`` with ``change`` applied, one version on."""
    if change.entry_id != meta.id:
        raise ValueError("the change is for another entry")
    return replace(
        meta,
        tags=meta.tags - change.remove_tags,
        retracted=meta.retracted or change.retract,
        version=meta.version + 1,
    )


# ------------------------------------------------------------------ migration


def pool_entry_from(entry: MemoryEntry, user: str) -> PoolEntry | None:
    """Today's per-user entry of ``user`` as a pool entry (rule 10); None for a deleted
    entry. ``InvalidMemory`` when ``entry`` is not ``user``'s."""
    if entry.owner != owner_key(user):
        raise InvalidMemory("the memory entry belongs to another user")
    if entry.status != "active":
        return None
    tags = {from_tag(user), for_person_tag(user), tenant_tag(entry.tenant)}
    topics = clean_topic_tags([entry.kind])
    personal = PersonalMemory(
        kind=entry.kind, key=entry.key, origin=entry.origin, stated_at=entry.stated_at,
        updated_at=entry.updated_at,
    )  # fmt: skip
    if entry.origin == "person":
        meta = EntryMeta(
            id=entry.id, role_id=entry.role_id, layer="pinned", tags=frozenset(tags) | topics,
            sources=(), created_at=entry.created_at, personal=personal,
        )  # fmt: skip
        return PoolEntry(meta, entry.content)
    sources: tuple[Source, ...] = ()
    access: tuple[ThreadAccess, ...] = ()
    if entry.source_thread_id is not None:
        tags.add(thread_tag(entry.source_thread_id))
        item = f"{LEGACY_ITEM_PREFIX}{entry.source_seq if entry.source_seq is not None else '?'}"
        sources = (ThreadSource(entry.source_thread_id, item),)
        access = (ThreadAccess(entry.source_thread_id, item, frozenset({user})),)
    meta = EntryMeta(
        id=entry.id, role_id=entry.role_id, layer="fact", tags=frozenset(tags) | topics,
        sources=sources, created_at=entry.created_at, access=access, personal=personal,
    )  # fmt: skip
    return PoolEntry(meta, entry.content)
