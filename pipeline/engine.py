"""The cascaded engine: the driver that builds the rooms and runs the coordinator's commands.

Theory of operation
-------------------
Audio enters through ``push_audio``: ``Listening`` (``pipeline/listening.py``) runs the VAD and
the echo path and hands the speech events to the ``TurnCoordinator`` (``pipeline/turns.py``,
sans-I/O); the engine executes the commands it returns and keeps one timer armed for
``coordinator.next_deadline()``. The utterance and its transcripts live in ``SpeechCapture``
(``pipeline/capture.py``); at a confirmed pause the engine starts a preemptive answer, asks the
endpointing model and reads the cue (``pipeline/endpoint_cues.py``) of the pause's speculative
transcript: both go to the coordinator, whose endpoint deadline follows them.

A committed turn, an interruption, a hold and its resumption go to the ``Responder``
(``pipeline/responder.py``): one response's life, from recording the person's input to its one
``response.done``. The conversation's items and journal writes are the ``Conversation``'s
(``pipeline/conversation.py``), the brain's input the ``TurnContextReader``'s
(``pipeline/turn_context.py``). The rooms take ports — the clock, ``send``, ``spawn``,
``TurnPorts`` — never the engine. ``docs/architecture.md`` draws the whole path.

One clock. Every time the engine reads (``clock``, by default ``loop_time``) and every wait —
the coordinator's timer, the pacer's sleeps, the brain/TTS/ASR watchdogs, the idle timer — is
the event loop's, so a ``tests.virtual_time.VirtualTimeLoop`` runs whole conversations in
virtual time. A ``clock`` passed in must be that loop's clock (tests pass ``loop.time``).

Tool permissions (``runtime.tool_gate``): the gate reaches the session through the engine's
``ToolGateHost`` calls (``send_all``, ``is_current``, ``continue_with``); a call settled after
its response ended continues the turn as a client function's output does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from journal.errors import WriterFenced
from journal.events import ThreadRef
from journal.store import JournalStore
from pipeline import events as ev
from pipeline.audio import PCM
from pipeline.backchannel import is_real_turn
from pipeline.capture import SpeechCapture
from pipeline.conversation import Conversation
from pipeline.echo import EchoGuard
from pipeline.echo_path import EchoPath
from pipeline.endpoint_cues import Cue, transcript_cue
from pipeline.engine_config import (
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
from pipeline.items import ConversationItems
from pipeline.listening import Listening
from pipeline.responder import Responder, TurnPorts
from pipeline.response import Continuation, ResponseOptions, ToolGateHook
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
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec, Transcript, VADEventKind
from plugins.errors import PluginError

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
        self.model_hold = model_hold
        """Told when this session's person is mid-turn (background model work yields)."""
        self._held = False
        self.thread_memory = thread_memory
        self.sink = sink
        self.thread = thread
        self.voice_session_id = voice_session_id
        self.settings = settings = settings or EngineSettings()
        self.clock = clock or loop_time
        self.items = ConversationItems()
        """This session's items as announced (``retrieve``/``delete``/``truncate``)."""
        self.conversation = Conversation(
            journal=journal,
            thread=thread,
            voice_session_id=voice_session_id,
            incarnation=incarnation,
            send=self._send,
            spawn=self._spawn,
            memory=memory,
        )
        self.context = TurnContextReader(
            journal=journal,
            history=history or ConversationHistory(journal),
            thread=thread,
            settings=settings,
            enrichment=enrichment,
            thread_memory=thread_memory,
        )
        self.coordinator = TurnCoordinator(
            settings.turns, end_of_turn_model=plugins.endpointer is not None
        )
        self.echo_path = EchoPath(settings.output_sample_rate, enabled=settings.echo_guard)
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
        self.responder = Responder(
            ports=TurnPorts(
                is_current=self.is_current,
                endpointing=self._endpointing,
                audio_started=self._audio_started,
                response_done=self._response_done,
                thinking_changed=self._sync_model_hold,
            ),
            plugins=plugins,
            settings=settings,
            persona=persona,
            thread=thread,
            voice_session_id=voice_session_id,
            clock=self.clock,
            send=self._send,
            spawn=self._spawn,
            capture=self.capture,
            echo_path=self.echo_path,
            conversation=self.conversation,
            context=self.context,
            items=self.items,
            tools=tools or {},
            tool_specs=tool_specs,
            memory=memory,
            thread_memory=thread_memory,
            tool_gate=tool_gate,
            on_turn_end=on_turn_end,
            on_turn_failed=on_turn_failed,
        )
        self._partials: dict[int, str] = {}
        self.idle_timeout_s: float | None = None
        """GA ``idle_timeout_ms``: quiet this long after an answer → ``timeout_triggered``."""
        self._idle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
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
        self.responder.inputs.pending.append(pending)
        return item

    def add_function_output(self, call_id: str, output: str, item_id: str | None = None) -> None:
        """The client's ``function_call_output`` for a call the brain made."""
        self.responder.add_function_output(call_id, output, item_id)

    def create_response(self, options: ResponseOptions | None = None) -> None:
        """``response.create``: answer what was added since the last response (a response in
        progress is interrupted: the newest request wins). A spoken turn that is still being
        transcribed without an answer of its own (manual turns, ``create_response: false``)
        is answered instead: push-to-talk's commit then ``response.create``."""
        if self.responder.request(options or ResponseOptions(), self.coordinator.generation):
            return
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
        self.responder.configure(setup)
        self.coordinator.settings = setup.turns
        self.idle_timeout_s = setup.idle_timeout_s
        self.listening.tune(
            threshold=setup.vad_threshold, prefix_padding_ms=setup.prefix_padding_ms
        )
        if self.settings.output_sample_rate != setup.output_sample_rate:
            self.settings = dataclasses.replace(
                self.settings, output_sample_rate=setup.output_sample_rate
            )
            self.context.settings = self.responder.settings = self.settings

    def set_playback(self, *, client_pauses: bool, exact: bool) -> None:
        """Who plays the answer: whether the client pauses its playback with a held answer, and
        whether its playback reports are exact (a server-side media track)."""
        self.responder.client_pauses_playback = client_pauses
        self.responder.exact_playout = exact

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
        """``conversation.item.truncate`` (``Responder.truncate``)."""
        self.item(item_id)
        await self.responder.truncate(item_id, audio_end_ms)

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
        self.responder.on_playback(generation, played_ms)

    def is_current(self, generation: int) -> bool:
        return self.coordinator.is_current(generation)

    def send_all(self, events: list[ev.ServerEvent]) -> None:
        for event in events:
            self._send(event)

    def continue_with(self, continuation: Continuation, *, respond: bool) -> None:
        """A tool call settled after its response ended (an approval item, a timeout): the
        next response continues the turn from its input with the call's result, or hands the
        call to the client (``result`` None); ``respond``: that response starts now when no
        turn is under way."""
        self.responder.inputs.settled = continuation
        if respond and self.coordinator.state is TurnState.LISTENING and not self._closed:
            self.create_response()

    def adopt_last_input(self, text: str, journal_seq: int) -> None:
        """A session continued from the journal (``runtime.realtime.connection``): its last
        journaled user input is what a ``response.create`` without new input answers, as it would
        have been in the process that took it (which may have died before answering)."""
        self.responder.inputs.heard(text, journal_seq)

    @property
    def in_turn(self) -> bool:
        """A turn is under way: the user's is ending, or an answer is thought or spoken
        (a draining server waits for it: ``runtime/drain.py``)."""
        return self.coordinator.state in _TURN_STATES

    @property
    def echo(self) -> EchoGuard | None:
        """The session's echo guard (None: off)."""
        return self.echo_path.guard

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
        responder = self.responder
        for command in commands:
            if isinstance(command, UserSpeechStarted):
                self._begin_utterance(command)
            elif isinstance(command, UserSpeechStopped):
                self._on_pause(command)
            elif isinstance(command, UserSpeechResumed):
                responder.drop_preemption()
                self.capture.resume()
                self._send(
                    ev.SpeechStarted(
                        round(self.listening.stream_ms), self.conversation.item_id(command.turn_id)
                    )
                )
            elif isinstance(command, DropUtterance):
                responder.drop_preemption()
                self.capture.drop()
            elif isinstance(command, CommitUserTurn):
                if command.reason != "endpoint":
                    # An explicit end of turn: speech heard from now on is new speech, even if
                    # the VAD has not seen the pause yet.
                    self.listening.reset()
                responder.open(command)
            elif isinstance(command, Interrupt):
                responder.interrupt(command)
            elif isinstance(command, PauseResponse):
                self._on_hold(command)
            elif isinstance(command, JudgeInterruption):
                self._spawn(self._judge_interruption(command), "judge-interruption")
            elif isinstance(command, ResumeResponse):
                held = self.capture.utterance
                if held is not None and held.turn_id == command.turn_id:
                    if not command.keep_recording:
                        self.capture.drop()
                responder.resume(command.generation)
        self._arm_timer()
        self._sync_model_hold()

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
        if utterance is None:
            return
        speculation = utterance.speculation
        if speculation is not None and self.settings.preemptive and self.responder.auto_respond:
            # Answer ahead of the commit (``pipeline.preemption`` Rule 1).
            self.responder.drop_preemption()
            self._spawn(self.responder.preempt(command.turn_id, speculation), "preempt")
        if audio is None:
            return
        if self.plugins.endpointer is not None:
            utterance.endpoint_task = self._spawn(
                self._judge_endpoint(command.turn_id, audio), "endpointer"
            )
        # The cue is read from the transcript the capture is already making of this pause
        # (the one the commit uses): no second transcription.
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

    def _endpointing(self, turn_id: int) -> bool:
        coordinator = self.coordinator
        return coordinator.turn_id == turn_id and coordinator.state is TurnState.ENDPOINTING

    # ------------------------------------------------------------ false interruptions

    def _on_hold(self, command: PauseResponse) -> None:
        """Sound over the answer: pause it and record the sound (``pipeline.turns`` Rule 3)."""
        now = self.clock()
        self.responder.hold(command.generation, now)
        # The sound is transcribed as soon as it goes quiet: the verdict at its stop (a
        # voice gap later) then usually finds the transcript made or well under way.
        self.capture.begin(command.turn_id, command.at, now, speculate_after_ms=HOLD_SPECULATE_MS)

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

    # ------------------------------------------------------------ the responder's ports

    def _audio_started(self, generation: int, now: float) -> None:
        self.coordinator.on_audio_started(generation, now)
        self._run(self.coordinator.commands())

    def _response_done(self, generation: int) -> None:
        # Its audio has played out (the client may have said so before real time had passed).
        self.echo_path.played_out(self.clock())
        self.coordinator.on_response_done(generation, self.clock())
        self._run(self.coordinator.commands())
        if self.idle_timeout_s is not None and self.coordinator.state is TurnState.LISTENING:
            self._arm_idle(self.idle_timeout_s)

    def _sync_model_hold(self) -> None:
        """Hold the shared model while the person speaks, the turn is being decided or an
        answer is generated; release it otherwise (``ModelHold``)."""
        if self.model_hold is None:
            return
        state = self.coordinator.state
        busy = not self._closed and (
            bool(self.responder.thinking)
            or state in (TurnState.USER_SPEAKING, TurnState.ENDPOINTING, TurnState.THINKING)
        )
        if busy != self._held:
            self._held = busy
            if busy:
                self.model_hold.hold(self.voice_session_id)
            else:
                self.model_hold.release(self.voice_session_id)

    # ------------------------------------------------------------ timers and tasks

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
