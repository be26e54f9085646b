"""HTTP API of long-term memory (SPEC MEM-6, MEM-7, MEM-8): per role, for the calling user only.

- ``GET  /api/memory?role_id=R`` → ``{"role_id", "enabled", "entries": [entry]}`` (newest first)
- ``POST /api/memory {role_id?, kind, content}`` → 201 entry (200 with the existing entry when
  an identical one exists: duplicates merge) | 409 ``memory_full`` at 100 entries per role
- ``PATCH /api/memory/{id} {content, kind?, revision}`` → entry | 409 ``stale_revision``
  (with ``current_revision``) | 409 ``duplicate_memory``; the edit unlinks the source
- ``DELETE /api/memory/{id}?revision=N`` → 204 | 409 ``stale_revision``
- ``POST /api/memory/clear {role_id?}`` → ``{"deleted": n}``
- ``GET  /api/memory/settings?role_id=R`` → the settings view: ``{"role_id", "enabled",
  "settings": {"memory_enabled"}, "overrides": {"memory_enabled"}, "defaults":
  {"memory_enabled"}}`` — ``settings`` is what applies to the caller, ``overrides`` the caller's
  own switches (null: none), ``defaults`` the role's as its admins set them
- ``PUT  /api/memory/settings {role_id?, enabled, scope?}`` → the settings view. ``scope``
  ``"user"`` (a member's only choice, and their default) keeps a personal override: the role's
  default and everyone else's memory stay as they are; ``"role"`` (admins and owners, their
  default) sets the role's ``memory_enabled`` for the tenant, as ``PATCH /api/roles/{id}`` does.
  A member asking for ``"role"`` is 403 ``forbidden``. Off stops injection and extraction and
  deletes nothing; a personal override only narrows (the role off is off for everyone).
- ``GET  /api/memory/changes?role_id=R`` → ``{"changes": [{entry_id, action, actor, at,
  revision, kind, key, source_thread_id}]}`` (newest first, at most 1000; never content)
- ``GET  /api/memory/export`` → the export document (``memory/backup.py``)
- ``POST /api/memory/import`` (that document) → ``{"imported", "skipped"}``; deletions recorded
  here or in the document win (an older export never brings deleted entries back)

A missing ``role_id`` means the tenant's default role; an unknown one is 404 ``role_not_found``.
Entry ids of other users are 404 ``memory_not_found``, like unknown ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, HTTPException, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from memory.backup import from_document, to_document
from memory.entries import MAX_ENTRY_CHARS, MemoryDraft, MemoryEntry, MemoryKind
from memory.errors import (
    DuplicateMemory,
    InvalidMemory,
    MemoryFull,
    MemoryNotFound,
    MemoryStoreError,
    MemoryUnavailable,
    StaleRevision,
)
from runtime.accounts import Principal
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden
from runtime.roles import Role, RoleOverrides, memory_enabled_for
from runtime.services import Services

router = APIRouter(prefix="/api/memory", tags=["memory"])
RoleQuery = Annotated[str | None, Query(max_length=200)]

_STATUS: dict[type[MemoryStoreError], int] = {
    InvalidMemory: 422,
    MemoryNotFound: 404,
    StaleRevision: 409,
    DuplicateMemory: 409,
    MemoryFull: 409,
    MemoryUnavailable: 503,
}


def _http_error(error: MemoryStoreError) -> HTTPException:
    status = next((s for t, s in _STATUS.items() if isinstance(error, t)), 500)
    detail: dict[str, Any] = {"code": error.code, "message": str(error)}
    if isinstance(error, StaleRevision):
        detail["current_revision"] = error.current_revision
    return HTTPException(status_code=status, detail=detail)


@contextmanager
def _memory_errors() -> Iterator[None]:
    """Memory errors inside the block become their HTTP error."""
    try:
        yield
    except MemoryStoreError as e:
        raise _http_error(e) from e


def entry_json(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "role_id": entry.role_id,
        "kind": entry.kind,
        "key": entry.key,
        "content": entry.content,
        "source_thread_id": entry.source_thread_id,
        "origin": entry.origin,
        "status": entry.status,
        "revision": entry.revision,
        "created_at": entry.created_at.isoformat(),
        "updated_at": entry.updated_at.isoformat(),
    }


async def _role(services: Services, who: Principal, role_id: str | None) -> Role:
    role = await services.role_for(who, role_id)
    if role is None:
        raise ApiError(404, "role_not_found", f"no role {role_id}")
    return role


class MemoryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role_id: str | None = Field(default=None, max_length=200)
    kind: MemoryKind
    content: str = Field(min_length=1, max_length=MAX_ENTRY_CHARS)


class MemoryPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=MAX_ENTRY_CHARS)
    kind: MemoryKind | None = None
    revision: int = Field(ge=1)


class RoleRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role_id: str | None = Field(default=None, max_length=200)


class MemorySwitch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role_id: str | None = Field(default=None, max_length=200)
    enabled: bool
    scope: Literal["user", "role"] | None = None
    """None: ``role`` for admins and owners, ``user`` for members."""


async def settings_view(services: Services, who: Principal, role: Role) -> dict[str, Any]:
    overrides = await services.roles.overrides(who.tenant, who.user, role.id)
    effective = memory_enabled_for(role, overrides)
    return {
        "role_id": role.id,
        "enabled": effective,
        "settings": {"memory_enabled": effective},
        "overrides": {"memory_enabled": overrides.memory_enabled},
        "defaults": {"memory_enabled": role.memory_enabled},
    }


@router.get("", dependencies=[allow(Policy.MEMBER)])
async def list_memory(
    who: Caller, services: ServicesDep, role_id: RoleQuery = None
) -> dict[str, Any]:
    role = await _role(services, who, role_id)
    with _memory_errors():
        entries = await services.memory.list_entries(who.tenant, who.user, role.id)
    overrides = await services.roles.overrides(who.tenant, who.user, role.id)
    return {
        "role_id": role.id,
        "enabled": memory_enabled_for(role, overrides),
        "entries": [entry_json(e) for e in entries],
    }


@router.post("", status_code=201, response_model=None, dependencies=[allow(Policy.MEMBER)])
async def add_memory(body: MemoryIn, who: Caller, services: ServicesDep) -> Any:
    role = await _role(services, who, body.role_id)
    with _memory_errors():
        outcome = await services.memory.save(
            who.tenant, who.user, role.id, MemoryDraft(body.kind, body.content)
        )
    if outcome.action == "full":
        raise _http_error(MemoryFull("this role already holds the most memories it can keep"))
    assert outcome.entry is not None
    if not outcome.changed:
        return JSONResponse(entry_json(outcome.entry), status_code=200)
    return entry_json(outcome.entry)


@router.patch("/{entry_id}", dependencies=[allow(Policy.MEMBER)])
async def edit_memory(
    entry_id: str, body: MemoryPatch, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    with _memory_errors():
        entry = await services.memory.edit(
            who.tenant,
            who.user,
            entry_id,
            revision=body.revision,
            content=body.content,
            kind=body.kind,
        )
    return entry_json(entry)


@router.delete("/{entry_id}", status_code=204, dependencies=[allow(Policy.MEMBER)])
async def delete_memory(
    entry_id: str, who: Caller, services: ServicesDep, revision: Annotated[int, Query(ge=1)]
) -> Response:
    with _memory_errors():
        await services.memory.delete(who.tenant, who.user, entry_id, revision=revision)
    return Response(status_code=204)


@router.post("/clear", dependencies=[allow(Policy.MEMBER)])
async def clear_memory(body: RoleRef, who: Caller, services: ServicesDep) -> dict[str, Any]:
    role = await _role(services, who, body.role_id)
    with _memory_errors():
        deleted = await services.memory.clear(who.tenant, who.user, role.id)
    return {"deleted": deleted}


@router.put("/settings", dependencies=[allow(Policy.MEMBER)])
async def switch_memory(body: MemorySwitch, who: Caller, services: ServicesDep) -> dict[str, Any]:
    scope = body.scope or ("role" if who.can("admin") else "user")
    if scope == "role" and not who.can("admin"):
        raise forbidden("only admins and owners change a role's memory; use scope 'user'")
    role = await _role(services, who, body.role_id)
    if scope == "role":
        updated = await services.roles.update(who.tenant, role.id, memory_enabled=body.enabled)
        if updated is None:
            raise ApiError(404, "role_not_found", f"no role {role.id}")
        role = updated
    else:
        await services.roles.set_overrides(
            who.tenant, who.user, role.id, RoleOverrides(memory_enabled=body.enabled)
        )
    return await settings_view(services, who, role)


@router.get("/settings", dependencies=[allow(Policy.MEMBER)])
async def memory_settings(
    who: Caller, services: ServicesDep, role_id: RoleQuery = None
) -> dict[str, Any]:
    return await settings_view(services, who, await _role(services, who, role_id))


@router.get("/changes", dependencies=[allow(Policy.MEMBER)])
async def memory_changes(
    who: Caller, services: ServicesDep, role_id: RoleQuery = None
) -> dict[str, Any]:
    role = await _role(services, who, role_id)
    with _memory_errors():
        changes = await services.memory.changes(who.tenant, who.user, role.id)
    return {
        "changes": [
            {
                "entry_id": c.entry_id,
                "action": c.action,
                "actor": c.actor,
                "at": c.at.isoformat(),
                "revision": c.revision,
                "kind": c.kind,
                "key": c.key,
                "source_thread_id": c.source_thread_id,
            }
            for c in changes
        ]
    }


@router.get("/export", dependencies=[allow(Policy.MEMBER)])
async def export_memory(who: Caller, services: ServicesDep) -> dict[str, Any]:
    with _memory_errors():
        return to_document(await services.memory.backup(who.tenant, who.user))


@router.post("/import", dependencies=[allow(Policy.MEMBER)])
async def import_memory(
    who: Caller, services: ServicesDep, document: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    with _memory_errors():
        backup = from_document(document, tenant=who.tenant, user=who.user)
        result = await services.memory.restore(who.tenant, who.user, backup)
    return {"imported": result.imported, "skipped": result.skipped}
