"""The engine's configuration and its collaborators' contracts (kept apart so the response
module and the engine can share them without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from pipeline import events as ev
from pipeline.audio import PCM
from pipeline.turn_commands import TurnSettings
from plugins.contracts import ASR, TTS, VAD, Brain, Endpointer, ToolChoice, ToolSpec


class OutputSink(Protocol):
    """Where the engine's output goes (the voice session's ordered outbox)."""

    def send(self, event: ev.ServerEvent) -> None: ...


class TurnMemory(Protocol):
    """Long-term memory for one session (``memory.session.SessionMemory``): ``read`` starts
    when a turn starts and its block goes into the system prompt; ``on_user_final`` runs after
    each journaled final user message. Neither may fail the turn."""

    async def read(self) -> str | None: ...

    async def on_user_final(
        self, text: str, *, thread_id: str, seq: int | None, at: datetime
    ) -> None: ...


class InputEnrichment(Protocol):
    """Input enrichment for one session (``runtime.enrichment.SessionEnrichment``, SPEC RM-5):
    ``rewrite`` gets a turn's input when it is the person's own words (never a continuation, a
    client's out-of-band input or a notice) with its journal position, and gives the text the
    brain sees as the current input instead, or None (the input as said). It bounds its own
    wait and never raises; cancelling it (a barge-in) cancels its model call."""

    async def rewrite(self, text: str, *, seq: int) -> str | None: ...


class ThreadMemoryHook(Protocol):
    """The thread's learned facts for one session (``runtime.thread_memory.ThreadMemoryHook``):
    ``read`` gives the block a turn is shown (or None); ``after_turn`` starts learning from the
    finished turn in the background. Neither may fail the turn."""

    async def read(self, language: str | None) -> str | None: ...

    def after_turn(self) -> object: ...

    async def close(self) -> None: ...


class ModelHold(Protocol):
    """The shared model's foreground signal (``LocalModel.hold``/``release``, SPEC RT-11): the
    session's person is mid-turn — speaking, waiting or being answered — so background model
    work yields and none starts; ``release`` when the answer is generated."""

    def hold(self, lane: str) -> None: ...

    def release(self, lane: str) -> None: ...


class AudioTap(Protocol):
    """Both sides of the conversation as the session has them (a recording, SPEC REC-2,
    REC-3): every input frame as received (16 kHz), and every event the session sends — the
    answer's audio (at the session's output rate) and its end, an interruption, the person's
    speech and what was heard, the answer's transcript."""

    def heard(self, pcm: PCM) -> None: ...

    def sent(self, event: ev.ServerEvent) -> None: ...


class HeldModel:
    """One session's side of the ``ModelHold``: holds and releases only on a change."""

    def __init__(self, hold: ModelHold | None, lane: str) -> None:
        self.hold = hold
        self.lane = lane
        self._held = False

    def sync(self, busy: bool) -> bool:
        """True when this call took the hold."""
        if self.hold is None or busy == self._held:
            return False
        self._held = busy
        if busy:
            self.hold.hold(self.lane)
        else:
            self.hold.release(self.lane)
        return busy


@dataclass(frozen=True, slots=True)
class Plugins:
    vad: VAD
    asr: ASR
    brain: Brain
    tts: TTS
    endpointer: Endpointer | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    output_sample_rate: int = 24_000
    frame_ms: int = 40
    """Granularity of response audio (the first message is one frame)."""
    max_audio_message_ms: int = 120
    """Once audio runs ahead of real time, frames are sent in messages of up to this long."""
    playout_lead_ms: float = 300.0
    """How far ahead of real-time playback the server may send audio."""
    preroll_ms: float = 1_500.0
    """Audio kept from before the VAD's speech start (covers VAD and barge-in latency)."""
    max_utterance_s: float = 60.0
    speculate_after_ms: float | None = 150.0
    """Quiet this long inside an utterance starts the speculative transcription (None: wait
    for the VAD's end of speech)."""
    partial_every_s: float | None = 2.5
    """During long speech, a partial transcript this often (None: never)."""
    asr_timeout_s: float = 30.0
    brain_timeout_s: float = 30.0
    tts_timeout_s: float = 30.0
    heard_report_wait_s: float = 0.5
    """After an interruption, how long to wait for the client's playback report."""
    memory_read_timeout_s: float = 1.0
    """How long a turn waits for its long-term memory read (then goes on without it)."""
    enrichment_timeout_s: float = 16.0
    """The most a turn waits for its input's enrichment (the hook bounds itself at 15 s, SPEC
    RM-6; this guards one that does not): then the input goes on as said."""
    max_tool_rounds: int = 4
    tool_timeout_s: float = 10.0
    history_events: int = 200
    """While the journal is unreachable: how many recent events the brain still sees."""
    max_sentences_queued: int = 16
    max_frames_queued: int = 750
    """Synthesised audio waiting to be paced out (750 × 40 ms = 30 s); TTS waits beyond it."""
    turns: TurnSettings = field(default_factory=TurnSettings)
    echo_guard: bool = True
    """Judge every microphone frame against the answer's audio (``pipeline.echo``) so the
    assistant's own voice coming back through the microphone never interrupts it."""
    preemptive: bool = True
    """Start the brain on the speculative transcript during the endpoint wait
    (``pipeline.preemption``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSetup:
    """What a voice session's configuration (GA ``session.update``) sets on its engine, all at
    once (``Engine.configure``)."""

    instructions: str
    voice: str | None
    audio_out: bool
    """Output modalities: audio with a transcript (True) or text only."""
    client_tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    max_output_tokens: int | None
    auto_respond: bool
    """A spoken turn the VAD ends starts a response (``create_response``)."""
    turns: TurnSettings
    idle_timeout_s: float | None
    vad_threshold: float | None
    prefix_padding_ms: int | None
    output_sample_rate: int


Offer = tuple[tuple[ToolSpec, ...], ToolChoice, int | None]
"""What a response offers the brain: client functions, tool choice, output limit."""


@dataclass(slots=True)
class ResponseDefaults:
    """What a response uses unless its ``response.create`` sets its own — the session's, from
    its configuration (``apply``) — and who plays it out."""

    audio_out: bool = True
    """The session's output modalities: audio with a transcript (True) or text only."""
    auto_respond: bool = True
    """A spoken turn the VAD ends starts a response (server_vad ``create_response``)."""
    client_tools: tuple[ToolSpec, ...] = ()
    """Functions the client declared (``session.update`` tools); the client runs them."""
    tool_choice: ToolChoice = ToolChoice()
    max_output_tokens: int | None = None
    """The output limit per response (None: none)."""
    client_pauses_playback: bool = False
    """The client pauses and resumes its playback on ``openrealtime.output_audio.paused`` /
    ``resumed`` (our own clients do); otherwise a held answer's buffered audio plays out."""
    exact_playout: bool = False
    """Playback reports are exact (a WebRTC call's server-side track sends them): playout
    ends on the report, not on the estimate (``pipeline.speaker``)."""

    def offer(
        self,
        tools: tuple[ToolSpec, ...] | None,
        choice: ToolChoice | None,
        limit: int | Literal["inf"] | None,
    ) -> Offer:
        """A response's client functions, tool choice and output limit: its own where
        ``response.create`` set them (not None), else these; ``tool_choice: none`` offers no
        function (the brain answers in words; server built-ins such as the knowledge search
        stay); an ``inf`` limit is none."""
        choice = choice or self.tool_choice
        tools = self.client_tools if tools is None else tools
        tokens = self.max_output_tokens if limit is None else None if limit == "inf" else limit
        return (() if choice.mode == "none" else tools), choice, tokens

    def apply(self, setup: SessionSetup) -> None:
        self.audio_out = setup.audio_out
        self.auto_respond = setup.auto_respond
        self.client_tools = setup.client_tools
        self.tool_choice = setup.tool_choice
        self.max_output_tokens = setup.max_output_tokens


@dataclass(frozen=True, slots=True)
class Persona:
    """What the role contributes to a session (frozen at session start)."""

    instructions: str
    voice: str | None = None
    language: str | None = None
    failure_message: str | None = None
    """What a failed spoken turn says instead of silence (SPEC RT-11): None, the default in
    the turn's language (``FAILURE_MESSAGES``); empty, nothing."""
    role_id: str = ""
    """The role's id (a brain outside the process is told which role it answers as)."""


FAILURE_MESSAGES = {
    "en": "Sorry, I lost that — could you say it again?",
    "zh": "抱歉，我没跟上，能再说一遍吗？",
}
"""The default apology of a failed spoken turn, per language (SPEC RT-11)."""


@dataclass(frozen=True, slots=True)
class TurnFailure:
    """One failed turn, as the operator sees it (ids, stage, code, timings; never content)."""

    turn_id: int
    generation: int
    response_id: str
    stage: str
    code: str
    retryable: bool
    waited_ms: float
    """How long the failing stage had been running."""
    elapsed_ms: float
    """From the turn's commit to the failure."""


__all__ = [
    "FAILURE_MESSAGES",
    "EngineSettings",
    "InputEnrichment",
    "ModelHold",
    "OutputSink",
    "Persona",
    "Plugins",
    "ResponseDefaults",
    "TurnFailure",
    "TurnMemory",
]
