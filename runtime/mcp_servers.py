"""One session's MCP servers (SPEC TOOL-6; ``tools.mcp``), for its tool gate
(``runtime.tool_gate`` Rule 7).

Theory of operation
-------------------
Rule 1. Servers come from two places: the session's ``session.update`` (``set_session``: a new
        or changed one is added, a removed one dropped) and the role's admins (``add`` with
        ``origin="role"``, header values already read from the tenant's secrets). A label a
        role's server holds stays the role's: the session's is left out, logged.
Rule 2. Each server is listed once, as a GA ``mcp_list_tools`` item (added with no tools,
        ``mcp_list_tools.in_progress``, then ``.completed`` and the item done with the tools
        kept, or ``.failed`` and the item done empty). Its tools join the session's
        ``ToolRegistry`` (a tool whose schema is outside ``tools.schema``'s subset is gated
        with its arguments unchecked: the server checks them) and ``specs`` offers them;
        ``listed`` waits for the listings under way (each bounded by the MCP timeout).
Rule 3. ``run`` calls a tool on its server's connection; a failure is raised and kept, by call,
        for the call's ``mcp_call`` item (``error``; at most ``MAX_ERRORS_KEPT``).
Rule 4. ``close`` cancels the listings and closes every connection; a dropped server's
        connection is closed in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

from pipeline import events as ev
from pipeline.loop import retrieved
from plugins.contracts import ToolCall, ToolSpec
from tools.errors import InvalidTool, McpCallFailed, UnknownTool
from tools.http_tool import SecretStore
from tools.mcp import McpConnection, McpServer, McpToolInfo
from tools.registry import McpTool, ToolRegistry
from tools.schema import check_parameters_schema

log = logging.getLogger(__name__)

MAX_ERRORS_KEPT = 256
Origin = Literal["session", "role"]


@dataclasses.dataclass(eq=False)
class _Entry:
    """One server: its connection, the listing under way, its tools' specs once listed."""

    server: McpServer
    connection: McpConnection
    origin: Origin
    listing: asyncio.Task[None] | None = None
    specs: tuple[ToolSpec, ...] = ()


class McpServers:
    """The module's rules for one session."""

    def __init__(
        self,
        registry: ToolRegistry,
        send: Callable[[list[ev.ServerEvent]], None],
        *,
        timeout_s: float = 10.0,
        max_result_chars: int = 16_000,
    ) -> None:
        self.registry = registry
        self.send = send
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self._entries: dict[str, _Entry] = {}
        self._errors: OrderedDict[str, ev.McpError] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ servers (Rule 1)

    def set_session(self, servers: tuple[McpServer, ...]) -> None:
        """The session's servers after a ``session.update``."""
        wanted = {server.label: server for server in servers}
        for label, entry in list(self._entries.items()):
            server = wanted.get(label)
            if entry.origin == "session" and not (server and _same(server, entry.server)):
                self._drop(label)
        for label, server in wanted.items():
            if label not in self._entries:
                self.add(server, origin="session")
            elif self._entries[label].origin == "role":
                log.warning("mcp %s: the role declares this label; the session's is left out",
                            label)  # fmt: skip

    def add(self, server: McpServer, *, origin: Origin) -> None:
        if server.label in self._entries:
            self._drop(server.label)  # a role's server replaces a session's
        connection = McpConnection(
            server, timeout_s=self.timeout_s, max_result_chars=self.max_result_chars
        )
        entry = self._entries[server.label] = _Entry(server, connection, origin)
        entry.listing = asyncio.ensure_future(self._list(entry))
        entry.listing.add_done_callback(retrieved)

    def _drop(self, label: str) -> None:
        entry = self._entries.pop(label)
        self.registry.set_mcp_tools(label, [])
        if entry.listing is not None:
            entry.listing.cancel()
        closing = asyncio.ensure_future(entry.connection.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    # ------------------------------------------------------------ tools (Rule 2)

    async def _list(self, entry: _Entry) -> None:
        label = entry.server.label
        item = ev.McpListToolsItem(f"mcpl_{uuid.uuid4().hex[:24]}", label)
        self.send([ev.ItemAdded(item), ev.McpListToolsInProgress(item.id)])
        try:
            infos = await entry.connection.list_tools()
        except McpCallFailed as e:
            log.warning("mcp %s: the tools cannot be listed (%s)", label, e.kind)
            self.send([ev.McpListToolsFailed(item.id), ev.ItemDone(item)])
            return
        finally:
            entry.listing = None
        by_name = {info.name: info for info in infos}
        kept = self.registry.set_mcp_tools(label, [_tool(info, entry.server) for info in infos])
        entry.specs = tuple(
            ToolSpec(t.name, t.description, dict(by_name[t.name].input_schema)) for t in kept
        )
        listed = tuple(
            ev.McpListedTool(t.name, dict(by_name[t.name].input_schema), t.description or None,
                             by_name[t.name].annotations)
            for t in kept
        )  # fmt: skip
        log.info("mcp %s: %d tools offered", label, len(kept))
        self.send([ev.McpListToolsCompleted(item.id),
                   ev.ItemDone(dataclasses.replace(item, tools=listed))])  # fmt: skip

    async def listed(self) -> None:
        """Wait for the listings under way."""
        listings = [e.listing for e in self._entries.values() if e.listing is not None]
        if listings:
            await asyncio.wait([asyncio.shield(t) for t in listings])

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(s for e in self._entries.values() for s in e.specs)

    def server_of(self, name: str) -> str | None:
        """The label of the server whose tool ``name`` is, if it is one."""
        with contextlib.suppress(UnknownTool):
            tool = self.registry.get(name)
            if isinstance(tool, McpTool):
                return tool.server_label
        return None

    # ------------------------------------------------------------ calls (Rule 3)

    async def run(self, tool: McpTool, call: ToolCall) -> str:
        entry = self._entries.get(tool.server_label)
        if entry is None:
            failure = McpCallFailed("the MCP server was removed", "http_error")
        else:
            try:
                return await entry.connection.call(call.name, call.arguments)
            except McpCallFailed as e:
                failure = e
        self._errors[call.call_id] = ev.McpError(failure.kind, failure.message, failure.status)
        while len(self._errors) > MAX_ERRORS_KEPT:
            self._errors.popitem(last=False)
        raise failure

    def error(self, call_id: str) -> ev.McpError | None:
        """Why a call failed (None: it did not, or it was not run here)."""
        return self._errors.get(call_id)

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            if entry.listing is not None:
                entry.listing.cancel()
            await entry.connection.aclose()
        for closing in list(self._closing):
            with contextlib.suppress(BaseException):
                await closing


def _same(a: McpServer, b: McpServer) -> bool:
    return a == b and dict(a.headers) == dict(b.headers)


def _tool(info: McpToolInfo, server: McpServer) -> McpTool:
    """A server's tool as the registry holds it (Rule 2)."""
    try:
        parameters: dict[str, Any] = check_parameters_schema(info.input_schema)
    except InvalidTool:
        parameters = {"type": "object"}
    return McpTool(
        name=info.name, description=info.description, parameters=parameters,
        server_label=server.label, read_only=info.read_only,
        requires_approval=server.approval.requires(info.name, info.read_only),
    )  # fmt: skip


async def with_secret_headers(
    server: McpServer, secrets: SecretStore, tenant: str
) -> McpServer | None:
    """A role's server with its header values from the tenant's secrets (None: one is not
    stored; the server is not offered)."""
    headers: dict[str, str] = {}
    for header in server.secret_headers:
        value = await secrets.get(tenant, header.secret)
        if value is None:
            log.warning("mcp %s: secret %r is not stored; not offered", server.label, header.secret)
            return None
        headers[header.header] = header.prefix + value
    return dataclasses.replace(server, headers=headers)


__all__ = ["McpServers", "with_secret_headers"]
