"""The cascaded engine: asyncio glue between the transport, the plugins and the coordinator.

Theory of operation
-------------------
Input audio goes to the VAD inline (it is cheap per frame); VAD decisions and voiced frames go to
the ``TurnCoordinator``; the engine executes the commands it returns and keeps one timer armed
for ``coordinator.next_deadline()``. The microphone buffer, the utterance and all transcription
(speculative at pauses, partial during long speech) live in ``SpeechCapture``
(``pipeline/capture.py``); at a confirmed pause the engine also asks the endpointing model,
and reads the cue (``pipeline/endpoint_cues.py``) of the pause's speculative transcript when it
is ready: both go to the coordinator, whose endpoint deadline follows them.

Each response is one task: it journals the user's input (an interruption cannot cancel that
part), projects the thread's history within the budget (``ConversationHistory``) — while
the session's long-term memory (``TurnMemory``) is read beside it for the system prompt, bounded
by ``memory_read_timeout_s``, and each journaled final user message goes to memory extraction in
a task of its own, so memory never holds or fails a turn; the person's words may reach the
brain rewritten by the session's ``InputEnrichment`` (SPEC RM-5, bounded by
``enrichment_timeout_s``; the journal keeps what was said) — then hands the answer to the
``AnswerSpeaker`` (``pipeline/response.py``: brain through the shared tool loop, sentences, TTS,
pacing), awaits its playout and finalizes it. ``Interrupt`` cancels the task at once; the pacer
and the session's outbox both check that the generation is still current, so nothing of an
interrupted response is sent after the interruption event. The heard prefix comes from the
``PlayoutTracker`` (client playback reports or a GA client's truncate, else a real-time
estimate) and is what the journal keeps. After each response the thread is compacted if it grew
past its threshold.

One clock. Every time the engine reads (``clock``, by default ``loop_time``) and every wait —
the coordinator's timer, the pacer's sleeps, the brain/TTS/ASR watchdogs, the idle timer — is
the event loop's, so a ``tests.virtual_time.VirtualTimeLoop`` runs whole conversations in
virtual time. A ``clock`` passed in must be that loop's clock (tests pass ``loop.time``).

The GA conversation (``pipeline/events.py``): user items added with ``add_user_text`` wait for
``create_response``; spoken turns are items too; every item announced is kept
(``pipeline/items.py``) for retrieve, delete (a journal tombstone) and truncate; a client
function call ends its response and ``add_function_output`` + ``create_response`` continue it.

Tool permissions (``tool_gate``, ``runtime.tool_gate``): every call of a response is decided
by the gate bound to that response's generation before it runs or reaches the client; a
question for the person ends the response, the person's next words are offered to the gate
first (``ToolGateHook.answer``), and a call settled after its response ended continues the turn
(``continue_with``) as a client function's output does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from journal.errors import JournalError, WriterFenced
from journal.events import ThreadRef
from journal.store import JournalStore
from pipeline import events as ev
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.backchannel import is_real_turn
from pipeline.capture import SpeechCapture, Utterance
from pipeline.content import TurnContent
from pipeline.conversation import Conversation
from pipeline.echo import EchoGuard
from pipeline.echo_path import EchoPath
from pipeline.endpoint_cues import Cue, transcript_cue
from pipeline.engine_config import (
    FAILURE_MESSAGES,
    EngineSettings,
    InputEnrichment,
    ModelHold,
    OutputSink,
    Persona,
    Plugins,
    SessionSetup,
    ThreadMemoryHook,
    TurnFailure,
    TurnMemory,
)
from pipeline.history import ConversationHistory
from pipeline.items import ConversationItems, ItemNotFound, TruncatedBeyondAudio
from pipeline.listening import Listening
from pipeline.preemption import Preemption
from pipeline.response import (
    AnswerSpeaker,
    CallOrigin,
    Continuation,
    PendingInput,
    Response,
    ResponseOptions,
    ResponseState,
    ResponseTrigger,
    ToolGateHook,
    usage,
)
from pipeline.response_events import ResponseEvents
from pipeline.tool_record import ToolRecord
from pipeline.turn_context import ALL_HISTORY, TurnContextReader
from pipeline.turns import (
    Command,
    CommitUserTurn,
    DropUtterance,
    Interrupt,
    JudgeInterruption,
    PauseResponse,
    ResumeResponse,
    TurnCoordinator,
    TurnState,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from plugins.brain.tool_loop import ToolGate, ToolHandler
from plugins.contracts import (
    BrainDelta,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
    Transcript,
    VADEventKind,
)
from plugins.errors import PluginError
from plugins.language import detect_language

log = logging.getLogger(__name__)

_UVLOOP: type | None
try:
    from uvloop import Loop as _UVLOOP
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    _UVLOOP = None


_TURN_STATES = frozenset({TurnState.ENDPOINTING, TurnState.THINKING, TurnState.SPEAKING})


def loop_time() -> float:
    """The running event loop's clock: the engine's one clock (module docstring).

    uvloop's ``time()`` counts whole milliseconds, read once per loop iteration: a turn's
    marks taken with it were rounded to the millisecond (a 2.4 ms turn read 2 or 3) and late
    by the iteration's work. Its clock is ``CLOCK_MONOTONIC``, as ``time.monotonic`` is, so on
    uvloop the engine reads that directly (timers still fire on the loop's own reading, at most
    a millisecond behind). Any other loop — the virtual-time loop of the tests — is read as it
    is."""
    loop = asyncio.get_running_loop()
    if type(loop) is _UVLOOP:
        return time.monotonic()
    return loop.time()


HOLD_SPECULATE_MS = 40.0
"""Quiet after which a held sound is transcribed (two frames: sooner than a turn's pause)."""

_GA_REASONS = {"barge_in": "turn_detected", "cancel": "client_cancelled",
               "text_input": "client_cancelled"}  # fmt: skip
"""Our interruption reasons as the GA protocol's ``status_details.reason``."""


class Engine:
    def __init__(
        self,
        *,
        plugins: Plugins,
        sink: OutputSink,
        journal: JournalStore,
        thread: ThreadRef,
        persona: Persona,
        voice_session_id: str,
        settings: EngineSettings | None = None,
        clock: Callable[[], float] | None = None,
        tools: Mapping[str, ToolHandler] | None = None,
        tool_specs: tuple[ToolSpec, ...] = (),
        history: ConversationHistory | None = None,
        incarnation: int = 0,
        memory: TurnMemory | None = None,
        thread_memory: ThreadMemoryHook | None = None,
        enrichment: InputEnrichment | None = None,
        on_turn_end: Callable[[], None] | None = None,
        tool_gate: ToolGateHook | None = None,
        model_hold: ModelHold | None = None,
        on_turn_failed: Callable[[TurnFailure], None] | None = None,
    ) -> None:
        self.plugins = plugins
        self.on_turn_failed = on_turn_failed
        """Told of every failed turn (the session's log, metrics and system page)."""
        self.model_hold = model_hold
        """Told when this session's person is mid-turn (background model work yields)."""
        self._held = False
        self._thinking: set[int] = set()
        """Generations whose brain is still at work (the model is theirs)."""
        self.tool_gate = tool_gate
        """Decides the calls of gated tools (module docstring); None: every call runs."""
        self.on_turn_end = on_turn_end
        """Called when a response ends, however it ends (role memory's learning waits for it)."""
        self.memory = memory
        self.thread_memory = thread_memory
        self.history = history or ConversationHistory(journal)
        self.tools: Mapping[str, ToolHandler] = tools or {}
        self.tool_specs = tool_specs
        self.sink = sink
        self.thread = thread
        self.persona = persona
        self.voice_session_id = voice_session_id
        self.conversation = Conversation(
            journal=journal,
            thread=thread,
            voice_session_id=voice_session_id,
            incarnation=incarnation,
            send=self._send,
            spawn=self._spawn,
            memory=memory,
        )
        self.settings = settings or EngineSettings()
        self.context = TurnContextReader(
            journal=journal,
            history=self.history,
            thread=thread,
            settings=self.settings,
            enrichment=enrichment,
            thread_memory=thread_memory,
        )
        self.clock = clock or loop_time
        self.coordinator = TurnCoordinator(
            self.settings.turns, end_of_turn_model=plugins.endpointer is not None
        )
        self.echo_path = EchoPath(
            self.settings.output_sample_rate, enabled=self.settings.echo_guard
        )
        settings = self.settings
        self.capture = SpeechCapture(
            asr=plugins.asr,
            clock=self.clock,
            spawn=self._spawn,
            on_partial=self._emit_partial,
            language=persona.language,
            preroll_ms=settings.preroll_ms,
            max_utterance_s=settings.max_utterance_s,
            asr_timeout_s=settings.asr_timeout_s,
            speculate_after_ms=settings.speculate_after_ms,
            partial_every_s=settings.partial_every_s,
        )
        self.listening = Listening(
            plugins.vad.create_stream(),
            self.echo_path,
            self.capture,
            clock=self.clock,
            preroll_floor_ms=settings.preroll_ms,
        )
        self._responses: dict[int, Response] = {}
        self.audio_out = True
        """The session's output modalities: audio with a transcript (True) or text only."""
        self.auto_respond = True
        """A spoken turn the VAD ends starts a response (server_vad ``create_response``)."""
        self.client_pauses_playback = False
        """The client pauses and resumes its playback on ``openrealtime.output_audio.paused`` /
        ``resumed`` (our own clients do); otherwise a held answer's buffered audio plays out."""
        self.exact_playout = False
        """Playback reports are exact (a WebRTC call's server-side track sends them): playout
        ends on the report, not on the estimate (``pipeline.response``)."""
        self.client_tools: tuple[ToolSpec, ...] = ()
        """Functions the client declared (``session.update`` tools); the client runs them. A
        response may offer its own instead."""
        self.tool_choice = ToolChoice()
        """The session's ``tool_choice``; a response may set its own."""
        self.max_output_tokens: int | None = None
        """The session's output limit per response (None: none); a response may set its own."""
        self._pending: list[PendingInput] = []
        self._exchange: tuple[tuple[ToolCall, ...], dict[str, ToolResult], str] | None = None
        """The last response's client calls, the outputs received so far, and its input."""
        self._settled: Continuation | None = None
        """A gated call settled after its response ended, for the next typed response."""
        self.items = ConversationItems()
        """This session's items as announced (``retrieve``/``delete``/``truncate``)."""
        self.tool_record = ToolRecord(
            items=self.items,
            send=self._send,
            send_all=self.send_all,
            append=self.conversation.append,
            new_item_id=self.conversation.new_item_id,
            gate=tool_gate,
            private=frozenset(t.name for t in tool_specs if t.private),
        )
        self._last_input = ""
        self._last_input_seq: int | None = None
        self._partials: dict[int, str] = {}
        self._next_options: ResponseOptions | None = None
        self.idle_timeout_s: float | None = None
        """GA ``idle_timeout_ms``: quiet this long after an answer → ``timeout_triggered``."""
        self._idle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.speaker = AnswerSpeaker(self)
        self._preemption: Preemption | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: float | None = None
        self._closed = False
        if tool_gate is not None:
            tool_gate.bind(self)

    # ------------------------------------------------------------ input

    async def push_audio(self, pcm: PCM) -> None:
        """One frame of 16 kHz microphone audio."""
        if self._closed:
            return
        heard = await self.listening.hear(pcm, mic_paused=self.coordinator.mic_paused)
        if heard is None:
            return
        now, coordinator = heard.now, self.coordinator
        for kind, at in heard.events:
            if kind is VADEventKind.SPEECH_START:
                coordinator.on_speech_start(now, at=at)
                if self._idle is not None:
                    self._idle.cancel()
                    self._idle = None
            else:
                coordinator.on_speech_end(now, at=at)
        if heard.voiced:
            coordinator.on_voice(now)
        coordinator.on_tick(now)
        self._run(coordinator.commands())
        self.capture.after_frame(heard.voiced, now)

    def push_text(self, text: str) -> None:
        """A typed user turn answered at once (``add_user_text`` then ``create_response``)."""
        self.add_user_text(text)
        self.create_response()

    def add_user_text(self, text: str, item_id: str | None = None) -> ev.MessageItem:
        """A user text item (``conversation.item.create``): journaled now, answered when a
        response is created."""
        item, pending = self.conversation.add_text(text, item_id, self.items.last_id)
        self._pending.append(pending)
        return item

    def add_function_output(self, call_id: str, output: str, item_id: str | None = None) -> None:
        """The client's ``function_call_output`` for a call the brain made."""
        exchange = self._exchange
        calls = exchange[0] if exchange else ()
        call = next((c for c in calls if c.call_id == call_id), None)
        if exchange is None or call is None:
            raise ItemNotFound(f"no function call {call_id[:64]!r} is waiting for its output")
        exchange[1][call_id] = self.conversation.function_output(
            call, output, item_id, self.items.last_id
        )

    def create_response(self, options: ResponseOptions | None = None) -> None:
        """``response.create``: answer what was added since the last response (a response in
        progress is interrupted: the newest request wins). A spoken turn that is still being
        transcribed without an answer of its own (manual turns, ``create_response: false``)
        is answered instead: push-to-talk's commit then ``response.create``."""
        options = options or ResponseOptions()
        current = self._responses.get(self.coordinator.generation)
        if (
            current is not None
            and current.pending is None
            and current.recording
            and not current.respond
            and not self._pending
            and options.in_conversation
        ):
            current.respond = True
            current.options = options
            if options.audio is not None:
                current.events.audio = options.audio
            return
        self._next_options = options
        self.coordinator.on_text_input("", self.clock())
        self._run(self.coordinator.commands())

    def clear_input(self) -> None:
        """``input_audio_buffer.clear``: drop the utterance being heard, if any (a paused
        microphone stays paused)."""
        paused = self.coordinator.mic_paused
        self.coordinator.pause_microphone(self.clock())
        if not paused:
            self.coordinator.resume_microphone(self.clock())
        self.listening.clear()
        self._run(self.coordinator.commands())

    def configure(self, setup: SessionSetup) -> None:
        """The session's configuration, at its start and after each update: the next response
        uses it (one in progress keeps what it began with)."""
        self.persona = dataclasses.replace(
            self.persona, instructions=setup.instructions, voice=setup.voice
        )
        self.audio_out = setup.audio_out
        self.client_tools = setup.client_tools
        self.tool_choice = setup.tool_choice
        self.max_output_tokens = setup.max_output_tokens
        self.auto_respond = setup.auto_respond
        self.coordinator.settings = setup.turns
        self.idle_timeout_s = setup.idle_timeout_s
        self.listening.tune(
            threshold=setup.vad_threshold, prefix_padding_ms=setup.prefix_padding_ms
        )
        if self.settings.output_sample_rate != setup.output_sample_rate:
            self.settings = dataclasses.replace(
                self.settings, output_sample_rate=setup.output_sample_rate
            )
            self.context.settings = self.settings

    def set_playback(self, *, client_pauses: bool, exact: bool) -> None:
        """Who plays the answer: whether the client pauses its playback with a held answer, and
        whether its playback reports are exact (a server-side media track)."""
        self.client_pauses_playback = client_pauses
        self.exact_playout = exact

    def item(self, item_id: str) -> ev.Item:
        return self.items.get(item_id)

    async def delete_item(self, item_id: str) -> None:
        """``conversation.item.delete``: the item leaves the model's history (a tombstone in the
        journal; the journal itself is append-only)."""
        self.item(item_id)
        await self.conversation.deleted(item_id)
        self.items.forget(item_id)
        self._send(ev.ItemDeleted(item_id))

    async def truncate_item(self, item_id: str, audio_end_ms: int) -> None:
        """``conversation.item.truncate``: the person heard ``audio_end_ms`` of an answer. While
        the response runs this is its playback report; afterwards the journal is amended."""
        self.item(item_id)
        response = next((r for r in self._responses.values() if r.events.item_id == item_id), None)
        if response is None:
            raise ItemNotFound(f"item {item_id[:64]!r} is not an answer with audio")
        tracker = response.tracker
        if audio_end_ms > tracker.sent_ms + 1:
            raise TruncatedBeyondAudio(
                f"audio_end_ms {audio_end_ms} is beyond the item's audio ({tracker.sent_ms:.0f} ms)"
            )
        if not response.finalized:
            tracker.on_client_played(float(audio_end_ms))
            response.played_report.set()
        else:
            heard = tracker.heard_text(float(audio_end_ms))
            await self.conversation.truncated(item_id, heard, audio_end_ms)
        self._send(ev.ItemTruncated(item_id, 0, audio_end_ms))

    def commit(self) -> bool:
        ok = self.coordinator.commit(self.clock())
        self._run(self.coordinator.commands())
        return ok

    def cancel_response(self) -> bool:
        ok = self.coordinator.cancel_response(self.clock())
        self._run(self.coordinator.commands())
        return ok

    def pause_microphone(self) -> None:
        self.coordinator.pause_microphone(self.clock())
        self.listening.clear()
        self._run(self.coordinator.commands())

    def resume_microphone(self) -> None:
        self.coordinator.resume_microphone(self.clock())

    def on_playback(self, generation: int, played_ms: float) -> None:
        """The client reports how much of a generation's audio it has played."""
        response = self._responses.get(generation)
        if response is None:
            return
        response.tracker.on_client_played(played_ms)
        response.played_report.set()

    def is_current(self, generation: int) -> bool:
        return self.coordinator.is_current(generation)

    def tool_gate_for(self, response: Response) -> ToolGate | None:
        if self.tool_gate is None:
            return None
        origin = CallOrigin(
            response.generation, response.turn_id, self._last_input, self._last_input_seq
        )
        return self.tool_gate.gate(origin)

    def continue_with(self, continuation: Continuation, *, respond: bool) -> None:
        """A tool call settled after its response ended (an approval item, a timeout): the
        next response continues the turn from its input with the call's result, or hands the
        call to the client (``result`` None); ``respond``: that response starts now when no
        turn is under way."""
        self._settled = continuation
        if respond and self.coordinator.state is TurnState.LISTENING and not self._closed:
            self.create_response()

    def adopt_last_input(self, text: str, journal_seq: int) -> None:
        """A session continued from the journal (``runtime.realtime.connection``): its last
        journaled user input is what a ``response.create`` without new input answers, as it would
        have been in the process that took it (which may have died before answering)."""
        self._last_input, self._last_input_seq = text, journal_seq

    @property
    def in_turn(self) -> bool:
        """A turn is under way: the user's is ending, or an answer is thought or spoken
        (a draining server waits for it: ``runtime/drain.py``)."""
        return self.coordinator.state in _TURN_STATES

    async def close(self) -> None:
        self._closed = True
        if self.thread_memory is not None:
            await self.thread_memory.close()
        if self._timer is not None:
            self._timer.cancel()
        if self._idle is not None:
            self._idle.cancel()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        self._sync_model_hold()  # closed: the model is not this session's any more

    # ------------------------------------------------------------ commands

    def _run(self, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, UserSpeechStarted):
                self._begin_utterance(command)
            elif isinstance(command, UserSpeechStopped):
                self._on_pause(command)
            elif isinstance(command, UserSpeechResumed):
                self._drop_preemption()
                self.capture.resume()
                self._send(
                    ev.SpeechStarted(
                        round(self.listening.stream_ms), self.conversation.item_id(command.turn_id)
                    )
                )
            elif isinstance(command, DropUtterance):
                self._drop_preemption()
                self.capture.drop()
            elif isinstance(command, CommitUserTurn):
                self._on_commit(command)
            elif isinstance(command, Interrupt):
                self._on_interrupt(command)
            elif isinstance(command, PauseResponse):
                self._on_hold(command)
            elif isinstance(command, JudgeInterruption):
                self._spawn(self._judge_interruption(command), "judge-interruption")
            elif isinstance(command, ResumeResponse):
                self._on_resume(command)
        self._arm_timer()
        self._sync_model_hold()

    def audio_sent(self, pcm: PCM, now: float) -> None:
        """A response's audio went to the client (the echo guard's reference)."""
        self.echo_path.sent(pcm, now, self.settings.output_sample_rate)

    @property
    def echo(self) -> EchoGuard | None:
        """The session's echo guard (None: off)."""
        return self.echo_path.guard

    def _send(self, event: ev.ServerEvent) -> None:
        """Send ``event``; the items it announces are kept (``pipeline.items``)."""
        self.items.note(event)
        self.sink.send(event)

    def _begin_utterance(self, command: UserSpeechStarted) -> None:
        now = self.clock()
        held = self.capture.utterance
        if not (command.adopt and held is not None and held.turn_id == command.turn_id):
            self.capture.begin(command.turn_id, command.at, now)
        self._send(
            ev.SpeechStarted(
                audio_start_ms=self.listening.position_ms(command.at, now),
                item_id=self.conversation.item_id(command.turn_id),
            )
        )

    def _on_pause(self, command: UserSpeechStopped) -> None:
        self._send(
            ev.SpeechStopped(
                audio_end_ms=self.listening.position_ms(command.at, self.clock()),
                item_id=self.conversation.item_id(command.turn_id),
            )
        )
        audio = self.capture.pause(command.at)
        utterance = self.capture.utterance
        self._maybe_preempt(command.turn_id)
        if audio is None or utterance is None:
            return
        if self.plugins.endpointer is not None:
            utterance.endpoint_task = self._spawn(
                self._judge_endpoint(command.turn_id, audio), "endpointer"
            )
        # The cue is read from the transcript the capture is already making of this pause
        # (the one the commit uses): no second transcription.
        speculation = utterance.speculation
        if speculation is not None:
            speculation.add_done_callback(functools.partial(self._read_cue, command.turn_id))

    def _read_cue(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        """The speculative transcript of the pause is ready: its cue goes to the coordinator
        (a failed transcription says nothing: NEUTRAL)."""
        utterance = self.capture.utterance
        if (
            self._closed
            or speculation.cancelled()
            or utterance is None
            or utterance.speculation is not speculation
        ):
            return  # speech resumed or the turn was committed: this pause is over
        if speculation.exception() is not None:
            cue = Cue.NEUTRAL
        else:
            transcript = speculation.result()
            cue = transcript_cue(transcript.text, self.capture.language or transcript.language)
        self.coordinator.on_transcript_cue(turn_id, cue, self.clock())
        self._run(self.coordinator.commands())

    async def _judge_endpoint(self, turn_id: int, audio: PCM) -> None:
        assert self.plugins.endpointer is not None
        complete: bool | None
        try:
            complete = (await self.plugins.endpointer.predict(audio)).complete
        except PluginError as e:
            log.warning("endpointer failed: %s", e)
            complete = None  # a model that failed has no opinion
        self.coordinator.on_endpoint_verdict(turn_id, complete, self.clock())
        self._run(self.coordinator.commands())

    def _on_commit(self, command: CommitUserTurn) -> None:
        if command.reason != "endpoint":
            # An explicit end of turn: speech heard from now on is new speech, even if the
            # VAD has not seen the pause yet.
            self.listening.reset()
        generation = command.generation
        typed = command.reason == "text"
        options = (self._next_options if typed else None) or ResponseOptions()
        self._next_options = None
        audio = self.audio_out if options.audio is None else options.audio
        events = ResponseEvents(
            response_id=f"resp_{uuid.uuid4().hex[:16]}",
            item_id=self.conversation.new_item_id(),
            generation=generation,
            audio=audio,
            in_conversation=options.in_conversation,
            conversation_id=self.thread.thread_id,
        )
        response = Response(
            generation, command.turn_id, events.response_id, events, options=options
        )
        response.client_tools, response.tool_choice = self._tool_offer(options)
        limit = options.max_output_tokens
        response.max_output_tokens = (
            self.max_output_tokens if limit is None else None if limit == "inf" else limit
        )
        if typed:
            response.pending, self._pending = self._pending, []
            response.settled, self._settled = self._settled, None
            if self._exchange is not None and self._exchange[1]:
                calls, results, last_input = self._exchange
                response.tool_calls = tuple(c for c in calls if c.call_id in results)
                response.tool_results = tuple(results[c.call_id] for c in response.tool_calls)
                self._last_input = last_input
            self._exchange = None
        else:
            response.respond = self.auto_respond
        response.marks["committed"] = self.clock()
        utterance = self.capture.take()
        if utterance is not None and utterance.speech_end_at is not None:
            response.marks["vad_end"] = utterance.speech_end_at
        if command.text is None and utterance is not None and utterance.endpoint_task:
            utterance.endpoint_task.cancel()
        preemption, self._preemption = self._preemption, None
        if preemption is not None and not typed and preemption.turn_id == command.turn_id:
            response.preemption = preemption
        elif preemption is not None:
            preemption.cancel()
        self._responses[generation] = response
        for old in [g for g in self._responses if g < generation - 4]:
            del self._responses[old]
        if not typed:
            item = self.conversation.spoken_item(command.turn_id, None, "in_progress")
            previous = self.items.last_id
            self._send(ev.InputAudioBufferCommitted(item.id, previous))
            self._send(ev.ItemAdded(item, previous))
        # Long-term memory is read while the input is transcribed and journaled; started
        # before the response, its read is usually done when the turn's context needs it (no
        # round of the loop waiting for it: under load every round waits behind every session).
        memory_read = self._spawn(self.memory.read(), "memory-read") if self.memory else None
        response.task = self._spawn(
            self._respond(response, command.text, utterance, memory_read), f"response-{generation}"
        )

    def _on_interrupt(self, command: Interrupt) -> None:
        response = self._responses.get(command.generation)
        if response is None:
            return
        self._send(ev.ResponseInterrupted(response.response_id, command.generation, command.reason))
        response.cancelled = True
        if self.tool_gate is not None:
            self.tool_gate.interrupted(command.generation, command.reason)
        self.echo_path.stop(self.clock())  # the client clears its playback
        if response.preemption is not None:
            response.preemption.cancel()
        if response.task is not None and not response.recording:
            # While the user's words are still being recorded the task runs on and stops
            # by itself right after (the user's input must not be lost).
            response.task.cancel()
        self._spawn(self._finish_interrupted(response, command.reason), "finish-interrupted")

    # ------------------------------------------------------------ preemption

    def _maybe_preempt(self, turn_id: int) -> None:
        """At a pause: answer the speculative transcript ahead of the commit (Rule 1 of
        ``pipeline.preemption``)."""
        utterance = self.capture.utterance
        if (
            not self.settings.preemptive
            or not self.auto_respond
            or utterance is None
            or utterance.speculation is None
        ):
            return
        self._drop_preemption()
        self._spawn(self._preempt(turn_id, utterance.speculation), "preempt")

    async def _preempt(self, turn_id: int, speculation: asyncio.Task[Any]) -> None:
        await asyncio.wait({speculation})
        if speculation.cancelled() or speculation.exception() is not None:
            return
        text = speculation.result().text.strip()
        if not text or not self._endpointing(turn_id):
            return
        memory = self._spawn(self.memory.read(), "memory-read") if self.memory else None
        try:
            content = await self._turn_content(text, before_seq=ALL_HISTORY, memory=memory)
        except JournalError as e:
            log.info("no preemptive answer: %s", e)
            return
        finally:
            if memory is not None and not memory.done():
                memory.cancel()
        if not self._endpointing(turn_id) or self._preemption is not None:
            return
        preemption = Preemption(turn_id, text, content)
        read_only = frozenset(t.name for t in self.tool_specs if t.read_only)
        preemption.start(
            self.speaker.brain_stream(content.to_brain_input(session=self.voice_session_id)),
            read_only,
            self._spawn,
        )
        self._preemption = preemption

    def _endpointing(self, turn_id: int) -> bool:
        coordinator = self.coordinator
        return coordinator.turn_id == turn_id and coordinator.state is TurnState.ENDPOINTING

    def _drop_preemption(self) -> None:
        preemption, self._preemption = self._preemption, None
        if preemption is not None:
            preemption.cancel()

    # ------------------------------------------------------------ false interruptions

    def _on_hold(self, command: PauseResponse) -> None:
        """Sound over the answer: pause it and record the sound (``pipeline.turns`` Rule 3)."""
        now = self.clock()
        response = self._responses.get(command.generation)
        if response is not None:
            self.speaker.pause(response, now)
            if self.client_pauses_playback:
                self.echo_path.pause(now)
            self._send(ev.OutputAudioPaused(response.response_id, command.generation))
        # The sound is transcribed as soon as it goes quiet: the verdict at its stop (a
        # voice gap later) then usually finds the transcript made or well under way.
        self.capture.begin(command.turn_id, command.at, now, speculate_after_ms=HOLD_SPECULATE_MS)

    def _on_resume(self, command: ResumeResponse) -> None:
        """No real turn followed: the answer goes on where it paused, the sound is forgotten."""
        held = self.capture.utterance
        if held is not None and held.turn_id == command.turn_id and not command.keep_recording:
            self.capture.drop()
        response = self._responses.get(command.generation)
        if response is not None and response.paused:
            self.speaker.resume(response, self.clock())
            if self.client_pauses_playback:
                self.echo_path.resume(self.clock())
            self._send(ev.OutputAudioResumed(response.response_id, command.generation))

    async def _judge_interruption(self, command: JudgeInterruption) -> None:
        """Transcribe the held sound and tell the coordinator whether it is a real turn (a
        failed transcription is none: the answer resumes)."""
        held = self.capture.utterance
        real = False
        if held is not None and held.turn_id == command.turn_id:
            # The speculation made at the quiet covers the sound up to its stop (voice coming
            # back cancels it); at the timeout, or without one, all that was heard.
            ready = held.speculation if command.speech_end is not None else None
            if ready is not None:
                await asyncio.wait({ready})  # voice coming back cancels it: then transcribe anew
            try:
                if ready is not None and not ready.cancelled():
                    transcript = ready.result()
                else:
                    transcript = await self.capture.transcribe(held.audio())
            except PluginError as e:
                log.warning("transcribing a possible interruption failed: %s", e)
            else:
                real = is_real_turn(transcript.text)
        self.coordinator.on_interruption_verdict(command.turn_id, real, self.clock())
        self._run(self.coordinator.commands())

    # ------------------------------------------------------------ the response

    async def _respond(
        self,
        response: Response,
        text: str | None,
        utterance: Utterance | None,
        memory_read: asyncio.Task[str | None] | None,
    ) -> None:
        self._thinking.add(response.generation)  # the model is the answer's (SPEC RT-11)
        self._sync_model_hold()
        options = response.options
        try:
            if response.pending is not None:
                response.enter("journal", self.clock())
                text, user_seq = await self.conversation.typed(response.pending)
            else:
                text, user_seq = await self._record_user_input(response, text, utterance)
            response.move(ResponseTrigger.RECORDED)
            response.enter("context", self.clock())
            if response.cancelled:
                return
            persons_words = bool(text)
            if text:
                self._last_input, self._last_input_seq = text, user_seq
            settled = response.settled
            if settled is None and text and self.tool_gate is not None:
                settled = await self.tool_gate.answer(text, response.generation)
            if settled is not None:  # a question was answered: continue the turn that asked
                text, user_seq = settled.input, settled.input_seq
                self._last_input, self._last_input_seq = text, user_seq
                persons_words = False
                if settled.result is None:
                    await self._hand_to_client(response, settled.call)
                    return
                response.tool_calls = (*response.tool_calls, settled.call)
                response.tool_results = (*response.tool_results, settled.result)
            elif response.tool_results or response.pending is not None:
                # A continuation (after a function's output, or a response asked for after a
                # spoken turn that was not answered): the turn's input is the last one.
                text, user_seq = self._last_input, self._last_input_seq
            if not text or not response.respond:
                self._response_finished(response)  # nothing to answer: silence, no auto-response
                return
            if not options.in_conversation and options.input_text is not None:
                # Out of band with its own input: the whole conversation so far is context.
                user_seq, text = ALL_HISTORY, options.input_text
                persons_words = False
            # The brain may see the person's words enriched from memory; the journal keeps them.
            current = await self.context.enriched(text, user_seq) if persons_words else text
            preempted = response.preemption
            if preempted is not None and (
                current != text or not preempted.reusable_for(response.turn_id, text)
            ):
                preempted.cancel()
                preempted = response.preemption = None
            if preempted is not None:
                content = preempted.content
            else:
                content = await self._turn_content(
                    current,
                    before_seq=user_seq,
                    memory=memory_read,
                    instructions=options.instructions,
                    response=response,
                )
            events = response.events
            events.previous_item_id = self.items.last_id
            self.send_all(events.created())
            response.move(ResponseTrigger.CREATED)
            if settled is not None:
                self.tool_record.show_settled_mcp(response, settled)
            response.enter("brain", self.clock())
            await self.speaker.speak(response, content)
            self.send_all(events.audio_done())
            response.enter("playout", self.clock())
            await self.speaker.await_playout(response)
            response.enter("finalize", self.clock())
            await self._finalize(response, interrupted=False)
            self._response_finished(response)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a failed turn is one failed turn, never silence (RT-11)
            await self._fail(response, error)
        finally:
            if memory_read is not None and not memory_read.done():
                memory_read.cancel()
            self._thinking.discard(response.generation)
            self._sync_model_hold()

    async def _fail(self, response: Response, error: Exception) -> None:
        """End a failed turn (SPEC RT-11): one log line and the operator's hook (stage, code,
        timings; never content), the client's error, in voice a short apology instead of
        silence, and ``response.done`` failed — then the session listens as after any turn."""
        if isinstance(error, PluginError | JournalError):
            code, retryable, message = error.code, error.retryable, str(error)
        else:
            code, retryable, message = "internal_error", False, "the server failed this turn"
        now = self.clock()
        failure = TurnFailure(
            turn_id=response.turn_id,
            generation=response.generation,
            response_id=response.response_id,
            stage=response.failed_stage or response.stage,
            code=code,
            retryable=retryable,
            waited_ms=round((now - response.stage_at) * 1000.0, 1),
            elapsed_ms=round((now - response.marks.get("committed", now)) * 1000.0, 1),
        )
        log.warning(
            "turn failed at %s: %s",
            failure.stage,
            code,
            exc_info=None if isinstance(error, PluginError | JournalError) else error,
            extra={
                "session_id": self.voice_session_id,
                "thread_id": self.thread.thread_id,
                "turn_id": failure.turn_id,
                "generation": failure.generation,
                "response_id": failure.response_id,
                "stage": failure.stage,
                "code": code,
                "waited_ms": failure.waited_ms,
                "elapsed_ms": failure.elapsed_ms,
            },
        )
        if self.on_turn_failed is not None:
            self.on_turn_failed(failure)
        self._emit_error(code, message, retryable=retryable)
        if response.finalized or not response.respond:
            self._response_finished(response)  # nobody asked for an answer: the error says all
            return
        if not response.created:  # a client that asked for it gets the whole response
            self.send_all(response.events.created())
            response.move(ResponseTrigger.CREATED)
        await self._apologize(response)
        done = response.events.done(
            "failed", error={"type": "server_error", "code": code, "message": message}
        )
        self._response_finished(response, done)

    async def _apologize(self, response: Response) -> None:
        """Say the role's failure message in a spoken answer (never in text only); a TTS that
        fails again leaves the error to speak for itself."""
        if (
            not response.events.audio
            or not self.is_current(response.generation)
            or response.stage == "finalize"  # the whole answer was heard: only its record failed
        ):
            return
        text = self.persona.failure_message
        if text is None:
            language = self.persona.language or detect_language(self._last_input)
            text = FAILURE_MESSAGES["zh" if language == "zh" else "en"]
        if not text:
            return
        try:
            async with asyncio.timeout(self.settings.tts_timeout_s):
                await self.speaker.say(response, text)
            self.send_all(response.events.audio_done())
            await self.speaker.await_playout(response)
        except Exception as e:  # the apology is best effort: the done event still goes
            log.warning("the failed turn's apology failed too: %s", type(e).__name__)

    def brain_finished(self, generation: int) -> None:
        """Speaking and playing out need no language model: background work may run."""
        self._thinking.discard(generation)
        self._sync_model_hold()

    def _sync_model_hold(self) -> None:
        """Hold the shared model while the person speaks, the turn is being decided or an
        answer is generated; release it otherwise (``ModelHold``)."""
        if self.model_hold is None:
            return
        state = self.coordinator.state
        busy = not self._closed and (
            bool(self._thinking)
            or state in (TurnState.USER_SPEAKING, TurnState.ENDPOINTING, TurnState.THINKING)
        )
        if busy != self._held:
            self._held = busy
            if busy:
                self.model_hold.hold(self.voice_session_id)
            else:
                self.model_hold.release(self.voice_session_id)

    async def _record_user_input(
        self, response: Response, text: str | None, utterance: Utterance | None
    ) -> tuple[str, int | None]:
        """Transcribe (if spoken) and journal the user's turn; returns its text and seq (None
        while the journal is unreachable and the event waits in the session's buffer)."""
        if text is None:
            response.enter("asr", self.clock())
            transcript = await self.capture.final_transcript(utterance)
            response.marks["asr_final"] = self.clock()
            if utterance is not None and utterance.asr_started is not None:
                response.marks["asr_started"] = utterance.asr_started
                if utterance.asr_done is not None:
                    response.marks["asr_done"] = utterance.asr_done
            text = transcript.text.strip()
            seconds = utterance.samples / INPUT_SAMPLE_RATE if utterance is not None else 0.0
            self.send_all(self.conversation.transcribed(response.turn_id, text, seconds))
        seq: int | None = None
        if text:
            response.enter("journal", self.clock())
            voice = utterance is not None
            seq = await self.conversation.record_spoken(response.turn_id, text, voice=voice)
        return text, seq

    async def _turn_content(
        self,
        current_input: str,
        *,
        before_seq: int | None,
        memory: asyncio.Task[str | None] | None = None,
        instructions: str | None = None,
        response: Response | None = None,
    ) -> TurnContent:
        """What the brain is given; ``response`` sets the tools, tool choice and output limit
        (none: the session's, as a preemptive answer before the commit uses)."""
        persona = self.persona
        instructions = persona.instructions if instructions is None else instructions
        if response is not None:
            client_tools, tool_choice = response.client_tools, response.tool_choice
            max_output_tokens = response.max_output_tokens
        else:
            client_tools, tool_choice = self._tool_offer(ResponseOptions())
            max_output_tokens = self.max_output_tokens
        gated: tuple[ToolSpec, ...] = ()
        if self.tool_gate is not None and tool_choice.mode != "none":
            gated = await self.tool_gate.specs()
        return await self.context.content(
            current_input,
            before_seq=before_seq,
            persona=persona,
            instructions=instructions,
            tools=(*self.tool_specs, *gated, *client_tools),
            tool_choice=tool_choice,
            max_output_tokens=max_output_tokens,
            memory=memory,
        )

    async def journal_tool(self, response: Response, delta: BrainDelta) -> None:
        """A tool call or result of ``response``, shown and journaled (``ToolRecord``); a call
        the client runs joins the calls whose outputs a continuation waits for."""
        prefix = self.conversation.event_id(response.turn_id, response.generation)
        call = await self.tool_record.record(response, delta, prefix)
        if call is not None:
            known = self._exchange[0] if self._exchange else ()
            self._exchange = ((*known, call), {}, self._last_input)

    async def _hand_to_client(self, response: Response, call: ToolCall) -> None:
        """An approved client call: this response's one output is the call, for the client."""
        response.events.previous_item_id = self.items.last_id
        self.send_all(response.events.created())
        response.move(ResponseTrigger.CREATED)
        await self.journal_tool(response, BrainDelta(tool_call=call))
        await self._finalize(response, interrupted=False)
        self._response_finished(response)

    def _tool_offer(self, options: ResponseOptions) -> tuple[tuple[ToolSpec, ...], ToolChoice]:
        """The client functions a response offers and its tool choice: its own where
        ``response.create`` set them, else the session's; ``tool_choice: none`` offers none
        (the brain answers in words; server built-ins such as the knowledge search stay)."""
        choice = options.tool_choice or self.tool_choice
        tools = self.client_tools if options.tools is None else options.tools
        if options.tools is not None and self.tool_gate is not None:
            # The gate decides calls of a response's own functions like the session's.
            known = {t.name: t for t in (*self.client_tools, *options.tools)}
            self.tool_gate.set_client_tools(tuple(known.values()))
        return (() if choice.mode == "none" else tools), choice

    async def _finish_interrupted(self, response: Response, reason: str) -> None:
        if response.task is not None:
            with contextlib.suppress(BaseException):
                await response.task
        if response.finalized:
            return
        if response.tracker.first_sent_at is not None and response.tracker.client_played_ms is None:
            response.played_report.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    response.played_report.wait(), self.settings.heard_report_wait_s
                )
        try:
            await self._finalize(response, interrupted=True, reason=reason)
        except JournalError as e:
            self._emit_error(e.code, str(e), retryable=e.retryable)

    async def _finalize(
        self, response: Response, *, interrupted: bool, reason: str | None = None
    ) -> None:
        if response.finalized:
            return
        response.move(ResponseTrigger.FINALIZE)
        tracker = response.tracker
        events = response.events
        if events.audio:
            text = tracker.text
            heard = tracker.heard_text(tracker.played_ms(self.clock())) if interrupted else text
        else:
            text = heard = events.text  # text only: what was sent is what was read
        if text and response.options.in_conversation:
            try:
                await self.conversation.answered(
                    response.turn_id, response.generation, events.item_id,
                    text=text, heard=heard, interrupted=interrupted,
                )  # fmt: skip
            except JournalError as e:
                if not interrupted:
                    response.move(ResponseTrigger.RECORD_FAILED)  # ``_fail`` sends a failed done
                    raise
                # Interrupted: the client still gets its done (cancelled) after the error.
                self._emit_error(e.code, str(e), retryable=e.retryable)
            else:
                self._spawn(self.context.compact(self.persona.language), "compaction")
        if interrupted:
            status: str = "cancelled"
            ga_reason: str | None = _GA_REASONS.get(reason or "", "turn_detected")
        elif response.incomplete is not None:
            status, ga_reason = "incomplete", response.incomplete  # a limit cut it short
        else:
            status, ga_reason = "completed", None
        done = events.done(
            status,
            reason=ga_reason,
            heard=heard,
            text=text,
            usage=usage(response.prompt, events.text),
        )
        self._finish(response, done, learn=bool(text) and response.options.in_conversation)

    def _finish(
        self, response: Response, done: list[ev.ServerEvent] | None = None, *, learn: bool = False
    ) -> None:
        """The one end of a response (``pipeline.response`` Rule 1): its ``response.done``
        (None: there was nothing to answer), the thread's memory learning from an answer that
        joined the conversation (``learn``, TM-4: in the background), FINISHED, and the
        owner told that the turn ended — once, however many paths reach it."""
        if response.state is ResponseState.FINISHED:
            return
        if done is not None:
            self.send_all(done)
        if learn and self.thread_memory is not None:
            self.thread_memory.after_turn()
        response.move(ResponseTrigger.FINISH)
        if self.on_turn_end is not None:
            self.on_turn_end()

    def _response_finished(
        self, response: Response, done: list[ev.ServerEvent] | None = None
    ) -> None:
        self._finish(response, done)  # also a response that failed or had nothing to answer
        # Its audio has played out (the client may have said so before real time had passed).
        self.echo_path.played_out(self.clock())
        self.coordinator.on_response_done(response.generation, self.clock())
        self._run(self.coordinator.commands())
        if self.idle_timeout_s is not None and self.coordinator.state is TurnState.LISTENING:
            self._arm_idle(self.idle_timeout_s)

    def _arm_idle(self, delay: float) -> None:
        if self._idle is not None:
            self._idle.cancel()
        started = self.listening.stream_ms
        self._idle = asyncio.get_running_loop().call_later(delay, self._on_idle, started)

    def _on_idle(self, started_ms: float) -> None:
        """Nobody spoke since the answer: say so (``timeout_triggered``). No response is
        created — the brains answer words, and there were none; a client may ask for one."""
        self._idle = None
        if self._closed or self.coordinator.state is not TurnState.LISTENING:
            return
        item_id = self.conversation.new_item_id()
        self._send(ev.TimeoutTriggered(round(started_ms), round(self.listening.stream_ms), item_id))

    # ------------------------------------------------------------ output helpers

    def _emit_error(self, code: str, message: str, *, retryable: bool) -> None:
        self._send(ev.error(code, message, server=True, retryable=retryable))

    def _emit_partial(self, turn_id: int, text: str) -> None:
        """A partial transcript. GA deltas only add text: a hypothesis that rewrote earlier
        words adds nothing for a GA client; the ``transcript`` extension field has it all."""
        sent = self._partials.get(turn_id, "")
        delta = text[len(sent) :] if text.startswith(sent) else ""
        if delta:
            self._partials = {turn_id: text}
        self._send(
            ev.TranscriptionDelta(self.conversation.item_id(turn_id), delta, transcript=text)
        )

    def audio_started(self, generation: int, now: float) -> None:
        """The first frame of ``generation`` went out (the speaker's notice)."""
        self.coordinator.on_audio_started(generation, now)
        self._run(self.coordinator.commands())

    def send_all(self, events: list[ev.ServerEvent]) -> None:
        for event in events:
            self._send(event)

    def _arm_timer(self) -> None:
        deadline = self.coordinator.next_deadline()
        if deadline == self._timer_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, deadline - self.clock())
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self.coordinator.on_tick(self.clock())
        self._run(self.coordinator.commands())

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, WriterFenced):
            # Another process continued this session: this copy stops (the journal buffer
            # fences it), nothing it wrote after the fence was kept. Expected, not a bug.
            log.info("engine task %s stopped: the session was continued elsewhere", task.get_name())
        elif isinstance(error, PluginError):
            # A provider's failure (a speculative transcript, an endpoint judgement): the turn
            # that needs the result reports it (``_fail``); not a bug of ours.
            log.warning("engine task %s failed: %s", task.get_name(), error.code)
        elif error is not None:
            log.error("engine task %s failed", task.get_name(), exc_info=error)


__all__ = [
    "ALL_HISTORY",
    "Engine",
    "EngineSettings",
    "OutputSink",
    "Persona",
    "Plugins",
    "ResponseOptions",
    "TurnMemory",
]
