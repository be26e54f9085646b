"""One response's way from the brain to the client: think → speak → pace → playout.

Theory of operation
-------------------
Rule 1. A ``Response`` is the state of one answer (its generation, its GA events, its playout
        tracker, its marks); the responder creates it at the commit and finishes it. Its life is
        ``ResponseState``, moved only through ``RESPONSE_TRANSITIONS``: RECORDING (the
        person's input is transcribed and journaled) → PREPARING (its context; nothing sent)
        → ANSWERING (``response.created`` sent) → FINALIZING (the answer's record) →
        FINISHED. FINISHED is reached once, from any other state, where ``response.done``
        was sent (or nothing was to be answered) — the responder's ``finish``, which also tells
        its owner the turn ended, once.
Rule 2. ``AnswerSpeaker.speak`` runs the brain through the shared tool loop in the calling
        task and TTS in a second one, connected by a bounded sentence queue (a
        ``SentenceSplitter`` hands each finished sentence on); audio is resampled to the
        session rate and paced to the client by a ``Pacer`` at most ``playout_lead_ms`` ahead
        of real time. The first frame reaches the socket after a single task switch.
Rule 3. Everything the speaker needs from the session comes through its ``SpeakerHost`` (the
        responder, ``pipeline/responder.py``): settings, plugins, persona, tools, the response
        defaults, the clock, sending events, the fence (``is_current``) and the first-audio
        notice.
Rule 4. A held response (``pause``/``resume``: a candidate interruption) sends nothing and
        does not end its playout until it is resumed or interrupted; brain and TTS work on
        into the bounded queues meanwhile.
Rule 5. Watchdogs: the brain may be silent at most ``brain_timeout_s`` (plus a tool's timeout,
        since tools run between a call and its result), TTS ``tts_timeout_s``; then
        ``PluginTimeout``. A failing stage cancels the others; the first failure is raised.
Rule 6. Tool permissions: the brain of a response is run with the gate the host gives for it
        (``SpeakerHost.tool_gate_for``, ``ToolGateHook``), so every call knows its
        generation (``CallOrigin``); cancelling the response cancels its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from journal.events import JournalEvent
from journal.tokens import count_tokens
from pipeline import events as ev
from pipeline.audio import PCM, duration_ms, resample
from pipeline.content import TurnContent
from pipeline.engine_config import EngineSettings, Persona, Plugins, ResponseDefaults
from pipeline.pacer import Pacer
from pipeline.playout import PlayoutTracker
from pipeline.preemption import Preemption
from pipeline.response_events import ResponseEvents
from pipeline.sentences import SentenceSplitter
from plugins.brain.tool_loop import ToolGate, ToolHandler, run_brain_with_tools
from plugins.contracts import (
    BrainDelta,
    BrainInput,
    SpeechChunk,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from plugins.errors import PluginTimeout
from plugins.language import has_cjk


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


class SpeakerHost(Protocol):
    """What the speaker needs from the session's responder (Rule 3)."""

    settings: EngineSettings
    plugins: Plugins
    persona: Persona
    tools: Mapping[str, ToolHandler]
    defaults: ResponseDefaults
    """The session's client functions, and who plays the answer out: whether the client
    pauses its playback when told to, whether its playback reports are exact (the server plays
    the audio out itself: WebRTC) — a response's playout then ends when they say so, within
    ``EXACT_PLAYOUT_GRACE_S`` of the estimate."""
    voice_session_id: str
    clock: Callable[[], float]

    def send_all(self, events: list[ev.ServerEvent]) -> None: ...

    def is_current(self, generation: int) -> bool: ...

    def audio_started(self, generation: int, now: float) -> None: ...

    def brain_finished(self, generation: int) -> None:
        """The brain of ``generation`` is done (TTS and playout need no language model)."""
        ...

    def audio_sent(self, pcm: PCM, now: float) -> None: ...

    async def journal_tool(self, response: Response, delta: BrainDelta) -> None: ...

    def tool_gate_for(self, response: Response) -> ToolGate | None:
        """The permission gate for ``response``'s tool calls (Rule 6), or None."""
        ...


class AnswerSpeaker:
    """Brain → sentences → TTS → paced frames for one engine's responses (Rule 2)."""

    def __init__(self, host: SpeakerHost) -> None:
        self.host = host

    async def speak(self, response: Response, content: TurnContent) -> None:
        """Brain → sentences → TTS → paced frames. The brain runs in this task, TTS in a
        second one, pacing in a third only once audio is ahead of real time, so the first
        frame reaches the socket after a single task switch."""
        sentences: asyncio.Queue[str | None] = asyncio.Queue(
            self.host.settings.max_sentences_queued
        )
        try:
            async with asyncio.TaskGroup() as group:
                pacer = self._pacer(response, group)
                group.create_task(self._synthesize(response, sentences, pacer))
                await self._think(response, content, sentences)
        except* Exception as failure:
            # Report the first failing stage; the TaskGroup already cancelled the others.
            raise failure.exceptions[0] from None

    async def say(self, response: Response, text: str) -> None:
        """Speak ``text`` as the rest of ``response`` (a failed turn's apology, SPEC RT-11):
        its transcript, then its audio paced like an answer's."""
        events = response.events
        if events.text and not events.text[-1].isspace() and not has_cjk(text):
            text = " " + text
        self.host.send_all(events.text_delta(text))
        sentences: asyncio.Queue[str | None] = asyncio.Queue(2)
        sentences.put_nowait(text.strip())
        sentences.put_nowait(None)
        async with asyncio.TaskGroup() as group:
            await self._synthesize(response, sentences, self._pacer(response, group))

    def _pacer(self, response: Response, group: asyncio.TaskGroup) -> Pacer:
        settings = self.host.settings
        generation = response.generation
        pacer = Pacer(
            tracker=response.tracker,
            clock=self.host.clock,
            group=group,
            is_current=lambda: self.host.is_current(generation),
            send=lambda frame, now: self.send_frame(response, frame, now),
            lead_ms=settings.playout_lead_ms,
            frame_ms=settings.frame_ms,
            message_ms=settings.max_audio_message_ms,
        )
        if response.paused:
            pacer.pause()
        response.pacer = pacer
        return pacer

    async def _think(
        self, response: Response, content: TurnContent, sentences: asyncio.Queue[str | None]
    ) -> None:
        splitter = SentenceSplitter()
        request = dataclasses.replace(
            content.to_brain_input(session=self.host.voice_session_id),
            tool_calls=response.tool_calls,
            tool_results=response.tool_results,
        )
        response.prompt = (request.system, request.model_text)
        preempted = response.preemption
        stream = (
            preempted.stream()
            if preempted is not None
            else self.brain_stream(
                request, self.host.tool_gate_for(response), client_tools=response.client_tools
            )
        )
        events = response.events
        # Tools run between a call and its result: the brain's idle watchdog must outlast them.
        idle = self.host.settings.brain_timeout_s + self.host.settings.tool_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(idle) as watchdog:
                async for delta in stream:
                    watchdog.reschedule(loop.time() + idle)
                    if delta.tool_call is not None or delta.tool_result is not None:
                        response.failed_stage = "journal"  # the call's journal write
                        await self.host.journal_tool(response, delta)
                        response.failed_stage = None
                        continue
                    text = delta.text
                    if response.max_output_tokens is not None:
                        text = within_limit(events.text, text, response.max_output_tokens)
                        if text != delta.text:
                            response.incomplete = "max_output_tokens"
                    if text:
                        if "brain_first_token" not in response.marks:
                            response.marks["brain_first_token"] = self.host.clock()
                        self.host.send_all(events.text_delta(text))
                        pieces = splitter.feed(text) if events.audio else []
                        if delta.speak_now and events.audio:
                            pieces += splitter.cut()  # the brain's opening words: said at once
                        for sentence in pieces:
                            watchdog.reschedule(None)
                            await sentences.put(sentence)
                            watchdog.reschedule(loop.time() + idle)
                        if pieces:
                            # The synthesiser takes the sentence before this loop sends more
                            # text: a brain that streams faster than the loop turns would
                            # otherwise have every delta written before the first audio.
                            await asyncio.sleep(0)
                    if response.incomplete is not None:
                        break  # the limit is reached: the brain stops (closed below)
        except TimeoutError as e:
            response.failed_stage = _brain_stage(response)
            raise PluginTimeout(f"brain was silent for more than {idle}s") from e
        except Exception:
            response.failed_stage = response.failed_stage or _brain_stage(response)
            raise
        finally:
            await aclose(stream)
        self.host.brain_finished(response.generation)
        for sentence in splitter.flush() if events.audio else ():
            await sentences.put(sentence)
        await sentences.put(None)

    def brain_stream(
        self,
        request: BrainInput,
        gate: ToolGate | None = None,
        *,
        client_tools: tuple[ToolSpec, ...] | None = None,
    ) -> AsyncIterator[BrainDelta]:
        """The brain through the shared tool loop (the session's server tools and the client's
        functions — ``client_tools``, the session's by default — each call decided by ``gate``
        first when there is one: Rule 6)."""
        if client_tools is None:
            client_tools = self.host.defaults.client_tools
        return run_brain_with_tools(
            self.host.plugins.brain,
            request,
            self.host.tools,
            max_rounds=self.host.settings.max_tool_rounds,
            tool_timeout=self.host.settings.tool_timeout_s,
            client_tools=frozenset(t.name for t in client_tools),
            gate=gate,
        )

    async def _synthesize(
        self, response: Response, sentences: asyncio.Queue[str | None], pacer: Pacer
    ) -> None:
        rate = self.host.settings.output_sample_rate
        frame_samples = rate * self.host.settings.frame_ms // 1000
        tracker = response.tracker
        pending = np.zeros(0, dtype=np.int16)
        idle = self.host.settings.tts_timeout_s
        loop = asyncio.get_running_loop()
        while (sentence := await sentences.get()) is not None:
            tracker.add_sentence(sentence)
            stream = self.host.plugins.tts.stream(
                sentence, voice=self.host.persona.voice, language=self.host.persona.language
            )
            try:
                async with asyncio.timeout(idle) as watchdog:
                    async for chunk in stream:
                        pcm = self._to_output_rate(chunk)
                        if pcm.size == 0:
                            continue
                        tracker.add_audio(duration_ms(pcm.size, rate), chunk.words)
                        if "tts_first_audio" not in response.marks:
                            response.marks["tts_first_audio"] = self.host.clock()
                        pending = np.concatenate((pending, pcm)) if pending.size else pcm
                        whole = pending.size - pending.size % frame_samples
                        for start in range(0, whole, frame_samples):
                            pacer.push(pending[start : start + frame_samples])
                        pending = pending[whole:]
                        if pacer.backlog > self.host.settings.max_frames_queued:
                            watchdog.reschedule(None)
                            await pacer.wait_for_room(self.host.settings.max_frames_queued // 2)
                        watchdog.reschedule(loop.time() + idle)
            except TimeoutError as e:
                response.failed_stage = "tts"
                raise PluginTimeout(f"TTS was silent for more than {idle}s") from e
            except Exception:
                response.failed_stage = "tts"
                raise
            finally:
                await aclose(stream)
        if pending.size:
            pacer.push(pending)
        await pacer.finish()

    def send_frame(self, response: Response, frame: PCM, now: float) -> None:
        """Write one message of a response's audio (the pacer decides when)."""
        tracker = response.tracker
        first = tracker.first_sent_at is None
        self.host.send_all(response.events.audio_delta(frame.tobytes()))
        self.host.audio_sent(frame, now)
        tracker.on_sent(duration_ms(frame.size, self.host.settings.output_sample_rate), now)
        if first:
            response.marks["first_audio_sent"] = now
            self.host.audio_started(response.generation, now)
            self.host.send_all([latency_event(response)])

    def _to_output_rate(self, chunk: SpeechChunk) -> PCM:
        return resample(chunk.pcm, chunk.sample_rate, self.host.settings.output_sample_rate)

    def pause(self, response: Response, now: float) -> None:
        """Hold ``response``: nothing more is sent and its playout does not end until
        ``resume`` (the playback estimate pauses too if the client pauses with us)."""
        if response.paused:
            return
        response.paused = True
        response.unpaused.clear()
        response.tracker.pause(now, client_pauses=self.host.defaults.client_pauses_playback)
        if response.pacer is not None:
            response.pacer.pause()

    def resume(self, response: Response, now: float) -> None:
        if not response.paused:
            return
        response.paused = False
        response.tracker.resume(now)
        response.unpaused.set()
        if response.pacer is not None:
            response.pacer.resume()

    async def await_playout(self, response: Response) -> None:
        tracker = response.tracker
        while True:
            if response.paused:
                await response.unpaused.wait()
                continue
            end = tracker.playout_end()
            if end is None:
                return
            if self.host.defaults.exact_playout:
                end += EXACT_PLAYOUT_GRACE_S
            if tracker.client_played_ms is not None and tracker.client_played_ms >= tracker.sent_ms:
                return
            remaining = end - self.host.clock()
            if remaining <= 1e-6:  # within the loop's clock resolution it has passed
                return
            response.played_report.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(response.played_report.wait(), remaining)


def _brain_stage(response: Response) -> str:
    """``brain`` before the first token, ``brain_stream`` after it."""
    return "brain_stream" if "brain_first_token" in response.marks else "brain"


EXACT_PLAYOUT_GRACE_S = 0.5
"""How long past the real-time estimate a response waits for exact reports of its playout
(a media track that started late, or lags behind the estimate)."""


def latency_event(response: Response) -> ev.TurnLatency:
    """The extension event of a response's latency marks (``openrealtime.turn.latency``)."""
    marks = response.marks
    origin = marks.get("vad_end", marks["committed"])
    names = ("committed", "asr_started", "asr_done", "asr_final", "brain_first_token",
             "tts_first_audio", "first_audio_sent")  # fmt: skip
    return ev.TurnLatency(
        response_id=response.response_id,
        generation=response.generation,
        latency_ms={
            name: round((marks[name] - origin) * 1000.0, 2) for name in names if name in marks
        },
        origin="vad_end" if "vad_end" in marks else "committed",
        preempted=response.preemption is not None,
    )


def usage(prompt: tuple[str, str], output: str) -> ev.Usage:
    """Token usage as far as we know it: both sides estimated with ``journal.tokens`` (the
    brain plugins do not report counts)."""
    input_tokens = sum(count_tokens(part) for part in prompt if part)
    output_tokens = count_tokens(output) if output else 0
    return ev.Usage(input_tokens + output_tokens, input_tokens, output_tokens)


def within_limit(said: str, more: str, limit: int) -> str:
    """The part of ``more`` that keeps ``said + more`` within ``limit`` tokens (the
    ``journal.tokens`` estimate ``usage`` reports): all of it, or its longest prefix that
    fits, cut where a word or a CJK character ends."""
    if count_tokens(said + more) <= limit:
        return more
    fits = 0
    for end in range(1, len(more) + 1):
        if end < len(more) and not _ends_word(more, end):
            continue
        if count_tokens(said + more[:end]) > limit:
            break
        fits = end
    return more[:fits].rstrip()


def _ends_word(text: str, end: int) -> bool:
    before, after = text[end - 1], text[end]
    return not (before.isalnum() and after.isalnum()) or has_cjk(before) or has_cjk(after)


async def aclose(stream: object) -> None:
    """Close an async iterator now (and the HTTP stream or model work behind it)."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


__all__ = [
    "AnswerSpeaker",
    "CallOrigin",
    "Continuation",
    "ToolGateHook",
    "ToolGateHost",
    "PendingInput",
    "Response",
    "ResponseOptions",
    "SpeakerHost",
    "latency_event",
    "usage",
]
