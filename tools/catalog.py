"""Where a role's declared HTTP tools and MCP servers and the tenant's tool secrets are kept
(SPEC TOOL-1, TOOL-6).

Theory of operation
-------------------
1. ``ToolCatalog`` holds each role's HTTP tool declarations, by name. ``put`` checks a
   declaration with ``tools.registry.check_http_tool`` (its host on the allowlist the catalog
   was given) before it is kept; a name is unique per role and never shadows a built-in.
2. ``SecretStore`` (``tools.http_tool``) is read by the executor only; ``ToolSecrets`` adds
   what an admin does: set and delete a secret by name, and list the names. A secret's value is
   never returned by any method but ``get``, never logged, never part of a declaration.
3. Everything is scoped by tenant (and role for declarations). A session reads its role's
   declarations once, when it starts (``ToolRegistry.add_http`` each): a change applies to the
   sessions started after it.
4. Bounded: a role declares at most ``MAX_TOOLS_PER_ROLE`` tools counting the built-ins, a
   tenant keeps at most ``MAX_SECRETS_PER_TENANT`` secrets; past either, ``ToolLimitExceeded``.
5. This module holds the contract, the stored form of a declaration (``tool_record`` /
   ``tool_from_record``: every field, headers with their prefixes) and the in-memory
   implementations (tests, ``storage=memory``); the durable ones are on PostgreSQL
   (``tools/postgres_catalog.py``, secrets sealed at rest).
6. A role's MCP servers (``tools.mcp`` Rule 6) are kept beside its HTTP tools, by label, at
   most ``MAX_SERVERS_PER_ROLE``; their headers name secrets (``server_record``).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from tools.errors import InvalidTool, ToolLimitExceeded, UnknownTool
from tools.mcp import MAX_SERVERS_PER_ROLE, McpServer, check_server, server_record
from tools.registry import (
    BUILTIN_TOOLS,
    MAX_TOOLS_PER_ROLE,
    SECRET_NAME,
    HttpTool,
    HttpToolBounds,
    SecretHeader,
    check_http_tool,
)

MAX_SECRETS_PER_TENANT = 64
MAX_SECRET_CHARS = 4_096
MAX_DECLARED_TOOLS = MAX_TOOLS_PER_ROLE - len(BUILTIN_TOOLS)
"""HTTP tools one role may declare (rule 4: the built-ins count against the role's bound)."""


class ToolCatalog(Protocol):
    async def list(self, tenant: str, role_id: str) -> builtins.list[HttpTool]: ...

    async def get(self, tenant: str, role_id: str, name: str) -> HttpTool:
        """``UnknownTool`` when the role declares no such tool."""
        ...

    async def put(self, tenant: str, role_id: str, tool: HttpTool) -> HttpTool:
        """Declare or replace ``tool`` (checked first: ``InvalidTool``/``HostNotAllowed``)."""
        ...

    async def delete(self, tenant: str, role_id: str, name: str) -> bool: ...

    async def forget_role(self, tenant: str, role_id: str) -> int:
        """Remove everything of a deleted role (``DELETE /api/roles/{id}``); how many."""
        ...

    async def list_mcp(self, tenant: str, role_id: str) -> builtins.list[McpServer]:
        """The role's MCP servers (rule 6), in declaration order."""
        ...

    async def put_mcp(self, tenant: str, role_id: str, server: McpServer) -> McpServer:
        """Declare or replace the role's MCP server ``server.label`` (checked first)."""
        ...

    async def delete_mcp(self, tenant: str, role_id: str, label: str) -> bool: ...


class ToolSecrets(Protocol):
    async def get(self, tenant: str, name: str) -> str | None: ...

    async def set(self, tenant: str, name: str, value: str) -> None: ...

    async def delete(self, tenant: str, name: str) -> bool: ...

    async def names(self, tenant: str) -> builtins.list[str]: ...


def tool_record(tool: HttpTool) -> dict[str, Any]:
    """The declaration as stored (rule 5): JSON-ready, every field (``describe`` leaves out the
    headers' prefixes; this keeps them)."""
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "method": tool.method,
        "url_template": tool.url_template,
        "headers": [{"header": h.header, "secret": h.secret, "prefix": h.prefix}
                    for h in tool.headers],
        "timeout_s": tool.timeout_s,
        "max_response_bytes": tool.max_response_bytes,
        "cancellable": tool.cancellable,
        "target": tool.target,
    }  # fmt: skip


def tool_from_record(data: Mapping[str, Any]) -> HttpTool:
    """``tool_record``'s inverse."""
    return HttpTool(
        name=data["name"],
        description=data["description"],
        parameters=data["parameters"],
        method=data["method"],
        url_template=data["url_template"],
        headers=tuple(SecretHeader(h["header"], h["secret"], h.get("prefix", ""))
                      for h in data["headers"]),
        timeout_s=float(data["timeout_s"]),
        max_response_bytes=int(data["max_response_bytes"]),
        cancellable=bool(data["cancellable"]),
        target=data["target"],
    )  # fmt: skip


def check_secret(name: str, value: str) -> None:
    if not SECRET_NAME.match(name):
        raise InvalidTool(f"secret name must match {SECRET_NAME.pattern}")
    if not value or len(value) > MAX_SECRET_CHARS or any(c in value for c in "\r\n"):
        raise InvalidTool(f"a secret is one line of 1–{MAX_SECRET_CHARS} characters")


class InMemoryToolCatalog:
    def __init__(
        self,
        allowed_hosts: Iterable[str] = (),
        bounds: HttpToolBounds | None = None,
        *,
        max_tools: int = MAX_DECLARED_TOOLS,
    ) -> None:
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.bounds = bounds or HttpToolBounds()
        self.max_tools = max_tools
        self._tools: dict[tuple[str, str], dict[str, HttpTool]] = {}
        self._mcp: dict[tuple[str, str], dict[str, McpServer]] = {}

    async def list(self, tenant: str, role_id: str) -> builtins.list[HttpTool]:
        return list(self._tools.get((tenant, role_id), {}).values())

    async def get(self, tenant: str, role_id: str, name: str) -> HttpTool:
        tool = self._tools.get((tenant, role_id), {}).get(name)
        if tool is None:
            raise UnknownTool(f"no tool named {name!r}")
        return tool

    async def put(self, tenant: str, role_id: str, tool: HttpTool) -> HttpTool:
        check_http_tool(tool, self.allowed_hosts, self.bounds)  # built-in names too
        tools = self._tools.setdefault((tenant, role_id), {})
        if tool.name not in tools and len(tools) >= self.max_tools:
            raise ToolLimitExceeded(f"a role declares at most {self.max_tools} HTTP tools")
        tools[tool.name] = tool
        return tool

    async def delete(self, tenant: str, role_id: str, name: str) -> bool:
        return self._tools.get((tenant, role_id), {}).pop(name, None) is not None

    async def forget_role(self, tenant: str, role_id: str) -> int:
        servers = self._mcp.pop((tenant, role_id), {})
        return len(self._tools.pop((tenant, role_id), {})) + len(servers)

    async def list_mcp(self, tenant: str, role_id: str) -> builtins.list[McpServer]:
        return list(self._mcp.get((tenant, role_id), {}).values())

    async def put_mcp(self, tenant: str, role_id: str, server: McpServer) -> McpServer:
        server_record(check_server(server, self.allowed_hosts))
        servers = self._mcp.setdefault((tenant, role_id), {})
        if server.label not in servers and len(servers) >= MAX_SERVERS_PER_ROLE:
            raise ToolLimitExceeded(f"a role declares at most {MAX_SERVERS_PER_ROLE} MCP servers")
        servers[server.label] = server
        return server

    async def delete_mcp(self, tenant: str, role_id: str, label: str) -> bool:
        return self._mcp.get((tenant, role_id), {}).pop(label, None) is not None


class InMemoryToolSecrets:
    def __init__(self, *, max_secrets: int = MAX_SECRETS_PER_TENANT) -> None:
        self._secrets: dict[tuple[str, str], str] = {}
        self.max_secrets = max_secrets

    async def get(self, tenant: str, name: str) -> str | None:
        return self._secrets.get((tenant, name))

    async def set(self, tenant: str, name: str, value: str) -> None:
        check_secret(name, value)
        if (tenant, name) not in self._secrets and len(await self.names(tenant)) >= (
            self.max_secrets
        ):
            raise ToolLimitExceeded(f"a tenant keeps at most {self.max_secrets} secrets")
        self._secrets[(tenant, name)] = value

    async def delete(self, tenant: str, name: str) -> bool:
        return self._secrets.pop((tenant, name), None) is not None

    async def names(self, tenant: str) -> builtins.list[str]:
        return sorted(n for t, n in self._secrets if t == tenant)

    def __repr__(self) -> str:
        return f"InMemoryToolSecrets({len(self._secrets)} secrets)"
