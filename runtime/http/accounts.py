"""HTTP API of accounts (SPEC ACC-1): users and tokens of the caller's tenant.

- ``GET  /api/me`` (member) → ``{"tenant", "user", "role", "token_id", "scopes"}``
- ``GET  /api/users`` (admin) → ``{"users": [membership]}``
- ``POST /api/users {user, role?}`` (admin; only owners add owners) → 201 membership |
  409 ``user_exists``
- ``POST /api/users/{user}/disable`` (admin; only owners disable owners) → membership; the
  user's tokens stop working and their live voice sessions close (4013) at once
- ``PUT  /api/users/{user}/role {role}`` (owner) → membership | 409 ``last_owner``
- ``GET  /api/tokens?user=U`` (member: their own; admins: anyone's in the tenant) →
  ``{"tokens": [token]}`` (never a secret or a hash)
- ``POST /api/tokens {user?, name?, expires_days?, scopes?}`` (admin) → 201 token with
  ``"token"``: the secret, shown this once
- ``DELETE /api/tokens/{id}`` (member: their own; admins: anyone's in the tenant) → the token,
  revoked; its live voice sessions close (4013) at once

The tenant is always the caller's. Another tenant's users and tokens, and (for members) other
users' tokens, are 404 like unknown ones.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from accounts.errors import (
    AccountError,
    AccountsUnavailable,
    InvalidAccount,
    LastOwner,
    TokenNotFound,
    UserExists,
    UserNotFound,
)
from accounts.model import (
    ID_PATTERN,
    MAX_EXPIRY_DAYS,
    MAX_TOKEN_NAME_CHARS,
    Membership,
    MembershipRole,
    Revocation,
    Scope,
    TokenInfo,
)
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden

router = APIRouter(tags=["accounts"])

_STATUS: dict[type[AccountError], int] = {
    InvalidAccount: 422,
    UserExists: 409,
    UserNotFound: 404,
    TokenNotFound: 404,
    LastOwner: 409,
    AccountsUnavailable: 503,
}


def account_error(error: AccountError) -> ApiError:
    status = next((s for t, s in _STATUS.items() if isinstance(error, t)), 500)
    return ApiError(status, error.code, str(error))


def membership_json(m: Membership) -> dict[str, Any]:
    return {
        "user": m.user,
        "tenant": m.tenant,
        "role": m.role,
        "disabled": m.disabled,
        "created_at": m.created_at.isoformat(),
    }


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def token_json(t: TokenInfo) -> dict[str, Any]:
    return {
        "id": t.id,
        "user": t.user,
        "name": t.name,
        "scopes": list(t.scopes),
        "created_at": t.created_at.isoformat(),
        "expires_at": _time(t.expires_at),
        "last_used_at": _time(t.last_used_at),
        "revoked_at": _time(t.revoked_at),
        "active": t.active(datetime.now(UTC)),
    }


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(pattern=ID_PATTERN.pattern)
    role: MembershipRole = "member"


class RoleChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: MembershipRole


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str | None = Field(default=None, pattern=ID_PATTERN.pattern)
    name: str = Field(default="api", min_length=1, max_length=MAX_TOKEN_NAME_CHARS)
    expires_days: int | None = Field(default=None, ge=1, le=MAX_EXPIRY_DAYS)
    scopes: list[Scope] | None = Field(default=None, max_length=4)


@router.get("/api/me", dependencies=[allow(Policy.MEMBER)])
async def me(who: Caller) -> dict[str, Any]:
    return {
        "tenant": who.tenant,
        "user": who.user,
        "role": who.role,
        "token_id": who.token_id,
        "scopes": sorted(who.scopes),
    }


@router.get("/api/users", dependencies=[allow(Policy.ADMIN)])
async def list_users(who: Caller, services: ServicesDep) -> dict[str, Any]:
    try:
        users = await services.accounts.list_users(who.tenant)
    except AccountError as e:
        raise account_error(e) from e
    return {"users": [membership_json(m) for m in users]}


@router.post("/api/users", status_code=201, dependencies=[allow(Policy.ADMIN)])
async def add_user(body: UserIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    if body.role == "owner" and not who.can("owner"):
        raise forbidden("only owners may add owners")
    try:
        member = await services.accounts.add_user(who.tenant, body.user, role=body.role)
    except AccountError as e:
        raise account_error(e) from e
    return membership_json(member)


async def _member(services: ServicesDep, tenant: str, user: str) -> Membership:
    try:
        member = await services.accounts.membership(tenant, user)
    except AccountError as e:
        raise account_error(e) from e
    if member is None:
        raise ApiError(404, "user_not_found", f"no user {user}")
    return member


@router.post("/api/users/{user}/disable", dependencies=[allow(Policy.ADMIN)])
async def disable_user(user: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    member = await _member(services, who.tenant, user)
    if member.role == "owner" and not who.can("owner"):
        raise forbidden("only owners may disable owners")
    try:
        disabled = await services.accounts.disable_user(who.tenant, user)
    except AccountError as e:
        raise account_error(e) from e
    services.revoked(Revocation(who.tenant, user))
    return membership_json(disabled)


@router.put("/api/users/{user}/role", dependencies=[allow(Policy.OWNER)])
async def change_role(
    user: str, body: RoleChange, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    try:
        member = await services.accounts.set_role(who.tenant, user, body.role)
    except AccountError as e:
        raise account_error(e) from e
    return membership_json(member)


@router.get("/api/tokens", dependencies=[allow(Policy.MEMBER)])
async def list_tokens(
    who: Caller, services: ServicesDep, user: str | None = None
) -> dict[str, Any]:
    if not who.can("admin"):
        if user is not None and user != who.user:
            raise forbidden("members list only their own tokens")
        user = who.user
    try:
        tokens = await services.accounts.list_tokens(who.tenant, user)
    except AccountError as e:
        raise account_error(e) from e
    return {"tokens": [token_json(t) for t in tokens]}


@router.post("/api/tokens", status_code=201, dependencies=[allow(Policy.ADMIN)])
async def issue_token(body: TokenIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    user = body.user or who.user
    await _member(services, who.tenant, user)
    expires = (
        None if body.expires_days is None else datetime.now(UTC) + timedelta(days=body.expires_days)
    )
    try:
        issued = await services.accounts.issue_token(
            who.tenant,
            user,
            name=body.name,
            scopes=tuple(body.scopes) if body.scopes else None,
            expires_at=expires,
        )
    except AccountError as e:
        raise account_error(e) from e
    return {**token_json(issued.info), "token": issued.secret}


@router.delete("/api/tokens/{token_id}", dependencies=[allow(Policy.MEMBER)])
async def revoke_token(token_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    try:
        found = await services.accounts.get_token(who.tenant, token_id)
        if found is None or (found.user != who.user and not who.can("admin")):
            raise TokenNotFound(f"no token {token_id}")
        revoked = await services.accounts.revoke_token(who.tenant, token_id)
    except AccountError as e:
        raise account_error(e) from e
    services.revoked(Revocation(revoked.tenant, revoked.user, revoked.id))
    return token_json(revoked)
