"""Where a role's declared HTTP tools and the tenant's tool secrets are kept (SPEC TOOL-1).

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
4. This module holds the contract and the in-memory implementations (tests, ``storage=memory``);
   the durable ones are on PostgreSQL.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Protocol

from tools.errors import InvalidTool, UnknownTool
from tools.registry import (
    BUILTIN_TOOLS,
    MAX_TOOLS_PER_ROLE,
    SECRET_NAME,
    HttpTool,
    HttpToolBounds,
    check_http_tool,
)

MAX_SECRETS_PER_TENANT = 64
MAX_SECRET_CHARS = 4_096


class ToolCatalog(Protocol):
    async def list(self, tenant: str, role_id: str) -> builtins.list[HttpTool]: ...

    async def get(self, tenant: str, role_id: str, name: str) -> HttpTool:
        """``UnknownTool`` when the role declares no such tool."""
        ...

    async def put(self, tenant: str, role_id: str, tool: HttpTool) -> HttpTool:
        """Declare or replace ``tool`` (checked first: ``InvalidTool``/``HostNotAllowed``)."""
        ...

    async def delete(self, tenant: str, role_id: str, name: str) -> bool: ...


class ToolSecrets(Protocol):
    async def get(self, tenant: str, name: str) -> str | None: ...

    async def set(self, tenant: str, name: str, value: str) -> None: ...

    async def delete(self, tenant: str, name: str) -> bool: ...

    async def names(self, tenant: str) -> builtins.list[str]: ...


def check_secret(name: str, value: str) -> None:
    if not SECRET_NAME.match(name):
        raise InvalidTool(f"secret name must match {SECRET_NAME.pattern}")
    if not value or len(value) > MAX_SECRET_CHARS or any(c in value for c in "\r\n"):
        raise InvalidTool(f"a secret is one line of 1–{MAX_SECRET_CHARS} characters")


class InMemoryToolCatalog:
    def __init__(
        self, allowed_hosts: Iterable[str] = (), bounds: HttpToolBounds | None = None
    ) -> None:
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.bounds = bounds or HttpToolBounds()
        self._tools: dict[tuple[str, str], dict[str, HttpTool]] = {}

    async def list(self, tenant: str, role_id: str) -> builtins.list[HttpTool]:
        return list(self._tools.get((tenant, role_id), {}).values())

    async def get(self, tenant: str, role_id: str, name: str) -> HttpTool:
        tool = self._tools.get((tenant, role_id), {}).get(name)
        if tool is None:
            raise UnknownTool(f"no tool named {name!r}")
        return tool

    async def put(self, tenant: str, role_id: str, tool: HttpTool) -> HttpTool:
        check_http_tool(tool, self.allowed_hosts, self.bounds)
        if tool.name in BUILTIN_TOOLS:
            raise InvalidTool(f"{tool.name!r} is a built-in tool")
        tools = self._tools.setdefault((tenant, role_id), {})
        if tool.name not in tools and len(tools) >= MAX_TOOLS_PER_ROLE - len(BUILTIN_TOOLS):
            raise InvalidTool(f"a role has at most {MAX_TOOLS_PER_ROLE} tools")
        tools[tool.name] = tool
        return tool

    async def delete(self, tenant: str, role_id: str, name: str) -> bool:
        return self._tools.get((tenant, role_id), {}).pop(name, None) is not None


class InMemoryToolSecrets:
    def __init__(self) -> None:
        self._secrets: dict[tuple[str, str], str] = {}

    async def get(self, tenant: str, name: str) -> str | None:
        return self._secrets.get((tenant, name))

    async def set(self, tenant: str, name: str, value: str) -> None:
        check_secret(name, value)
        if (tenant, name) not in self._secrets and len(await self.names(tenant)) >= (
            MAX_SECRETS_PER_TENANT
        ):
            raise InvalidTool(f"a tenant has at most {MAX_SECRETS_PER_TENANT} secrets")
        self._secrets[(tenant, name)] = value

    async def delete(self, tenant: str, name: str) -> bool:
        return self._secrets.pop((tenant, name), None) is not None

    async def names(self, tenant: str) -> builtins.list[str]:
        return sorted(n for t, n in self._secrets if t == tenant)

    def __repr__(self) -> str:
        return f"InMemoryToolSecrets({len(self._secrets)} secrets)"
