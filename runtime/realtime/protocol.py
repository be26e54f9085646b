"""The WebSocket protocol: message schemas, limits, error and close codes (docs/protocol.md).

Theory of operation
-------------------
``parse_client_message`` is the only way client bytes become a message. It is pure: given the
raw frame and the limits it returns a typed message or raises ``ProtocolError`` carrying a stable
``code``; the session turns that into an ``error`` event and carries on. Nothing a client sends
can raise anything else out of this module.

The messages are the OpenAI Realtime GA protocol's (``openai`` package, ``types/realtime``);
our extensions are namespaced ``openrealtime.*`` and opt-in (``Extensions``). Server events are
typed values (``pipeline.events``) written by ``encode_event``: GA JSON with an ``event_id``
(and ``seq`` when negotiated). With the ``binary_audio`` extension, audio travels as binary
messages: server → client a 12-byte little-endian header (``seq`` u64, ``generation`` u32) and
PCM16 at the session's output rate; client → server raw PCM16 in the session's input format.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pipeline.audio import INPUT_SAMPLE_RATE
from pipeline.events import ServerEvent, wire
from runtime.errors import ProtocolError, Refused
from runtime.realtime.codes import CloseCode as CloseCode
from runtime.realtime.codes import ErrorCode as ErrorCode
from runtime.realtime.protocol_tools import FunctionToolIn, McpToolIn, ToolChoiceFunctionIn

AUDIO_HEADER = struct.Struct("<QI")


def unauthorized() -> Refused:
    """No credential, or one that proves no one (close 4001)."""
    return Refused(
        ErrorCode.UNAUTHORIZED,
        "a valid bearer token is required",
        CloseCode.UNAUTHORIZED,
        "unauthorized",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_message_bytes: int = 256 * 1024
    """Largest client message handled; larger ones get ``message_too_large``."""
    max_audio_frame_ms: int = 500
    max_text_chars: int = 4_000

    @property
    def max_audio_frame_bytes(self) -> int:
        return INPUT_SAMPLE_RATE * 2 * self.max_audio_frame_ms // 1000


# ---------------------------------------------------------------- client messages
#
# GA client events (the ``openai`` package's ``types/realtime`` names and fields), then our
# extensions (``openrealtime.*``). The session configuration of ``session.update`` lives in
# ``runtime.realtime.session_config``.


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    event_id: str | None = Field(default=None, max_length=128)


class SessionUpdate(_Message):
    type: Literal["session.update"]
    session: dict[str, Any]
    """Validated by ``runtime.realtime.session_config.apply_update`` (errors name the parameter)."""


class AudioAppend(_Message):
    type: Literal["input_audio_buffer.append"]
    audio: str = Field(max_length=1_000_000)


class AudioCommit(_Message):
    type: Literal["input_audio_buffer.commit"]


class AudioClear(_Message):
    type: Literal["input_audio_buffer.clear"]


class ContentIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["input_text", "input_audio", "text", "output_text", "output_audio", "audio"]
    text: str | None = None
    audio: str | None = Field(default=None, max_length=1_000_000)
    transcript: str | None = None


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["message"] = "message"
    id: str | None = Field(default=None, max_length=64)
    object: Literal["realtime.item"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    role: Literal["user", "system", "assistant"]
    content: list[ContentIn] = Field(min_length=1, max_length=16)


class FunctionCallOutputIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["function_call_output"]
    id: str | None = Field(default=None, max_length=64)
    object: Literal["realtime.item"] | None = None
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    call_id: str = Field(max_length=128)
    output: str


MAX_APPROVAL_TEXT_CHARS = 1_000
"""Of an approval's ``reason`` and ``rule`` (a rule's own limit, ``tools.rules``)."""


class McpApprovalResponseIn(BaseModel):
    """The person's answer to a tool call waiting for approval (GA ``mcp_approval_response``),
    with two optional extension fields: ``scope`` (``lifetime``: "always"; default ``once``)
    and ``rule``, a sentence to save as a proposed rule of the role."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["mcp_approval_response"]
    id: str | None = Field(default=None, max_length=64)
    object: Literal["realtime.item"] | None = None
    approval_request_id: str = Field(max_length=128)
    approve: bool
    reason: str | None = Field(default=None, max_length=MAX_APPROVAL_TEXT_CHARS)
    scope: Literal["once", "lifetime"] | None = None
    rule: str | None = Field(default=None, max_length=MAX_APPROVAL_TEXT_CHARS)


class ItemCreate(_Message):
    type: Literal["conversation.item.create"]
    previous_item_id: str | None = Field(default=None, max_length=64)
    item: Annotated[
        MessageIn | FunctionCallOutputIn | McpApprovalResponseIn, Field(discriminator="type")
    ]


class ItemRetrieve(_Message):
    type: Literal["conversation.item.retrieve"]
    item_id: str = Field(max_length=64)


class ItemDelete(_Message):
    type: Literal["conversation.item.delete"]
    item_id: str = Field(max_length=64)


class ItemTruncate(_Message):
    type: Literal["conversation.item.truncate"]
    item_id: str = Field(max_length=64)
    content_index: int = Field(ge=0, le=0)
    audio_end_ms: int = Field(ge=0)


MAX_OUTPUT_TOKENS = 4096
"""The largest ``max_output_tokens`` (else ``inf``)."""


class ResponseParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    instructions: str | None = Field(default=None, max_length=20_000)
    output_modalities: list[Literal["audio", "text"]] | None = Field(
        default=None, min_length=1, max_length=1
    )
    conversation: Literal["auto", "none"] | None = None
    input: list[Annotated[MessageIn | FunctionCallOutputIn, Field(discriminator="type")]] | None = (
        Field(default=None, max_length=16)
    )
    max_output_tokens: Annotated[int, Field(ge=1, le=MAX_OUTPUT_TOKENS)] | Literal["inf"] | None = (
        None
    )
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    tools: list[Annotated[FunctionToolIn | McpToolIn, Field(discriminator="type")]] | None = Field(
        default=None, max_length=32
    )
    """This response's functions instead of the session's (an MCP server is refused here:
    servers are declared with ``session.update``)."""
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceFunctionIn | None = None


class ResponseCreate(_Message):
    type: Literal["response.create"]
    response: ResponseParams | None = None


class ResponseCancel(_Message):
    type: Literal["response.cancel"]
    response_id: str | None = Field(default=None, max_length=64)


class OutputAudioBufferClear(_Message):
    type: Literal["output_audio_buffer.clear"]


# ---------------------------------------------------------------- extensions


class Extensions(BaseModel):
    """What a client opts into (docs/protocol.md, *Extensions*)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    events: bool = True
    """``openrealtime.*`` events and extension fields."""
    seq: bool = True
    """Every message numbered (``seq``), acks, the replay window and resume tokens."""
    binary_audio: bool = False
    """Audio as binary frames both ways instead of base64 JSON."""
    pause_playback: bool = False
    """The client pauses and resumes its playback on ``openrealtime.output_audio.paused`` /
    ``resumed`` (with ``events``), so the server's estimate of what was heard pauses too."""


class SessionStart(_Message):
    """First message of a connection that offered the ``openrealtime`` subprotocol: start a
    session (optionally continuing a thread) with extensions on."""

    type: Literal["openrealtime.session.start"]
    token: str | None = Field(default=None, max_length=512)
    model: str | None = Field(default=None, max_length=128)
    """The agent role (id or name); the tenant's default role otherwise."""
    requested_thread_id: str | None = Field(default=None, max_length=128)
    previous_voice_session_id: str | None = Field(default=None, max_length=128)
    extensions: Extensions = Extensions()
    session: dict[str, Any] | None = None
    """A GA session configuration applied before ``session.created`` (as ``session.update``)."""


class SessionResume(_Message):
    """Pick up a session after a dropped connection (first message of the new connection)."""

    type: Literal["openrealtime.session.resume"]
    token: str | None = Field(default=None, max_length=512)
    session_id: str = Field(max_length=128)
    resume_token: str = Field(max_length=512)
    last_seq: int = Field(ge=0)


class InputPause(_Message):
    type: Literal["openrealtime.input.pause"]


class InputResume(_Message):
    type: Literal["openrealtime.input.resume"]


class PlaybackProgress(_Message):
    type: Literal["openrealtime.playback"]
    generation: int = Field(ge=0)
    played_ms: float = Field(ge=0, le=3_600_000)


class Ack(_Message):
    type: Literal["openrealtime.ack"]
    seq: int = Field(ge=0)


class SessionClose(_Message):
    type: Literal["openrealtime.session.close"]


ClientMessage = Annotated[
    SessionUpdate
    | AudioAppend
    | AudioCommit
    | AudioClear
    | ItemCreate
    | ItemRetrieve
    | ItemDelete
    | ItemTruncate
    | ResponseCreate
    | ResponseCancel
    | OutputAudioBufferClear
    | SessionStart
    | SessionResume
    | InputPause
    | InputResume
    | PlaybackProgress
    | Ack
    | SessionClose,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)
KNOWN_TYPES = frozenset(
    {
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.delete",
        "conversation.item.truncate",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
        "openrealtime.session.start",
        "openrealtime.session.resume",
        "openrealtime.input.pause",
        "openrealtime.input.resume",
        "openrealtime.playback",
        "openrealtime.ack",
        "openrealtime.session.close",
    }
)


@dataclass(frozen=True, slots=True)
class AudioFrame:
    pcm: bytes


def parse_client_message(data: str | bytes, limits: Limits) -> ClientMessage | AudioFrame:
    """Parse one client WebSocket message; raises ``ProtocolError`` for anything invalid."""
    if isinstance(data, bytes):
        if len(data) > limits.max_message_bytes:
            raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
        return AudioFrame(data)  # bounded by duration in the session's input format
    if len(data) > limits.max_message_bytes:  # chars ≤ bytes, so this is a cheap first bound
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
    if len(data.encode("utf-8", "surrogatepass")) > limits.max_message_bytes:
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
    try:
        raw: Any = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message must be a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message needs a string 'type'")
    if kind not in KNOWN_TYPES:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind[:64]!r}")
    event_id = raw.get("event_id") if isinstance(raw.get("event_id"), str) else None
    try:
        message = _ADAPTER.validate_python(raw)
    except ValidationError as e:
        raise validation_error(e, kind=kind, event_id=event_id) from None
    if isinstance(message, ItemCreate):
        item = message.item
        if isinstance(item, MessageIn):
            size = sum(len(part.text or part.transcript or "") for part in item.content)
        elif isinstance(item, FunctionCallOutputIn):
            size = len(item.output)
        else:
            size = 0  # an approval's texts have their own bounds
        if size > limits.max_text_chars:
            raise ProtocolError(
                ErrorCode.TEXT_TOO_LONG,
                f"text is longer than {limits.max_text_chars} characters",
                param="item.content",
                event_id=event_id,
            )
    return message


def validation_error(
    error: ValidationError, *, kind: str, event_id: str | None, prefix: tuple[str, ...] = ()
) -> ProtocolError:
    """A pydantic error as a GA-shaped one: an unknown field is ``unknown_parameter``, a bad
    value ``invalid_value``; ``param`` names where (``session.audio.input.format.rate``)."""
    first = error.errors()[0]
    parts = list(prefix)
    for part in first.get("loc", ()):
        if isinstance(part, int) and parts:
            parts[-1] += f"[{part}]"  # a list's element: "session.tools[0].name"
        elif not isinstance(part, int) and not _union_tag(str(part)):
            # Discriminated unions put the tag in the path ("item.message.content"): left out.
            parts.append(str(part))
    where = ".".join(parts)
    extra = first.get("type") == "extra_forbidden"
    code = ErrorCode.UNKNOWN_PARAMETER if extra else ErrorCode.INVALID_VALUE
    text = "unknown parameter" if extra else str(first.get("msg"))
    return ProtocolError(code, f"{kind}: {where}: {text}", param=where or None, event_id=event_id)


_UNION_TAGS = frozenset(
    {"message", "function_call_output", "mcp_approval_response", "server_vad", "semantic_vad",
     "audio/pcm", "audio/pcmu", "audio/pcma", "function", "mcp", "str", "int", "literal['inf']",
     "dict[str,any]", "list[str]", "McpToolFilterIn", "McpApprovalFilterIn"}
)  # fmt: skip


def _union_tag(part: str) -> bool:
    """A path part pydantic adds for a union's member (a message's type such as
    ``response.create``, ``constrained-int``, ``literal['auto','none']``), not a field."""
    return part in _UNION_TAGS or "." in part or "[" in part or part.startswith("constrained-")


def decode_append(message: AudioAppend) -> bytes:
    try:
        return base64.b64decode(message.audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(
            ErrorCode.INVALID_AUDIO, "audio is not valid base64", param="audio"
        ) from None


def check_audio(
    data: bytes, limits: Limits, *, bytes_per_second: int = INPUT_SAMPLE_RATE * 2
) -> AudioFrame:
    """Bound one chunk of input audio by duration in the session's input format
    (``bytes_per_second``: 48,000 for 24 kHz PCM16, 8,000 for G.711)."""
    if bytes_per_second > 8_000 and len(data) % 2:
        raise ProtocolError(
            ErrorCode.ODD_LENGTH_AUDIO, "PCM16 audio must have an even number of bytes"
        )
    if len(data) * 1000 > limits.max_audio_frame_ms * bytes_per_second:
        raise ProtocolError(
            ErrorCode.AUDIO_FRAME_TOO_LONG,
            f"an audio chunk may hold at most {limits.max_audio_frame_ms} ms",
        )
    return AudioFrame(data)


def _too_large(size: int, limits: Limits) -> str:
    return f"message of {size} bytes exceeds the limit of {limits.max_message_bytes}"


# ---------------------------------------------------------------- server messages


def encode_event(event: ServerEvent, *, event_id: str, seq: int | None, extensions: bool) -> str:
    """The one encoder of server events (``pipeline.events`` Rule 2): GA JSON with
    ``event_id``, and ``seq`` when the client negotiated it."""
    body = wire(event, extensions=extensions)
    body["event_id"] = event_id
    if seq is not None:
        body["seq"] = seq
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def encode_audio(seq: int, generation: int, pcm: bytes) -> bytes:
    """An audio delta as a binary frame (the ``binary_audio`` extension)."""
    return AUDIO_HEADER.pack(seq, generation) + pcm


def decode_audio(data: bytes) -> tuple[int, int, bytes]:
    """Client side: split a server audio message into (seq, generation, pcm)."""
    seq, generation = AUDIO_HEADER.unpack_from(data)
    return seq, generation, data[AUDIO_HEADER.size :]
