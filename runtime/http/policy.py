"""Who may use each HTTP route and each protocol message (SPEC ACC-3).

Rules
-----
1. Every route declares one ``Policy`` with ``dependencies=[allow(Policy.X)]``; a test walks the
   application's routes and fails for any without one (``policy_of``).
2. ``anonymous``: no token. Every other policy needs a valid bearer token (else 401
   ``unauthorized``): ``member`` any membership of the token's tenant, ``admin`` admin or owner,
   ``owner`` owner only (else 403 ``forbidden``); these need the token's ``api`` scope.
   ``metrics`` needs a token with the ``metrics`` scope (else 403). A client secret (``ek_…``)
   is not a token here: every route but ``anonymous`` ones refuses it with 403
   ``client_secret_not_allowed`` (``runtime.http.api.authenticated_caller``).
3. Who the caller is comes from the token only. Objects of another user or tenant are not
   looked up across that boundary: they answer 404 like unknown ones (the routes' own rule).
4. Write requests (any method but GET/HEAD/OPTIONS) of an authenticated caller count against
   ``write_requests_per_minute`` (``runtime/limits.py``): over it, 429 ``rate_limited`` with
   ``Retry-After``.
5. ``realtime``: a WebRTC call (``POST /v1/realtime/calls``, ``runtime.webrtc.calls``) authenticates
   as the realtime WebSocket does — a bearer token or a client secret — and counts as a write.
   The realtime WebSocket (served outside the HTTP app) and every client message on it are
   ``member``: ``session.start`` / ``session.resume`` authenticate, every later message acts
   as that caller in that session (``MESSAGE_POLICIES``). There a client secret proves its
   user too, for sessions of the one agent role it is bound to (``Principal.bound_role_id``).
6. ``telephony``: a phone provider's webhook (``/v1/telephony/…``) carries no token; it is
   authenticated by its signature (Twilio's ``X-Twilio-Signature`` with the account's auth
   token, ``runtime.telephony.twilio_auth``) and acts as the line's owner (``telephony_token``).
   Unconfigured: 404 ``telephony_disabled``; unsigned or badly signed: 403 ``invalid_signature``.
   A provider's calls are not the owner's writes: rule 4's limit does not apply (the session
   limit does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute

from accounts.model import Principal
from runtime.http.api import ApiError, authenticated_caller, services_of
from runtime.realtime.protocol import KNOWN_TYPES
from runtime.telephony.twilio_auth import telephony_caller


class Policy(StrEnum):
    ANONYMOUS = "anonymous"
    MEMBER = "member"
    ADMIN = "admin"
    OWNER = "owner"
    METRICS = "metrics"
    REALTIME = "realtime"
    TELEPHONY = "telephony"


_READS = frozenset({"GET", "HEAD", "OPTIONS"})

MESSAGE_POLICIES: dict[str, Policy] = {kind: Policy.MEMBER for kind in sorted(KNOWN_TYPES)}
"""Rule 5: the policy of every client message type of the realtime protocol."""
REALTIME_POLICY = Policy.MEMBER

FRAMEWORK_ROUTES: dict[str, Policy] = {
    "/openapi.json": Policy.ANONYMOUS,
    "/docs": Policy.ANONYMOUS,
    "/docs/oauth2-redirect": Policy.ANONYMOUS,
    "/redoc": Policy.ANONYMOUS,
    "": Policy.ANONYMOUS,
}
"""Routes the framework adds (the API's description) and the browser pages (mounted at ``/``,
path ``""``): static and public; the pages sign in with a token themselves."""


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


@dataclass(frozen=True, slots=True)
class PolicyCheck:
    """The dependency ``allow`` attaches: checks the caller against ``policy`` (rules 2, 4)."""

    policy: Policy

    async def __call__(self, request: Request) -> Principal | None:
        if self.policy is Policy.ANONYMOUS:
            return None
        services = services_of(request)
        if self.policy is Policy.TELEPHONY:
            request.state.principal = await telephony_caller(request)
            return request.state.principal  # type: ignore[no-any-return]
        if self.policy is Policy.REALTIME:
            header = request.headers.get("authorization")
            realtime = await services.authenticate_header(header, realtime=True)
            if realtime is None:
                raise ApiError(401, "unauthorized", "a valid bearer token is required")
            found = realtime
        else:
            found = await authenticated_caller(request)
        if self.policy is Policy.METRICS:
            if "metrics" not in found.scopes:
                raise forbidden("this route needs a token with the metrics scope")
        elif self.policy is not Policy.REALTIME:
            if "api" not in found.scopes:
                raise forbidden("this token may not use the API (its scopes: metrics)")
            if self.policy is Policy.ADMIN and not found.can("admin"):
                raise forbidden("only the tenant's admins and owners may do this")
            if self.policy is Policy.OWNER and not found.can("owner"):
                raise forbidden("only the tenant's owners may do this")
        if request.method not in _READS:
            wait = services.write_limiter.take((found.tenant, found.user), time.monotonic())
            if wait is not None:
                raise ApiError(
                    429,
                    "rate_limited",
                    f"more than {services.settings.write_requests_per_minute} write requests "
                    "per minute; retry later",
                    headers={"Retry-After": str(wait)},
                )
        request.state.principal = found
        return found


def allow(policy: Policy) -> Any:
    """``dependencies=[allow(Policy.ADMIN)]`` on a route: rule 1."""
    return Depends(PolicyCheck(policy))


def application_routes(routes: list[Any]) -> list[Any]:
    """Every route of a route table, with included routers' routes in place of the router
    (FastAPI ≥ 0.16x keeps an included router as one entry holding ``original_router``)."""
    found: list[Any] = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            found.extend(application_routes(list(included.routes)))
        else:
            found.append(route)
    return found


def policy_of(route: APIRoute) -> Policy | None:
    for dependency in route.dependencies:
        check = dependency.dependency
        if isinstance(check, PolicyCheck):
            return check.policy
    return None
