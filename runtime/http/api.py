"""What every HTTP router shares: the error type, the authenticated caller, the services.

Feature routers (``runtime/http/<feature>.py``) import from here, never from ``runtime.app``
(which includes them), so there is no import cycle.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from accounts.model import is_client_secret
from runtime.accounts import Principal
from runtime.services import Services, bearer_token


class ApiError(HTTPException):
    """An HTTP error with a stable ``code``; rendered as ``{"code", "message"}``."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(
            status_code=status, detail={"code": code, "message": message}, headers=headers
        )


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def authenticated_caller(request: Request) -> Principal:
    """Who the request's bearer token proves: 401 ``unauthorized`` without a valid token,
    403 ``client_secret_not_allowed`` for a client secret (``ek_…``: it opens realtime
    sessions and nothing else, ``runtime/http/policy.py`` rule 2)."""
    header = request.headers.get("authorization")
    token = bearer_token(header)
    if token is not None and is_client_secret(token):
        raise ApiError(
            403,
            "client_secret_not_allowed",
            "a client secret (ek_…) only opens a realtime session; the HTTP API needs a token",
        )
    found = await services_of(request).authenticate_header(header)
    if found is None:
        raise ApiError(401, "unauthorized", "a valid bearer token is required")
    return found


async def current_principal(request: Request) -> Principal:
    """The caller, from the bearer token only (never from a body or query field): the one the
    route's policy check authenticated (``runtime/http/policy.py``), else authenticated here."""
    checked: Principal | None = getattr(request.state, "principal", None)
    if checked is not None:
        return checked
    return await authenticated_caller(request)


Caller = Annotated[Principal, Depends(current_principal)]
"""The authenticated (tenant, user) of a request."""

ServicesDep = Annotated[Services, Depends(services_of)]
"""The process's services, for routers that live outside ``create_app``."""
