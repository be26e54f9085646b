"""MCP servers as tools (SPEC TOOL-6, OAI-2): the GA session's ``type: "mcp"`` tools.

Theory of operation
-------------------
Rule 1. ``McpServer`` is one declared server: its label (unique in a session), its URL, which
        of its tools are allowed (``allowed_tools``: names and/or the read-only ones; all when
        unset), which need the person's approval (``require_approval``: ``always`` — the GA
        default —, ``never``, or filters naming tools or the read-only ones) and the headers
        sent with every request (``authorization`` becomes a bearer header). ``check_server``
        holds its URL to an HTTP tool's rules (http(s), no credentials, a host on the tool
        allowlist): the runtime makes the requests, so a client can never point it at a
        service behind it.
Rule 2. ``McpConnection`` holds one MCP session over streamable HTTP (the ``mcp`` package's
        ``Client``) for a voice session. A task of its own opens it on first use and holds it
        until ``aclose`` (the package's task groups are entered and left in one task); a
        connection that broke is opened again by the next use. Every request is bounded by
        ``timeout_s``; cancelling a call cancels its request.
Rule 3. ``list_tools`` lists the server's tools (every page, at most ``MAX_TOOLS``) and keeps
        the allowed ones whose names a tool may have here (``tools.registry.NAME_PATTERN``);
        the others are left out and logged by name. Descriptions are cut at
        ``MAX_DESCRIPTION_CHARS``.
Rule 4. ``call`` runs one tool: the result's text parts joined (other parts named by type),
        cut at ``max_result_chars``. A result marked as an error, a JSON-RPC error, an HTTP
        failure or the timeout is ``McpCallFailed`` with the GA error type
        (``tool_execution_error``, ``protocol_error``, ``http_error``).
Rule 5. Headers reach the MCP server and nothing else: they are never logged, journaled,
        shown back in ``session.updated`` or stored for a resume. Logs name the label, the
        tool and the outcome; never arguments or results — the ``mcp`` package's own loggers
        (and its HTTP client's, which log URLs) are held at WARNING.
Rule 6. An admin may declare servers for a role (``tools.catalog``, at most
        ``MAX_SERVERS_PER_ROLE``): stored as ``server_record`` — its headers by the name of a
        tenant tool secret (``secret_headers``), never a value —, offered in every session of
        the role beside those the session declares (a session's server with a role server's
        label is left out), its header values read from the secrets when it connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tools.errors import InvalidTool, McpCallFailed
from tools.registry import (
    MAX_DESCRIPTION_CHARS,
    MAX_HEADERS,
    NAME_PATTERN,
    SecretHeader,
    check_host,
    check_secret_headers,
)

log = logging.getLogger(__name__)
for _name in ("mcp", "httpx2", "httpcore2"):
    # The package logs URLs at INFO and JSON-RPC messages (arguments, results) at DEBUG:
    # neither may reach the server's logs (Rule 5).
    logging.getLogger(_name).setLevel(logging.WARNING)

MAX_TOOLS = 64
"""The most tools kept from one server (Rule 3)."""
MAX_SERVERS_PER_ROLE = 8
"""The most MCP servers an admin declares for one role (Rule 6)."""
MAX_PAGES = 8
LABEL_PATTERN = NAME_PATTERN
ApprovalMode = Literal["always", "never"]


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """Tools by name and/or by their read-only hint (GA ``McpToolFilter``); empty: none."""

    names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, read_only: bool | None) -> bool:
        if self.names is None and self.read_only is None:
            return False
        if self.names is not None and name not in self.names:
            return False
        return self.read_only is None or bool(read_only) == self.read_only


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Which tools need the person's approval: ``mode`` for all, or ``always``/``never``
    filters (a tool neither filter names needs approval, as GA's default does)."""

    mode: ApprovalMode | None = "always"
    always: ToolFilter | None = None
    never: ToolFilter | None = None

    def requires(self, name: str, read_only: bool | None) -> bool:
        if self.mode is not None:
            return self.mode == "always"
        if self.always is not None and self.always.matches(name, read_only):
            return True
        return not (self.never is not None and self.never.matches(name, read_only))


@dataclass(frozen=True, slots=True)
class McpServer:
    """One declared MCP server (Rule 1): by a session (``headers`` with their values) or by an
    admin for a role (``secret_headers``: values are the tenant's tool secrets, Rule 6)."""

    label: str
    url: str
    allowed: ToolFilter | None = None
    """None: every tool of the server."""
    approval: ApprovalPolicy = ApprovalPolicy()
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    description: str = ""
    secret_headers: tuple[SecretHeader, ...] = ()

    def allows(self, name: str, read_only: bool | None) -> bool:
        return self.allowed is None or self.allowed.matches(name, read_only)


def check_server(server: McpServer, allowed_hosts: Iterable[str]) -> McpServer:
    """``server`` when its label and URL hold (Rule 1), else ``InvalidTool``/``HostNotAllowed``."""
    if not LABEL_PATTERN.match(server.label):
        raise InvalidTool(f"server_label must match {LABEL_PATTERN.pattern}")
    check_host(server.url, allowed_hosts)
    if len(server.headers) > MAX_HEADERS * 2:
        raise InvalidTool(f"at most {MAX_HEADERS * 2} headers")
    check_secret_headers(server.secret_headers)
    if len(server.description) > MAX_DESCRIPTION_CHARS:
        raise InvalidTool(f"description must be at most {MAX_DESCRIPTION_CHARS} characters")
    return server


def server_record(server: McpServer) -> dict[str, Any]:
    """A role's server as stored (Rule 6): every field but header values, which it never has."""
    if server.headers:
        raise InvalidTool("a role's MCP server names its headers' secrets, never their values")
    return {
        "kind": "mcp",
        "label": server.label,
        "url": server.url,
        "allowed": _filter_record(server.allowed),
        "approval": {"mode": server.approval.mode,
                     "always": _filter_record(server.approval.always),
                     "never": _filter_record(server.approval.never)},
        "description": server.description,
        "secret_headers": [{"header": h.header, "secret": h.secret, "prefix": h.prefix}
                           for h in server.secret_headers],
    }  # fmt: skip


def server_from_record(data: Mapping[str, Any]) -> McpServer:
    """``server_record``'s inverse."""
    approval = data["approval"]
    return McpServer(
        label=data["label"],
        url=data["url"],
        allowed=_filter_from(data["allowed"]),
        approval=ApprovalPolicy(approval["mode"], _filter_from(approval["always"]),
                                _filter_from(approval["never"])),
        description=data["description"],
        secret_headers=tuple(SecretHeader(h["header"], h["secret"], h.get("prefix", ""))
                             for h in data["secret_headers"]),
    )  # fmt: skip


def _filter_record(value: ToolFilter | None) -> dict[str, Any] | None:
    if value is None:
        return None
    names = sorted(value.names) if value.names is not None else None
    return {"names": names, "read_only": value.read_only}


def _filter_from(data: Mapping[str, Any] | None) -> ToolFilter | None:
    if data is None:
        return None
    names = data.get("names")
    return ToolFilter(frozenset(names) if names is not None else None, data.get("read_only"))


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """One tool as the server listed it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool | None = None
    annotations: Mapping[str, Any] | None = None


class McpConnection:
    """One MCP session with one server (Rules 2–4)."""

    def __init__(
        self, server: McpServer, *, timeout_s: float = 10.0, max_result_chars: int = 16_000
    ) -> None:
        self.server = server
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self._owner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Any] | None = None
        self._closing = asyncio.Event()

    async def list_tools(self) -> list[McpToolInfo]:
        """The allowed tools (Rule 3); ``McpCallFailed`` when the server cannot list them."""
        found: list[McpToolInfo] = []
        cursor: str | None = None
        async with self._bounded("tools/list"):
            client = await self._client()
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                for tool in page.tools:
                    info = _info(tool)
                    if not self.server.allows(info.name, info.read_only):
                        continue
                    if not NAME_PATTERN.match(info.name):
                        log.warning("mcp %s: tool %r is not offered (its name)",
                                    self.server.label, info.name[:64])  # fmt: skip
                        continue
                    found.append(info)
                cursor = page.next_cursor
                if cursor is None or len(found) >= MAX_TOOLS:
                    break
        return found[:MAX_TOOLS]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One call's text (Rule 4)."""
        async with self._bounded(name):
            client = await self._client()
            result = await client.call_tool(name, dict(arguments))
        text = _text(result.content)
        if len(text) > self.max_result_chars:
            text = text[: self.max_result_chars]
        if result.is_error:
            log.info("mcp %s: tool %s answered with an error", self.server.label, name)
            raise McpCallFailed(text or "the tool failed", "tool_execution_error")
        return text

    async def aclose(self) -> None:
        self._closing.set()
        owner, self._owner, self._ready = self._owner, None, None
        if owner is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(owner, self.timeout_s)

    # ------------------------------------------------------------ the session (Rule 2)

    @contextlib.asynccontextmanager
    async def _bounded(self, what: str) -> Any:
        """A request under the timeout, its failures as ``McpCallFailed`` (Rule 4)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                yield
        except McpCallFailed:
            raise
        except TimeoutError as e:
            log.warning("mcp %s: %s timed out", self.server.label, what)
            raise McpCallFailed(
                f"the MCP server {self.server.label!r} did not answer in time", "http_error", 504
            ) from e
        except Exception as e:
            failure = _failure(e, self.server.label)
            log.warning("mcp %s: %s failed: %s", self.server.label, what, failure.kind)
            if failure.kind != "protocol_error":  # the server answered: the session holds
                self._drop()
            raise failure from e

    async def _client(self) -> Any:
        if self._closing.is_set():
            raise McpCallFailed("the session's MCP connections are closed", "http_error")
        if self._owner is None or self._owner.done():
            ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._ready = ready
            self._owner = asyncio.create_task(self._own(ready), name=f"mcp:{self.server.label}")
        assert self._ready is not None
        return await asyncio.shield(self._ready)

    def _drop(self) -> None:
        """Forget a connection that failed: the next use opens a new one."""
        owner, self._owner, self._ready = self._owner, None, None
        if owner is not None and not owner.done():
            owner.cancel()

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        try:
            http = create_mcp_http_client(headers=dict(self.server.headers) or None)
            async with http, Client(streamable_http_client(self.server.url, http_client=http),
                                    read_timeout_seconds=self.timeout_s) as client:  # fmt: skip
                ready.set_result(client)
                await self._closing.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(_failure(e, self.server.label))
                ready.exception()  # retrieved here: nobody may be waiting any more
            if isinstance(e, asyncio.CancelledError):
                raise


def _info(tool: Any) -> McpToolInfo:
    annotations = tool.annotations
    read_only = annotations.read_only_hint if annotations is not None else None
    return McpToolInfo(
        name=str(tool.name),
        description=str(tool.description or "")[:MAX_DESCRIPTION_CHARS],
        input_schema=dict(tool.input_schema or {"type": "object"}),
        read_only=read_only,
        annotations=(
            annotations.model_dump(by_alias=True, exclude_none=True)
            if annotations is not None
            else None
        ),
    )


def _text(content: Iterable[Any]) -> str:
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(str(block.resource.text))
        else:
            parts.append(f"[{kind or 'content'}]")
    return "\n".join(parts)


def _leaf(e: BaseException) -> BaseException:
    """The first failure inside exception groups (the package's task groups raise them)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def _failure(e: BaseException, label: str) -> McpCallFailed:
    """A failure of the ``mcp`` package or of HTTP as the GA error type (Rule 4)."""
    from mcp.shared.exceptions import MCPError

    e = _leaf(e)
    if isinstance(e, McpCallFailed):
        return e
    if isinstance(e, MCPError):
        return McpCallFailed(
            f"the MCP server {label!r} refused the request: {e.message[:200]}",
            "protocol_error",
            e.code,
        )
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return McpCallFailed(
            f"the MCP server {label!r} answered HTTP {status}", "http_error", status
        )
    return McpCallFailed(f"the MCP server {label!r} cannot be reached", "http_error")


__all__ = [
    "MAX_TOOLS",
    "ApprovalPolicy",
    "McpConnection",
    "McpServer",
    "McpToolInfo",
    "ToolFilter",
    "check_server",
]
