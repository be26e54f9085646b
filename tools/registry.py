"""Tool declarations (SPEC TOOL-1): built-ins, HTTP tools per role, client tools.

Theory of operation
-------------------
1. Four kinds, one namespace per role: the built-ins (``BUILTIN_TOOLS``, by name only here;
   their code lives with their packages), HTTP tools an admin declares for a role, client
   tools the connected client declares for its connection, and the tools of the MCP servers
   it declares (``tools.mcp``). A name is ``NAME_PATTERN`` and is unique: no declaration
   shadows a built-in or another declaration (an MCP tool that would is left out).
2. Every declaration is checked when it is made, never when it is called: its parameters are a
   schema of ``tools.schema``'s subset; a ``target`` names a required string, integer or number
   parameter; an HTTP tool's URL template is http(s) with a literal host on the allowlist (the
   placeholders may only stand in the path and query), its method one of ``METHODS``, its
   timeout and response limit within ``HttpToolBounds``, and its secret headers name secrets
   (the values are fetched by the executor and are never part of a declaration).
3. ``ToolRegistry.capability_of(name, arguments)`` turns a call into a ``Capability``: the
   action is the tool's name, the target the declared argument's value as text (or ``"*"``),
   the arguments the call's exact arguments, after they are checked against the schema.
4. ``describe`` is what the HTTP API shows of a tool: everything declared, secrets by name.
5. ``confirm`` (optional) is how the agent names a call when it asks the person about it: a
   short phrase whose ``{name}`` placeholders are the call's arguments ("cancel order
   {order_id}" → "May I cancel order A10086?"); each placeholder must be a parameter.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from tools.capability import ANY_TARGET, MAX_TARGET_CHARS, Capability
from tools.errors import HostNotAllowed, InvalidArguments, InvalidTool, UnknownTool
from tools.schema import check_arguments, check_parameters_schema

BUILTIN_TOOLS = ("knowledge_search", "confide", "end_conversation")
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MAX_DESCRIPTION_CHARS = 1_024
MAX_HEADERS = 8
MAX_TOOLS_PER_ROLE = 64
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,64}$")
SECRET_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
TARGET_TYPES = ("string", "integer", "number")
ToolKind = Literal["builtin", "http", "client", "mcp"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpToolBounds:
    """What an admin may declare (rule 2)."""

    max_timeout_s: float = 30.0
    max_response_bytes: int = 1_048_576


@dataclass(frozen=True, slots=True)
class SecretHeader:
    """A request header whose value is the stored secret ``secret`` (after ``prefix``)."""

    header: str
    secret: str
    prefix: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltinTool:
    name: str
    cancellable: bool = True
    kind: ToolKind = "builtin"
    target: str | None = None
    parameters: Mapping[str, Any] | None = None
    """None: the built-in's own code checks its arguments."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpTool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    method: str
    url_template: str
    headers: tuple[SecretHeader, ...] = ()
    timeout_s: float = 10.0
    max_response_bytes: int = 65_536
    cancellable: bool = True
    """An interruption may cancel a running call (SPEC TOOL-5)."""
    target: str | None = None
    confirm: str | None = None
    """How the agent names a call when it asks the person (rule 5)."""
    kind: ToolKind = "http"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    cancellable: bool = True
    target: str | None = None
    confirm: str | None = None
    """How the agent names a call when it asks the person (rule 5)."""
    kind: ToolKind = "client"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpTool:
    """A tool of an MCP server the session declared (``tools.mcp``): run by the runtime on
    that server. ``parameters`` is its schema when it is of ``tools.schema``'s subset, else
    ``{"type": "object"}`` (the server checks its own arguments)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    server_label: str
    read_only: bool | None = None
    requires_approval: bool = True
    """The declaration's ``require_approval`` covers it: only the person's grant runs it."""
    cancellable: bool = True
    target: str | None = None
    confirm: str | None = None
    kind: ToolKind = "mcp"


Tool = BuiltinTool | HttpTool | ClientTool | McpTool


MAX_CONFIRM_CHARS = 200


def _check_confirm(confirm: str | None, parameters: Mapping[str, Any]) -> None:
    """Rule 5."""
    if confirm is None:
        return
    if not confirm.strip() or len(confirm) > MAX_CONFIRM_CHARS or "\n" in confirm:
        raise InvalidTool(f"confirm must be one line of 1–{MAX_CONFIRM_CHARS} characters")
    properties = parameters.get("properties", {})
    try:
        fields = template_fields(confirm)
    except InvalidTool as e:
        raise InvalidTool("confirm placeholders must be plain {name}") from e
    unknown = [f for f in fields if f not in properties]
    if unknown:
        raise InvalidTool(f"confirm names {unknown[0]!r}, which is no parameter")


def _check_common(name: str, description: str, parameters: Any, target: str | None) -> None:
    if not NAME_PATTERN.match(name):
        raise InvalidTool(f"tool name must match {NAME_PATTERN.pattern}")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidTool(f"description must be at most {MAX_DESCRIPTION_CHARS} characters")
    schema = check_parameters_schema(parameters)
    if target is not None:
        prop = schema.get("properties", {}).get(target)
        if prop is None or target not in schema.get("required", []):
            raise InvalidTool(f"target {target!r} must name a required parameter")
        if prop.get("type") not in TARGET_TYPES:
            raise InvalidTool(f"target {target!r} must be a {', '.join(TARGET_TYPES)} parameter")


def template_fields(url_template: str) -> list[str]:
    """The ``{name}`` placeholders of a URL template, in order."""
    try:
        parsed = list(string.Formatter().parse(url_template))
    except ValueError as e:
        raise InvalidTool("url_template has an unbalanced brace") from e
    fields: list[str] = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise InvalidTool("url_template placeholders must be plain {name}")
        fields.append(name)
    return fields


def check_host(url: str, allowed_hosts: Iterable[str]) -> str:
    """The URL's host when its scheme is http(s) and its host is allowed, else an error."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise InvalidTool("url must be http or https")
    host = (parts.hostname or "").lower()
    if parts.username is not None or parts.password is not None:
        raise InvalidTool("url must not carry credentials")
    if not host or host not in {h.lower() for h in allowed_hosts}:
        raise HostNotAllowed(f"host {host or '(none)'!r} is not on the allowlist")
    return host


def check_http_tool(
    tool: HttpTool, allowed_hosts: Iterable[str], bounds: HttpToolBounds | None = None
) -> HttpTool:
    """``tool`` when its declaration holds (rule 2), else ``InvalidTool``/``HostNotAllowed``."""
    bounds = bounds or HttpToolBounds()
    _check_common(tool.name, tool.description, tool.parameters, tool.target)
    if tool.name in BUILTIN_TOOLS:
        raise InvalidTool(f"{tool.name!r} is a built-in tool")
    if tool.method not in METHODS:
        raise InvalidTool(f"method must be one of {', '.join(METHODS)}")
    fields = template_fields(tool.url_template)
    properties = tool.parameters.get("properties", {})
    unknown = [f for f in fields if f not in properties]
    if unknown:
        raise InvalidTool(f"url_template names {unknown[0]!r}, which is no parameter")
    authority = tool.url_template.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    if "{" in authority or "}" in authority or "://" not in tool.url_template:
        raise InvalidTool("url_template must start with a literal scheme and host")
    check_host(tool.url_template, allowed_hosts)
    _check_confirm(tool.confirm, tool.parameters)
    if not 0 < tool.timeout_s <= bounds.max_timeout_s:
        raise InvalidTool(f"timeout_s must be in (0, {bounds.max_timeout_s:g}]")
    if not 0 < tool.max_response_bytes <= bounds.max_response_bytes:
        raise InvalidTool(f"max_response_bytes must be in (0, {bounds.max_response_bytes}]")
    check_secret_headers(tool.headers)
    return tool


def check_secret_headers(headers: tuple[SecretHeader, ...]) -> None:
    """At most ``MAX_HEADERS``, each a header name, a secret name and a one-line prefix."""
    if len(headers) > MAX_HEADERS:
        raise InvalidTool(f"at most {MAX_HEADERS} secret headers")
    for header in headers:
        if not HEADER_NAME.match(header.header) or not SECRET_NAME.match(header.secret):
            raise InvalidTool("a secret header needs a header name and a secret name")
        if any(c in header.prefix for c in "\r\n") or len(header.prefix) > 64:
            raise InvalidTool("a secret header's prefix must be one short line")


def check_client_tool(tool: ClientTool) -> ClientTool:
    _check_common(tool.name, tool.description, tool.parameters, tool.target)
    if tool.name in BUILTIN_TOOLS:
        raise InvalidTool(f"{tool.name!r} is a built-in tool")
    _check_confirm(tool.confirm, tool.parameters)
    return tool


def describe(tool: Tool) -> dict[str, Any]:
    """The API's view of a declaration (rule 4): secrets by name, never a value."""
    out: dict[str, Any] = {
        "name": tool.name,
        "kind": tool.kind,
        "cancellable": tool.cancellable,
        "target": tool.target,
    }
    if not isinstance(tool, BuiltinTool):
        out["description"] = tool.description
        out["parameters"] = dict(tool.parameters)
        out["confirm"] = tool.confirm
    if isinstance(tool, McpTool):
        out["server_label"] = tool.server_label
    if isinstance(tool, HttpTool):
        out |= {
            "method": tool.method,
            "url_template": tool.url_template,
            "headers": [{"header": h.header, "secret": h.secret} for h in tool.headers],
            "timeout_s": tool.timeout_s,
            "max_response_bytes": tool.max_response_bytes,
        }
    return out


@dataclass
class ToolRegistry:
    """One role's tools in one connection: built-ins, the role's HTTP tools, and the client's."""

    allowed_hosts: frozenset[str]
    bounds: HttpToolBounds = field(default_factory=HttpToolBounds)
    _tools: dict[str, Tool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in BUILTIN_TOOLS:
            self._tools.setdefault(name, BuiltinTool(name=name))

    def add_builtin(self, name: str) -> None:
        """A built-in of the connection's transport (a phone call's ``end_call``): its code
        lives with the transport, the gate allows it like the other built-ins."""
        self._add(BuiltinTool(name=name))

    def _add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise InvalidTool(f"a tool named {tool.name!r} is already declared")
        if len(self._tools) >= MAX_TOOLS_PER_ROLE:
            raise InvalidTool(f"a role has at most {MAX_TOOLS_PER_ROLE} tools")
        self._tools[tool.name] = tool

    def add_http(self, tool: HttpTool) -> HttpTool:
        self._add(check_http_tool(tool, self.allowed_hosts, self.bounds))
        return tool

    def set_client_tools(self, tools: Iterable[ClientTool]) -> None:
        """Replace the client's tools (a client declares its whole set at once)."""
        checked = [check_client_tool(t) for t in tools]
        names = [t.name for t in checked]
        if len(set(names)) != len(names):
            raise InvalidTool("client tool names must be unique")
        for name in [n for n, t in self._tools.items() if isinstance(t, ClientTool)]:
            del self._tools[name]
        for tool in checked:
            self._add(tool)

    def set_mcp_tools(self, label: str, tools: Iterable[McpTool]) -> list[McpTool]:
        """Replace the tools of the MCP server ``label``; returns those kept (a tool whose name
        another tool has, or past the limit, is left out)."""
        for name in [n for n, t in self._tools.items()
                     if isinstance(t, McpTool) and t.server_label == label]:  # fmt: skip
            del self._tools[name]
        kept: list[McpTool] = []
        for tool in tools:
            try:
                self._add(tool)
            except InvalidTool:
                continue
            kept.append(tool)
        return kept

    def get(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownTool(f"no tool named {name!r}")
        return tool

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def capability_of(self, name: str, arguments: Mapping[str, Any]) -> Capability:
        """The capability a call asks for (rule 3); ``InvalidArguments`` when they do not fit."""
        tool = self.get(name)
        if tool.parameters is not None:
            check_arguments(tool.parameters, dict(arguments))
        target = ANY_TARGET
        if tool.target is not None:
            target = str(arguments[tool.target])
            if not target or len(target) > MAX_TARGET_CHARS:
                # Never cut: a cut target could equal another one's grant.
                raise InvalidArguments(f"$.{tool.target} must be 1–{MAX_TARGET_CHARS} characters")
        return Capability(action=tool.name, target=target, arguments=dict(arguments))
