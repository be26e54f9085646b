"""The tools a client declares: functions, MCP servers and the tool choice (docs/protocol.md).

Part of the WebSocket protocol's schemas (``runtime.realtime.protocol``: its rules hold here):
GA ``session.update`` and ``response.create`` carry these; ``tool_specs`` turns a client's
functions into the brain's ``ToolSpec``; an MCP server declaration becomes the tools package's
``McpServer`` (its allowed tools and approval policy) and is echoed back by ``mcp_tool_json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from plugins.contracts import ToolSpec
from runtime.errors import ProtocolError
from runtime.realtime.codes import ErrorCode
from tools.mcp import MAX_TOOLS as MAX_MCP_TOOLS
from tools.mcp import ApprovalPolicy, McpServer, ToolFilter


class FunctionToolIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function"] = "function"
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = Field(default="", max_length=4_000)
    parameters: dict[str, Any] = Field(default_factory=dict)


def tool_specs(tools: Sequence[FunctionToolIn | McpToolIn]) -> tuple[ToolSpec, ...]:
    """Declared functions (``session.update`` or ``response.create`` ``tools``) as the brain's
    tool specs (MCP servers are ``mcp_servers``)."""
    return tuple(
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
        for t in tools
        if isinstance(t, FunctionToolIn)
    )


class McpToolFilterIn(BaseModel):
    """GA ``McpToolFilter``: tools by name and/or by their read-only hint."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool_names: list[Annotated[str, Field(max_length=128)]] | None = Field(
        default=None, max_length=MAX_MCP_TOOLS
    )
    read_only: bool | None = None


class McpApprovalFilterIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    always: McpToolFilterIn | None = None
    never: McpToolFilterIn | None = None


class McpToolIn(BaseModel):
    """A GA ``mcp`` tool: a remote MCP server the runtime connects to (``tools.mcp``).
    ``connector_id`` and ``tunnel_id`` name OpenAI's own services and are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["mcp"]
    server_label: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$")
    server_url: str | None = Field(default=None, max_length=2_048)
    server_description: str | None = Field(default=None, max_length=1_024)
    allowed_tools: list[Annotated[str, Field(max_length=128)]] | McpToolFilterIn | None = Field(
        default=None, union_mode="left_to_right"
    )
    require_approval: Literal["always", "never"] | McpApprovalFilterIn | None = None
    headers: dict[str, Annotated[str, Field(max_length=4_096)]] | None = Field(
        default=None, max_length=16
    )
    authorization: str | None = Field(default=None, max_length=4_096)
    connector_id: str | None = Field(default=None, max_length=64)
    tunnel_id: str | None = Field(default=None, max_length=128)
    defer_loading: bool | None = None


def _tool_filter(value: McpToolFilterIn | None) -> ToolFilter | None:
    if value is None:
        return None
    names = frozenset(value.tool_names) if value.tool_names is not None else None
    return ToolFilter(names, value.read_only)


def allowed_filter(value: list[str] | McpToolFilterIn | None) -> ToolFilter | None:
    """GA ``allowed_tools`` as a filter (None: every tool)."""
    return ToolFilter(frozenset(value)) if isinstance(value, list) else _tool_filter(value)


def approval_policy(
    value: Literal["always", "never"] | McpApprovalFilterIn | None,
) -> ApprovalPolicy:
    """GA ``require_approval`` as a policy (unset: ``always``, GA's default)."""
    if value is None:
        return ApprovalPolicy()
    if isinstance(value, str):
        return ApprovalPolicy(mode=value)
    return ApprovalPolicy(mode=None, always=_tool_filter(value.always),
                          never=_tool_filter(value.never))  # fmt: skip


def mcp_servers(
    tools: Sequence[FunctionToolIn | McpToolIn], *, param: str, event_id: str | None = None
) -> tuple[McpServer, ...]:
    """The MCP servers among declared tools (``ProtocolError`` naming the tool's field for
    one that cannot be served here: a connector, no URL, a label used twice)."""
    servers: list[McpServer] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, McpToolIn):
            continue
        where = f"{param}[{index}]"
        if tool.connector_id is not None or tool.tunnel_id is not None:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED,
                "connectors and tunnels are OpenAI's services; give an MCP server_url",
                param=f"{where}.{'connector_id' if tool.connector_id else 'tunnel_id'}",
                event_id=event_id,
            )
        if tool.server_url is None:
            raise ProtocolError(ErrorCode.INVALID_VALUE, "an mcp tool needs a server_url",
                                param=f"{where}.server_url", event_id=event_id)  # fmt: skip
        if any(s.label == tool.server_label for s in servers):
            raise ProtocolError(ErrorCode.INVALID_VALUE, "server_label must be unique",
                                param=f"{where}.server_label", event_id=event_id)  # fmt: skip
        headers = dict(tool.headers or {})
        if tool.authorization is not None:
            headers["Authorization"] = f"Bearer {tool.authorization}"
        servers.append(
            McpServer(
                label=tool.server_label,
                url=tool.server_url,
                allowed=allowed_filter(tool.allowed_tools),
                approval=approval_policy(tool.require_approval),
                headers=headers,
                description=tool.server_description or "",
            )
        )
    return tuple(servers)


def mcp_tool_json(server: McpServer) -> dict[str, Any]:
    """An MCP server as ``session.updated`` shows it: never its headers (``tools.mcp`` Rule 5)."""
    out: dict[str, Any] = {"type": "mcp", "server_label": server.label, "server_url": server.url}
    if server.description:
        out["server_description"] = server.description
    if server.allowed is not None:
        out["allowed_tools"] = _filter_json(server.allowed)
    policy = server.approval
    if policy.mode is not None:
        out["require_approval"] = policy.mode
    else:
        out["require_approval"] = {
            k: _filter_json(f) for k, f in (("always", policy.always), ("never", policy.never))
            if f is not None
        }  # fmt: skip
    return out


def _filter_json(value: ToolFilter) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if value.names is not None:
        out["tool_names"] = sorted(value.names)
    if value.read_only is not None:
        out["read_only"] = value.read_only
    return out


class ToolChoiceFunctionIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function"]
    name: str = Field(max_length=64)


__all__ = [
    "FunctionToolIn",
    "McpApprovalFilterIn",
    "McpToolFilterIn",
    "McpToolIn",
    "ToolChoiceFunctionIn",
    "allowed_filter",
    "approval_policy",
    "mcp_servers",
    "mcp_tool_json",
    "tool_specs",
]
