"""The responder: one response's life, from the commit to its ``response.done``.

Theory of operation
-------------------
Rule 1. ``open`` turns a ``CommitUserTurn`` into a ``Response`` (what it offers:
        ``ResponseDefaults.offer``; a typed one takes what ``TurnInputs`` holds) and runs it as
        one task: its input recorded (an interruption cannot cancel that part), the turn's
        context read (long-term memory read beside it), ``response.created``, the answer spoken
        by the ``AnswerSpeaker`` and played out, then finalized.
Rule 2. One end. ``finish`` is the only place a response ends: its ``response.done`` (none when
        there was nothing to answer), thread memory's learning (TM-4), FINISHED and the
        owner's ``on_turn_end`` — once per response, whichever path reaches it; then
        ``TurnPorts.response_done`` tells the coordinator.
Rule 3. ``interrupt`` sends the interruption at once, stops the echo path's playout, cancels the
        task (not while the input is recorded) and finalizes with what was heard: the client's
        playback report, waited for up to ``heard_report_wait_s``, else the estimate.
Rule 4. A failed turn is one failed turn (``pipeline.turn_failure``, SPEC RT-11): logged, the
        client's error, in voice a short apology, a failed ``response.done``.
Rule 5. Hold and resume (TT-1) pause and resume the speaker (and the echo path where the client
        pauses its playback); a pause's preemption is the ``Preempter``'s.
Rule 6. Ports, not the engine: the clock, ``send``, ``spawn``, the rooms it uses and
        ``TurnPorts`` (the coordinator's questions and notices). It is the ``SpeakerHost``.
Rule 7. Computed ahead: when the person starts to speak and nothing is being answered,
        ``prepare`` gives a brain that can use it (``prepare``: the default brain's Rule 11)
        the coming turn's context without its words — read as a turn reads it — so its model
        computes the prompt's start while they speak. One at a time; it fails nothing.
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
from pipeline.audio import PCM
from pipeline.capture import SpeechCapture, Utterance
from pipeline.content import TurnContent
from pipeline.conversation import Conversation
from pipeline.echo_path import EchoPath
from pipeline.engine_config import (
    EngineSettings,
    Offer,
    Persona,
    Plugins,
    ResponseDefaults,
    SessionSetup,
    ThreadMemoryHook,
    TurnFailure,
    TurnMemory,
)
from pipeline.items import ItemNotFound, TruncatedBeyondAudio
from pipeline.preemption import Preempter
from pipeline.response import (
    Response,
    ResponseOptions,
    ResponseState,
    ResponseTrigger,
    ToolGateHook,
)
from pipeline.response_events import ResponseEvents
from pipeline.speaker import AnswerSpeaker, usage
from pipeline.tool_record import ToolRecord
from pipeline.turn_commands import CommitUserTurn, Interrupt
from pipeline.turn_context import ALL_HISTORY, TurnContextReader
from pipeline.turn_failure import apology, describe, log_failure
from pipeline.turn_inputs import TurnInputs
from plugins.brain.tool_loop import ToolGate, ToolHandler
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolSpec, Transcript

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
        self.tools = tools
        self.tool_specs = tool_specs
        self.memory = memory
        self.thread_memory = thread_memory
        self.tool_gate = tool_gate
        self.on_turn_end = on_turn_end
        """Called when a response ends, however it ends (role memory's learning waits for it)."""
        self.on_turn_failed = on_turn_failed
        """Told of every failed turn (the session's log, metrics and system page)."""
        self.defaults = ResponseDefaults()
        self.inputs = TurnInputs(
            conversation=conversation, capture=capture, send_all=self.send_all, clock=clock
        )
        self.thinking: set[int] = set()
        self._preparing: asyncio.Task[None] | None = None
        """Rule 7's one task."""
        """Generations whose brain is still at work (the model is theirs)."""
        self.responses: dict[int, Response] = {}
        self.tool_record = ToolRecord(
            items=conversation.items,
            send=send,
            send_all=self.send_all,
            append=conversation.append,
            new_item_id=conversation.new_item_id,
            gate=tool_gate,
            private=frozenset(t.name for t in tool_specs if t.private),
        )
        self.speaker = AnswerSpeaker(self)
        self.preempter = Preempter(
            content=lambda text, memory: self._turn_content(
                text, before_seq=ALL_HISTORY, memory=memory
            ),
            brain=lambda content: self.speaker.brain_stream(
                content.to_brain_input(session=voice_session_id)
            ),
            read_memory=memory.read if memory is not None else None,
            endpointing=ports.endpointing,
            read_only=frozenset(t.name for t in tool_specs if t.read_only),
            spawn=spawn,
        )

    def configure(self, setup: SessionSetup) -> None:
        """What the next response uses (one in progress keeps what it began with)."""
        self.persona = dataclasses.replace(
            self.persona, instructions=setup.instructions, voice=setup.voice
        )
        self.defaults.apply(setup)

    # ------------------------------------------------------------ requests

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
        if response is not None:
            response.tracker.on_client_played(played_ms)
            response.played_report.set()

    # ------------------------------------------------------------ commit, interrupt, hold

    def open(self, command: CommitUserTurn) -> None:
        """Rule 1: the committed turn's response, started."""
        generation = command.generation
        typed = command.reason == "text"
        options = (self.inputs.next_options if typed else None) or ResponseOptions()
        self.inputs.next_options = None
        audio = self.defaults.audio_out if options.audio is None else options.audio
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
        offer = self._offer(options)
        response.client_tools, response.tool_choice, response.max_output_tokens = offer
        if options.say is not None:
            pass  # fixed words: the pending input waits for the next response
        elif typed:
            self.inputs.take(response)
        else:
            response.respond = self.defaults.auto_respond
        response.marks["committed"] = self.clock()
        utterance = self.capture.take()
        if utterance is not None and utterance.speech_end_at is not None:
            response.marks["vad_end"] = utterance.speech_end_at
        if command.text is None and utterance is not None and utterance.endpoint_task:
            utterance.endpoint_task.cancel()
        response.preemption = self.preempter.take(None if typed else command.turn_id)
        self.responses[generation] = response
        for old in [g for g in self.responses if g < generation - 4]:
            del self.responses[old]
        if not typed:
            item = self.conversation.spoken_item(command.turn_id, None, "in_progress")
            previous = self.conversation.items.last_id
            self._send(ev.InputAudioBufferCommitted(item.id, previous))
            self._send(ev.ItemAdded(item, previous))
        # Long-term memory is read while the input is transcribed and journaled; started
        # before the response, its read is usually done when the turn's context needs it (no
        # round of the loop waiting for it: under load every round waits behind every session).
        memory_read = (
            self._spawn(self.memory.read(), "memory-read")
            if self.memory and options.say is None
            else None
        )
        answer = (
            self._say(response, options.say)
            if options.say is not None
            else self._respond(response, command.text, utterance, memory_read)
        )
        response.task = self._spawn(answer, f"response-{generation}")

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

    def hold(self, generation: int, now: float) -> None:
        """Sound over the answer: pause it (Rule 5)."""
        response = self.responses.get(generation)
        if response is not None:
            self.speaker.pause(response, now)
            if self.defaults.client_pauses_playback:
                self.echo_path.pause(now)
            self._send(ev.OutputAudioPaused(response.response_id, generation))

    def resume(self, generation: int) -> None:
        """No real turn followed: the answer goes on where it paused."""
        response = self.responses.get(generation)
        if response is not None and response.paused:
            self.speaker.resume(response, self.clock())
            if self.defaults.client_pauses_playback:
                self.echo_path.resume(self.clock())
            self._send(ev.OutputAudioResumed(response.response_id, generation))

    def prepare(self) -> None:
        """The person started to speak (Rule 7)."""
        prepare = getattr(self.plugins.brain, "prepare", None)
        if prepare is None or self.thinking:
            return
        if self._preparing is not None and not self._preparing.done():
            return
        self._preparing = self._spawn(self._prepare(prepare), "prepare")

    async def _prepare(self, prepare: Callable[[BrainInput], Awaitable[None]]) -> None:
        memory_read = self._spawn(self.memory.read(), "memory-read") if self.memory else None
        try:
            content = await self._turn_content("", before_seq=ALL_HISTORY, memory=memory_read)
            await prepare(content.to_brain_input(session=self.voice_session_id))
        except Exception as e:  # a chance taken: the turn reads its own context as ever
            log.info("computing the prompt ahead failed: %s", type(e).__name__)
        finally:
            if memory_read is not None and not memory_read.done():
                memory_read.cancel()

    def at_pause(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        """A pause's speculative transcript: answered ahead of the commit where the session
        answers by itself (``pipeline.preemption``)."""
        if self.settings.preemptive and self.defaults.auto_respond:
            self.preempter.at_pause(turn_id, speculation)

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
            text, user_seq = await inputs.record(response, text, utterance)
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
            self._created(response)
            if settled is not None:
                self.tool_record.show_settled_mcp(response, settled)
            response.enter("brain", self.clock())
            await self.speaker.speak(response, content)
            await self._played_out(response)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a failed turn is one failed turn, never silence (RT-11)
            await self._fail(response, error)
        finally:
            if memory_read is not None and not memory_read.done():
                memory_read.cancel()
            self.thinking.discard(response.generation)
            self.ports.thinking_changed()

    def _created(self, response: Response) -> None:
        """The response begins: ``response.created``, after the conversation's last item."""
        events = response.events
        events.previous_item_id = self.conversation.items.last_id
        self.send_all(events.created())
        response.move(ResponseTrigger.CREATED)

    async def _played_out(self, response: Response) -> None:
        """All of the answer was said: its audio ends, plays out, and the response finishes."""
        self.send_all(response.events.audio_done())
        response.enter("playout", self.clock())
        await self.speaker.await_playout(response)
        response.enter("finalize", self.clock())
        await self._finalize(response, interrupted=False)
        self._response_finished(response)

    async def _say(self, response: Response, text: str) -> None:
        """A response of fixed words (``ResponseOptions.say``): no brain, the same events and
        pacing as an answer, interruptible like one."""
        try:
            self._created(response)
            response.enter("brain", self.clock())
            await self.speaker.say(response, text)
            await self._played_out(response)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            await self._fail(response, error)

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
            client_tools, tool_choice, max_output_tokens = self._offer(ResponseOptions())
        gate = self.tool_gate
        gated = await gate.specs() if gate is not None and tool_choice.mode != "none" else ()
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

    def _offer(self, options: ResponseOptions) -> Offer:
        """``ResponseDefaults.offer``; the gate decides calls of a response's own functions like
        the session's."""
        if options.tools is not None and self.tool_gate is not None:
            known = {t.name: t for t in (*self.defaults.client_tools, *options.tools)}
            self.tool_gate.set_client_tools(tuple(known.values()))
        return self.defaults.offer(options.tools, options.tool_choice, options.max_output_tokens)

    async def _hand_to_client(self, response: Response, call: ToolCall) -> None:
        """An approved client call: this response's one output is the call, for the client."""
        response.events.previous_item_id = self.conversation.items.last_id
        self.send_all(response.events.created())
        response.move(ResponseTrigger.CREATED)
        await self.journal_tool(response, BrainDelta(tool_call=call))
        await self._finalize(response, interrupted=False)
        self._response_finished(response)

    # ------------------------------------------------------------ failure (Rule 4)

    async def _fail(self, response: Response, error: Exception) -> None:
        """End a failed turn (``pipeline.turn_failure``): one log line and the operator's hook,
        the client's error, in voice a short apology instead of silence, and
        ``response.done`` failed — then the session listens as after any turn."""
        failure, message = describe(response, error, self.clock())
        log_failure(
            failure, error, session_id=self.voice_session_id, thread_id=self.thread.thread_id
        )
        if self.on_turn_failed is not None:
            self.on_turn_failed(failure)
        self._emit_error(failure.code, message, retryable=failure.retryable)
        if response.finalized or not response.respond:
            self._response_finished(response)  # nobody asked for an answer: the error says all
            return
        if not response.created:  # a client that asked for it gets the whole response
            self.send_all(response.events.created())
            response.move(ResponseTrigger.CREATED)
        await self._apologize(response)
        error_field = {"type": "server_error", "code": failure.code, "message": message}
        self._response_finished(response, response.events.done("failed", error=error_field))

    async def _apologize(self, response: Response) -> None:
        """Say the apology in a spoken answer (never in text only); a TTS that fails again
        leaves the error to speak for itself."""
        if (
            not response.events.audio
            or not self.is_current(response.generation)
            or response.stage == "finalize"  # the whole answer was heard: only its record failed
        ):
            return
        text = apology(self.persona, self.inputs.last_input)
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
        used = usage(response.prompt, events.text)
        done = events.done(status, reason=ga_reason, heard=heard, text=text, usage=used)
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


__all__ = ["Responder", "TurnPorts"]
