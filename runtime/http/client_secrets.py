"""Client secrets, as OpenAI's GA ``POST /v1/realtime/client_secrets`` (issue 14).

A backend holding a long-lived token mints a short-lived client secret (``ek_…``) and hands it
to a browser page, which opens ``/v1/realtime`` with it — the page never holds the token.

Rules
-----
1. Any member may mint (``member`` policy, with the token's ``api`` scope); a client secret
   cannot mint another one, nor use any other HTTP route (``runtime/http/policy.py`` rule 2).
2. The secret is the caller's: bound to the (tenant, user) and the token that authenticated
   this request, and to one agent role of the caller's tenant — ``session.model``, a role id or
   (when no id matches) the name of exactly one role, else the tenant's default role.
3. It lives ``expires_after.seconds`` (``MIN_SECONDS``–``MAX_SECONDS``, default
   ``DEFAULT_SECONDS``) from its creation and may open any number of sessions until then (a
   session already open outlives it). Disabling the user or revoking the minting token ends it
   at once (``accounts/store.py`` rule 7).
4. The request and answer are shaped as the ``openai`` package's ``ClientSecretCreateParams``
   and ``ClientSecretCreateResponse``. Only the session fields that choose what the secret is
   bound to are taken (``type``, ``model``); the rest is configured on the connection once it is
   open, and sending one here is ``422 unsupported_session_field`` (not silently ignored).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from accounts.errors import AccountError
from accounts.model import MAX_CLIENT_SECRET_TTL
from runtime.http.accounts import account_error
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.roles import Role, RoleStore, default_role

router = APIRouter(tags=["realtime"])

CLIENT_SECRETS_PATH = "/v1/realtime/client_secrets"
MIN_SECONDS = 10
MAX_SECONDS = int(MAX_CLIENT_SECRET_TTL.total_seconds())
DEFAULT_SECONDS = 600


class ExpiresAfterIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    anchor: Literal["created_at"] = "created_at"
    seconds: int = DEFAULT_SECONDS


class SessionIn(BaseModel):
    # Extra fields are kept so rule 4 can name the first one in its refusal.
    model_config = ConfigDict(extra="allow")
    type: str = "realtime"
    model: str | None = Field(default=None, min_length=1, max_length=200)


class ClientSecretIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expires_after: ExpiresAfterIn = Field(default_factory=ExpiresAfterIn)
    session: SessionIn = Field(default_factory=SessionIn)


async def bound_role(roles: RoleStore, tenant: str, model: str | None) -> Role:
    """Rule 2: the role ``model`` names in ``tenant`` (404 ``role_not_found``; 409
    ``role_ambiguous`` when several roles carry that name and none has it as id)."""
    if model is None:
        return await default_role(roles, tenant)
    role = await roles.get(tenant, model)
    if role is not None:
        return role
    named = [r for r in await roles.list(tenant) if r.name == model]
    if len(named) > 1:
        raise ApiError(
            409, "role_ambiguous", f"{len(named)} roles are named {model[:100]!r}; give its id"
        )
    if not named:
        raise ApiError(404, "role_not_found", f"no role {model[:100]!r}")
    return named[0]


def session_json(secret_id: str, role: Role) -> dict[str, Any]:
    """The ``session`` of the answer (``RealtimeSessionCreateResponse``): ``id`` is the client
    secret's (the voice session gets its own ``vs_…`` id when it opens), ``model`` the bound
    role's id, ``instructions`` and ``voice`` the role's."""
    session: dict[str, Any] = {
        "type": "realtime",
        "object": "realtime.session",
        "id": secret_id,
        "model": role.id,
        "instructions": role.instructions,
    }
    if role.voice is not None:
        session["audio"] = {"output": {"voice": role.voice}}
    return session


@router.post(CLIENT_SECRETS_PATH, dependencies=[allow(Policy.MEMBER)])
async def create_client_secret(
    who: Caller, services: ServicesDep, body: ClientSecretIn | None = None
) -> dict[str, Any]:
    body = body or ClientSecretIn()
    seconds = body.expires_after.seconds
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ApiError(
            422,
            "invalid_expiry",
            f"expires_after.seconds: {MIN_SECONDS}–{MAX_SECONDS} (default {DEFAULT_SECONDS})",
        )
    if body.session.type != "realtime":
        raise ApiError(
            422,
            "unsupported_session_type",
            f"session.type {body.session.type[:40]!r}: only 'realtime' sessions",
        )
    if body.session.model_extra:
        field = sorted(body.session.model_extra)[0]
        raise ApiError(
            422,
            "unsupported_session_field",
            f"session.{field[:40]}: not taken here; configure it on the connection",
        )
    role = await bound_role(services.roles, who.tenant, body.session.model)
    try:
        issued = await services.accounts.issue_client_secret(
            who, role_id=role.id, ttl=timedelta(seconds=seconds)
        )
    except AccountError as e:
        raise account_error(e) from e
    return {
        "value": issued.secret,
        "expires_at": int(issued.info.expires_at.timestamp()),
        "session": session_json(issued.info.id, role),
    }
