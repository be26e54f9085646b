"""What every HTTP router shares: the error type, the authenticated caller, the services.

Feature routers (``runtime/api_<feature>.py``) import from here, never from ``runtime.app``
(which includes them), so there is no import cycle.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from runtime.accounts import Principal
from runtime.services import Services


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


async def current_principal(request: Request) -> Principal:
    """The caller, from the bearer token only (never from a body or query field): the one the
    route's policy check authenticated (``runtime/policy.py``), else authenticated here."""
    checked: Principal | None = getattr(request.state, "principal", None)
    if checked is not None:
        return checked
    found = await services_of(request).authenticate_header(request.headers.get("authorization"))
    if found is None:
        raise ApiError(401, "unauthorized", "a valid bearer token is required")
    return found


Caller = Annotated[Principal, Depends(current_principal)]
"""The authenticated (tenant, user) of a request."""

ServicesDep = Annotated[Services, Depends(services_of)]
"""The process's services, for routers that live outside ``create_app``."""
