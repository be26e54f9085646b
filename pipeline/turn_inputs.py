"""What the next response answers besides new speech: typed items, function outputs, settled calls.

Theory of operation
-------------------
Rule 1. A typed item (``conversation.item.create``) is journaled when it is added and waits
        here (``PendingInput``) for the next ``response.create``, which takes all that wait.
Rule 2. A client function call the brain made joins the *exchange*: the calls of the last
        response, the outputs the client sent for them so far, and the input behind them.
        An output for a call not in it is refused (``ItemNotFound``); the next typed response
        continues the turn with the calls that have their output, from that input.
Rule 3. A gated call settled after its response ended (an approval, a timeout) is kept as a
        ``Continuation`` for the next typed response.
Rule 4. The last input (its text and journal position) is what a continuation answers and
        what every tool call's origin names; a session continued from the journal adopts its
        last journaled input.
"""

from __future__ import annotations

from pipeline.items import ItemNotFound
from pipeline.response import CallOrigin, Continuation, PendingInput, Response
from plugins.contracts import ToolCall, ToolResult


class TurnInputs:
    def __init__(self) -> None:
        self.pending: list[PendingInput] = []
        self.exchange: tuple[tuple[ToolCall, ...], dict[str, ToolResult], str] | None = None
        """The last response's client calls, the outputs received so far, and its input."""
        self.settled: Continuation | None = None
        """A gated call settled after its response ended, for the next typed response."""
        self.last_input = ""
        self.last_input_seq: int | None = None

    def call_waiting(self, call_id: str) -> ToolCall:
        """The client call ``call_id`` whose output is awaited (Rule 2)."""
        calls = self.exchange[0] if self.exchange else ()
        call = next((c for c in calls if c.call_id == call_id), None)
        if call is None:
            raise ItemNotFound(f"no function call {call_id[:64]!r} is waiting for its output")
        return call

    def output(self, call_id: str, result: ToolResult) -> None:
        assert self.exchange is not None
        self.exchange[1][call_id] = result

    def called(self, call: ToolCall) -> None:
        """The brain called a client function: its output is awaited (Rule 2)."""
        known = self.exchange[0] if self.exchange else ()
        self.exchange = ((*known, call), {}, self.last_input)

    def take(self, response: Response) -> None:
        """A typed response takes what waits: the items, a settled call, and the calls that have
        their outputs (Rules 1–3)."""
        response.pending, self.pending = self.pending, []
        response.settled, self.settled = self.settled, None
        if self.exchange is not None and self.exchange[1]:
            calls, results, last_input = self.exchange
            response.tool_calls = tuple(c for c in calls if c.call_id in results)
            response.tool_results = tuple(results[c.call_id] for c in response.tool_calls)
            self.last_input = last_input
        self.exchange = None

    def heard(self, text: str, seq: int | None) -> None:
        """The turn's input (Rule 4)."""
        self.last_input, self.last_input_seq = text, seq

    def origin(self, response: Response) -> CallOrigin:
        """Where ``response``'s tool calls come from (the tool gate's question)."""
        return CallOrigin(
            response.generation, response.turn_id, self.last_input, self.last_input_seq
        )
