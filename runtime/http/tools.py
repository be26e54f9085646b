"""HTTP API of tool permissions (SPEC TOOL-1…3): a role's tools, the tenant's tool secrets, a
role's rules and its grants.

Routes (``docs/http_api.md#tools``):

- ``GET    /api/roles/{role_id}/tools`` → ``{"role_id", "tools", "allowed_hosts"}``: the
  built-ins, then the declared HTTP tools (``tools.registry.describe``: secrets by name).
- ``PUT    /api/roles/{role_id}/tools/{name}`` (admins) → the declaration; ``DELETE`` → 204.
- ``GET    /api/roles/{role_id}/mcp_servers`` → ``{"role_id", "mcp_servers"}`` (the GA
  ``mcp`` fields, headers by secret name); ``PUT …/{label}`` (admins) → the server;
  ``DELETE`` → 204.
- ``GET    /api/tool-secrets`` (admins) → ``{"secrets": [{"name"}]}``; ``PUT …/{name}
  {value}`` → ``{"name"}``; ``DELETE …/{name}`` → 204.
- ``GET    /api/roles/{role_id}/rules?status=`` → ``{"role_id", "rules"}``; ``POST`` (admins)
  → 201 rule; ``PATCH …/rules/{rule_id} {expected_version, text?, status?}`` (admins) → rule.
- ``GET    /api/roles/{role_id}/grants?status=&limit=`` → ``{"role_id", "grants",
  "truncated"}``; ``POST`` → 201 grant; ``POST …/grants/{grant_id}/revoke`` → ``{"revoked"}``.

Rules
-----
1. Who acts is the bearer token's (tenant, user) only. The role must exist in the caller's
   tenant (else 404 ``role_not_found``); every store call names that tenant and role.
2. Tools: everyone reads the role's tools; admins declare and delete them. A declaration is
   checked by the catalog (``tools/registry.py`` rule 2): a bad one is 400 ``invalid_tool``,
   a host off ``OPENREALTIME_TOOL_HOSTS`` 400 ``host_not_allowed``. ``allowed_hosts`` is shown
   to admins (members get ``null``).
3. Secrets are admins' only, and write-only: no route ever answers a value, only names. A
   bad name or value is 400 ``invalid_secret``; nothing here logs either.
4. Rules: admins write them — a rule an admin adds is ``active``, its author that person; a
   PATCH names the version it read (``expected_version``): another is 409 ``stale_revision``
   with ``current_version`` and the rule as it is now (``current``). Members read the active
   rules only (no ``status``, or ``status=active``; any other 403 ``forbidden``): proposed and
   retired sentences are the admins' review work.
5. Grants: the role never sees them (this API is for people). Admins see, create and revoke
   every grant of the role. A member sees only the grants a member may answer for — granted by
   them (``granted_by`` person = the caller) or in a thread of theirs of this role — creates
   grants only for such a thread with scope ``once`` or ``thread`` (``lifetime`` or no thread:
   403 ``forbidden``; another's thread 404 ``thread_not_found``), derives only from a grant
   they see, and revokes only grants they see (another 404 ``grant_not_found``, like an
   unknown one). Every grant made here is granted by the calling person.
6. Revoking cascades (``tools/grants.py`` rule 4): the answer lists the ids revoked now — for a
   member, those among them the member sees (a derived grant of someone else's is revoked too,
   but not named).
7. Bounded: lists hold at most ``MAX_GRANTS_LISTED`` grants (the newest, oldest first, with
   ``truncated``); every body field has a length limit; the stores bound the counts (409
   ``tool_limit_exceeded``). A store that cannot be reached is 503 ``tools_unavailable``.
8. MCP servers: everyone reads the role's; admins declare and delete them. The URL obeys the
   HTTP tools' allowlist (400 ``host_not_allowed``), headers name secrets (rule 3), a role
   has at most ``tools.mcp.MAX_SERVERS_PER_ROLE`` (409 ``tool_limit_exceeded``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from runtime.accounts import Principal
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden
from runtime.http.role_memory import _role as role_in_tenant
from runtime.realtime.protocol_tools import (
    McpApprovalFilterIn,
    McpToolFilterIn,
    allowed_filter,
    approval_policy,
    mcp_tool_json,
)
from runtime.services import Services
from tools.capability import (
    ANY_TARGET,
    MAX_ACTION_CHARS,
    MAX_TARGET_CHARS,
    Capability,
)
from tools.catalog import MAX_SECRET_CHARS
from tools.errors import (
    GrantNotFound,
    InvalidArguments,
    InvalidGrant,
    InvalidRule,
    InvalidTool,
    RuleNotFound,
    RuleVersionConflict,
    ToolError,
    ToolLimitExceeded,
    ToolsUnavailable,
    UnknownTool,
)
from tools.grants import Effect, Grant, GrantedBy, GrantStatus, NewGrant, Scope
from tools.mcp import McpServer
from tools.registry import (
    BUILTIN_TOOLS,
    MAX_DESCRIPTION_CHARS,
    MAX_HEADERS,
    BuiltinTool,
    HttpTool,
    SecretHeader,
    describe,
)
from tools.rules import MAX_RULE_CHARS, Author, Rule, RuleStatus

router = APIRouter(tags=["tools"])

MAX_GRANTS_LISTED = 1_000
"""Most grants one listing answers (rule 7)."""
MAX_URL_CHARS = 2_000
_NAME = Annotated[str, Field(min_length=1, max_length=64)]
_ID = Annotated[str, Field(min_length=1, max_length=200)]

_STATUS: tuple[tuple[type[ToolError], int], ...] = (
    (InvalidTool, 400),
    (InvalidArguments, 422),
    (UnknownTool, 404),
    (InvalidGrant, 422),
    (GrantNotFound, 404),
    (InvalidRule, 422),
    (RuleNotFound, 404),
    (ToolLimitExceeded, 409),
    (ToolsUnavailable, 503),
)


@contextmanager
def _tool_errors() -> Iterator[None]:
    """Tools errors inside the block become their HTTP error (stable code; this package's
    messages never hold a secret, a call's arguments or a response body)."""
    try:
        yield
    except RuleVersionConflict as e:
        error = ApiError(409, "stale_revision", str(e))
        assert isinstance(error.detail, dict)
        error.detail["current_version"] = e.current.version
        error.detail["current"] = rule_json(e.current)
        raise error from e
    except ToolError as e:
        status = next((s for t, s in _STATUS if isinstance(e, t)), 500)
        raise ApiError(status, e.code, e.message) from e


# ------------------------------------------------------------------ tools (rule 2)


class SecretHeaderIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    header: str = Field(min_length=1, max_length=64)
    secret: str = Field(min_length=1, max_length=64)
    prefix: str = Field(default="", max_length=64)


class ToolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    parameters: dict[str, Any]
    method: str = Field(min_length=1, max_length=10)
    url_template: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    headers: list[SecretHeaderIn] = Field(default_factory=list, max_length=MAX_HEADERS)
    timeout_s: float = Field(default=10.0, gt=0)
    max_response_bytes: int = Field(default=65_536, gt=0)
    cancellable: bool = True
    target: str | None = Field(default=None, min_length=1, max_length=64)

    def tool(self, name: str) -> HttpTool:
        return HttpTool(
            name=name, description=self.description, parameters=self.parameters,
            method=self.method.upper(), url_template=self.url_template,
            headers=tuple(SecretHeader(h.header, h.secret, h.prefix) for h in self.headers),
            timeout_s=self.timeout_s, max_response_bytes=self.max_response_bytes,
            cancellable=self.cancellable, target=self.target,
        )  # fmt: skip


@router.get("/api/roles/{role_id}/tools", dependencies=[allow(Policy.MEMBER)])
async def list_tools(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """The role's tools: the built-ins, then its HTTP tools in declaration order."""
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        declared = await services.tool_catalog.list(who.tenant, role.id)
    builtins = [describe(BuiltinTool(name=name)) for name in BUILTIN_TOOLS]
    hosts = services.settings.tool_host_set()
    return {
        "role_id": role.id,
        "tools": builtins + [describe(t) for t in declared],
        "allowed_hosts": sorted(hosts) if who.can("admin") else None,
    }


@router.put("/api/roles/{role_id}/tools/{name}", dependencies=[allow(Policy.ADMIN)])
async def put_tool(
    role_id: str, name: str, body: ToolIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Declare or replace the HTTP tool ``name`` (checked first)."""
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        saved = await services.tool_catalog.put(who.tenant, role.id, body.tool(name))
    return describe(saved)


@router.delete(
    "/api/roles/{role_id}/tools/{name}", status_code=204, dependencies=[allow(Policy.ADMIN)]
)
async def delete_tool(role_id: str, name: str, who: Caller, services: ServicesDep) -> Response:
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        deleted = await services.tool_catalog.delete(who.tenant, role.id, name)
    if not deleted:
        raise ApiError(404, "unknown_tool", f"the role declares no tool {name[:64]!r}")
    return Response(status_code=204)


# ------------------------------------------------------------------ MCP servers (rule 8)


class McpServerIn(BaseModel):
    """A role's MCP server (``tools.mcp`` Rule 6): the GA ``mcp`` tool's fields, with headers
    naming the tenant's tool secrets instead of values."""

    model_config = ConfigDict(extra="forbid")
    server_url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    server_description: str = Field(default="", max_length=MAX_DESCRIPTION_CHARS)
    allowed_tools: list[_NAME] | McpToolFilterIn | None = Field(
        default=None, union_mode="left_to_right"
    )
    require_approval: Literal["always", "never"] | McpApprovalFilterIn | None = None
    headers: list[SecretHeaderIn] = Field(default_factory=list, max_length=MAX_HEADERS)

    def server(self, label: str) -> McpServer:
        return McpServer(
            label=label, url=self.server_url, description=self.server_description,
            allowed=allowed_filter(self.allowed_tools),
            approval=approval_policy(self.require_approval),
            secret_headers=tuple(SecretHeader(h.header, h.secret, h.prefix)
                                 for h in self.headers),
        )  # fmt: skip


def mcp_server_json(server: McpServer) -> dict[str, Any]:
    """A role's server as the API shows it: the GA fields, headers by secret name."""
    return mcp_tool_json(server) | {
        "headers": [{"header": h.header, "secret": h.secret} for h in server.secret_headers]
    }


@router.get("/api/roles/{role_id}/mcp_servers", dependencies=[allow(Policy.MEMBER)])
async def list_mcp_servers(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        servers = await services.tool_catalog.list_mcp(who.tenant, role.id)
    return {"role_id": role.id, "mcp_servers": [mcp_server_json(s) for s in servers]}


@router.put("/api/roles/{role_id}/mcp_servers/{label}", dependencies=[allow(Policy.ADMIN)])
async def put_mcp_server(
    role_id: str, label: str, body: McpServerIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Declare or replace the role's MCP server ``label`` (checked first, like an HTTP tool's
    URL); sessions started after it offer its tools."""
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        saved = await services.tool_catalog.put_mcp(who.tenant, role.id, body.server(label))
    return mcp_server_json(saved)


@router.delete(
    "/api/roles/{role_id}/mcp_servers/{label}",
    status_code=204,
    dependencies=[allow(Policy.ADMIN)],
)
async def delete_mcp_server(
    role_id: str, label: str, who: Caller, services: ServicesDep
) -> Response:
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        deleted = await services.tool_catalog.delete_mcp(who.tenant, role.id, label)
    if not deleted:
        raise ApiError(404, "unknown_tool", f"the role declares no MCP server {label[:64]!r}")
    return Response(status_code=204)


# ------------------------------------------------------------------ secrets (rule 3)


class SecretIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str = Field(min_length=1, max_length=MAX_SECRET_CHARS)

    def __repr__(self) -> str:  # never a value in a traceback or a log line
        return "SecretIn(value=…)"


@router.get("/api/tool-secrets", dependencies=[allow(Policy.ADMIN)])
async def list_secrets(who: Caller, services: ServicesDep) -> dict[str, Any]:
    """The tenant's secret names (never a value)."""
    with _tool_errors():
        names = await services.tool_secrets.names(who.tenant)
    return {"secrets": [{"name": n} for n in names]}


@router.put("/api/tool-secrets/{name}", dependencies=[allow(Policy.ADMIN)])
async def put_secret(name: str, body: SecretIn, who: Caller, services: ServicesDep) -> Any:
    """Set or replace the secret ``name`` (the answer names it, never its value)."""
    with _tool_errors():
        try:
            await services.tool_secrets.set(who.tenant, name, body.value)
        except InvalidTool as e:
            raise ApiError(400, "invalid_secret", e.message) from e
    return {"name": name}


@router.delete("/api/tool-secrets/{name}", status_code=204, dependencies=[allow(Policy.ADMIN)])
async def delete_secret(name: str, who: Caller, services: ServicesDep) -> Response:
    with _tool_errors():
        deleted = await services.tool_secrets.delete(who.tenant, name)
    if not deleted:
        raise ApiError(404, "secret_not_found", f"no secret {name[:64]!r}")
    return Response(status_code=204)


# ------------------------------------------------------------------ rules (rule 4)


def rule_json(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "role_id": rule.role_id,
        "text": rule.text,
        "author": {"kind": rule.author.kind, "id": rule.author.id},
        "status": rule.status,
        "version": rule.version,
        "created_at": rule.created_at.isoformat(),
        "updated_at": rule.updated_at.isoformat(),
    }


class RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=MAX_RULE_CHARS * 2)


class RulePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_version: int = Field(ge=1, le=2**31 - 1)
    text: str | None = Field(default=None, min_length=1, max_length=MAX_RULE_CHARS * 2)
    status: RuleStatus | None = None


@router.get("/api/roles/{role_id}/rules", dependencies=[allow(Policy.MEMBER)])
async def list_rules(
    role_id: str, who: Caller, services: ServicesDep, status: RuleStatus | None = None
) -> dict[str, Any]:
    """The role's rules in creation order (members: the active ones only)."""
    role = await role_in_tenant(services, who, role_id)
    if not who.can("admin"):
        if status not in (None, "active"):
            raise forbidden("members read the active rules only")
        status = "active"
    with _tool_errors():
        rules = await services.rules.list(who.tenant, role.id, status=status)
    return {"role_id": role.id, "rules": [rule_json(r) for r in rules]}


@router.post("/api/roles/{role_id}/rules", status_code=201, dependencies=[allow(Policy.ADMIN)])
async def create_rule(
    role_id: str, body: RuleIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """A rule by the calling person: active at once."""
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        rule = await services.rules.create(
            who.tenant, role.id, body.text, Author("person", who.user)
        )
    return rule_json(rule)


@router.patch("/api/roles/{role_id}/rules/{rule_id}", dependencies=[allow(Policy.ADMIN)])
async def update_rule(
    role_id: str, rule_id: str, body: RulePatch, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Change the text and/or status against the version read (409 ``stale_revision``)."""
    role = await role_in_tenant(services, who, role_id)
    if body.text is None and body.status is None:
        raise ApiError(422, "invalid_rule", "a change names a text, a status or both")
    with _tool_errors():
        rule = await services.rules.update(
            who.tenant, role.id, rule_id, expected_version=body.expected_version,
            by=Author("person", who.user), text=body.text, status=body.status,
        )  # fmt: skip
    return rule_json(rule)


# ------------------------------------------------------------------ grants (rules 5, 6)


def grant_json(grant: Grant) -> dict[str, Any]:
    arguments = grant.capability.arguments
    return {
        "id": grant.id,
        "role_id": grant.role_id,
        "action": grant.capability.action,
        "target": grant.capability.target,
        "arguments": None if arguments is None else dict(arguments),
        "effect": grant.effect,
        "scope": grant.scope,
        "thread_id": grant.thread_id,
        "granted_by": {"kind": grant.granted_by.kind, "id": grant.granted_by.id},
        "parent": grant.parent,
        "status": grant.status,
        "created_at": grant.created_at.isoformat(),
    }


class GrantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: str = Field(min_length=1, max_length=MAX_ACTION_CHARS)
    target: str = Field(default=ANY_TARGET, min_length=1, max_length=MAX_TARGET_CHARS)
    arguments: dict[str, Any] | None = None
    """The exact arguments the grant pins; null: any arguments."""
    effect: Effect
    scope: Scope
    thread_id: _ID | None = None
    parent: _ID | None = None


class GrantVisibility:
    """Which of a role's grants a caller may see (rule 5): all for admins; for a member those
    granted by them or in a thread of theirs of this role (each thread looked up once)."""

    def __init__(self, services: Services, who: Principal, role_id: str) -> None:
        self.services = services
        self.who = who
        self.role_id = role_id
        self._threads: dict[str, bool] = {}

    async def own_thread(self, thread_id: str) -> bool:
        known = self._threads.get(thread_id)
        if known is None:
            thread = await self.services.threads.get(self.who.tenant, self.who.user, thread_id)
            known = thread is not None and thread.role_id == self.role_id
            self._threads[thread_id] = known
        return known

    async def sees(self, grant: Grant) -> bool:
        if self.who.can("admin"):
            return True
        if grant.granted_by == GrantedBy("person", self.who.user):
            return True
        return grant.thread_id is not None and await self.own_thread(grant.thread_id)

    async def visible(self, grants: list[Grant]) -> list[Grant]:
        return [g for g in grants if await self.sees(g)]


@router.get("/api/roles/{role_id}/grants", dependencies=[allow(Policy.MEMBER)])
async def list_grants(
    role_id: str,
    who: Caller,
    services: ServicesDep,
    status: GrantStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_GRANTS_LISTED)] = MAX_GRANTS_LISTED,
) -> dict[str, Any]:
    """The role's grants the caller sees, in creation order (the newest ``limit``)."""
    role = await role_in_tenant(services, who, role_id)
    with _tool_errors():
        grants = await services.grants.list(who.tenant, role.id, status=status)
    shown = await GrantVisibility(services, who, role.id).visible(grants)
    return {
        "role_id": role.id,
        "grants": [grant_json(g) for g in shown[-limit:]],
        "truncated": len(shown) > limit,
    }


async def _check_member_grant(
    services: Services, who: Principal, role_id: str, body: GrantIn, seen: GrantVisibility
) -> None:
    """Rule 5: what a member may grant."""
    if body.thread_id is None or body.scope == "lifetime":
        raise forbidden("members grant for one of their own threads, scope once or thread")
    if not await seen.own_thread(body.thread_id):
        raise ApiError(404, "thread_not_found", f"no thread {body.thread_id}")
    if body.parent is not None:
        try:
            parent = await services.grants.get(who.tenant, role_id, body.parent)
        except GrantNotFound:
            parent = None
        if parent is None or not await seen.sees(parent):
            raise ApiError(422, "invalid_grant", "parent must be an active grant you can see")


@router.post("/api/roles/{role_id}/grants", status_code=201, dependencies=[allow(Policy.MEMBER)])
async def create_grant(
    role_id: str, body: GrantIn, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """A grant by the calling person (admins: any; members: rule 5)."""
    role = await role_in_tenant(services, who, role_id)
    seen = GrantVisibility(services, who, role.id)
    with _tool_errors():
        if not who.can("admin"):
            await _check_member_grant(services, who, role.id, body, seen)
        new = NewGrant(
            capability=Capability(body.action, body.target, body.arguments),
            effect=body.effect, scope=body.scope, granted_by=GrantedBy("person", who.user),
            thread_id=body.thread_id, parent=body.parent,
        )  # fmt: skip
        grant = await services.grants.create(who.tenant, role.id, new)
    return grant_json(grant)


@router.post("/api/roles/{role_id}/grants/{grant_id}/revoke", dependencies=[allow(Policy.MEMBER)])
async def revoke_grant(
    role_id: str, grant_id: str, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """Revoke the grant and every grant derived from it (rule 6): the ids revoked now."""
    role = await role_in_tenant(services, who, role_id)
    seen = GrantVisibility(services, who, role.id)
    with _tool_errors():
        grant = await services.grants.get(who.tenant, role.id, grant_id)
        if not await seen.sees(grant):
            raise GrantNotFound(f"no grant {grant_id}")
        revoked = await services.grants.revoke(who.tenant, role.id, grant_id)
        if not who.can("admin"):
            everything = await services.grants.list(who.tenant, role.id, status="revoked")
            mine = {g.id for g in await seen.visible(everything)}
            revoked = [g for g in revoked if g in mine]
    return {"revoked": revoked}
