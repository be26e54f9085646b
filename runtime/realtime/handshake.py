"""The opening of a realtime connection: who the client is, and what session it asks for.

Theory of operation
-------------------
Rule 1. Credentials. A GA client authenticates with ``Authorization: Bearer`` or the browser
        convention, the subprotocol ``openai-insecure-api-key.<token>``; a first message may
        carry its own token (``runtime.realtime.connection``). Credentials never travel in the
        URL: a query parameter that looks like one is refused (``token_in_url``, 1008).
Rule 2. The session asked for: a new thread with the role ``model`` names (id, then name; a GA
        client's unknown name falls back to the tenant's default, its SDK always sends some
        name), or the thread a start continues (``runtime.realtime.continuity``); a client
        secret's role wins, and a first message naming another is refused. The configuration is
        the role's, updated by the start's ``session`` (refused as a whole when invalid).
Rule 3. A store the handshake needs cannot be reached (``UNAVAILABLE``: PostgreSQL restarting):
        the client is told to retry, the process goes on.
"""

from __future__ import annotations

import uuid
from typing import Protocol

import asyncpg
from starlette.websockets import WebSocket

from accounts.errors import AccountsUnavailable
from journal.errors import JournalUnavailable
from journal.events import ThreadRef
from runtime.accounts import Principal
from runtime.database import DatabaseUnavailable
from runtime.errors import ProtocolError, Refused
from runtime.realtime.continuity import ContinuityServices, check_continuation
from runtime.realtime.protocol import CloseCode, ErrorCode, SessionStart
from runtime.realtime.session import initial_config
from runtime.realtime.session_config import SessionConfig, apply_update
from runtime.roles import Role
from storage.postgres import CONNECTION_ERRORS

_KEY_PROTOCOL = "openai-insecure-api-key."
_SECRET_QUERY_KEYS = ("resume_token", "token", "api_key", "access_token", "key")
UNAVAILABLE: tuple[type[BaseException], ...] = (
    AccountsUnavailable,
    JournalUnavailable,
    DatabaseUnavailable,
    *CONNECTION_ERRORS,
    asyncpg.InternalClientError,  # a pooled connection left confused by the server's restart
)
"""A store the handshake needs cannot be reached (e.g. PostgreSQL restarting): the client is
told to retry (``server_unavailable``, retryable, close 1013), the process goes on."""


class HandshakeServices(ContinuityServices, Protocol):
    """What the handshake takes of the services."""

    async def authenticate(self, token: str, *, realtime: bool = False) -> Principal | None: ...

    async def authenticate_header(
        self, header: str | None, *, realtime: bool = False
    ) -> Principal | None: ...

    async def role_for(self, principal: Principal, role_id: str | None) -> Role | None: ...


async def authenticate(
    services: HandshakeServices, ws: WebSocket, offered: list[str]
) -> Principal | None:
    """Rule 1: the principal of the upgrade request's credentials (None: it carried none)."""
    if any(key in ws.query_params for key in _SECRET_QUERY_KEYS):
        raise Refused(
            ErrorCode.TOKEN_IN_URL,
            "credentials are never sent in the URL",
            CloseCode.FORBIDDEN,
            "credentials in the URL",
        )
    principal = await services.authenticate_header(ws.headers.get("authorization"), realtime=True)
    key = next((p for p in offered if p.startswith(_KEY_PROTOCOL)), None)
    if principal is None and key is not None:
        principal = await services.authenticate(key.removeprefix(_KEY_PROTOCOL), realtime=True)
    return principal


async def opening(
    services: HandshakeServices, principal: Principal, start: SessionStart
) -> tuple[ThreadRef, Role, SessionConfig]:
    """Rule 2: the thread (new, or the one continued), role and configuration ``start`` asks
    for."""
    ga = not start.extensions.events  # a GA-only client (no extensions negotiated)
    bound = principal.bound_role_id
    model = start.model
    if bound is not None:
        # A client secret's role wins; a first message naming another is refused (GA
        # SDKs always send some model name, so theirs is not held against them).
        if model is not None and not ga and not principal.may_use_role(model):
            raise Refused(
                ErrorCode.ROLE_MISMATCH,
                "this client secret is bound to another role",
                CloseCode.FORBIDDEN,
                "role mismatch",
            )
        model = bound
    if start.requested_thread_id is None:
        role = await role_for(
            services,
            principal,
            model,
            strict=bound is not None or start.model is not None and not ga,
        )
        if role is None:
            raise Refused(
                ErrorCode.ROLE_NOT_FOUND,
                f"no role {model!r}",
                CloseCode.FORBIDDEN,
                "role not found",
            )
        thread = ThreadRef(principal.tenant, principal.user, f"th_{uuid.uuid4().hex}")
        await services.threads.create(thread.tenant, thread.user, thread.thread_id, role.id)
    else:
        thread, role = await check_continuation(
            services, principal, start.model_copy(update={"model": model})
        )
    config = initial_config(role, start.extensions)
    if start.session is not None:
        try:
            config = apply_update(
                config,
                start.session,
                event_id=start.event_id,
                tool_hosts=services.settings.tool_host_set(),
            )
        except ProtocolError as e:
            raise Refused(
                e.code,
                e.message,
                CloseCode.FORBIDDEN,
                "invalid session configuration",
                param=e.param,
                event_id=e.event_id,
            ) from None
    return thread, role, config


async def role_for(
    services: HandshakeServices, principal: Principal, model: str | None, *, strict: bool
) -> Role | None:
    """Rule 2: the role ``model`` names (id, then name); unknown names fall back to the tenant's
    default for GA clients (whose SDKs always send some model name) unless ``strict``."""
    if model:
        role = await services.roles.get(principal.tenant, model)
        if role is None:
            role = next(
                (r for r in await services.roles.list(principal.tenant) if r.name == model),
                None,
            )
        if role is not None or strict:
            return role
    return await services.role_for(principal, None)


__all__ = ["UNAVAILABLE", "authenticate", "opening", "role_for"]
