"""Plugin contracts: VAD, endpointing, ASR, brain, TTS.

Each contract is a small ``typing.Protocol``. Implementations are async, cancellable (a
cancelled task must leave the plugin usable for the next call) and never block the event loop:
CPU-heavy work runs in a bounded worker pool. Every stage has an embedded, offline default and a
fake (``plugins.fakes``) that takes a script and can be told to be slow, fail or time out.

Per-session state lives in *streams* created by the plugin (``VAD.create_stream``), so one loaded
model serves many sessions.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from plugins.audio import PCM, WordTiming

# ---------------------------------------------------------------- VAD


class VADEventKind(enum.Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"


@dataclass(frozen=True, slots=True)
class VADEvent:
    """A decision of the VAD. ``at_ms`` is the position in the input audio stream where the
    speech started or ended (earlier than the frame that made the VAD decide)."""

    kind: VADEventKind
    at_ms: float


@runtime_checkable
class VADStream(Protocol):
    async def process(self, pcm: PCM) -> Sequence[VADEvent]:
        """Feed 16 kHz audio (any length); returns the decisions it caused, in order."""
        ...

    def reset(self) -> None:
        """Forget the current speech state (used when the microphone is paused)."""
        ...

    @property
    def voiced(self) -> bool:
        """Whether the latest audio window was voiced, before any hysteresis. The barge-in
        rule uses it to tell continuing speech from a short noise the VAD has not closed yet."""
        ...


@runtime_checkable
class VAD(Protocol):
    def create_stream(self) -> VADStream: ...


# ---------------------------------------------------------------- endpointing


@dataclass(frozen=True, slots=True)
class EndpointVerdict:
    """Whether an utterance sounds finished. ``complete=None`` means "no opinion" and the
    coordinator falls back to its silence timer."""

    complete: bool | None
    probability: float = 0.0


@runtime_checkable
class Endpointer(Protocol):
    async def predict(self, utterance: PCM) -> EndpointVerdict:
        """Judge the user's utterance (16 kHz audio up to the end of speech)."""
        ...


# ---------------------------------------------------------------- ASR


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    language: str | None = None
    final: bool = True


@runtime_checkable
class ASR(Protocol):
    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        """Transcribe one utterance of 16 kHz audio."""
        ...


# ---------------------------------------------------------------- brain


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool = False
    """No effects outside the answer (a search): it may run before the turn is committed."""
    private: bool = False
    """What it is given and answers is kept only by the tool, sealed (``confide``): the journal
    keeps the call and its result without them (``pipeline.tool_record`` Rule 4)."""


ToolChoiceMode = Literal["auto", "none", "required", "function"]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """How the brain may call the offered function tools (GA ``tool_choice``): ``auto`` (it
    decides), ``none`` (it answers in words), ``required`` (it calls one), ``function`` (it
    calls ``name``). Server-side built-ins (the knowledge search) are the brain's own business
    and not counted as function tools."""

    mode: ToolChoiceMode = "auto"
    name: str = ""

    @classmethod
    def from_ga(cls, value: str | Mapping[str, Any] | None) -> ToolChoice:
        """The GA value (``"auto"``, ``"none"``, ``"required"`` or ``{"type": "function",
        "name": …}``); None is ``auto``."""
        if value is None or value == "auto":
            return cls()
        if value == "none":
            return cls("none")
        if value == "required":
            return cls("required")
        if isinstance(value, Mapping) and value.get("type") == "function":
            return cls("function", str(value.get("name", "")))
        raise ValueError(f"not a tool_choice: {value!r}")


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call returned. ``is_error`` marks a failure the brain is told about in
    ``content`` (unknown tool, the handler raised or timed out)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


HistoryRole = Literal["user", "assistant", "tool_call", "tool_result", "summary"]


@dataclass(frozen=True, slots=True)
class HistoryTurn:
    """One entry of the conversation before the current input (``BrainInput.history``): one
    journal event, or the verified summary that stands in for older ones. The history holds the
    same entries, within the same budget, as the rendered ``conversation_context``, one per line
    and in the same order (``journal.projection`` renders each turn as its line).

    ``text`` is on one line (whitespace collapsed): what the person said; what the assistant
    said (of an interrupted output only what the person heard); a tool call's arguments as
    JSON; a tool result's content; the summary of the earlier conversation."""

    role: HistoryRole
    text: str
    tool: str = ""
    """The tool's name (``tool_call`` and ``tool_result``)."""
    interrupted: bool = False
    """An assistant output the person cut off: ``text`` is the part they heard."""

    @property
    def line_text(self) -> str:
        """``text`` as the turn's line shows it: an interrupted output ends with `` …``."""
        return f"{self.text} …" if self.interrupted else self.text


@dataclass(frozen=True, slots=True)
class BrainInput:
    """What the brain sees for one response. ``model_text`` is history + current input rendered
    as one user message; ``system`` holds role instructions and ``<memory_data>``.

    In a tool round ``tool_calls`` holds the calls the brain made in earlier rounds of this
    response (in order) and ``tool_results`` their results (see ``plugins.brain.tool_loop``)."""

    system: str
    model_text: str
    current_input: str
    language: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    conversation_context: str = ""
    """The history part of ``model_text`` alone (one line per event, see
    ``journal.projection``)."""
    history: tuple[HistoryTurn, ...] = ()
    """The same history as turns, oldest first: what a brain reads the conversation from (a
    brain that lays it out as chat messages, or looks back at what the person said)."""
    session: str = ""
    """The voice session asking (a shared model serves sessions fairly by it)."""
    tool_choice: ToolChoice = ToolChoice()
    """How the offered function tools may be called (GA ``tool_choice``)."""
    max_output_tokens: int | None = None
    """The response's output limit (GA ``max_output_tokens``; None: no limit). The engine
    enforces it; a brain may use it to stop generating early."""
    instructions: str = ""
    """``system``'s parts, apart: the role's (or response's) instructions, the person's
    ``<memory_data>`` block and the thread's facts (a brain outside the process gets them as
    fields: ``plugins.brain.http_agent``)."""
    memory_data: str = ""
    thread_memory: str = ""
    role_id: str = ""
    thread_id: str = ""
    response_id: str = ""
    """The response being answered (every tool round of it has the same)."""
    turn_id: int | None = None


@dataclass(frozen=True, slots=True)
class BrainDelta:
    """A piece of the brain's answer: text to speak, or a tool call to run. ``tool_result`` is
    set only by the tool loop (``plugins.brain.tool_loop``), never by a brain: it reports what a
    tool returned so the caller can journal it."""

    text: str = ""
    tool_call: ToolCall | None = None
    tool_result: ToolResult | None = None
    speak_now: bool = False
    """The answer so far is a piece to speak at once, not held for the sentence's end: the
    brain's own opening words ("Okay, ", "According to the guide, "), said while its model is
    still writing the rest."""


@runtime_checkable
class Brain(Protocol):
    def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        """Stream the answer. Cancelling the consuming task must stop the work."""
        ...


# ---------------------------------------------------------------- TTS


@dataclass(frozen=True, slots=True)
class SpeechChunk:
    """Synthesised audio for (part of) one sentence. ``words`` are relative to this chunk's
    start and index into the sentence text given to ``TTS.stream``."""

    pcm: PCM
    sample_rate: int
    words: tuple[WordTiming, ...] = field(default_factory=tuple)


@runtime_checkable
class TTS(Protocol):
    def stream(
        self, text: str, *, voice: str | None, language: str | None
    ) -> AsyncIterator[SpeechChunk]:
        """Synthesise one sentence or clause, streaming chunks as they are ready."""
        ...
