"""Roles (SPEC RT-7): configured agents. Scoped by tenant; every tenant has a default role.

A role's switches (today ``memory_enabled``) are the admin's defaults for the whole tenant
(SPEC ACC-2). A user may keep a personal override per role (``RoleOverrides``); an override only
narrows: memory is on for a user when the role has it on and the user did not turn it off
(``memory_enabled_for``). Overrides go with their role.

Revisions (both stores keep these rules):

1. A role is created at ``revision`` 1; every ``update`` that changes something adds 1 (an
   update with no changes changes nothing, the revision included).
2. ``update`` and ``delete`` take ``expected_revision``: when given and not the role's revision,
   nothing changes and ``StaleRoleRevision`` carries the role as it is now. The check and the
   write are one step (PostgreSQL: one statement), so two editors of one revision cannot both
   win. ``None`` skips the check (last writer wins) — for callers that change one switch, such
   as the memory page's on/off, and for clients older than revisions.
3. An unknown role is ``None`` / ``False``, whatever the expected revision.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Protocol

DEFAULT_INSTRUCTIONS = (
    "You are a helpful voice assistant. Answer briefly, in the user's language. "
    "When you do not know, say so."
)


@dataclass(frozen=True, slots=True)
class Role:
    id: str
    tenant: str
    name: str
    instructions: str
    voice: str | None
    language: str | None
    memory_enabled: bool
    is_default: bool
    created_at: datetime
    updated_at: datetime
    revision: int = 1
    failure_message: str | None = None
    """What a failed spoken turn says (SPEC RT-11): None, the default apology in the turn's
    language; empty, nothing (the client still gets the error)."""
    recording_enabled: bool = False
    """Sessions of this role are recorded (SPEC REC-1), where the tenant may record at all
    (``Settings.recording_tenants``); off unless an admin turns it on."""
    agent_url: str | None = None
    """Its own chat agent (SPEC BRAIN-6, ``runtime.role_agent``): each turn of its sessions is
    answered by the agent at this URL (its host on the tool allowlist) instead of the
    deployment's brain; None: the deployment's brain."""
    agent_secret: str | None = None
    """The name of the tenant's tool secret sent to ``agent_url`` as its bearer token (the value
    stays sealed in the secret store; the role keeps only the name)."""


@dataclass(frozen=True, slots=True)
class RoleOverrides:
    """One user's own switches for one role; None: the role's default applies."""

    memory_enabled: bool | None = None


class StaleRoleRevision(Exception):
    """Rule 2: the role is no longer at the revision the caller read; ``current`` is it now."""

    def __init__(self, current: Role) -> None:
        super().__init__(f"role {current.id} is at revision {current.revision}")
        self.current = current


def memory_enabled_for(role: Role, overrides: RoleOverrides) -> bool:
    return role.memory_enabled and overrides.memory_enabled is not False


EDITABLE_FIELDS = frozenset(
    {
        "name",
        "instructions",
        "voice",
        "language",
        "memory_enabled",
        "failure_message",
        "recording_enabled",
        "agent_url",
        "agent_secret",
    }
)
"""What ``RoleStore.update`` may change."""


class RoleStore(Protocol):
    async def list(self, tenant: str) -> list[Role]: ...

    async def get(self, tenant: str, role_id: str) -> Role | None: ...

    async def create(
        self,
        tenant: str,
        *,
        name: str,
        instructions: str,
        voice: str | None,
        language: str | None,
        memory_enabled: bool,
        is_default: bool = False,
        failure_message: str | None = None,
    ) -> Role: ...

    async def update(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None, **changes: object
    ) -> Role | None:
        """The role after ``changes`` (rules 1–3); None when there is no such role."""
        ...

    async def delete(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None
    ) -> bool:
        """Whether the role was there and is gone now (rules 2, 3); its overrides go with it."""
        ...

    async def overrides(self, tenant: str, user: str, role_id: str) -> RoleOverrides: ...

    async def set_overrides(
        self, tenant: str, user: str, role_id: str, overrides: RoleOverrides
    ) -> RoleOverrides:
        """Keep the user's overrides of an existing role (the caller checked it exists)."""
        ...


class InMemoryRoleStore:
    def __init__(self) -> None:
        self._roles: dict[tuple[str, str], Role] = {}
        self._overrides: dict[tuple[str, str, str], RoleOverrides] = {}

    async def list(self, tenant: str) -> list[Role]:
        roles = [r for (t, _), r in self._roles.items() if t == tenant]
        return sorted(roles, key=lambda r: (not r.is_default, r.created_at))

    async def get(self, tenant: str, role_id: str) -> Role | None:
        return self._roles.get((tenant, role_id))

    async def create(
        self,
        tenant: str,
        *,
        name: str,
        instructions: str,
        voice: str | None,
        language: str | None,
        memory_enabled: bool,
        is_default: bool = False,
        failure_message: str | None = None,
    ) -> Role:
        now = datetime.now(UTC)
        role = Role(
            id=f"role_{uuid.uuid4().hex[:16]}",
            tenant=tenant,
            name=name,
            instructions=instructions,
            voice=voice,
            language=language,
            memory_enabled=memory_enabled,
            is_default=is_default,
            created_at=now,
            updated_at=now,
            failure_message=failure_message,
        )
        self._roles[(tenant, role.id)] = role
        return role

    async def update(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None, **changes: object
    ) -> Role | None:
        unknown = set(changes) - EDITABLE_FIELDS
        if unknown:
            raise ValueError(f"cannot change {sorted(unknown)}")
        role = self._current(tenant, role_id, expected_revision)
        if role is None or not changes:
            return role
        updated = replace(
            role,
            **changes,  # type: ignore[arg-type]
            updated_at=datetime.now(UTC),
            revision=role.revision + 1,
        )
        self._roles[(tenant, role_id)] = updated
        return updated

    async def delete(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None
    ) -> bool:
        if self._current(tenant, role_id, expected_revision) is None:
            return False
        for key in [k for k in self._overrides if (k[0], k[2]) == (tenant, role_id)]:
            del self._overrides[key]
        return self._roles.pop((tenant, role_id), None) is not None

    def _current(self, tenant: str, role_id: str, expected_revision: int | None) -> Role | None:
        role = self._roles.get((tenant, role_id))
        if role is not None and expected_revision not in (None, role.revision):
            raise StaleRoleRevision(role)
        return role

    async def overrides(self, tenant: str, user: str, role_id: str) -> RoleOverrides:
        return self._overrides.get((tenant, user, role_id), RoleOverrides())

    async def set_overrides(
        self, tenant: str, user: str, role_id: str, overrides: RoleOverrides
    ) -> RoleOverrides:
        if (tenant, role_id) in self._roles:
            self._overrides[(tenant, user, role_id)] = overrides
        return overrides


async def default_role(store: RoleStore, tenant: str) -> Role:
    """The tenant's default role, created on first use."""
    for role in await store.list(tenant):
        if role.is_default:
            return role
    return await store.create(
        tenant,
        name="Assistant",
        instructions=DEFAULT_INSTRUCTIONS,
        voice=None,
        language=None,
        memory_enabled=True,
        is_default=True,
    )
