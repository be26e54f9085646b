"""Errors of the tools package.

::

    ToolError                      code, retryable
    ├── InvalidTool                remote: a bad declaration (schema, template, limits); 422
    │   └── HostNotAllowed         remote: a URL's host is not on the allowlist; 422
    ├── InvalidArguments           remote: a call's arguments do not fit the tool; 422
    ├── UnknownTool                remote: no such tool for this role; 404
    ├── InvalidGrant               remote: a bad grant (scope without thread, unknown parent); 422
    ├── GrantNotFound              remote: no such grant for this role; 404
    ├── InvalidRule                remote: empty or too long text, bad status change; 422
    ├── RuleNotFound               remote: no such rule for this role; 404
    ├── RuleVersionConflict        remote: the rule changed since it was read; carries it; 409
    ├── ToolLimitExceeded          remote: a documented count limit (rules, grants); 409
    ├── ToolCallFailed             remote: the tool's server failed the call
    │   ├── ToolTimeout            the call took longer than the tool's timeout (retryable)
    │   ├── ToolUnreachable        no connection to the tool's host (retryable)
    │   ├── ResponseTooLarge       the response passed the tool's size limit
    │   ├── ToolHttpStatus         a non-2xx answer (retryable for 429 and 5xx)
    │   └── McpCallFailed          an MCP server failed: its ``kind`` is the GA error type
    ├── SecretMissing              local: a header's secret is not stored (configuration)
    └── ToolsUnavailable           local: the store cannot be reached (retryable)

Every error carries a stable ``code`` (the HTTP API's ``{code, message}``). No message ever
carries a secret's value, a call's arguments or a response body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.rules import Rule


class ToolError(Exception):
    code = "tool_error"
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidTool(ToolError):
    code = "invalid_tool"


class HostNotAllowed(InvalidTool):
    code = "host_not_allowed"


class InvalidArguments(ToolError):
    code = "invalid_arguments"


class UnknownTool(ToolError):
    code = "unknown_tool"


class InvalidGrant(ToolError):
    code = "invalid_grant"


class GrantNotFound(ToolError):
    code = "grant_not_found"


class InvalidRule(ToolError):
    code = "invalid_rule"


class RuleNotFound(ToolError):
    code = "rule_not_found"


class RuleVersionConflict(ToolError):
    """An update named a version the rule is no longer at: ``current`` is the rule now."""

    code = "rule_conflict"

    def __init__(self, current: Rule) -> None:
        super().__init__(f"rule {current.id} is at version {current.version}")
        self.current = current


class ToolLimitExceeded(ToolError):
    code = "tool_limit_exceeded"


class ToolCallFailed(ToolError):
    code = "tool_call_failed"


class ToolTimeout(ToolCallFailed):
    code = "tool_timeout"
    retryable = True


class ToolUnreachable(ToolCallFailed):
    code = "tool_unreachable"
    retryable = True


class ResponseTooLarge(ToolCallFailed):
    code = "response_too_large"


class ToolHttpStatus(ToolCallFailed):
    code = "tool_http_status"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = status == 429 or status >= 500


class McpCallFailed(ToolCallFailed):
    """An MCP server could not list or run a tool: ``kind`` is the GA ``mcp_call`` error type
    (``protocol_error``, ``http_error`` or ``tool_execution_error``), ``status`` the HTTP or
    JSON-RPC code where there is one."""

    code = "mcp_call_failed"

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = kind == "http_error" and (status is None or status >= 500)


class SecretMissing(ToolError):
    code = "secret_missing"


class ToolsUnavailable(ToolError):
    code = "tools_unavailable"
    retryable = True
