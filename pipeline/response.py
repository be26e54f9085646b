"""A response's state: its options, its tool permissions' types, its life as a state table.

Theory of operation
-------------------
Rule 1. A ``Response`` is the state of one answer (its generation, its GA events, its playout
        tracker, its marks); the responder (``pipeline/responder.py``) creates it at the commit
        and finishes it. Its life is ``ResponseState``, moved only through
        ``RESPONSE_TRANSITIONS``: RECORDING (the person's input is transcribed and journaled) →
        PREPARING (its context; nothing sent) → ANSWERING (``response.created`` sent) →
        FINALIZING (the answer's record) → FINISHED. FINISHED is reached once, from any other
        state, where ``response.done`` was sent (or nothing was to be answered) — the
        responder's ``finish``, which also tells its owner the turn ended, once.
Rule 2. ``ResponseOptions`` are what a ``response.create`` asked for (its own tools, tool
        choice, output limit, modalities, instructions, out-of-band input).
Rule 3. Tool permissions: every call of a response is decided by the gate the session's
        ``ToolGateHook`` gives for it, so every call knows where it comes from
        (``CallOrigin``); a call settled after its response ended continues the turn as a
        ``Continuation``. The speaker (``pipeline/speaker.py``) runs the brain with that gate.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from journal.events import JournalEvent
from pipeline import events as ev
from pipeline.pacer import Pacer
from pipeline.playout import PlayoutTracker
from pipeline.preemption import Preemption
from pipeline.response_events import ResponseEvents
from plugins.brain.tool_loop import ToolGate
from plugins.contracts import ToolCall, ToolChoice, ToolResult, ToolSpec


@dataclass(frozen=True, slots=True)
class ResponseOptions:
    """What ``response.create`` may set for one response."""

    instructions: str | None = None
    """Replaces the session's instructions for this response only."""
    audio: bool | None = None
    """False: answer in text only; None: the session's output modalities."""
    in_conversation: bool = True
    """False (``conversation: "none"``): out of band, not journaled, not in the history."""
    input_text: str | None = None
    """Out-of-band input (a response outside the conversation answers this, not the thread)."""
    tools: tuple[ToolSpec, ...] | None = None
    """The client's functions for this response only (None: the session's)."""
    tool_choice: ToolChoice | None = None
    """This response's ``tool_choice`` (None: the session's)."""
    max_output_tokens: int | Literal["inf"] | None = None
    """This response's output limit (``inf``: none; None: the session's)."""
    say: str | None = None
    """Speak these words, not the brain's answer (the session's recording notice: SPEC
    REC-1); nothing is taken from the conversation's pending input."""


@dataclass(frozen=True, slots=True)
class CallOrigin:
    """The response (generation) a tool call belongs to, and the turn's input behind it."""

    generation: int
    turn_id: int
    input: str
    input_seq: int | None


@dataclass(frozen=True, slots=True)
class Continuation:
    """A call settled after its response ended (the person answered, or the question timed
    out): the next response continues the turn with its result, from the input behind it."""

    call: ToolCall
    result: ToolResult | None
    """None: the call was approved and goes to the client (a client tool)."""
    input: str
    input_seq: int | None
    ran: bool = False
    """The call was approved and ran here (its result is the tool's, not a refusal)."""


class ToolGateHost(Protocol):
    """What a tool gate needs from the engine."""

    def send_all(self, events: list[ev.ServerEvent]) -> None: ...

    def is_current(self, generation: int) -> bool: ...

    def continue_with(self, continuation: Continuation, *, respond: bool) -> None:
        """Keep ``continuation`` for the next response; ``respond``: start it now when no
        turn is under way."""
        ...


class ToolGateHook(Protocol):
    """The session's tool permissions (``runtime.tool_gate``), as the engine uses them."""

    def bind(self, host: ToolGateHost) -> None: ...

    def set_client_tools(self, specs: tuple[ToolSpec, ...]) -> None:
        """The client's declared functions (the session's, and a response's own)."""
        ...

    async def specs(self) -> tuple[ToolSpec, ...]:
        """The gated tools the brain is offered besides the engine's own (HTTP tools)."""
        ...

    def gate(self, origin: CallOrigin) -> ToolGate: ...

    def runs_on_client(self, call_id: str) -> bool:
        """Whether a client call was let through (else its result is the gate's)."""
        ...

    def journal_fields(self, call_id: str) -> dict[str, Any]:
        """What the journal keeps of a call's decision (added to its ``tool_call`` event)."""
        ...

    async def answer(self, text: str, generation: int) -> Continuation | None:
        """The person's next words while a question waits: the settled call when they answer
        it, else None (the words are a turn of their own)."""
        ...

    def interrupted(self, generation: int, reason: str) -> None:
        """``generation`` was interrupted (a barge-in, a cancel)."""
        ...

    def mcp_server_of(self, name: str) -> str | None:
        """The label of the MCP server whose tool ``name`` is (None: not an MCP tool)."""
        ...

    def mcp_error(self, call_id: str) -> ev.McpError | None:
        """Why a failed MCP call failed, for its ``mcp_call`` item."""
        ...


@dataclass(slots=True)
class PendingInput:
    """A user item added with ``conversation.item.create``, waiting for ``response.create``."""

    text: str
    item_id: str
    write: asyncio.Task[list[JournalEvent]]


class ResponseState(enum.Enum):
    RECORDING = "recording"
    """The person's input is transcribed and journaled: an interruption waits for it."""
    PREPARING = "preparing"
    """The turn's context is read; nothing of the response was sent yet."""
    ANSWERING = "answering"
    """``response.created`` was sent: the brain, the speech and its playout."""
    FINALIZING = "finalizing"
    """The answer's record is written; ``response.done`` follows."""
    FINISHED = "finished"
    """``response.done`` was sent, or there was nothing to answer: the turn ended."""


class ResponseTrigger(enum.Enum):
    RECORDED = "recorded"
    CREATED = "created"
    FINALIZE = "finalize"
    RECORD_FAILED = "record_failed"
    """The answer's record failed: a failed ``response.done`` is sent instead."""
    FINISH = "finish"


_R, _G = ResponseState, ResponseTrigger
RESPONSE_TRANSITIONS: dict[tuple[ResponseState, ResponseTrigger], ResponseState] = {
    (_R.RECORDING, _G.RECORDED): _R.PREPARING,
    (_R.PREPARING, _G.CREATED): _R.ANSWERING,
    (_R.RECORDING, _G.CREATED): _R.ANSWERING,  # the input failed: the apology's response
    (_R.ANSWERING, _G.FINALIZE): _R.FINALIZING,
    (_R.PREPARING, _G.FINALIZE): _R.FINALIZING,  # interrupted before anything was sent
    (_R.RECORDING, _G.FINALIZE): _R.FINALIZING,
    (_R.FINALIZING, _G.RECORD_FAILED): _R.ANSWERING,
    **{(state, _G.FINISH): _R.FINISHED for state in _R if state is not _R.FINISHED},
}
del _R, _G


@dataclass
class Response:
    generation: int
    turn_id: int
    response_id: str
    events: ResponseEvents
    options: ResponseOptions = field(default_factory=ResponseOptions)
    pending: list[PendingInput] | None = None
    """Typed input already journaled (``conversation.item.create``); None: a spoken turn."""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    """A client function call answered with ``function_call_output`` (continued here)."""
    client_tools: tuple[ToolSpec, ...] = ()
    """The client's functions this response offers (the session's or its own; none under
    ``tool_choice: none``)."""
    tool_choice: ToolChoice = ToolChoice()
    max_output_tokens: int | None = None
    """The output limit in tokens (``journal.tokens`` estimate; None: none)."""
    incomplete: str | None = None
    """Why the answer was cut short by a limit (GA reason ``max_output_tokens``), if it was."""
    settled: Continuation | None = None
    """A gated call settled after the response that asked (continued here)."""
    mcp_calls: dict[str, str] = field(default_factory=dict)
    """The open ``mcp_call`` output items, by call id (their results close them)."""
    prompt: tuple[str, str] = ("", "")
    """What the brain was given (system, text); its size is estimated when the response ends,
    off the path to the first audio."""
    respond: bool = True
    """False: a spoken turn is only transcribed and journaled (``create_response: false``)."""
    tracker: PlayoutTracker = field(default_factory=PlayoutTracker)
    task: asyncio.Task[None] | None = None
    state: ResponseState = ResponseState.RECORDING
    cancelled: bool = False
    """An interruption was asked for (in whatever state the response was)."""
    marks: dict[str, float] = field(default_factory=dict)
    played_report: asyncio.Event = field(default_factory=asyncio.Event)
    pacer: Pacer | None = None
    preemption: Preemption | None = None
    """The brain's work started before the commit, streamed instead of a new call."""
    paused: bool = False
    """Held for a candidate interruption (``AnswerSpeaker.pause``)."""
    unpaused: asyncio.Event = field(default_factory=asyncio.Event)
    stage: str = "turn"
    """Where the response is (``asr``, ``journal``, ``context``, ``brain``, ``playout``,
    ``finalize`` — the answer's journal record …):
    a failure is reported with the stage it happened in (SPEC RT-11)."""
    stage_at: float = 0.0
    failed_stage: str | None = None
    """The stage of a failure inside ``speak``, where brain and TTS run side by side."""

    def enter(self, stage: str, now: float) -> None:
        self.stage, self.stage_at = stage, now

    def move(self, trigger: ResponseTrigger) -> None:
        """Rule 1: the one way the response's state changes."""
        target = RESPONSE_TRANSITIONS.get((self.state, trigger))
        if target is None:
            raise RuntimeError(f"response: {trigger.value} is not allowed in {self.state.value}")
        self.state = target

    @property
    def recording(self) -> bool:
        """Still transcribing/journaling the person's input: an interruption must not cancel
        that."""
        return self.state is ResponseState.RECORDING

    @property
    def created(self) -> bool:
        """``response.created`` was sent and ``response.done`` not yet."""
        return self.state in (ResponseState.ANSWERING, ResponseState.FINALIZING)

    @property
    def finalized(self) -> bool:
        """Its record is being written or its done was sent: nobody else finishes it."""
        return self.state in (ResponseState.FINALIZING, ResponseState.FINISHED)


__all__ = [
    "RESPONSE_TRANSITIONS",
    "CallOrigin",
    "Continuation",
    "PendingInput",
    "Response",
    "ResponseOptions",
    "ResponseState",
    "ResponseTrigger",
    "ToolGateHook",
    "ToolGateHost",
]
