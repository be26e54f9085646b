"""What a response answers: the person's input recorded, and what waits besides new speech.

Theory of operation
-------------------
Rule 1. ``record`` makes the response's input part of the conversation: typed items already
        being journaled are awaited; a spoken turn is transcribed (its final transcript shown
        on its item) and journaled — the text and its journal position come back (the position
        is None while the journal is unreachable and the event waits in the session's buffer).
Rule 2. A typed item (``conversation.item.create``) is journaled when it is added and waits
        here (``PendingInput``) for the next ``response.create``, which takes all that wait;
        the request's options wait with them, unless a spoken turn being recorded without an
        answer of its own takes the request (push-to-talk's commit then ``response.create``).
Rule 3. A client function call the brain made joins the *exchange*: the calls of the last
        response, the outputs the client sent for them so far, and the input behind them.
        An output for a call not in it is refused (``ItemNotFound``); the next typed response
        continues the turn with the calls that have their output, from that input.
Rule 4. A gated call settled after its response ended (an approval, a timeout) is kept as a
        ``Continuation`` for the next typed response.
Rule 5. The last input (its text and journal position) is what a continuation answers and
        what every tool call's origin names; a session continued from the journal adopts its
        last journaled input.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline import events as ev
from pipeline.audio import INPUT_SAMPLE_RATE
from pipeline.capture import SpeechCapture, Utterance
from pipeline.conversation import Conversation
from pipeline.items import ItemNotFound
from pipeline.response import CallOrigin, Continuation, PendingInput, Response, ResponseOptions
from plugins.contracts import ToolCall, ToolResult


class TurnInputs:
    def __init__(
        self,
        *,
        conversation: Conversation,
        capture: SpeechCapture,
        send_all: Callable[[list[ev.ServerEvent]], None],
        clock: Callable[[], float],
    ) -> None:
        self.conversation = conversation
        self.capture = capture
        self.send_all = send_all
        self.clock = clock
        self.pending: list[PendingInput] = []
        self.exchange: tuple[tuple[ToolCall, ...], dict[str, ToolResult], str] | None = None
        """The last response's client calls, the outputs received so far, and its input."""
        self.settled: Continuation | None = None
        """A gated call settled after its response ended, for the next typed response."""
        self.last_input = ""
        self.last_input_seq: int | None = None
        self.next_options: ResponseOptions | None = None
        """``response.create``'s options, for the typed turn the coordinator commits next."""

    def request(self, options: ResponseOptions, current: Response | None) -> bool:
        """``response.create`` (Rule 2): True when ``current``, the spoken turn being recorded
        without an answer of its own, takes it; else the options wait for the next typed turn."""
        if (
            current is not None
            and current.pending is None
            and current.recording
            and not current.respond
            and not self.pending
            and options.in_conversation
        ):
            current.respond = True
            current.options = options
            if options.audio is not None:
                current.events.audio = options.audio
            return True
        self.next_options = options
        return False

    async def record(
        self, response: Response, text: str | None, utterance: Utterance | None
    ) -> tuple[str, int | None]:
        """Rule 1: the response's input, recorded; its text and journal position."""
        if response.pending is not None:
            response.enter("journal", self.clock())
            return await self.conversation.typed(response.pending)
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

    def function_output(self, call_id: str, output: str, item_id: str | None) -> None:
        """The client's ``function_call_output`` for a call the brain made (Rule 3)."""
        calls = self.exchange[0] if self.exchange else ()
        call = next((c for c in calls if c.call_id == call_id), None)
        if self.exchange is None or call is None:
            raise ItemNotFound(f"no function call {call_id[:64]!r} is waiting for its output")
        self.exchange[1][call_id] = self.conversation.function_output(call, output, item_id)

    def called(self, call: ToolCall) -> None:
        """The brain called a client function: its output is awaited (Rule 3)."""
        known = self.exchange[0] if self.exchange else ()
        self.exchange = ((*known, call), {}, self.last_input)

    def take(self, response: Response) -> None:
        """A typed response takes what waits: the items, a settled call, and the calls that have
        their outputs (Rules 2–4)."""
        response.pending, self.pending = self.pending, []
        response.settled, self.settled = self.settled, None
        if self.exchange is not None and self.exchange[1]:
            calls, results, last_input = self.exchange
            response.tool_calls = tuple(c for c in calls if c.call_id in results)
            response.tool_results = tuple(results[c.call_id] for c in response.tool_calls)
            self.last_input = last_input
        self.exchange = None

    def heard(self, text: str, seq: int | None) -> None:
        """The turn's input (Rule 5)."""
        self.last_input, self.last_input_seq = text, seq

    def origin(self, response: Response) -> CallOrigin:
        """Where ``response``'s tool calls come from (the tool gate's question)."""
        return CallOrigin(
            response.generation, response.turn_id, self.last_input, self.last_input_seq
        )
