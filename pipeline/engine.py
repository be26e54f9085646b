"""The cascaded engine: the driver that builds the rooms and runs the coordinator's commands.

Theory of operation
-------------------
Audio enters through ``push_audio``: ``Listening`` (VAD, echo path) hands speech events to the
``TurnCoordinator`` (``pipeline/turns.py``, sans-I/O); the engine executes the commands it
returns and keeps one timer armed for its next deadline. Speech events, pauses and verdicts go
to ``Hearing`` (``pipeline/hearing.py``: the utterance, the endpoint's evidence, a held sound's
verdict); a commit, an interruption, a hold and its resumption to the ``Responder``
(``pipeline/responder.py``: one response's life, to its one ``response.done``). Items and
journal writes are the ``Conversation``'s, the brain's input the ``TurnContextReader``'s. The
rooms take ports (the clock, ``send``, ``spawn``, ``TurnPorts``), never the engine; the tool
gate reaches the session through the engine's ``ToolGateHost`` calls. One clock and one
``TaskSet`` (``pipeline/loop.py``), so a ``tests.virtual_time.VirtualTimeLoop`` runs whole
conversations in virtual time. ``docs/architecture.md`` draws the whole path.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

from journal.events import ThreadRef
from journal.store import JournalStore
from pipeline import events as ev
from pipeline.audio import PCM
from pipeline.capture import SpeechCapture
from pipeline.conversation import Conversation
from pipeline.echo import EchoGuard
from pipeline.echo_path import EchoPath
from pipeline.engine_config import (
    AudioTap,
    EngineSettings,
    HeldModel,
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
from pipeline.hearing import Hearing
from pipeline.history import ConversationHistory
from pipeline.listening import Listening
from pipeline.loop import LoopTimer, TaskSet, loop_time
from pipeline.responder import Responder, TurnPorts
from pipeline.response import Continuation, ResponseOptions, ToolGateHook
from pipeline.turn_commands import (
    Command,
    CommitUserTurn,
    DropUtterance,
    Interrupt,
    JudgeInterruption,
    PauseResponse,
    ResumeResponse,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from pipeline.turn_context import ALL_HISTORY, TurnContextReader
from pipeline.turns import TurnCoordinator, TurnState
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec, VADEventKind

_TURN_STATES = frozenset({TurnState.ENDPOINTING, TurnState.THINKING, TurnState.SPEAKING})
_MID_TURN = frozenset({TurnState.USER_SPEAKING, TurnState.ENDPOINTING, TurnState.THINKING})


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
        self.model_hold = HeldModel(model_hold, voice_session_id)
        """Told when this session's person is mid-turn (background model work yields)."""
        self.taps: list[AudioTap] = []
        """Given every input frame and every sent event: the session's recording, its usage."""
        self.thread_memory = thread_memory
        self.sink = sink
        self.thread = thread
        self.voice_session_id = voice_session_id
        self.settings = settings = settings or EngineSettings()
        self.clock = clock or loop_time
        self.tasks = TaskSet()
        self._spawn = self.tasks.spawn
        self.conversation = Conversation(
            journal=journal,
            thread=thread,
            voice_session_id=voice_session_id,
            incarnation=incarnation,
            send=self._send,
            spawn=self._spawn,
            memory=memory,
        )
        self.items = self.conversation.items
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
            on_partial=lambda turn_id, text: self.hearing.partial(turn_id, text),
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
            tools=tools or {},
            tool_specs=tool_specs,
            memory=memory,
            thread_memory=thread_memory,
            tool_gate=tool_gate,
            on_turn_end=on_turn_end,
            on_turn_failed=on_turn_failed,
        )
        self.hearing = Hearing(
            coordinator=self.coordinator,
            drive=self._drive,
            capture=self.capture,
            listening=self.listening,
            conversation=self.conversation,
            endpointer=plugins.endpointer,
            send=self._send,
            spawn=self._spawn,
            preempt=self.responder.at_pause,
            clock=self.clock,
        )
        self.idle_timeout_s: float | None = None
        """GA ``idle_timeout_ms``: quiet this long after an answer → ``timeout_triggered``."""
        self._idle = LoopTimer()
        self._timer = LoopTimer()
        self._closed = False
        if tool_gate is not None:
            tool_gate.bind(self)

    # ------------------------------------------------------------ input

    async def push_audio(self, pcm: PCM) -> None:
        """One frame of 16 kHz microphone audio."""
        if self._closed:
            return
        for tap in self.taps:
            tap.heard(pcm)
        heard = await self.listening.hear(pcm, mic_paused=self.coordinator.mic_paused)
        if heard is None:
            return
        now, coordinator = heard.now, self.coordinator
        for kind, at in heard.events:
            if kind is VADEventKind.SPEECH_START:
                coordinator.on_speech_start(now, at=at)
                self._idle.cancel()
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
        item, pending = self.conversation.add_text(text, item_id)
        self.responder.inputs.pending.append(pending)
        return item

    def add_function_output(self, call_id: str, output: str, item_id: str | None = None) -> None:
        """The client's ``function_call_output`` for a call the brain made."""
        self.responder.inputs.function_output(call_id, output, item_id)

    def create_response(self, options: ResponseOptions | None = None) -> None:
        """``response.create``: answer what was added since the last response (a response in
        progress is interrupted: the newest request wins). A spoken turn that is still being
        transcribed without an answer of its own (manual turns, ``create_response: false``)
        is answered instead: push-to-talk's commit then ``response.create``."""
        current = self.responder.responses.get(self.coordinator.generation)
        if self.responder.inputs.request(options or ResponseOptions(), current):
            return
        self.coordinator.on_text_input("", self.clock())
        self._drive()

    def clear_input(self) -> None:
        """``input_audio_buffer.clear``: drop the utterance being heard, if any (a paused
        microphone stays paused)."""
        paused = self.coordinator.mic_paused
        self.coordinator.pause_microphone(self.clock())
        if not paused:
            self.coordinator.resume_microphone(self.clock())
        self.listening.clear()
        self._drive()

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
        self.responder.defaults.client_pauses_playback = client_pauses
        self.responder.defaults.exact_playout = exact

    def item(self, item_id: str) -> ev.Item:
        return self.items.get(item_id)

    async def delete_item(self, item_id: str) -> None:
        await self.conversation.delete(item_id)

    async def truncate_item(self, item_id: str, audio_end_ms: int) -> None:
        """``conversation.item.truncate`` (``Responder.truncate``)."""
        self.item(item_id)
        await self.responder.truncate(item_id, audio_end_ms)

    def commit(self) -> bool:
        ok = self.coordinator.commit(self.clock())
        self._drive()
        return ok

    def cancel_response(self) -> bool:
        ok = self.coordinator.cancel_response(self.clock())
        self._drive()
        return ok

    def pause_microphone(self) -> None:
        self.coordinator.pause_microphone(self.clock())
        self.listening.clear()
        self._drive()

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
        self._closed = self.hearing.closed = True
        if self.thread_memory is not None:
            await self.thread_memory.close()
        self._timer.cancel()
        self._idle.cancel()
        await self.tasks.cancel_all()
        self._sync_model_hold()  # closed: the model is not this session's any more

    # ------------------------------------------------------------ commands

    def _run(self, commands: list[Command]) -> None:
        hearing, responder = self.hearing, self.responder
        for command in commands:
            if isinstance(command, UserSpeechStarted):
                hearing.started(command)
            elif isinstance(command, UserSpeechStopped):
                hearing.paused(command)
            elif isinstance(command, UserSpeechResumed):
                responder.preempter.drop()
                hearing.resumed(command)
            elif isinstance(command, DropUtterance):
                responder.preempter.drop()
                hearing.dropped()
            elif isinstance(command, CommitUserTurn):
                if command.reason != "endpoint":
                    # An explicit end of turn: speech heard from now on is new speech, even if
                    # the VAD has not seen the pause yet.
                    self.listening.reset()
                responder.open(command)
            elif isinstance(command, Interrupt):
                responder.interrupt(command)
            elif isinstance(command, PauseResponse):
                now = self.clock()
                responder.hold(command.generation, now)
                hearing.held(command, now)
            elif isinstance(command, JudgeInterruption):
                self._spawn(hearing.judge_interruption(command), "judge-interruption")
            elif isinstance(command, ResumeResponse):
                hearing.released(command)
                responder.resume(command.generation)
        self._arm_timer()
        self._sync_model_hold()

    def _drive(self) -> None:
        self._run(self.coordinator.commands())

    def _send(self, event: ev.ServerEvent) -> None:
        """Send ``event``; the items it announces are kept (``pipeline.items``)."""
        self.items.note(event)
        for tap in self.taps:
            tap.sent(event)
        self.sink.send(event)

    def _endpointing(self, turn_id: int) -> bool:
        coordinator = self.coordinator
        return coordinator.turn_id == turn_id and coordinator.state is TurnState.ENDPOINTING

    # ------------------------------------------------------------ the responder's ports

    def _audio_started(self, generation: int, now: float) -> None:
        self.coordinator.on_audio_started(generation, now)
        self._drive()

    def _response_done(self, generation: int) -> None:
        # Its audio has played out (the client may have said so before real time had passed).
        self.echo_path.played_out(self.clock())
        self.coordinator.on_response_done(generation, self.clock())
        self._drive()
        if self.idle_timeout_s is not None and self.coordinator.state is TurnState.LISTENING:
            now, on_idle = self.clock(), functools.partial(self._on_idle, self.listening.stream_ms)
            self._idle.arm(now + self.idle_timeout_s, now, on_idle)

    def _sync_model_hold(self) -> None:
        """Hold the shared model while the person speaks, the turn is being decided or an
        answer is generated; release it otherwise (``ModelHold``)."""
        if self.model_hold.hold is None:
            return  # no shared model (every frame comes here)
        state = self.coordinator.state
        thinking = bool(self.responder.thinking) or state in _MID_TURN
        if self.model_hold.sync(thinking and not self._closed) and state is TurnState.USER_SPEAKING:
            self.responder.prepare()  # the prompt's start is computed while they speak

    # ------------------------------------------------------------ timers and tasks

    def _on_idle(self, started_ms: float) -> None:
        """Nobody spoke since the answer: say so (``timeout_triggered``). No response is
        created — the brains answer words, and there were none; a client may ask for one."""
        if self._closed or self.coordinator.state is not TurnState.LISTENING:
            return
        item_id = self.conversation.new_item_id()
        self._send(ev.TimeoutTriggered(round(started_ms), round(self.listening.stream_ms), item_id))

    def _arm_timer(self) -> None:
        deadline = None if self._closed else self.coordinator.next_deadline()
        if deadline != self._timer.deadline:  # the usual frame moves no deadline
            self._timer.arm(deadline, self.clock(), self._on_timer)

    def _on_timer(self) -> None:
        self.coordinator.on_tick(self.clock())
        self._drive()


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
