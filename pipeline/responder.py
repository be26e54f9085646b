"""The responder: one response's life, from the commit to its ``response.done``.

Theory of operation
-------------------
Rule 1. ``open`` turns a ``CommitUserTurn`` into a ``Response`` (its options, its tools and
        tool choice, its output limit; a typed one takes what ``TurnInputs`` holds) and runs
        it as one task: the person's input is recorded (transcribed and journaled — an
        interruption cannot cancel that part), the turn's context read (while long-term memory
        is read beside it), ``response.created`` sent, the answer spoken by the
        ``AnswerSpeaker`` and played out, then finalized.
Rule 2. One end. ``finish`` is the only place a response ends: its ``response.done`` (none when
        there was nothing to answer), thread memory's learning (TM-4), FINISHED, and the
        owner's ``on_turn_end`` — once per response, whichever path reaches it (completed,
        interrupted, failed, handed to the client). ``TurnPorts.response_done`` then tells the
        coordinator.
Rule 3. ``interrupt`` sends the interruption at once, stops the echo path's playout and cancels
        the task (not while the input is recorded), then finalizes with what was heard: the
        client's playback report, waited for up to ``heard_report_wait_s``, else the estimate.
Rule 4. A failed turn is one failed turn (SPEC RT-11): one log line and the operator's hook with
        stage, code and timings (never content), the client's error, in voice the role's short
        apology, and a failed ``response.done``; the session listens again.
Rule 5. Hold and resume (TT-1) pause and resume the speaker, and the echo path where the
        client pauses its playback. A preemption (``pipeline.preemption``) is started here at a
        pause and reused or discarded by the commit.
Rule 6. The responder takes ports, not the engine: the clock, ``send``, ``spawn``, the rooms it
        uses (capture, echo path, conversation, turn context, items) and ``TurnPorts`` — the
        coordinator's questions and notices, which the engine answers. It is the speaker's
        ``SpeakerHost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from journal.errors import JournalError
from journal.events import ThreadRef
from pipeline import events as ev
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.capture import SpeechCapture, Utterance
from pipeline.content import TurnContent
from pipeline.conversation import Conversation
from pipeline.echo_path import EchoPath
from pipeline.engine_config import (
    FAILURE_MESSAGES,
    EngineSettings,
    Persona,
    Plugins,
    SessionSetup,
    ThreadMemoryHook,
    TurnFailure,
    TurnMemory,
)
from pipeline.items import ConversationItems, ItemNotFound, TruncatedBeyondAudio
from pipeline.preemption import Preemption
from pipeline.response import (
    AnswerSpeaker,
    Continuation,
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
from pipeline.turn_inputs import TurnInputs
from pipeline.turns import CommitUserTurn, Interrupt
from plugins.brain.tool_loop import ToolGate, ToolHandler
from plugins.contracts import BrainDelta, ToolCall, ToolChoice, ToolSpec, Transcript
from plugins.errors import PluginError
from plugins.language import detect_language

log = logging.getLogger(__name__)

_GA_REASONS = {"barge_in": "turn_detected", "cancel": "client_cancelled",
               "text_input": "client_cancelled"}  # fmt: skip
"""Our interruption reasons as the GA protocol's ``status_details.reason``."""


@dataclass(frozen=True, slots=True)
class TurnPorts:
    """What the responder asks of the turn's driver (Rule 6)."""

    is_current: Callable[[int], bool]
    """The generation is the coordinator's current one (the fence)."""
    endpointing: Callable[[int], bool]
    """The turn is still ending (a preemption may start or be kept)."""
    audio_started: Callable[[int, float], None]
    """The first frame of a generation went out."""
    response_done: Callable[[int], None]
    """A response ended (the coordinator listens again)."""
    thinking_changed: Callable[[], None]
    """A brain started or finished (the shared model's hold follows)."""


class Responder:
    def __init__(
        self,
        *,
        ports: TurnPorts,
        plugins: Plugins,
        settings: EngineSettings,
        persona: Persona,
        thread: ThreadRef,
        voice_session_id: str,
        clock: Callable[[], float],
        send: Callable[[ev.ServerEvent], None],
        spawn: Callable[[Awaitable[Any], str], asyncio.Task[Any]],
        capture: SpeechCapture,
        echo_path: EchoPath,
        conversation: Conversation,
        context: TurnContextReader,
        items: ConversationItems,
        tools: Mapping[str, ToolHandler],
        tool_specs: tuple[ToolSpec, ...],
        memory: TurnMemory | None,
        thread_memory: ThreadMemoryHook | None,
        tool_gate: ToolGateHook | None,
        on_turn_end: Callable[[], None] | None,
        on_turn_failed: Callable[[TurnFailure], None] | None,
    ) -> None:
        self.ports = ports
        self.plugins = plugins
        self.settings = settings
        self.persona = persona
        self.thread = thread
        self.voice_session_id = voice_session_id
        self.clock = clock
        self._send = send
        self._spawn = spawn
        self.capture = capture
        self.echo_path = echo_path
        self.conversation = conversation
        self.context = context
        self.items = items
        self.tools = tools
        self.tool_specs = tool_specs
        self.memory = memory
        self.thread_memory = thread_memory
        self.tool_gate = tool_gate
        self.on_turn_end = on_turn_end
        """Called when a response ends, however it ends (role memory's learning waits for it)."""
        self.on_turn_failed = on_turn_failed
        """Told of every failed turn (the session's log, metrics and system page)."""
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
        self.inputs = TurnInputs()
        self.thinking: set[int] = set()
        """Generations whose brain is still at work (the model is theirs)."""
        self.responses: dict[int, Response] = {}
        self._next_options: ResponseOptions | None = None
        self._preemption: Preemption | None = None
        self.tool_record = ToolRecord(
            items=items,
            send=send,
            send_all=self.send_all,
            append=conversation.append,
            new_item_id=conversation.new_item_id,
            gate=tool_gate,
            private=frozenset(t.name for t in tool_specs if t.private),
        )
        self.speaker = AnswerSpeaker(self)

    def configure(self, setup: SessionSetup) -> None:
        """What the next response uses (one in progress keeps what it began with)."""
        self.persona = dataclasses.replace(
            self.persona, instructions=setup.instructions, voice=setup.voice
        )
        self.audio_out = setup.audio_out
        self.client_tools = setup.client_tools
        self.tool_choice = setup.tool_choice
        self.max_output_tokens = setup.max_output_tokens
        self.auto_respond = setup.auto_respond

    # ------------------------------------------------------------ requests

    def request(self, options: ResponseOptions, generation: int) -> bool:
        """``response.create``: True when the spoken turn being recorded without an answer of
        its own (``generation``, the current one) takes it — push-to-talk's commit then
        ``response.create``; else the options wait for the typed turn the coordinator commits
        next."""
        current = self.responses.get(generation)
        if (
            current is not None
            and current.pending is None
            and current.recording
            and not current.respond
            and not self.inputs.pending
            and options.in_conversation
        ):
            current.respond = True
            current.options = options
            if options.audio is not None:
                current.events.audio = options.audio
            return True
        self._next_options = options
        return False

    def add_function_output(self, call_id: str, output: str, item_id: str | None) -> None:
        """The client's ``function_call_output`` for a call the brain made."""
        call = self.inputs.call_waiting(call_id)
        result = self.conversation.function_output(call, output, item_id)
        self.inputs.output(call_id, result)

    async def truncate(self, item_id: str, audio_end_ms: int) -> None:
        """``conversation.item.truncate``: the person heard ``audio_end_ms`` of an answer. While
        the response runs this is its playback report; afterwards the journal is amended."""
        response = next((r for r in self.responses.values() if r.events.item_id == item_id), None)
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

    def on_playback(self, generation: int, played_ms: float) -> None:
        """The client reports how much of a generation's audio it has played."""
        response = self.responses.get(generation)
        if response is None:
            return
        response.tracker.on_client_played(played_ms)
        response.played_report.set()

    # ------------------------------------------------------------ commit and interrupt

    def open(self, command: CommitUserTurn) -> None:
        """Rule 1: the committed turn's response, started."""
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
            self.inputs.take(response)
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
        self.responses[generation] = response
        for old in [g for g in self.responses if g < generation - 4]:
            del self.responses[old]
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

    def interrupt(self, command: Interrupt) -> None:
        """Rule 3."""
        response = self.responses.get(command.generation)
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

    # ------------------------------------------------------------ hold and preemption

    def hold(self, generation: int, now: float) -> None:
        """Sound over the answer: pause it (Rule 5)."""
        response = self.responses.get(generation)
        if response is not None:
            self.speaker.pause(response, now)
            if self.client_pauses_playback:
                self.echo_path.pause(now)
            self._send(ev.OutputAudioPaused(response.response_id, generation))

    def resume(self, generation: int) -> None:
        """No real turn followed: the answer goes on where it paused."""
        response = self.responses.get(generation)
        if response is not None and response.paused:
            self.speaker.resume(response, self.clock())
            if self.client_pauses_playback:
                self.echo_path.resume(self.clock())
            self._send(ev.OutputAudioResumed(response.response_id, generation))

    def at_pause(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        """A pause's speculative transcript: answer it ahead of the commit where the session
        answers by itself (``pipeline.preemption`` Rule 1; Rule 4: it replaces an earlier one)."""
        if self.settings.preemptive and self.auto_respond:
            self.drop_preemption()
            self._spawn(self._preempt(turn_id, speculation), "preempt")

    async def _preempt(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        await asyncio.wait({speculation})
        if speculation.cancelled() or speculation.exception() is not None:
            return
        text = speculation.result().text.strip()
        if not text or not self.ports.endpointing(turn_id):
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
        if not self.ports.endpointing(turn_id) or self._preemption is not None:
            return
        preemption = Preemption(turn_id, text, content)
        read_only = frozenset(t.name for t in self.tool_specs if t.read_only)
        preemption.start(
            self.speaker.brain_stream(content.to_brain_input(session=self.voice_session_id)),
            read_only,
            self._spawn,
        )
        self._preemption = preemption

    def drop_preemption(self) -> None:
        preemption, self._preemption = self._preemption, None
        if preemption is not None:
            preemption.cancel()

    # ------------------------------------------------------------ the response

    async def _respond(
        self,
        response: Response,
        text: str | None,
        utterance: Utterance | None,
        memory_read: asyncio.Task[str | None] | None,
    ) -> None:
        self.thinking.add(response.generation)  # the model is the answer's (SPEC RT-11)
        self.ports.thinking_changed()
        options = response.options
        inputs = self.inputs
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
                inputs.heard(text, user_seq)
            settled = response.settled
            if settled is None and text and self.tool_gate is not None:
                settled = await self.tool_gate.answer(text, response.generation)
            if settled is not None:  # a question was answered: continue the turn that asked
                text, user_seq = settled.input, settled.input_seq
                inputs.heard(text, user_seq)
                persons_words = False
                if settled.result is None:
                    await self._hand_to_client(response, settled.call)
                    return
                response.tool_calls = (*response.tool_calls, settled.call)
                response.tool_results = (*response.tool_results, settled.result)
            elif response.tool_results or response.pending is not None:
                # A continuation (after a function's output, or a response asked for after a
                # spoken turn that was not answered): the turn's input is the last one.
                text, user_seq = inputs.last_input, inputs.last_input_seq
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
            self.thinking.discard(response.generation)
            self.ports.thinking_changed()

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

    async def _hand_to_client(self, response: Response, call: ToolCall) -> None:
        """An approved client call: this response's one output is the call, for the client."""
        response.events.previous_item_id = self.items.last_id
        self.send_all(response.events.created())
        response.move(ResponseTrigger.CREATED)
        await self.journal_tool(response, BrainDelta(tool_call=call))
        await self._finalize(response, interrupted=False)
        self._response_finished(response)

    # ------------------------------------------------------------ failure (Rule 4)

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
            language = self.persona.language or detect_language(self.inputs.last_input)
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

    # ------------------------------------------------------------ the end (Rule 2)

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
        self.finish(response, done, learn=bool(text) and response.options.in_conversation)

    def finish(
        self, response: Response, done: list[ev.ServerEvent] | None = None, *, learn: bool = False
    ) -> None:
        """The one end of a response (Rule 2): its ``response.done`` (None: there was nothing
        to answer), the thread's memory learning from an answer that joined the conversation
        (``learn``, TM-4: in the background), FINISHED, and the owner told that the turn ended
        — once, however many paths reach it."""
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
        self.finish(response, done)  # also a response that failed or had nothing to answer
        self.ports.response_done(response.generation)

    # ------------------------------------------------------------ the speaker's host

    def is_current(self, generation: int) -> bool:
        return self.ports.is_current(generation)

    def send_all(self, events: list[ev.ServerEvent]) -> None:
        for event in events:
            self._send(event)

    def audio_started(self, generation: int, now: float) -> None:
        """The first frame of ``generation`` went out (the speaker's notice)."""
        self.ports.audio_started(generation, now)

    def audio_sent(self, pcm: PCM, now: float) -> None:
        """A response's audio went to the client (the echo guard's reference)."""
        self.echo_path.sent(pcm, now, self.settings.output_sample_rate)

    def brain_finished(self, generation: int) -> None:
        """Speaking and playing out need no language model: background work may run."""
        self.thinking.discard(generation)
        self.ports.thinking_changed()

    async def journal_tool(self, response: Response, delta: BrainDelta) -> None:
        """A tool call or result of ``response``, shown and journaled (``ToolRecord``); a call
        the client runs joins the calls whose outputs a continuation waits for."""
        prefix = self.conversation.event_id(response.turn_id, response.generation)
        call = await self.tool_record.record(response, delta, prefix)
        if call is not None:
            self.inputs.called(call)

    def tool_gate_for(self, response: Response) -> ToolGate | None:
        if self.tool_gate is None:
            return None
        return self.tool_gate.gate(self.inputs.origin(response))

    def _emit_error(self, code: str, message: str, *, retryable: bool) -> None:
        self._send(ev.error(code, message, server=True, retryable=retryable))


__all__ = ["Continuation", "Responder", "TurnPorts"]
