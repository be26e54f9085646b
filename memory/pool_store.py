"""The store of the role-memory pools (SPEC RM-1…3, RM-7, RM-8): its contract, its rules, in memory.

Theory of operation
-------------------
A pool is one role's entries in one tenant (``memory/pool.py``). A store keeps each entry as its
metadata (``EntryMeta``: plaintext, so every visibility check runs without decrypting) and its
content, sealed with the ``Keyring`` under the row's context (``content_context``: tenant, role,
entry id and column). Reading is ``read_visible``: load the metadata, decide ``visible_ids``, then
open only the content of what the reader may see. Writing is a list of ``PoolWrite`` values
(``AddEntry``, ``UpdateEntry``, ``InvalidateEntry``) planned by ``plan_writes`` — one home for
the rules, shared by every store — against the pool as it is under the write lock.

Model calls never run inside a store call: a caller (the learner, the API) reads, releases,
calls the model, then hands the resulting writes to ``apply``/``apply_in``, which re-check them
against the latest pool under the write lock (a conflict is ``StaleRevision``; re-read and
plan again).

Rules every store keeps:

1. Scope: every read and write names ``(tenant, role_id)``; an entry of another role or
   tenant is never read, written or counted, and an entry written must carry exactly the
   tenant tag of its pool and its pool's role id (``InvalidMemory`` otherwise).
2. Locks: one ``PoolLock`` per ``(tenant, role_id)`` in the process (``PoolLocks``); reads hold
   it shared, writes exclusively, and a write's checks run under it. A store shared by several
   processes also serialises writers across them (PostgreSQL: an advisory transaction lock,
   taken *before* the process lock so a writer waiting for another process holds nothing a
   reader needs).
3. Content: sealed at rest, opened only for entries the reader may see (rules 1–7 of
   ``memory/pool.py``); ``load_meta``, ``purge`` and every check read metadata only.
4. Tags: a tag without a colon must be a clean topic (``clean_topic_tags``); a tag with one
   must be a system tag this package knows (``from:``, ``for:person:``, ``for:role``,
   ``tenant:``, ``thread:``, ``tool:``).
5. Audience: an added entry's ``for:`` tags, and the ``for:`` tags an update adds, must pass
   ``can_widen`` against the pool (every user named could see every source); ``for:role``
   needs the role's users (``role_users``) — without them it is refused
   (``WideningRefused``).
6. Versions: an add starts at version 1 and its id must be new (``DuplicateMemory``); an
   update or invalidation names the version it read (compare-and-set; ``StaleRevision``
   carries the current one) and the entry moves one version on. An update cannot change the
   id, role, layer or creation time, un-retract, or un-invalidate — with one exception: a
   person's update may turn a fact into a pinned entry without any source, its audience not
   growing (an edit of per-user memory unlinks its source, SPEC MEM-8).
7. Forget (``forget``) applies ``forget_for`` under the write lock: an entry the reader cannot
   see, or sees only through ``for:role``, is ``ForeignEntry``.
8. Change log: every write adds one record (entry version after it, time, ``by``
   ``memory_model``|``person``, entry id, action; a note, if any, sealed). ``change_log``
   shows a reader only the records of entries it may see (history included).
9. Purge by a ``from:``, ``thread:`` or ``tenant:`` tag removes, without opening any content,
   the entries carrying it and every entry derived from them (transitively, through entry
   sources), with their change-log records, and returns only the count.
10. ``apply_in(tx, writes)`` plans and writes inside a transaction the caller owns (PostgreSQL:
    an asyncpg connection in a transaction; ``transaction()`` makes one) — its writes commit or
    roll back with it. In memory, ``transaction()`` stages the writes and re-plans them at
    commit; any other ``tx`` (the in-memory learning-run store) applies at once.
    ``read_tagged``/``load_meta_matching`` take such a ``tx`` too and read inside it
    (PostgreSQL: on its connection; in memory: the pool as committed, staged writes not
    included).
11. Scoped reads: ``read_tagged`` is exactly ``read_visible`` with one tag, at the cost of the
    entries carrying the tag and what they cite (the only entries rules 1–7 read for them), not
    of the whole pool; ``load_meta_matching`` is the metadata of the entries carrying a tag or
    having one of some ids. Per-user memory (``memory/pool_memory.py``) reads through them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, get_args

from memory.crypto import Keyring, Sealed, row_context
from memory.errors import (
    DuplicateMemory,
    InvalidMemory,
    MemoryNotFound,
    MemoryStoreError,
    StaleRevision,
)
from memory.pool import (
    FOR_PERSON_PREFIX,
    FOR_PREFIX,
    FOR_ROLE,
    EntryMeta,
    EntrySource,
    PoolEntry,
    Reader,
    can_widen,
    clean_topic_tags,
    forget_for,
    forgotten,
    tenant_tag,
    visible_ids,
)
from memory.pool_lock import PoolLock

Actor = Literal["memory_model", "person"]
ACTORS: tuple[Actor, ...] = get_args(Actor)
ChangeAction = Literal["add", "update", "invalidate", "forget"]
PURGE_TAG_PREFIXES = ("from:", "thread:", "tenant:")
"""The system tags a purge accepts (SPEC RM-7)."""
_SYSTEM_PREFIXES = ("from:", FOR_PERSON_PREFIX, "tenant:", "thread:", "tool:")
CHANGE_LOG_LIMIT = 1_000
"""Most change-log records one ``change_log`` call returns (the newest ones)."""
ENTRIES_TABLE = "role_pool_entries"
CHANGES_TABLE = "role_pool_changes"


class WideningRefused(MemoryStoreError):
    """An audience names someone who could not see every source of the entry (409)."""

    code = "widening_refused"


# ------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True)
class AddEntry:
    """Add a new entry (version 1). ``role_users``: the role's users, needed for ``for:role``."""

    entry: PoolEntry
    by: Actor
    role_users: frozenset[str] | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateEntry:
    """Replace an entry's metadata (and content; None keeps it) if it is at ``expected_version``."""

    meta: EntryMeta
    content: str | None
    expected_version: int
    by: Actor
    role_users: frozenset[str] | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class InvalidateEntry:
    """Mark an entry as no longer holding at ``at`` (RM-3); ``expected_version`` None: any."""

    entry_id: str
    at: datetime
    by: Actor
    expected_version: int | None = None
    note: str | None = None


PoolWrite = AddEntry | UpdateEntry | InvalidateEntry


@dataclass(frozen=True, slots=True)
class PoolChange:
    """One change-log record: the entry's version after the change, when, by whom, what."""

    version: int
    at: datetime
    by: Actor
    entry_id: str
    action: ChangeAction
    note: str | None = None


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """What a store writes for one ``PoolWrite``: the row after it (``content`` None: keep the
    stored content), the version it must find (None: the id must be new) and the log record."""

    meta: EntryMeta
    content: str | None
    expected_version: int | None
    change: PoolChange


def content_context(tenant: str, role_id: str, entry_id: str) -> bytes:
    """Associated data of an entry's sealed content."""
    return row_context(ENTRIES_TABLE, "content", tenant, role_id, entry_id)


def note_context(tenant: str, role_id: str, entry_id: str, version: int) -> bytes:
    """Associated data of a change-log record's sealed note."""
    return row_context(CHANGES_TABLE, "note", tenant, role_id, entry_id, str(version))


def check_purge_tag(tag: str) -> str:
    if not tag.startswith(PURGE_TAG_PREFIXES) or tag.partition(":")[2] == "":
        raise InvalidMemory("a purge takes a from:, thread: or tenant: tag")
    return tag


def derived_closure(pool: Mapping[str, EntryMeta], tag: str) -> set[str]:
    """The ids carrying ``tag`` and every entry derived from them through entry sources."""
    dependants: dict[str, list[str]] = {}
    for meta in pool.values():
        for source in meta.sources:
            if isinstance(source, EntrySource):
                dependants.setdefault(source.entry_id, []).append(meta.id)
    doomed = {i for i, meta in pool.items() if tag in meta.tags}
    stack = list(doomed)
    while stack:
        for child in dependants.get(stack.pop(), ()):
            if child not in doomed:
                doomed.add(child)
                stack.append(child)
    return doomed


# ------------------------------------------------------------------ the rules


def _check_shape(tenant: str, role_id: str, meta: EntryMeta) -> None:
    """Rules 1 and 4."""
    if meta.role_id != role_id:
        raise InvalidMemory("the entry belongs to another role")
    tenants = {t for t in meta.tags if t.startswith("tenant:")}
    if tenants != {tenant_tag(tenant)}:
        raise InvalidMemory("the entry must carry exactly its pool's tenant tag")
    topics = {t for t in meta.tags if ":" not in t}
    if clean_topic_tags(topics) != topics:
        raise InvalidMemory("a topic tag is not a clean topic")
    for tag in meta.tags:
        if ":" in tag and tag != FOR_ROLE and not tag.startswith(_SYSTEM_PREFIXES):
            raise InvalidMemory("unknown system tag")
        if tag.startswith(FOR_PREFIX) and tag != FOR_ROLE and not tag.startswith(FOR_PERSON_PREFIX):
            raise InvalidMemory("unknown audience tag")


def _check_audience(
    tenant: str,
    meta: EntryMeta,
    added: frozenset[str],
    pool: Mapping[str, EntryMeta],
    role_users: frozenset[str] | None,
) -> None:
    """Rule 5."""
    if not added:
        return
    if FOR_ROLE in added and role_users is None:
        raise WideningRefused("for:role needs the role's users to check")
    if not can_widen(meta, added, pool, tenant=tenant, role_users=role_users or frozenset()):
        raise WideningRefused(f"memory {meta.id}: the audience could not see every source")


def _current(pool: Mapping[str, EntryMeta], entry_id: str, expected: int | None) -> EntryMeta:
    meta = pool.get(entry_id)
    if meta is None:
        raise MemoryNotFound(f"no memory {entry_id}")
    if expected is not None and meta.version != expected:
        raise StaleRevision(f"memory {entry_id} is at version {meta.version}", meta.version)
    return meta


def _unlinks(old: EntryMeta, new: EntryMeta, by: Actor) -> bool:
    """Rule 6's one layer change: a person turns a fact into a pinned entry without sources,
    for no one new."""
    return (
        by == "person"
        and (old.layer, new.layer) == ("fact", "pinned")
        and not new.sources
        and not new.access
        and new.audience <= old.audience
    )


def plan_writes(
    tenant: str,
    role_id: str,
    pool: Mapping[str, EntryMeta],
    writes: Iterable[PoolWrite],
    *,
    now: datetime,
) -> list[PlannedWrite]:
    """The rows and log records ``writes`` make on ``pool`` (rules 1, 4–6, 8), each write seeing
    the ones before it; raises on the first write that breaks a rule (nothing planned)."""
    working = dict(pool)
    planned: list[PlannedWrite] = []
    for write in writes:
        if isinstance(write, AddEntry):
            meta = replace(write.entry.meta, version=1)
            _check_shape(tenant, role_id, meta)
            if meta.id in working:
                raise DuplicateMemory(f"memory {meta.id} exists")
            _check_audience(tenant, meta, meta.audience, working, write.role_users)
            change = PoolChange(1, now, write.by, meta.id, "add", write.note)
            step = PlannedWrite(meta, write.entry.content, None, change)
        elif isinstance(write, UpdateEntry):
            old = _current(working, write.meta.id, write.expected_version)
            meta = replace(write.meta, version=old.version + 1)
            _check_shape(tenant, role_id, meta)
            if meta.created_at != old.created_at or (
                meta.layer != old.layer and not _unlinks(old, meta, write.by)
            ):
                raise InvalidMemory("an update cannot change the layer or the creation time")
            if (old.retracted and not meta.retracted) or (
                old.invalidated_at is not None and meta.invalidated_at != old.invalidated_at
            ):
                raise InvalidMemory("an update cannot undo a retraction or an invalidation")
            added = meta.audience - old.audience
            _check_audience(tenant, meta, added, working, write.role_users)
            change = PoolChange(meta.version, now, write.by, meta.id, "update", write.note)
            step = PlannedWrite(meta, write.content, old.version, change)
        else:
            old = _current(working, write.entry_id, write.expected_version)
            if old.invalidated_at is not None:
                raise InvalidMemory(f"memory {old.id} is already invalidated")
            meta = replace(old, invalidated_at=write.at, version=old.version + 1)
            change = PoolChange(meta.version, now, write.by, meta.id, "invalidate", write.note)
            step = PlannedWrite(meta, None, old.version, change)
        working[meta.id] = meta
        planned.append(step)
    return planned


def plan_forget(
    reader: Reader, entry_id: str, pool: Mapping[str, EntryMeta], *, now: datetime
) -> PlannedWrite:
    """Rule 7: the row and record of ``reader``'s Forget of ``entry_id``."""
    change = forget_for(entry_id, reader, pool)
    old = pool[entry_id]
    meta = forgotten(old, change)
    return PlannedWrite(
        meta, None, old.version, PoolChange(meta.version, now, "person", entry_id, "forget")
    )


def matches(meta: EntryMeta, tags: Collection[str]) -> bool:
    """``meta`` carries every tag of ``tags``."""
    return all(t in meta.tags for t in tags)


def _now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------ locks and the protocol


class PoolLocks:
    """One ``PoolLock`` per ``(tenant, role_id)``, made on first use (one entry per pool the
    process has touched; pools are few — one per role)."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], PoolLock] = {}

    def __call__(self, tenant: str, role_id: str) -> PoolLock:
        lock = self._locks.get((tenant, role_id))
        if lock is None:
            lock = self._locks[(tenant, role_id)] = PoolLock()
        return lock


PROCESS_POOL_LOCKS = PoolLocks()
"""The process's pool locks; every store shares them unless given its own."""


class PoolStore(Protocol):
    """The role-memory pool store (module docstring, rules 1–11)."""

    keyring: Keyring
    locks: PoolLocks

    async def load_meta(self, tenant: str, role_id: str) -> dict[str, EntryMeta]: ...

    async def read_visible(
        self,
        tenant: str,
        role_id: str,
        reader: Reader,
        *,
        tags: Collection[str] = (),
        current_only: bool = False,
    ) -> list[PoolEntry]:
        """The entries ``reader`` may see carrying every tag of ``tags``, oldest first."""
        ...

    async def read_tagged(
        self,
        tenant: str,
        role_id: str,
        reader: Reader,
        tag: str,
        *,
        current_only: bool = False,
        tx: Any = None,
    ) -> list[PoolEntry]:
        """``read_visible`` of the entries carrying ``tag``, decided from those entries and
        what they cite alone (rule 11); ``tx``: inside the caller's transaction (rule 10)."""
        ...

    async def load_meta_matching(
        self,
        tenant: str,
        role_id: str,
        *,
        tag: str | None = None,
        ids: Collection[str] = (),
        tx: Any = None,
    ) -> dict[str, EntryMeta]:
        """The metadata of the entries carrying ``tag`` or with an id of ``ids`` (rule 11)."""
        ...

    async def add(
        self, entry: PoolEntry, by: Actor, *, role_users: frozenset[str] | None = None
    ) -> EntryMeta: ...

    async def update(
        self,
        meta: EntryMeta,
        content: str | None,
        *,
        expected_version: int,
        by: Actor,
        role_users: frozenset[str] | None = None,
    ) -> EntryMeta: ...

    async def invalidate(
        self,
        tenant: str,
        role_id: str,
        entry_id: str,
        at: datetime,
        *,
        by: Actor,
        expected_version: int | None = None,
    ) -> EntryMeta: ...

    async def forget(self, tenant: str, role_id: str, reader: Reader, entry_id: str) -> EntryMeta:
        """Rule 7; ``ForeignEntry`` when it is not the reader's."""
        ...

    async def apply(
        self, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        """Plan and write ``writes`` in one transaction under the write lock."""
        ...

    def transaction(self) -> Any:
        """An async context manager giving a ``tx`` for ``apply_in`` (rule 10)."""
        ...

    async def apply_in(
        self, tx: Any, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        """``apply`` inside the caller's transaction ``tx`` (rule 10)."""
        ...

    async def change_log(
        self, tenant: str, role_id: str, reader: Reader, *, limit: int = CHANGE_LOG_LIMIT
    ) -> list[PoolChange]:
        """The newest ``limit`` records of entries ``reader`` may see, oldest first (rule 8)."""
        ...

    async def purge(self, tenant: str, role_id: str, tag: str) -> int:
        """Rule 9: how many entries went."""
        ...


class PoolStoreBase:
    """``add``, ``update`` and ``invalidate`` of ``PoolStore`` as one-write ``apply`` calls."""

    async def apply(
        self, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        raise NotImplementedError

    async def add(
        self, entry: PoolEntry, by: Actor, *, role_users: frozenset[str] | None = None
    ) -> EntryMeta:
        (meta,) = await self.apply(
            _tenant_of(entry.meta), entry.meta.role_id, [AddEntry(entry, by, role_users)]
        )
        return meta

    async def update(
        self,
        meta: EntryMeta,
        content: str | None,
        *,
        expected_version: int,
        by: Actor,
        role_users: frozenset[str] | None = None,
    ) -> EntryMeta:
        write = UpdateEntry(meta, content, expected_version, by, role_users)
        (new,) = await self.apply(_tenant_of(meta), meta.role_id, [write])
        return new

    async def invalidate(
        self,
        tenant: str,
        role_id: str,
        entry_id: str,
        at: datetime,
        *,
        by: Actor,
        expected_version: int | None = None,
    ) -> EntryMeta:
        write = InvalidateEntry(entry_id, at, by, expected_version)
        (new,) = await self.apply(tenant, role_id, [write])
        return new


# ------------------------------------------------------------------ in memory


@dataclass(slots=True)
class _Row:
    meta: EntryMeta
    sealed: Sealed


@dataclass(frozen=True, slots=True)
class _Record:
    change: PoolChange
    note: Sealed | None


@dataclass(slots=True)
class InMemoryPoolTransaction:
    """Writes staged by ``apply_in``, planned again and written at commit."""

    writes: list[tuple[str, str, PoolWrite]] = field(default_factory=list)


class InMemoryPoolStore(PoolStoreBase):
    """``PoolStore`` in one process. Content is sealed here too (same contexts as PostgreSQL),
    so only what a reader may see is ever opened."""

    def __init__(self, *, keyring: Keyring | None = None, locks: PoolLocks | None = None) -> None:
        from memory.postgres_store import process_keyring  # the one process-wide test key

        self.keyring = keyring if keyring is not None else process_keyring()
        self.locks = locks if locks is not None else PROCESS_POOL_LOCKS
        self._pools: dict[tuple[str, str], dict[str, _Row]] = {}
        self._logs: dict[tuple[str, str], list[_Record]] = {}

    def _meta(self, tenant: str, role_id: str) -> dict[str, EntryMeta]:
        return {i: row.meta for i, row in self._pools.get((tenant, role_id), {}).items()}

    async def load_meta(self, tenant: str, role_id: str) -> dict[str, EntryMeta]:
        return self._meta(tenant, role_id)

    async def read_visible(
        self,
        tenant: str,
        role_id: str,
        reader: Reader,
        *,
        tags: Collection[str] = (),
        current_only: bool = False,
    ) -> list[PoolEntry]:
        async with self.locks(tenant, role_id).read():
            rows = self._pools.get((tenant, role_id), {})
            pool = {i: row.meta for i, row in rows.items()}
            shown = visible_ids(reader, pool, current_only=current_only)
            picked = sorted(
                (pool[i] for i in shown if matches(pool[i], tags)),
                key=lambda m: (m.created_at, m.id),
            )
            opened = self.keyring.open
            return [
                PoolEntry(
                    m, opened(rows[m.id].sealed, context=content_context(tenant, role_id, m.id))
                )
                for m in picked
            ]

    async def read_tagged(
        self,
        tenant: str,
        role_id: str,
        reader: Reader,
        tag: str,
        *,
        current_only: bool = False,
        tx: Any = None,
    ) -> list[PoolEntry]:
        # What a transaction staged is not written yet: it reads the pool as committed.
        return await self.read_visible(
            tenant, role_id, reader, tags=(tag,), current_only=current_only
        )

    async def load_meta_matching(
        self,
        tenant: str,
        role_id: str,
        *,
        tag: str | None = None,
        ids: Collection[str] = (),
        tx: Any = None,
    ) -> dict[str, EntryMeta]:
        wanted = set(ids)
        return {
            i: m
            for i, m in self._meta(tenant, role_id).items()
            if i in wanted or (tag is not None and tag in m.tags)
        }

    def _write(self, tenant: str, role_id: str, planned: Sequence[PlannedWrite]) -> None:
        rows = self._pools.setdefault((tenant, role_id), {})
        log = self._logs.setdefault((tenant, role_id), [])
        for step in planned:
            old = rows.get(step.meta.id)
            if step.content is not None:
                sealed = self.keyring.seal(
                    step.content, context=content_context(tenant, role_id, step.meta.id)
                )
            else:
                assert old is not None
                sealed = old.sealed
            rows[step.meta.id] = _Row(step.meta, sealed)
            note = None
            if step.change.note is not None:
                note = self.keyring.seal(
                    step.change.note,
                    context=note_context(tenant, role_id, step.meta.id, step.change.version),
                )
            log.append(_Record(replace(step.change, note=None), note))

    async def apply(
        self, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        async with self.locks(tenant, role_id).write():
            planned = plan_writes(tenant, role_id, self._meta(tenant, role_id), writes, now=_now())
            self._write(tenant, role_id, planned)
            return [p.meta for p in planned]

    async def forget(self, tenant: str, role_id: str, reader: Reader, entry_id: str) -> EntryMeta:
        async with self.locks(tenant, role_id).write():
            step = plan_forget(reader, entry_id, self._meta(tenant, role_id), now=_now())
            self._write(tenant, role_id, [step])
            return step.meta

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[InMemoryPoolTransaction]:
        tx = InMemoryPoolTransaction()
        yield tx
        # Commit: plan every pool's staged writes again against the pools as they are now.
        by_pool: dict[tuple[str, str], list[PoolWrite]] = {}
        for tenant, role_id, write in tx.writes:
            by_pool.setdefault((tenant, role_id), []).append(write)
        for (tenant, role_id), writes in by_pool.items():
            async with self.locks(tenant, role_id).write():
                now = _now()
                planned = plan_writes(tenant, role_id, self._meta(tenant, role_id), writes, now=now)
                self._write(tenant, role_id, planned)

    async def apply_in(
        self, tx: Any, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        if not isinstance(tx, InMemoryPoolTransaction):
            return await self.apply(tenant, role_id, writes)
        async with self.locks(tenant, role_id).read():
            staged = [w for t, r, w in tx.writes if (t, r) == (tenant, role_id)]
            pool = self._meta(tenant, role_id)
            planned = plan_writes(tenant, role_id, pool, [*staged, *writes], now=_now())
        tx.writes.extend((tenant, role_id, w) for w in writes)
        return [p.meta for p in planned[len(staged) :]]

    async def change_log(
        self, tenant: str, role_id: str, reader: Reader, *, limit: int = CHANGE_LOG_LIMIT
    ) -> list[PoolChange]:
        async with self.locks(tenant, role_id).read():
            shown = visible_ids(reader, self._meta(tenant, role_id))
            records = [
                r for r in self._logs.get((tenant, role_id), []) if r.change.entry_id in shown
            ]
            out = []
            for record in records[-limit:] if limit > 0 else []:
                change = record.change
                if record.note is not None:
                    context = note_context(tenant, role_id, change.entry_id, change.version)
                    change = replace(change, note=self.keyring.open(record.note, context=context))
                out.append(change)
            return out

    async def purge(self, tenant: str, role_id: str, tag: str) -> int:
        check_purge_tag(tag)
        async with self.locks(tenant, role_id).write():
            rows = self._pools.get((tenant, role_id), {})
            doomed = derived_closure({i: r.meta for i, r in rows.items()}, tag)
            for entry_id in doomed:
                del rows[entry_id]
            key = (tenant, role_id)
            if key in self._logs:
                self._logs[key] = [r for r in self._logs[key] if r.change.entry_id not in doomed]
            return len(doomed)


def _tenant_of(meta: EntryMeta) -> str:
    tenants = [t.partition(":")[2] for t in meta.tags if t.startswith("tenant:")]
    if len(tenants) != 1:
        raise InvalidMemory("the entry must carry exactly its pool's tenant tag")
    return tenants[0]
