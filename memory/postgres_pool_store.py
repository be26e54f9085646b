"""The role-memory pool store on PostgreSQL (``memory/pool_store.py`` rules 1–10).

Theory of operation
-------------------
Tables live in ``memory/migrations/0006_role_pool.sql``: ``role_pool_entries`` (metadata in
plaintext columns — layer, tags ``text[]``, sources and access records ``jsonb``, confidence,
times, retraction, version — and the content only as ``content_sealed`` under ``key_id``) and
``role_pool_changes`` (the change log; a note only sealed). Every statement names
``tenant`` and ``role_id``.

1. A read (``read_visible``, ``change_log``) is one read-only REPEATABLE READ transaction under
   the process's shared pool lock: the metadata is loaded, ``visible_ids`` decides, and a second
   statement of the same snapshot fetches the ciphertexts of the visible ids only, which are
   then opened. Permissions and content therefore come from one moment.
2. A write (``apply``, ``forget``, ``purge``, ``apply_in``) runs in a transaction that first
   takes ``pg_advisory_xact_lock`` on ``(tenant, role_id)`` — writers of every process on the
   database queue there — and only then the process's exclusive pool lock, so a writer waiting
   for another process never blocks this process's readers, and a transaction that calls
   ``apply_in`` twice cannot deadlock with a local writer. Under both locks the metadata of
   the entries written and of everything they cite (their entry sources, level by level: all
   that ``plan_writes`` reads) is loaded afresh, so a write costs what it touches, not the
   pool's size, and ``plan_writes`` re-checks every rule; updates are still compare-and-set on
   ``version`` in SQL (``StaleRevision`` when the row moved).
3. ``apply_in(conn, …)`` does step 2 on the caller's connection inside the caller's
   transaction (the learner's ``finish``): the advisory lock is held to the caller's commit or
   rollback, and every row written goes with it. ``transaction()`` gives such a connection;
   ``read_tagged``/``load_meta_matching`` read on it when given (what the transaction sees,
   its own writes included), so a caller needs one connection, not two.
4. ``purge`` is one statement: a recursive walk from the entries tagged with the purge tag
   along ``source_entries`` (a GIN index), deleting those entries and their change-log records
   and returning the count. No content is read.
5. Metadata cache: ``role_pool_heads`` holds one version per pool, set in every write's
   transaction to a fresh value of a sequence (``0010``: never handed out twice, so never
   reused by a rolled-back write). A read asks for it first, in its snapshot; when the process
   decoded the metadata at that very version it reuses it (immutable values), else it loads
   and caches it. So a cached read is exact across processes, and a pool untouched since the
   last read costs one small query instead of decoding every row. A write plans against the
   cache too when the head under its lock is the cached one (every writer holds the advisory
   lock, so the head cannot move), and caches the pool it writes under its new head: a read
   after a write of this process, and the next write, decode nothing. At most
   ``MAX_CACHED_POOLS`` pools are cached (oldest dropped).
6. Connection failures and timeouts become ``MemoryUnavailable``; each statement is bounded by
   ``query_timeout``, the wait for a connection by ``acquire_timeout``.
7. Key rotation (``rotate``, ``openrealtime memory rotate-key``) re-encrypts content and notes
   under the active key in batches, in place; ``key_ids_in_use`` counts rows per key.
   Per-user memory's attributes (migration 0011: ``personal_*``) are plaintext metadata.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg

from memory.crypto import Keyring, Sealed
from memory.errors import DuplicateMemory, MemoryUnavailable, StaleRevision, UnknownKey
from memory.pool import (
    EntryMeta,
    EntrySource,
    PersonalMemory,
    PoolEntry,
    PoolIndex,
    Reader,
    Source,
    ThreadAccess,
    ThreadSource,
    visible_ids,
)
from memory.pool_store import (
    CHANGE_LOG_LIMIT,
    PROCESS_POOL_LOCKS,
    AddEntry,
    InvalidateEntry,
    PlannedWrite,
    PoolChange,
    PoolLocks,
    PoolStoreBase,
    PoolWrite,
    check_purge_tag,
    content_context,
    matches,
    note_context,
    plan_forget,
    plan_writes,
)
from storage.postgres import CONNECTION_ERRORS, in_batches

T = TypeVar("T")

_LOCK_CLASS = 0x504F4F4C  # "POOL": the advisory lock namespace of this store
_META = (
    "id, role_id, layer, tags, sources, access, confidence, created_at, invalidated_at,"
    " retracted, version, personal_kind, personal_key, personal_origin, personal_stated_at,"
    " personal_updated_at"
)
_SCOPE = "tenant = $1 AND role_id = $2"
_INSERT = """
INSERT INTO role_pool_entries (tenant, role_id, id, layer, tags, sources, source_entries, access,
    confidence, created_at, invalidated_at, retracted, version, key_id, content_sealed,
    personal_kind, personal_key, personal_origin, personal_stated_at, personal_updated_at)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, $15, $16, $17,
    $18, $19, $20)
"""
_PERSONAL_SET = """personal_kind = $13, personal_key = $14, personal_origin = $15,
    personal_stated_at = $16, personal_updated_at = $17"""
_UPDATE_META = f"""
UPDATE role_pool_entries SET tags = $4, sources = $5::jsonb, source_entries = $6,
    access = $7::jsonb, confidence = $8, invalidated_at = $9, retracted = $10, version = $11,
    layer = $18, {_PERSONAL_SET}, updated_at = clock_timestamp()
WHERE tenant = $1 AND role_id = $2 AND id = $3 AND version = $12
"""
_UPDATE_ALL = f"""
UPDATE role_pool_entries SET tags = $4, sources = $5::jsonb, source_entries = $6,
    access = $7::jsonb, confidence = $8, invalidated_at = $9, retracted = $10, version = $11,
    layer = $18, {_PERSONAL_SET}, key_id = $19, content_sealed = $20,
    updated_at = clock_timestamp()
WHERE tenant = $1 AND role_id = $2 AND id = $3 AND version = $12
"""
_LOG = """
INSERT INTO role_pool_changes (tenant, role_id, entry_id, version, at, by_actor, action,
    note_key_id, note_sealed)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""
_PURGE = """
WITH RECURSIVE doomed(id) AS (
    SELECT id FROM role_pool_entries WHERE tenant = $1 AND role_id = $2 AND tags @> ARRAY[$3]
    UNION
    SELECT e.id FROM role_pool_entries e JOIN doomed d ON e.source_entries @> ARRAY[d.id]
    WHERE e.tenant = $1 AND e.role_id = $2
), gone AS (
    DELETE FROM role_pool_entries
    WHERE tenant = $1 AND role_id = $2 AND id IN (SELECT id FROM doomed)
    RETURNING id
), logs AS (
    DELETE FROM role_pool_changes
    WHERE tenant = $1 AND role_id = $2 AND entry_id IN (SELECT id FROM gone)
)
SELECT count(*) FROM gone
"""
_BUMP = """
INSERT INTO role_pool_heads (tenant, role_id, version)
VALUES ($1, $2, nextval('role_pool_head_versions'))
ON CONFLICT (tenant, role_id) DO UPDATE SET version = EXCLUDED.version
RETURNING version
"""
_HEAD = f"SELECT version FROM role_pool_heads WHERE {_SCOPE}"
ROTATE_BATCH = 500
"""Rows re-encrypted per transaction (``rotate``)."""
MAX_CACHED_POOLS = 64
"""Pools whose decoded metadata one store keeps (module docstring, rule 5)."""


def _sources_json(sources: Sequence[Source]) -> str:
    return json.dumps(
        [
            {"entry": s.entry_id}
            if isinstance(s, EntrySource)
            else {"thread": s.thread_id, "item": s.item_id}
            for s in sources
        ]
    )


def _access_json(access: Sequence[ThreadAccess]) -> str:
    return json.dumps(
        [{"thread": a.thread_id, "item": a.item_id, "users": sorted(a.users)} for a in access]
    )


def _personal_columns(personal: PersonalMemory | None) -> tuple[Any, ...]:
    if personal is None:
        return (None, None, None, None, None)
    return (
        personal.kind, personal.key, personal.origin, personal.stated_at, personal.updated_at,
    )  # fmt: skip


def _personal(row: Any) -> PersonalMemory | None:
    if row["personal_kind"] is None:
        return None
    return PersonalMemory(
        kind=row["personal_kind"], key=row["personal_key"], origin=row["personal_origin"],
        stated_at=row["personal_stated_at"], updated_at=row["personal_updated_at"],
    )  # fmt: skip


def _meta(row: Any) -> EntryMeta:
    sources: list[Source] = [
        EntrySource(s["entry"]) if "entry" in s else ThreadSource(s["thread"], s["item"])
        for s in json.loads(row["sources"])
    ]
    access = tuple(
        ThreadAccess(a["thread"], a["item"], frozenset(a["users"]))
        for a in json.loads(row["access"])
    )
    return EntryMeta(
        id=row["id"],
        role_id=row["role_id"],
        layer=row["layer"],
        tags=frozenset(row["tags"]),
        sources=tuple(sources),
        created_at=row["created_at"],
        access=access,
        confidence=row["confidence"],
        invalidated_at=row["invalidated_at"],
        retracted=row["retracted"],
        version=row["version"],
        personal=_personal(row),
    )


def _written_ids(writes: Sequence[PoolWrite]) -> set[str]:
    """The entries ``writes`` touch and the entries their new metadata cites."""
    ids: set[str] = set()
    for write in writes:
        if isinstance(write, InvalidateEntry):
            ids.add(write.entry_id)
            continue
        meta = write.entry.meta if isinstance(write, AddEntry) else write.meta
        ids.add(meta.id)
        ids.update(s.entry_id for s in meta.sources if isinstance(s, EntrySource))
    return ids


def _lock_name(tenant: str, role_id: str) -> str:
    return f"{len(tenant)}:{tenant}/{role_id}"


class PostgresPoolStore(PoolStoreBase):
    """``PoolStore`` on an asyncpg pool whose database has migration 0006 applied.

    ``keyring`` seals content and notes (default: ``process_keyring``); ``reload_keyring`` is
    called once when a row is sealed under a key the keyring does not hold (a rotation made by
    another process, ``openrealtime memory rotate-key``); ``locks`` are the
    process's pool locks (default: ``PROCESS_POOL_LOCKS``).
    """

    def __init__(
        self,
        pool: Any,
        *,
        keyring: Keyring | None = None,
        locks: PoolLocks | None = None,
        reload_keyring: Callable[[], Keyring] | None = None,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        from memory.postgres_store import process_keyring

        self.pool = pool
        self.keyring = keyring if keyring is not None else process_keyring()
        self.reload_keyring = reload_keyring
        self.locks = locks if locks is not None else PROCESS_POOL_LOCKS
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._cache: dict[tuple[str, str], tuple[int, Mapping[str, EntryMeta]]] = {}

    def _open(self, sealed: Sealed, *, context: bytes) -> str:
        try:
            return self.keyring.open(sealed, context=context)
        except UnknownKey:
            if self.reload_keyring is None:
                raise
            self.keyring = self.reload_keyring()
            return self.keyring.open(sealed, context=context)

    async def _call(self, work: Callable[[Any], Awaitable[T]], *, readonly: bool = False) -> T:
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                if readonly:
                    async with conn.transaction(isolation="repeatable_read", readonly=True):
                        return await work(conn)
                async with conn.transaction():
                    return await work(conn)
        except CONNECTION_ERRORS as e:
            raise MemoryUnavailable(f"memory pool store unavailable: {type(e).__name__}") from e

    async def _load(self, conn: Any, tenant: str, role_id: str) -> dict[str, EntryMeta]:
        rows = await conn.fetch(
            f"SELECT {_META} FROM role_pool_entries WHERE {_SCOPE}",
            tenant,
            role_id,
            timeout=self.query_timeout,
        )
        return {row["id"]: _meta(row) for row in rows}

    async def _snapshot(self, conn: Any, tenant: str, role_id: str) -> Mapping[str, EntryMeta]:
        """The pool's metadata in ``conn``'s snapshot, from the cache when it is current."""
        head = await conn.fetchval(_HEAD, tenant, role_id, timeout=self.query_timeout) or 0
        cached = self._cache.get((tenant, role_id))
        if cached is not None and cached[0] == head:
            return cached[1]
        pool = PoolIndex(await self._load(conn, tenant, role_id))
        self._remember(tenant, role_id, head, pool)
        return pool

    def _remember(
        self, tenant: str, role_id: str, head: int, pool: Mapping[str, EntryMeta]
    ) -> None:
        self._cache.pop((tenant, role_id), None)
        if len(self._cache) >= MAX_CACHED_POOLS:
            del self._cache[next(iter(self._cache))]
        self._cache[(tenant, role_id)] = (head, pool)

    async def load_meta(self, tenant: str, role_id: str) -> dict[str, EntryMeta]:
        pool = await self._call(lambda conn: self._snapshot(conn, tenant, role_id), readonly=True)
        return dict(pool)

    async def read_visible(
        self,
        tenant: str,
        role_id: str,
        reader: Reader,
        *,
        tags: Collection[str] = (),
        current_only: bool = False,
    ) -> list[PoolEntry]:
        async def work(conn: Any) -> list[tuple[EntryMeta, Sealed]]:
            pool = await self._snapshot(conn, tenant, role_id)
            shown = visible_ids(reader, pool, current_only=current_only)
            picked = [i for i in shown if matches(pool[i], tags)]
            if not picked:
                return []
            rows = await conn.fetch(
                "SELECT id, key_id, content_sealed FROM role_pool_entries"
                f" WHERE {_SCOPE} AND id = ANY($3::text[])",
                tenant,
                role_id,
                picked,
                timeout=self.query_timeout,
            )
            return [(pool[r["id"]], Sealed(r["key_id"], r["content_sealed"])) for r in rows]

        async with self.locks(tenant, role_id).read():
            found = await self._call(work, readonly=True)
        return self._opened(tenant, role_id, found)

    async def _closure(
        self,
        conn: Any,
        tenant: str,
        role_id: str,
        *,
        tag: str | None = None,
        ids: Collection[str] = (),
    ) -> dict[str, EntryMeta]:
        """The entries carrying ``tag`` (or with an id of ``ids``) and every entry they cite,
        transitively: all that rules 1–7 of ``memory/pool.py`` read to decide them. One
        indexed statement for the seeds, then one per level of entry sources still missing
        (none for facts and pinned entries)."""
        timeout = self.query_timeout
        if tag is not None:
            rows = await conn.fetch(
                f"SELECT {_META} FROM role_pool_entries WHERE {_SCOPE} AND tags @> ARRAY[$3::text]",
                tenant, role_id, tag, timeout=timeout,
            )  # fmt: skip
        else:
            rows = await self._by_ids(conn, tenant, role_id, ids)
        found = {row["id"]: _meta(row) for row in rows}
        asked = set(found) | set(ids)
        while True:
            missing = {d for m in found.values() for d in m._entry_deps} - asked
            if not missing:
                return found
            asked |= missing
            for row in await self._by_ids(conn, tenant, role_id, missing):
                found[row["id"]] = _meta(row)

    async def _by_ids(self, conn: Any, tenant: str, role_id: str, ids: Collection[str]) -> Any:
        if not ids:
            return []
        return await conn.fetch(
            f"SELECT {_META} FROM role_pool_entries WHERE {_SCOPE} AND id = ANY($3::text[])",
            tenant, role_id, list(ids), timeout=self.query_timeout,
        )  # fmt: skip

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
        async def work(conn: Any) -> list[tuple[EntryMeta, Sealed]]:
            pool = PoolIndex(await self._closure(conn, tenant, role_id, tag=tag))
            shown = pool.visible_ids(reader, current_only=current_only)
            picked = [i for i in shown if tag in pool[i].tags]
            if not picked:
                return []
            rows = await conn.fetch(
                "SELECT id, key_id, content_sealed FROM role_pool_entries"
                f" WHERE {_SCOPE} AND id = ANY($3::text[])",
                tenant, role_id, picked, timeout=self.query_timeout,
            )  # fmt: skip
            return [(pool[r["id"]], Sealed(r["key_id"], r["content_sealed"])) for r in rows]

        async with self.locks(tenant, role_id).read():
            found = await self._on(tx, work)
        return self._opened(tenant, role_id, found)

    async def load_meta_matching(
        self,
        tenant: str,
        role_id: str,
        *,
        tag: str | None = None,
        ids: Collection[str] = (),
        tx: Any = None,
    ) -> dict[str, EntryMeta]:
        async def work(conn: Any) -> dict[str, EntryMeta]:
            rows = await conn.fetch(
                f"SELECT {_META} FROM role_pool_entries WHERE {_SCOPE}"
                " AND (tags @> ARRAY[$3::text] OR id = ANY($4::text[]))",
                tenant, role_id, tag, list(ids), timeout=self.query_timeout,
            )  # fmt: skip
            return {row["id"]: _meta(row) for row in rows}

        return await self._on(tx, work)

    async def _on(self, tx: Any, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work`` on the caller's transaction ``tx``, or in a read-only snapshot of its own."""
        if tx is None:
            return await self._call(work, readonly=True)
        try:
            return await work(tx)
        except CONNECTION_ERRORS as e:
            raise MemoryUnavailable(f"memory pool store unavailable: {type(e).__name__}") from e

    def _opened(
        self, tenant: str, role_id: str, found: list[tuple[EntryMeta, Sealed]]
    ) -> list[PoolEntry]:
        found.sort(key=lambda pair: (pair[0].created_at, pair[0].id))
        opened = self._open
        return [
            PoolEntry(m, opened(sealed, context=content_context(tenant, role_id, m.id)))
            for m, sealed in found
        ]

    async def _write(
        self, conn: Any, tenant: str, role_id: str, planned: Sequence[PlannedWrite]
    ) -> None:
        timeout = self.query_timeout
        for step in planned:
            m = step.meta
            entries = [s.entry_id for s in m.sources if isinstance(s, EntrySource)]
            columns = (
                list(m.tags), _sources_json(m.sources), entries, _access_json(m.access),
                m.confidence, m.invalidated_at, m.retracted, m.version,
            )  # fmt: skip
            personal = _personal_columns(m.personal)
            sealed = None
            if step.content is not None:
                sealed = self.keyring.seal(
                    step.content, context=content_context(tenant, role_id, m.id)
                )
            if step.expected_version is None:
                assert sealed is not None
                try:
                    await conn.execute(
                        _INSERT, tenant, role_id, m.id, m.layer, columns[0], columns[1],
                        columns[2], columns[3], m.confidence, m.created_at, m.invalidated_at,
                        m.retracted, m.version, sealed.key_id, sealed.blob, *personal,
                        timeout=timeout,
                    )  # fmt: skip
                except asyncpg.UniqueViolationError as e:
                    raise DuplicateMemory(f"memory {m.id} exists") from e
            else:
                if sealed is None:
                    args: tuple[Any, ...] = (*columns, step.expected_version, *personal, m.layer)
                    status = await conn.execute(
                        _UPDATE_META, tenant, role_id, m.id, *args, timeout=timeout
                    )
                else:
                    args = (
                        *columns, step.expected_version, *personal, m.layer, sealed.key_id,
                        sealed.blob,
                    )  # fmt: skip
                    status = await conn.execute(
                        _UPDATE_ALL, tenant, role_id, m.id, *args, timeout=timeout
                    )
                if status != "UPDATE 1":  # the plan was checked under the lock: a bug or a race
                    current = await conn.fetchval(
                        f"SELECT version FROM role_pool_entries WHERE {_SCOPE} AND id = $3",
                        tenant, role_id, m.id, timeout=timeout,
                    )  # fmt: skip
                    raise StaleRevision(f"memory {m.id} moved", current or 0)
            c = step.change
            note = None
            if c.note is not None:
                note = self.keyring.seal(
                    c.note, context=note_context(tenant, role_id, m.id, c.version)
                )
            await conn.execute(
                _LOG, tenant, role_id, m.id, c.version, c.at, c.by, c.action,
                note.key_id if note else None, note.blob if note else None, timeout=timeout,
            )  # fmt: skip

    async def _locked(
        self,
        conn: Any,
        tenant: str,
        role_id: str,
        seeds: Collection[str],
        plan: Callable[[Mapping[str, EntryMeta]], list[PlannedWrite]],
    ) -> list[PlannedWrite]:
        """Rule 2 of this module on ``conn`` (in a transaction): both locks, fresh metadata of
        the entries written and what they cite (``seeds`` and their closure: all the rules
        read), the plan, the rows."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))",
            _LOCK_CLASS,
            _lock_name(tenant, role_id),
            timeout=self.query_timeout,
        )
        async with self.locks(tenant, role_id).write():
            # Under the advisory lock the head cannot move: a pool cached at it is current,
            # and planning on it (a superset of the closure) keeps the cache warm.
            head = await conn.fetchval(_HEAD, tenant, role_id, timeout=self.query_timeout) or 0
            cached = self._cache.get((tenant, role_id))
            base = cached[1] if cached is not None and cached[0] == head else None
            if base is not None:
                planned = plan(base)
            else:
                planned = plan(await self._closure(conn, tenant, role_id, ids=seeds))
            await self._write(conn, tenant, role_id, planned)
            if planned:
                head = await conn.fetchval(_BUMP, tenant, role_id, timeout=self.query_timeout)
                if base is not None:
                    self._remember(tenant, role_id, head, _after(base, planned))
        return planned

    async def apply(
        self, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        return await self._call(lambda conn: self.apply_in(conn, tenant, role_id, writes))

    async def apply_in(
        self, tx: Any, tenant: str, role_id: str, writes: Sequence[PoolWrite]
    ) -> list[EntryMeta]:
        now = datetime.now(UTC)
        planned = await self._locked(
            tx, tenant, role_id, _written_ids(writes),
            lambda pool: plan_writes(tenant, role_id, pool, writes, now=now),
        )  # fmt: skip
        return [p.meta for p in planned]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        try:
            async with self.pool.acquire(timeout=self.acquire_timeout) as conn:
                async with conn.transaction():
                    yield conn
        except CONNECTION_ERRORS as e:
            raise MemoryUnavailable(f"memory pool store unavailable: {type(e).__name__}") from e

    async def forget(self, tenant: str, role_id: str, reader: Reader, entry_id: str) -> EntryMeta:
        now = datetime.now(UTC)

        async def work(conn: Any) -> list[PlannedWrite]:
            return await self._locked(
                conn, tenant, role_id, [entry_id],
                lambda pool: [plan_forget(reader, entry_id, pool, now=now)],
            )  # fmt: skip

        (step,) = await self._call(work)
        return step.meta

    async def change_log(
        self, tenant: str, role_id: str, reader: Reader, *, limit: int = CHANGE_LOG_LIMIT
    ) -> list[PoolChange]:
        async def work(conn: Any) -> list[Any]:
            shown = visible_ids(reader, await self._snapshot(conn, tenant, role_id))
            if not shown or limit <= 0:
                return []
            rows = await conn.fetch(
                "SELECT entry_id, version, at, by_actor, action, note_key_id, note_sealed"
                f" FROM role_pool_changes WHERE {_SCOPE} AND entry_id = ANY($3::text[])"
                " ORDER BY seq DESC LIMIT $4",
                tenant, role_id, list(shown), limit, timeout=self.query_timeout,
            )  # fmt: skip
            return list(reversed(rows))

        async with self.locks(tenant, role_id).read():
            rows = await self._call(work, readonly=True)
        out = []
        for r in rows:
            note = None
            if r["note_sealed"] is not None:
                note = self._open(
                    Sealed(r["note_key_id"], r["note_sealed"]),
                    context=note_context(tenant, role_id, r["entry_id"], r["version"]),
                )
            out.append(
                PoolChange(r["version"], r["at"], r["by_actor"], r["entry_id"], r["action"], note)
            )
        return out

    async def purge(self, tenant: str, role_id: str, tag: str) -> int:
        check_purge_tag(tag)

        async def work(conn: Any) -> int:
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                _LOCK_CLASS,
                _lock_name(tenant, role_id),
                timeout=self.query_timeout,
            )
            async with self.locks(tenant, role_id).write():
                count = await conn.fetchval(
                    _PURGE, tenant, role_id, tag, timeout=self.query_timeout
                )
                if count:
                    await conn.fetchval(_BUMP, tenant, role_id, timeout=self.query_timeout)
            return int(count)

        return await self._call(work)

    # ------------------------------------------------------------------ at-rest maintenance

    async def seal_plaintext(self, *, batch: int = ROTATE_BATCH) -> int:
        """Nothing to do: pool content was sealed from its first row (``rotate-key`` asks
        every sealed store)."""
        return 0

    async def rotate(self, *, batch: int = ROTATE_BATCH) -> int:
        """Re-encrypt, in batches of ``batch`` rows (one transaction each), every entry's
        content and every change-log note not under the active key (rule 7); returns how many.
        Rows stay readable throughout: the old keys stay in the keyring. Metadata is not
        touched, so the metadata cache stays valid."""
        total = 0
        for table in ("role_pool_entries", "role_pool_changes"):
            work = functools.partial(self._rotate_batch, table=table, batch=batch)
            total += await in_batches(functools.partial(self._call, work), batch)
        return total

    async def _rotate_batch(self, conn: Any, *, table: str, batch: int) -> int:
        active = self.keyring.active_id
        timeout = self.query_timeout
        # SKIP LOCKED: a row a writer holds right now is left for the next batch (or run).
        if table == "role_pool_entries":
            rows = await conn.fetch(
                "SELECT tenant, role_id, id, key_id, content_sealed FROM role_pool_entries"
                f" WHERE key_id <> $1 LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
                active, timeout=timeout,
            )  # fmt: skip
            updates = []
            for r in rows:
                context = content_context(r["tenant"], r["role_id"], r["id"])
                plain = self._open(Sealed(r["key_id"], r["content_sealed"]), context=context)
                sealed = self.keyring.seal(plain, context=context)
                updates.append((r["tenant"], r["role_id"], r["id"], sealed.key_id, sealed.blob))
            sql = (
                "UPDATE role_pool_entries SET key_id = $4, content_sealed = $5"
                " WHERE tenant = $1 AND role_id = $2 AND id = $3"
            )
        else:
            rows = await conn.fetch(
                "SELECT tenant, role_id, seq, entry_id, version, note_key_id, note_sealed"
                " FROM role_pool_changes WHERE note_key_id <> $1"
                f" LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
                active, timeout=timeout,
            )  # fmt: skip
            updates = []
            for r in rows:
                context = note_context(r["tenant"], r["role_id"], r["entry_id"], r["version"])
                plain = self._open(Sealed(r["note_key_id"], r["note_sealed"]), context=context)
                sealed = self.keyring.seal(plain, context=context)
                updates.append((r["tenant"], r["role_id"], r["seq"], sealed.key_id, sealed.blob))
            sql = (
                "UPDATE role_pool_changes SET note_key_id = $4, note_sealed = $5"
                " WHERE tenant = $1 AND role_id = $2 AND seq = $3"
            )
        if updates:
            await conn.executemany(sql, updates, timeout=timeout)
        return len(rows)

    async def key_ids_in_use(self) -> dict[str, int]:
        """Sealed entry contents and notes per key id."""

        async def work(conn: Any) -> dict[str, int]:
            rows = await conn.fetch(
                "SELECT key_id, count(*) AS n FROM (SELECT key_id FROM role_pool_entries"
                " UNION ALL SELECT note_key_id FROM role_pool_changes"
                " WHERE note_key_id IS NOT NULL) k GROUP BY key_id",
                timeout=self.query_timeout,
            )
            return {r["key_id"]: int(r["n"]) for r in rows}

        return await self._call(work, readonly=True)


def _after(
    base: Mapping[str, EntryMeta], planned: Sequence[PlannedWrite]
) -> Mapping[str, EntryMeta]:
    """The pool once ``planned`` is written on ``base``: the index derived when only new
    entries were added (``PoolIndex.extended``, the learner's usual write), else a mapping whose
    index the next read builds."""
    if isinstance(base, PoolIndex) and all(step.expected_version is None for step in planned):
        extended = base.extended(step.meta for step in planned)
        if extended is not None:
            return extended
    written = dict(base)
    written.update((step.meta.id, step.meta) for step in planned)
    return written


__all__ = ["PostgresPoolStore"]
