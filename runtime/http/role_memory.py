"""HTTP API of role memory (SPEC RM-6, RM-7): a role's shared pool as one caller may see it, its
settings, and what a thread's conversation confided and had rewritten.

Routes (``docs/http_api.md#role-memory``):

- ``GET  /api/roles/{role_id}/memory?tags=a,b`` → ``{"role_id", "entries", "truncated"}``:
  the entries the caller may see carrying every tag given, oldest first (the newest ``limit``).
- ``POST /api/roles/{role_id}/memory/remember {content, tags?}`` → 201 the new pinned entry.
- ``POST /api/roles/{role_id}/memory/forget {entry_id}`` → ``{"entry_id", "version"}``.
- ``GET  /api/roles/{role_id}/memory/log`` → ``{"changes": [{version, at, by, entry_id,
  action}]}`` of the entries the caller may see.
- ``POST /api/roles/{role_id}/memory/purge {tag}`` → ``{"purged": n}``.
- ``GET  /api/roles/{role_id}/memory/settings`` / ``PATCH`` (admins) → the settings view.
- ``GET  /api/threads/{thread_id}/confessions`` and ``/enrichments`` → the thread's records.

Rules
-----
1. Who reads is the bearer token's (tenant, user) only: a route builds its ``Reader`` from the
   principal and the roles of its tenant it may use, never from a body or query field. The
   pool's visibility rules (``memory/pool.py`` rules 1–7) decide what is shown; nothing here
   widens or filters around them.
2. The role must exist in the caller's tenant (else 404 ``role_not_found``); the thread must be
   the caller's (else 404 ``thread_not_found``, like an unknown one).
3. Remember adds a ``pinned`` entry with no source, tagged ``from:<me>``, ``for:person:<me>``,
   ``tenant:<t>`` and the topic tags the caller proposed that survive ``clean_topic_tags``
   (others are dropped, never an error); only its author sees it. Content is cleaned as
   per-user memory's is (at most ``MAX_ENTRY_CHARS``; passwords, keys and links are 422
   ``sensitive_content``).
4. Forget takes back the caller's part (``memory/pool.py`` rule 9): an entry the caller cannot
   see, or sees only as a user of the role, is 409 ``foreign_entry``.
5. Purge takes a ``from:``, ``thread:`` or ``tenant:`` tag (else 422 ``invalid_purge_tag``) and
   answers only the count. Who may: ``from:<me>`` anyone, for themselves; ``thread:<id>`` the
   thread's owner or an admin; ``tenant:<own tenant>`` admins; anything else 403 ``forbidden``.
6. Settings: members read the memory model, concurrency, budget and revision; the privacy
   ``instructions`` are shown to admins only (members get ``null``) — they may name what is
   private, and members need them for nothing. A PATCH (admins) names the revision it read
   (``expected``; 0 for a role never configured) — another revision is 409 ``stale_revision``
   with ``current_revision``; a field left out keeps its value, ``null`` clears it. A memory
   model must be ``null`` or one of ``services.memory_models`` (else 400
   ``unknown_memory_model``).
7. Every list is bounded (entries and records: at most ``MAX_RECORDS_LISTED``, the newest).
   Nothing here logs content.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from memory.entries import MAX_ENTRY_CHARS, clean_content
from memory.errors import (
    DuplicateMemory,
    InvalidMemory,
    MemoryKeyError,
    MemoryNotFound,
    MemoryStoreError,
    MemoryUnavailable,
    StaleRevision,
)
from memory.pool import (
    MAX_TOPIC_TAGS,
    EntryMeta,
    EntrySource,
    ForeignEntry,
    PoolEntry,
    Reader,
    clean_topic_tags,
    for_person_tag,
    from_tag,
    tenant_tag,
)
from memory.pool_store import PURGE_TAG_PREFIXES, PoolChange, WideningRefused
from memory.role_records import (
    MAX_BUDGET_MICROS,
    MAX_CONCURRENCY,
    MAX_INSTRUCTIONS_CHARS,
    MAX_RECORDS_LISTED,
    Budget,
    Confession,
    Enrichment,
    RoleMemorySettings,
)
from runtime.accounts import Principal
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden
from runtime.roles import Role
from runtime.services import Services

router = APIRouter(tags=["role memory"])

MAX_FILTER_TAGS = 16
"""Most tags one listing filters by."""
_ID = Annotated[str, Field(min_length=1, max_length=200)]

_STATUS: tuple[tuple[type[MemoryStoreError], int], ...] = (
    (InvalidMemory, 422),
    (MemoryNotFound, 404),
    (ForeignEntry, 409),
    (WideningRefused, 409),
    (DuplicateMemory, 409),
    (MemoryUnavailable, 503),
    (MemoryKeyError, 500),
)


class Stale(ApiError):
    """409 ``stale_revision`` carrying the current revision (``current_revision``)."""

    def __init__(self, current: int, message: str = "changed since it was read") -> None:
        super().__init__(409, "stale_revision", message)
        assert isinstance(self.detail, dict)
        self.detail["current_revision"] = current


@contextmanager
def _memory_errors() -> Iterator[None]:
    """Memory errors inside the block become their HTTP error (stable code; messages of this
    package's errors never hold content)."""
    try:
        yield
    except StaleRevision as e:
        raise Stale(e.current_revision, str(e)) from e
    except MemoryStoreError as e:
        status = next((s for t, s in _STATUS if isinstance(e, t)), 500)
        raise ApiError(status, e.code, str(e)) from e


# ------------------------------------------------------------------ who and what (rules 1, 2)


async def _role(services: Services, who: Principal, role_id: str) -> Role:
    role = await services.roles.get(who.tenant, role_id)
    if role is None or not who.may_use_role(role_id):
        raise ApiError(404, "role_not_found", f"no role {role_id}")
    return role


async def reader_of(services: Services, who: Principal) -> Reader:
    """The caller as a pool reader: their user and tenant, and the roles of the tenant they
    may use (rule 1)."""
    roles = await services.roles.list(who.tenant)
    return Reader(who.user, who.tenant, frozenset(r.id for r in roles if who.may_use_role(r.id)))


async def _own_thread(services: Services, who: Principal, thread_id: str) -> None:
    if await services.threads.get(who.tenant, who.user, thread_id) is None:
        raise ApiError(404, "thread_not_found", f"no thread {thread_id}")


def _sources_json(meta: EntryMeta) -> list[dict[str, str]]:
    return [
        {"entry": s.entry_id}
        if isinstance(s, EntrySource)
        else {"thread": s.thread_id, "item": s.item_id}
        for s in meta.sources
    ]


def entry_json(entry: PoolEntry) -> dict[str, Any]:
    m = entry.meta
    return {
        "id": m.id,
        "layer": m.layer,
        "tags": sorted(m.tags),
        "content": entry.content,
        "confidence": m.confidence,
        "created_at": m.created_at.isoformat(),
        "invalidated_at": None if m.invalidated_at is None else m.invalidated_at.isoformat(),
        "version": m.version,
        "sources": _sources_json(m),
    }


def change_json(change: PoolChange) -> dict[str, Any]:
    return {
        "version": change.version,
        "at": change.at.isoformat(),
        "by": change.by,
        "entry_id": change.entry_id,
        "action": change.action,
    }


def _filter_tags(tags: str | None) -> list[str]:
    found = [] if tags is None else [t.strip() for t in tags.split(",") if t.strip()]
    if len(found) > MAX_FILTER_TAGS:
        raise ApiError(422, "invalid_tags", f"filter by at most {MAX_FILTER_TAGS} tags")
    return found


# ------------------------------------------------------------------ the pool (RM-7)


@router.get("/api/roles/{role_id}/memory", dependencies=[allow(Policy.MEMBER)])
async def list_role_memory(
    role_id: str,
    who: Caller,
    services: ServicesDep,
    tags: Annotated[str | None, Query(max_length=2_000)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_RECORDS_LISTED)] = MAX_RECORDS_LISTED,
) -> dict[str, Any]:
    """The entries of the role's pool the caller may see (history included), carrying every
    tag of ``tags`` (comma-separated)."""
    role = await _role(services, who, role_id)
    wanted = _filter_tags(tags)
    with _memory_errors():
        reader = await reader_of(services, who)
        entries = await services.pool.read_visible(who.tenant, role.id, reader, tags=wanted)
    return {
        "role_id": role.id,
        "entries": [entry_json(e) for e in entries[-limit:]],
        "truncated": len(entries) > limit,
    }


class RememberIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=MAX_ENTRY_CHARS * 2)
    tags: list[Annotated[str, Field(max_length=100)]] = Field(
        default_factory=list, max_length=MAX_TOPIC_TAGS * 2
    )
    """Topic tags proposed; those that are not clean topics are dropped (rule 3)."""


@router.post(
    "/api/roles/{role_id}/memory/remember", status_code=201, dependencies=[allow(Policy.MEMBER)]
)
async def remember(
    role_id: str, body: RememberIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """A pinned entry only the caller sees (rule 3)."""
    role = await _role(services, who, role_id)
    with _memory_errors():
        content = clean_content(body.content)
        tags = {from_tag(who.user), for_person_tag(who.user), tenant_tag(who.tenant)}
        meta = EntryMeta(
            id=f"mem_{uuid.uuid4().hex}",
            role_id=role.id,
            layer="pinned",
            tags=frozenset(tags | clean_topic_tags(body.tags)),
            sources=(),
            created_at=datetime.now(UTC),
        )
        saved = await services.pool.add(PoolEntry(meta, content), "person")
    return entry_json(PoolEntry(saved, content))


class ForgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entry_id: _ID


@router.post("/api/roles/{role_id}/memory/forget", dependencies=[allow(Policy.MEMBER)])
async def forget(
    role_id: str, body: ForgetIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Take back the caller's part of an entry (rule 4)."""
    role = await _role(services, who, role_id)
    with _memory_errors():
        reader = await reader_of(services, who)
        meta = await services.pool.forget(who.tenant, role.id, reader, body.entry_id)
    return {"entry_id": meta.id, "version": meta.version}


@router.get("/api/roles/{role_id}/memory/log", dependencies=[allow(Policy.MEMBER)])
async def role_memory_log(
    role_id: str,
    who: Caller,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_RECORDS_LISTED)] = MAX_RECORDS_LISTED,
) -> dict[str, Any]:
    """The change log of the entries the caller may see, oldest first (the newest ``limit``)."""
    role = await _role(services, who, role_id)
    with _memory_errors():
        reader = await reader_of(services, who)
        changes = await services.pool.change_log(who.tenant, role.id, reader, limit=limit)
    return {"role_id": role.id, "changes": [change_json(c) for c in changes]}


class PurgeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = Field(min_length=1, max_length=300)


async def check_purge(services: Services, who: Principal, tag: str) -> None:
    """Rule 5: whether ``who`` may purge ``tag`` (422 or 403 when not)."""
    kind, _, value = tag.partition(":")
    if f"{kind}:" not in PURGE_TAG_PREFIXES or not value:
        raise ApiError(422, "invalid_purge_tag", "a purge takes a from:, thread: or tenant: tag")
    if kind == "from" and value == who.user:
        return
    if kind == "thread" and (
        who.can("admin") or await services.threads.get(who.tenant, who.user, value) is not None
    ):
        return
    if kind == "tenant" and value == who.tenant and who.can("admin"):
        return
    raise forbidden(
        "you may purge from:<you>, thread:<a thread of yours>; admins also any thread:<id>"
        " and tenant:<this tenant>"
    )


@router.post("/api/roles/{role_id}/memory/purge", dependencies=[allow(Policy.MEMBER)])
async def purge(role_id: str, body: PurgeIn, who: Caller, services: ServicesDep) -> dict[str, int]:
    """Remove, unread, the entries carrying ``tag`` and all derived from them; the count."""
    role = await _role(services, who, role_id)
    await check_purge(services, who, body.tag)
    with _memory_errors():
        purged = await services.pool.purge(who.tenant, role.id, body.tag)
    return {"purged": purged}


# ------------------------------------------------------------------ settings (RM-6)


class BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    period: Literal["day", "month"]
    limit_micros: int = Field(ge=0, le=MAX_BUDGET_MICROS)


class SettingsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected: int = Field(ge=0, le=2**31 - 1)
    """The revision the caller read (0: never configured)."""
    memory_model: str | None = Field(default=None, min_length=1, max_length=100)
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    budget: BudgetIn | None = None


def settings_json(
    role: Role, settings: RoleMemorySettings, services: Services, who: Principal
) -> dict[str, Any]:
    budget = settings.budget
    return {
        "role_id": role.id,
        "revision": settings.revision,
        "memory_model": settings.memory_model,
        "instructions": settings.instructions if who.can("admin") else None,
        "concurrency": settings.concurrency,
        "budget": None
        if budget is None
        else {"period": budget.period, "limit_micros": budget.limit_micros},
        "memory_models": sorted(services.memory_models),
    }


@router.get("/api/roles/{role_id}/memory/settings", dependencies=[allow(Policy.MEMBER)])
async def role_memory_settings(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """The role's memory settings (instructions for admins only, rule 6) and the memory
    models it may choose."""
    role = await _role(services, who, role_id)
    with _memory_errors():
        settings = await services.role_records.settings(who.tenant, role.id)
    return settings_json(role, settings, services, who)


@router.patch("/api/roles/{role_id}/memory/settings", dependencies=[allow(Policy.ADMIN)])
async def update_role_memory_settings(
    role_id: str, body: SettingsPatch, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Change the fields given against the revision read (rule 6)."""
    role = await _role(services, who, role_id)
    given = body.model_fields_set
    if body.memory_model is not None and body.memory_model not in services.memory_models:
        raise ApiError(
            400,
            "unknown_memory_model",
            f"memory_model must be null or one of: {', '.join(sorted(services.memory_models))}",
        )
    with _memory_errors():
        current = await services.role_records.settings(who.tenant, role.id)
        if current.revision != body.expected:
            raise Stale(current.revision, "the settings changed since they were read")
        budget = current.budget
        if "budget" in given:
            b = body.budget
            budget = None if b is None else Budget(b.period, b.limit_micros)
        wanted = RoleMemorySettings(
            memory_model=body.memory_model if "memory_model" in given else current.memory_model,
            instructions=(body.instructions or "")
            if "instructions" in given
            else current.instructions,
            concurrency=body.concurrency if "concurrency" in given else current.concurrency,
            budget=budget,
        )
        saved = await services.role_records.put_settings(
            who.tenant, role.id, wanted, expected=body.expected
        )
    return settings_json(role, saved, services, who)


# ------------------------------------------------------------------ a thread's records (RM-7)


def confession_json(c: Confession) -> dict[str, Any]:
    return {
        "id": c.id,
        "role_id": c.role_id,
        "seq": c.seq,
        "text": c.text,
        "answer": c.answer,
        "answered_by": c.answered_by,
        "at": c.at.isoformat(),
    }


def enrichment_json(e: Enrichment) -> dict[str, Any]:
    return {
        "id": e.id,
        "role_id": e.role_id,
        "seq": e.seq,
        "text": e.text,
        "original": e.original,
        "entry_ids": list(e.entry_ids),
        "at": e.at.isoformat(),
    }


@router.get("/api/threads/{thread_id}/confessions", dependencies=[allow(Policy.MEMBER)])
async def thread_confessions(thread_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """What the agent confided in this thread and the answers it got (its owner only)."""
    await _own_thread(services, who, thread_id)
    with _memory_errors():
        found = await services.role_records.confessions(who.tenant, thread_id)
    mine = [confession_json(c) for c in found if c.user == who.user]
    return {"thread_id": thread_id, "confessions": mine}


@router.get("/api/threads/{thread_id}/enrichments", dependencies=[allow(Policy.MEMBER)])
async def thread_enrichments(thread_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """How the memory model rewrote this thread's inputs, and with which entries (its owner
    only)."""
    await _own_thread(services, who, thread_id)
    with _memory_errors():
        found = await services.role_records.enrichments(who.tenant, thread_id)
    return {"thread_id": thread_id, "enrichments": [enrichment_json(e) for e in found]}
