"""Grants (SPEC TOOL-2): stored decisions about one role's capabilities, and the grant policy.

Theory of operation
-------------------
A grant says: for this role, this capability is allowed or denied, for one call, in one thread
or for the role's lifetime. The role never sees its grants; only the runtime reads them.

Rule 1. A grant applies to a call when it is ``active``, its capability ``matches`` the call
        (``tools.capability``: action equal; target equal or ``*``; arguments equal when the
        grant pins them) and its scope covers the call's thread: ``lifetime`` everywhere,
        ``thread`` only in its thread, ``once`` in its thread (or anywhere when it has none).
Rule 2. Deny beats every allow, regardless of order: when any applicable grant denies, the
        first applicable deny decides. Otherwise the first applicable allow decides. "First"
        is creation order (the stores list grants in it). No applicable grant: no decision.
Rule 3. A ``once`` grant that decides is used up (status ``used``) by the same decision,
        atomically: of two concurrent decisions at most one uses it; the other decides again
        without it. ``GrantStore.decide`` does both; ``grant_policy`` is the pure part.
Rule 4. Revoking a grant revokes every grant derived from it (``parent``), transitively, in
        any role of the tenant; a revoked or used grant never applies again.
Rule 5. A new grant is checked: ``thread`` scope needs a thread; its ``parent`` must exist in
        the tenant and be active (nothing derives from a revoked decision).
Rule 6. Bounded: a role holds at most ``MAX_ACTIVE_GRANTS`` active grants.
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from tools.capability import Capability, check_capability, matches
from tools.errors import GrantNotFound, InvalidGrant, ToolLimitExceeded

Effect = Literal["allow", "deny"]
Scope = Literal["once", "thread", "lifetime"]
GrantStatus = Literal["active", "used", "revoked"]
GranterKind = Literal["person", "role", "rule"]
EFFECTS: tuple[Effect, ...] = ("allow", "deny")
SCOPES: tuple[Scope, ...] = ("once", "thread", "lifetime")
STATUSES: tuple[GrantStatus, ...] = ("active", "used", "revoked")
GRANTER_KINDS: tuple[GranterKind, ...] = ("person", "role", "rule")
MAX_ACTIVE_GRANTS = 1_000
MAX_CASCADE = 10_000
"""Grants one revocation may reach (a guard against a cycle made by hand in the database)."""


@dataclass(frozen=True, slots=True)
class GrantedBy:
    kind: GranterKind
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NewGrant:
    """What a caller asks to store (the store gives it an id, a status and a time)."""

    capability: Capability
    effect: Effect
    scope: Scope
    granted_by: GrantedBy
    thread_id: str | None = None
    parent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    id: str
    tenant: str
    role_id: str
    capability: Capability
    effect: Effect
    scope: Scope
    thread_id: str | None
    granted_by: GrantedBy
    parent: str | None
    status: GrantStatus
    created_at: datetime


def applies(grant: Grant, call: Capability, thread_id: str | None) -> bool:
    """Rule 1."""
    if grant.status != "active" or not matches(grant.capability, call):
        return False
    if grant.scope == "lifetime":
        return True
    if grant.scope == "once" and grant.thread_id is None:
        return True
    return grant.thread_id == thread_id


def grant_policy(grants: Sequence[Grant], call: Capability, thread_id: str | None) -> Grant | None:
    """The grant that decides ``call`` (rules 1–2), or None. ``grants`` in creation order."""
    allow: Grant | None = None
    for grant in grants:
        if not applies(grant, call, thread_id):
            continue
        if grant.effect == "deny":
            return grant
        if allow is None:
            allow = grant
    return allow


def check_new_grant(new: NewGrant) -> None:
    """Rule 5's local part (the parent is checked by the store)."""
    problem = check_capability(new.capability)
    if problem is not None:
        raise InvalidGrant(problem)
    if new.effect not in EFFECTS or new.scope not in SCOPES:
        raise InvalidGrant("effect must be allow or deny; scope once, thread or lifetime")
    if new.granted_by.kind not in GRANTER_KINDS or not new.granted_by.id:
        raise InvalidGrant("granted_by needs a kind (person, role or rule) and an id")
    if new.scope == "thread" and not new.thread_id:
        raise InvalidGrant("a thread grant needs a thread_id")
    if new.scope == "lifetime" and new.thread_id is not None:
        raise InvalidGrant("a lifetime grant has no thread_id")


def new_grant_id() -> str:
    return "grant_" + uuid.uuid4().hex


class GrantStore(Protocol):
    async def create(self, tenant: str, role_id: str, new: NewGrant) -> Grant: ...

    async def get(self, tenant: str, role_id: str, grant_id: str) -> Grant: ...

    async def list(
        self, tenant: str, role_id: str, *, status: GrantStatus | None = None
    ) -> list[Grant]:
        """The role's grants in creation order (rule 2's "first")."""
        ...

    async def decide(
        self, tenant: str, role_id: str, call: Capability, thread_id: str | None
    ) -> Grant | None:
        """The deciding grant (rule 2), a ``once`` one used up with it (rule 3); the grant is
        returned as it was when it decided (status ``active``)."""
        ...

    async def revoke(self, tenant: str, role_id: str, grant_id: str) -> builtins.list[str]:
        """Revoke the grant and its descendants (rule 4); the ids revoked now."""
        ...

    async def forget_role(self, tenant: str, role_id: str) -> int:
        """Remove everything of a deleted role (``DELETE /api/roles/{id}``); how many."""
        ...


class InMemoryGrantStore:
    """``GrantStore`` in a list per tenant (tests, ``OPENREALTIME_STORAGE=memory``). Every
    method runs without awaiting between its read and its write, so it is atomic on the loop."""

    def __init__(self, *, max_active: int = MAX_ACTIVE_GRANTS) -> None:
        self._grants: dict[str, list[Grant]] = {}
        self.max_active = max_active

    async def create(self, tenant: str, role_id: str, new: NewGrant) -> Grant:
        check_new_grant(new)
        grants = self._grants.setdefault(tenant, [])
        if new.parent is not None:
            parent = next((g for g in grants if g.id == new.parent), None)
            if parent is None or parent.status != "active":
                raise InvalidGrant("parent must be an active grant of this tenant")
        active = sum(1 for g in grants if g.role_id == role_id and g.status == "active")
        if active >= self.max_active:
            raise ToolLimitExceeded(f"a role holds at most {self.max_active} active grants")
        grant = Grant(
            id=new_grant_id(), tenant=tenant, role_id=role_id, capability=new.capability,
            effect=new.effect, scope=new.scope, thread_id=new.thread_id,
            granted_by=new.granted_by, parent=new.parent, status="active",
            created_at=datetime.now(UTC),
        )  # fmt: skip
        grants.append(grant)
        return grant

    async def get(self, tenant: str, role_id: str, grant_id: str) -> Grant:
        for grant in self._grants.get(tenant, []):
            if grant.id == grant_id and grant.role_id == role_id:
                return grant
        raise GrantNotFound(f"no grant {grant_id}")

    async def list(
        self, tenant: str, role_id: str, *, status: GrantStatus | None = None
    ) -> list[Grant]:
        return [
            g
            for g in self._grants.get(tenant, [])
            if g.role_id == role_id and (status is None or g.status == status)
        ]

    async def decide(
        self, tenant: str, role_id: str, call: Capability, thread_id: str | None
    ) -> Grant | None:
        grants = self._grants.get(tenant, [])
        decided = grant_policy([g for g in grants if g.role_id == role_id], call, thread_id)
        if decided is not None and decided.scope == "once":
            index = grants.index(decided)
            grants[index] = replace(decided, status="used")
        return decided

    async def revoke(self, tenant: str, role_id: str, grant_id: str) -> builtins.list[str]:
        await self.get(tenant, role_id, grant_id)
        grants = self._grants.get(tenant, [])
        reached = {grant_id}
        frontier = [grant_id]
        while frontier and len(reached) < MAX_CASCADE:
            parent = frontier.pop()
            for g in grants:
                if g.parent == parent and g.id not in reached:
                    reached.add(g.id)
                    frontier.append(g.id)
        revoked: list[str] = []
        for index, g in enumerate(grants):
            if g.id in reached and g.status == "active":
                grants[index] = replace(g, status="revoked")
                revoked.append(g.id)
        return revoked

    async def forget_role(self, tenant: str, role_id: str) -> int:
        grants = self._grants.get(tenant, [])
        kept = [g for g in grants if g.role_id != role_id]
        self._grants[tenant] = kept
        return len(grants) - len(kept)
