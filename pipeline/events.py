"""The server's event vocabulary: every event a session sends is a value of a class here.

Theory of operation
-------------------
Rule 1. One vocabulary. The engine, the session and the memory code build these frozen values
        and hand them to the session's sink; nothing else builds an event. The names and fields
        are the OpenAI Realtime GA protocol's (the ``openai`` package's ``types/realtime`` is
        the reference); our own events are namespaced ``openrealtime.*`` and are *extensions*.
Rule 2. One encoder. ``wire(event, extensions)`` turns a value into the JSON object that goes
        out: fields in declaration order, ``None`` left out, tuples as lists, nested values
        encoded the same way. Bytes (audio) are base64. ``event_id`` and ``seq`` are added by
        the writer (``runtime.realtime.outbox``), not here.
Rule 3. Extensions are opt-in. A client that did not ask for extensions never receives an
        extension event (``ExtensionEvent``) nor an extension field (a field whose metadata
        says ``extension``): the writer drops the one and ``wire`` leaves out the other.
Rule 4. Fields a client never sees (the generation an audio frame belongs to) carry metadata
        ``wire=False``; the writer uses them to fence interrupted output.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pipeline.event_items import FIELD_EXTENSION, FIELD_INTERNAL, FIELD_NULLABLE
from pipeline.event_items import ContentPart as ContentPart
from pipeline.event_items import FunctionCallItem as FunctionCallItem
from pipeline.event_items import FunctionCallOutputItem as FunctionCallOutputItem
from pipeline.event_items import InputTokenDetails as InputTokenDetails
from pipeline.event_items import Item as Item
from pipeline.event_items import McpApprovalRequestItem as McpApprovalRequestItem
from pipeline.event_items import McpApprovalResponseItem as McpApprovalResponseItem
from pipeline.event_items import McpCallItem as McpCallItem
from pipeline.event_items import McpError as McpError
from pipeline.event_items import McpListedTool as McpListedTool
from pipeline.event_items import McpListToolsItem as McpListToolsItem
from pipeline.event_items import MessageItem as MessageItem
from pipeline.event_items import OutputTokenDetails as OutputTokenDetails
from pipeline.event_items import Response as Response
from pipeline.event_items import ResponsePart as ResponsePart
from pipeline.event_items import StatusDetails as StatusDetails
from pipeline.event_items import Usage as Usage

# ---------------------------------------------------------------- GA events


@dataclass(frozen=True, slots=True)
class ServerEvent:
    TYPE: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class SessionCreated(ServerEvent):
    TYPE: ClassVar[str] = "session.created"
    session: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SessionUpdated(ServerEvent):
    TYPE: ClassVar[str] = "session.updated"
    session: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    type: str  # "invalid_request_error" | "server_error"
    code: str
    message: str
    param: str | None = None
    event_id: str | None = None
    """The client event this error answers, when there is one."""
    retryable: bool | None = field(default=None, metadata=FIELD_EXTENSION)


@dataclass(frozen=True, slots=True)
class Error(ServerEvent):
    TYPE: ClassVar[str] = "error"
    error: ErrorDetail


def error(
    code: str,
    message: str,
    *,
    server: bool = False,
    param: str | None = None,
    event_id: str | None = None,
    retryable: bool = False,
) -> Error:
    """The one constructor of an ``error`` event: ``server`` for our own failures (a plugin,
    the journal), otherwise the client's request was at fault."""
    return Error(
        ErrorDetail(
            type="server_error" if server else "invalid_request_error",
            code=code,
            message=message,
            param=param,
            event_id=event_id,
            retryable=retryable,
        )
    )


@dataclass(frozen=True, slots=True)
class InputAudioBufferCommitted(ServerEvent):
    TYPE: ClassVar[str] = "input_audio_buffer.committed"
    item_id: str
    previous_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class InputAudioBufferCleared(ServerEvent):
    TYPE: ClassVar[str] = "input_audio_buffer.cleared"


@dataclass(frozen=True, slots=True)
class SpeechStarted(ServerEvent):
    TYPE: ClassVar[str] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class SpeechStopped(ServerEvent):
    TYPE: ClassVar[str] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class TimeoutTriggered(ServerEvent):
    TYPE: ClassVar[str] = "input_audio_buffer.timeout_triggered"
    audio_start_ms: int
    audio_end_ms: int
    item_id: str


@dataclass(frozen=True, slots=True)
class ItemAdded(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.added"
    item: Item
    previous_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class ItemDone(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.done"
    item: Item
    previous_item_id: str | None = None


@dataclass(frozen=True, slots=True)
class ItemRetrieved(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.retrieved"
    item: Item


@dataclass(frozen=True, slots=True)
class ItemDeleted(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.deleted"
    item_id: str


@dataclass(frozen=True, slots=True)
class ItemTruncated(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.truncated"
    item_id: str
    content_index: int
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class TranscriptionDelta(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.delta"
    item_id: str
    delta: str
    content_index: int = 0
    transcript: str | None = field(default=None, metadata=FIELD_EXTENSION)
    """Extension: the whole current hypothesis (a later one may rewrite earlier words)."""


@dataclass(frozen=True, slots=True)
class DurationUsage:
    seconds: float
    type: str = "duration"


@dataclass(frozen=True, slots=True)
class TranscriptionCompleted(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.completed"
    item_id: str
    transcript: str
    usage: DurationUsage
    content_index: int = 0


@dataclass(frozen=True, slots=True)
class TranscriptionFailed(ServerEvent):
    TYPE: ClassVar[str] = "conversation.item.input_audio_transcription.failed"
    item_id: str
    error: Mapping[str, str]
    content_index: int = 0


@dataclass(frozen=True, slots=True)
class ResponseCreated(ServerEvent):
    TYPE: ClassVar[str] = "response.created"
    response: Response


@dataclass(frozen=True, slots=True)
class ResponseDone(ServerEvent):
    TYPE: ClassVar[str] = "response.done"
    response: Response


@dataclass(frozen=True, slots=True)
class OutputItemAdded(ServerEvent):
    TYPE: ClassVar[str] = "response.output_item.added"
    response_id: str
    output_index: int
    item: Item


@dataclass(frozen=True, slots=True)
class OutputItemDone(ServerEvent):
    TYPE: ClassVar[str] = "response.output_item.done"
    response_id: str
    output_index: int
    item: Item


@dataclass(frozen=True, slots=True)
class ContentPartAdded(ServerEvent):
    TYPE: ClassVar[str] = "response.content_part.added"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: ResponsePart


@dataclass(frozen=True, slots=True)
class ContentPartDone(ServerEvent):
    TYPE: ClassVar[str] = "response.content_part.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    part: ResponsePart


@dataclass(frozen=True, slots=True)
class OutputAudioDelta(ServerEvent):
    """Audio of a response. On the wire base64 PCM in JSON, or a binary frame when the client
    negotiated the ``binary_audio`` extension."""

    TYPE: ClassVar[str] = "response.output_audio.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: bytes
    generation: int = field(default=0, metadata=FIELD_INTERNAL)


@dataclass(frozen=True, slots=True)
class OutputAudioDone(ServerEvent):
    TYPE: ClassVar[str] = "response.output_audio.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int


@dataclass(frozen=True, slots=True)
class OutputAudioTranscriptDelta(ServerEvent):
    TYPE: ClassVar[str] = "response.output_audio_transcript.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class OutputAudioTranscriptDone(ServerEvent):
    TYPE: ClassVar[str] = "response.output_audio_transcript.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    transcript: str


@dataclass(frozen=True, slots=True)
class OutputTextDelta(ServerEvent):
    TYPE: ClassVar[str] = "response.output_text.delta"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class OutputTextDone(ServerEvent):
    TYPE: ClassVar[str] = "response.output_text.done"
    response_id: str
    item_id: str
    output_index: int
    content_index: int
    text: str


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDelta(ServerEvent):
    TYPE: ClassVar[str] = "response.function_call_arguments.delta"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDone(ServerEvent):
    TYPE: ClassVar[str] = "response.function_call_arguments.done"
    response_id: str
    item_id: str
    output_index: int
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class McpCallArgumentsDelta(ServerEvent):
    TYPE: ClassVar[str] = "response.mcp_call_arguments.delta"
    response_id: str
    item_id: str
    output_index: int
    delta: str


@dataclass(frozen=True, slots=True)
class McpCallArgumentsDone(ServerEvent):
    TYPE: ClassVar[str] = "response.mcp_call_arguments.done"
    response_id: str
    item_id: str
    output_index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class McpCallInProgress(ServerEvent):
    TYPE: ClassVar[str] = "response.mcp_call.in_progress"
    item_id: str
    output_index: int


@dataclass(frozen=True, slots=True)
class McpCallCompleted(ServerEvent):
    TYPE: ClassVar[str] = "response.mcp_call.completed"
    item_id: str
    output_index: int


@dataclass(frozen=True, slots=True)
class McpCallFailed(ServerEvent):
    TYPE: ClassVar[str] = "response.mcp_call.failed"
    item_id: str
    output_index: int


@dataclass(frozen=True, slots=True)
class McpListToolsInProgress(ServerEvent):
    TYPE: ClassVar[str] = "mcp_list_tools.in_progress"
    item_id: str


@dataclass(frozen=True, slots=True)
class McpListToolsCompleted(ServerEvent):
    TYPE: ClassVar[str] = "mcp_list_tools.completed"
    item_id: str


@dataclass(frozen=True, slots=True)
class McpListToolsFailed(ServerEvent):
    TYPE: ClassVar[str] = "mcp_list_tools.failed"
    item_id: str


@dataclass(frozen=True, slots=True)
class OutputAudioBufferStarted(ServerEvent):
    """WebRTC: the server began playing a response's audio to the peer."""

    TYPE: ClassVar[str] = "output_audio_buffer.started"
    response_id: str


@dataclass(frozen=True, slots=True)
class OutputAudioBufferStopped(ServerEvent):
    """WebRTC: all of a response's audio has been played out (after ``response.done``)."""

    TYPE: ClassVar[str] = "output_audio_buffer.stopped"
    response_id: str


@dataclass(frozen=True, slots=True)
class OutputAudioBufferCleared(ServerEvent):
    """WebRTC: what was left of a response's audio was dropped (an interruption, or the
    client's ``output_audio_buffer.clear``)."""

    TYPE: ClassVar[str] = "output_audio_buffer.cleared"
    response_id: str


@dataclass(frozen=True, slots=True)
class RateLimit:
    name: str
    limit: int
    remaining: int
    reset_seconds: float


@dataclass(frozen=True, slots=True)
class RateLimitsUpdated(ServerEvent):
    TYPE: ClassVar[str] = "rate_limits.updated"
    rate_limits: tuple[RateLimit, ...]


# ---------------------------------------------------------------- extensions


@dataclass(frozen=True, slots=True)
class ExtensionEvent(ServerEvent):
    """An ``openrealtime.*`` event: sent only to a client that negotiated extensions."""


@dataclass(frozen=True, slots=True)
class SessionResumed(ExtensionEvent):
    """The answer to ``openrealtime.session.resume``: the one message outside the numbered
    stream (docs/protocol.md, *Resuming*)."""

    TYPE: ClassVar[str] = "openrealtime.session.resumed"
    session_id: str
    resume_token: str
    replayed: int | bool
    """How many messages follow as replay, or False when continued from the journal."""
    missing: tuple[int, int] | None = field(metadata=FIELD_NULLABLE)
    reconcile: Mapping[str, object] | None = field(metadata=FIELD_NULLABLE)
    last_seq: int = 0
    session: Mapping[str, object] | None = None


@dataclass(frozen=True, slots=True)
class SessionRecording(ExtensionEvent):
    """This session is being recorded, both sides (SPEC REC-1): its recording's id and until
    when it is kept (None: until it is deleted)."""

    TYPE: ClassVar[str] = "openrealtime.session.recording"
    recording_id: str
    retain_until: str | None = field(metadata=FIELD_NULLABLE)


@dataclass(frozen=True, slots=True)
class ResponseInterrupted(ExtensionEvent):
    TYPE: ClassVar[str] = "openrealtime.response.interrupted"
    response_id: str
    generation: int
    reason: str


@dataclass(frozen=True, slots=True)
class OutputAudioPaused(ExtensionEvent):
    """Sound from the user holds the answer (a possible false interruption): pause playback
    where it is; ``resumed`` or an interruption follows."""

    TYPE: ClassVar[str] = "openrealtime.output_audio.paused"
    response_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class OutputAudioResumed(ExtensionEvent):
    """No real turn followed the sound: play on from where playback paused."""

    TYPE: ClassVar[str] = "openrealtime.output_audio.resumed"
    response_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class TurnLatency(ExtensionEvent):
    TYPE: ClassVar[str] = "openrealtime.turn.latency"
    response_id: str
    generation: int
    latency_ms: Mapping[str, float]
    origin: str
    preempted: bool = False
    """The brain started before the commit (``pipeline.preemption``): its first token was
    ready when the turn ended."""


@dataclass(frozen=True, slots=True)
class ThreadMemoryUpdated(ExtensionEvent):
    """The thread's memory changed (a turn's consolidation, or a person's command): the view
    of ``runtime/thread_memory.py`` rule 1. The next turn reads it."""

    TYPE: ClassVar[str] = "openrealtime.thread_memory.updated"
    thread_id: str
    memory: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerDraining(ExtensionEvent):
    """This process is shutting down (SIGTERM, ``runtime/drain.py``): acknowledge with
    ``openrealtime.ack``, start no new turn; the live one finishes, then the connection closes
    with 1012 and the client resumes — on another process behind the load balancer."""

    TYPE: ClassVar[str] = "openrealtime.server.draining"
    close_within_ms: int


@dataclass(frozen=True, slots=True)
class InputPaused(ExtensionEvent):
    TYPE: ClassVar[str] = "openrealtime.input.paused"


@dataclass(frozen=True, slots=True)
class InputResumed(ExtensionEvent):
    TYPE: ClassVar[str] = "openrealtime.input.resumed"


@dataclass(frozen=True, slots=True)
class JournalRecovered(ExtensionEvent):
    TYPE: ClassVar[str] = "openrealtime.journal.recovered"


@dataclass(frozen=True, slots=True)
class MemoryStatus(ExtensionEvent):
    """What long-term memory did with a turn (saved, corrected, skipped …), for the page."""

    TYPE: ClassVar[str] = "openrealtime.memory.status"
    role_id: str
    body: Mapping[str, Any]


# ---------------------------------------------------------------- the encoder


_PLAN: dict[type, tuple[tuple[str, bool, bool], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, bool, bool], ...]:
    """(field name, is extension, written when None) for each wire field of ``cls``,
    computed once per class."""
    plan = _PLAN.get(cls)
    if plan is None:
        plan = tuple(
            (f.name, bool(f.metadata.get("extension")), bool(f.metadata.get("null")))
            for f in dataclasses.fields(cls)
            if f.metadata.get("wire", True)
        )
        _PLAN[cls] = plan
    return plan


def _value(value: Any, extensions: bool) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _object(value, extensions)
    if isinstance(value, tuple | list):
        return [_value(v, extensions) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {k: _value(v, extensions) for k, v in value.items()}
    return value


def _object(value: Any, extensions: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, extension, nullable in _plan(type(value)):
        if extension and not extensions:
            continue
        v = getattr(value, name)
        if v is not None:
            out[name] = _value(v, extensions)
        elif nullable:
            out[name] = None
    return out


def wire(event: ServerEvent, *, extensions: bool) -> dict[str, Any]:
    """The JSON object of ``event`` (without ``event_id``/``seq``; see Rule 2)."""
    if event.TYPE == "openrealtime.memory.status":
        assert isinstance(event, MemoryStatus)
        return {"type": event.TYPE, "role_id": event.role_id, **_value(event.body, True)}
    return {"type": event.TYPE, **_object(event, extensions)}


def item_json(item: Item) -> dict[str, Any]:
    """An item as the API shows it (used for ``reconcile`` and records)."""
    return _object(item, False)


__all__ = [name for name in dir() if not name.startswith("_")]
