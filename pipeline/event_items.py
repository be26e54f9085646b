"""The values inside events: conversation items, a response's parts, status and usage.

Part of the server's event vocabulary (``pipeline/events.py``, whose rules hold here too: one
vocabulary, one encoder there, extension fields marked by their metadata). ``events`` exports
every name here, so callers write ``ev.MessageItem`` as they write ``ev.ItemAdded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FIELD_INTERNAL = {"wire": False}
FIELD_EXTENSION = {"extension": True}
FIELD_NULLABLE = {"null": True}
"""Written even when None (a field whose ``null`` means something)."""


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a message item: ``input_text``/``output_text`` carry ``text``,
    ``input_audio``/``output_audio`` carry ``transcript`` (audio itself is never echoed)."""

    type: str
    text: str | None = None
    transcript: str | None = None


@dataclass(frozen=True, slots=True)
class MessageItem:
    id: str
    role: str  # "user" | "assistant" | "system"
    content: tuple[ContentPart, ...]
    status: str = "completed"  # "in_progress" | "completed" | "incomplete"
    type: str = "message"
    object: str = "realtime.item"


@dataclass(frozen=True, slots=True)
class FunctionCallItem:
    id: str
    call_id: str
    name: str
    arguments: str
    status: str = "completed"
    type: str = "function_call"
    object: str = "realtime.item"


@dataclass(frozen=True, slots=True)
class FunctionCallOutputItem:
    id: str
    call_id: str
    output: str
    status: str = "completed"
    type: str = "function_call_output"
    object: str = "realtime.item"


@dataclass(frozen=True, slots=True)
class McpApprovalRequestItem:
    """A tool call waiting for the person's approval (GA ``mcp_approval_request``):
    ``server_label`` is the MCP server's label, or for our own tools their kind (``http`` or
    ``client``)."""

    id: str
    name: str
    arguments: str
    server_label: str
    type: str = "mcp_approval_request"


@dataclass(frozen=True, slots=True)
class McpApprovalResponseItem:
    """How an approval request was settled (GA ``mcp_approval_response``): by the person's
    item, their spoken answer, or (``approve`` false) the question's timeout."""

    id: str
    approval_request_id: str
    approve: bool
    reason: str | None = None
    type: str = "mcp_approval_response"


@dataclass(frozen=True, slots=True)
class McpListedTool:
    """One tool of an ``mcp_list_tools`` item."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class McpListToolsItem:
    """The tools an MCP server the session declared offers (GA ``mcp_list_tools``)."""

    id: str
    server_label: str
    tools: tuple[McpListedTool, ...] = ()
    type: str = "mcp_list_tools"


@dataclass(frozen=True, slots=True)
class McpError:
    """Why an ``mcp_call`` failed: ``type`` is ``protocol_error`` or ``http_error`` (with a
    ``code``) or ``tool_execution_error``."""

    type: str
    message: str
    code: int | None = None


@dataclass(frozen=True, slots=True)
class McpCallItem:
    """A call of an MCP server's tool, run by the server (GA ``mcp_call``)."""

    id: str
    name: str
    server_label: str
    arguments: str
    output: str | None = None
    error: McpError | None = None
    approval_request_id: str | None = None
    type: str = "mcp_call"


Item = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | McpApprovalRequestItem
    | McpApprovalResponseItem
    | McpListToolsItem
    | McpCallItem
)


@dataclass(frozen=True, slots=True)
class ResponsePart:
    """A content part as ``response.content_part.*`` names it (``audio`` or ``text``)."""

    type: str
    transcript: str | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class StatusDetails:
    type: str
    reason: str | None = None
    error: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class InputTokenDetails:
    text_tokens: int = 0
    audio_tokens: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class OutputTokenDetails:
    text_tokens: int = 0
    audio_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    """GA ``usage``. Text tokens are counted with ``journal.tokens`` (the brains do not report
    theirs): ``estimated`` says so. Audio is not counted in tokens (the embedded ASR and TTS
    have none): its seconds are in the usage ledger (``runtime.usage``)."""

    total_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    input_token_details: InputTokenDetails = InputTokenDetails()
    output_token_details: OutputTokenDetails = OutputTokenDetails()
    estimated: bool = field(default=True, metadata=FIELD_EXTENSION)


@dataclass(frozen=True, slots=True)
class Response:
    id: str
    status: str  # "in_progress" | "completed" | "cancelled" | "failed" | "incomplete"
    output: tuple[Item, ...] = ()
    output_modalities: tuple[str, ...] = ("audio",)
    status_details: StatusDetails | None = None
    usage: Usage | None = None
    conversation_id: str | None = None
    object: str = "realtime.response"
    generation: int | None = field(default=None, metadata=FIELD_EXTENSION)
    output_text: str | None = field(default=None, metadata=FIELD_EXTENSION)
    """Extension: the whole answer (as spoken, or as sent for a text-only response)."""
    heard_text: str | None = field(default=None, metadata=FIELD_EXTENSION)
    """Extension: the prefix of the answer the person heard (all of it unless interrupted)."""
    interrupted: bool | None = field(default=None, metadata=FIELD_EXTENSION)


__all__ = [
    "FIELD_EXTENSION",
    "FIELD_INTERNAL",
    "FIELD_NULLABLE",
    "ContentPart",
    "FunctionCallItem",
    "InputTokenDetails",
    "OutputTokenDetails",
    "FunctionCallOutputItem",
    "Item",
    "McpApprovalRequestItem",
    "McpApprovalResponseItem",
    "McpCallItem",
    "McpError",
    "McpListToolsItem",
    "McpListedTool",
    "MessageItem",
    "Response",
    "ResponsePart",
    "StatusDetails",
    "Usage",
]
