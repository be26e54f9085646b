"""The tool loop's gate (``plugins/brain/tool_loop.py`` Rule 7): each call is decided before
it is passed on; refused calls never run, a question ends the response."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from plugins.brain.tool_loop import PROCEED, Verdict, run_brain_with_tools
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolSpec

SPECS = (ToolSpec("lookup", "Look up.", {"type": "object"}),
         ToolSpec("cancel", "Cancel.", {"type": "object"}))  # fmt: skip


class TwoCallBrain:
    """Says a word, calls ``lookup`` and ``cancel``; then answers from the results."""

    def __init__(self) -> None:
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if request.tool_results:
            yield BrainDelta(text="; ".join(r.content for r in request.tool_results))
            return
        yield BrainDelta(text="One moment.")
        yield BrainDelta(tool_call=ToolCall("c1", "lookup", {"id": "A1"}))
        yield BrainDelta(tool_call=ToolCall("c2", "cancel", {"id": "A1"}))


async def collect(gate: Any, ran: list[str], client: tuple[str, ...] = ()) -> list[BrainDelta]:
    async def handler(arguments: dict[str, Any]) -> str:
        ran.append("handler")
        return "handled"

    brain = TwoCallBrain()
    request = BrainInput(system="", model_text="cancel A1", current_input="cancel A1",
                         tools=SPECS)  # fmt: skip
    stream = run_brain_with_tools(brain, request, {"lookup": handler, "cancel": handler},
                                  client_tools=client, gate=gate)  # fmt: skip
    return [delta async for delta in stream]


async def test_a_refused_call_never_runs_and_its_refusal_is_the_result() -> None:
    ran: list[str] = []
    decided: list[str] = []

    async def gate(call: ToolCall) -> Verdict:
        decided.append(call.call_id)
        return PROCEED if call.name == "lookup" else Verdict(refused="Not permitted: no.")

    deltas = await collect(gate, ran)
    assert decided == ["c1", "c2"]
    assert ran == ["handler"]
    results = [d.tool_result for d in deltas if d.tool_result is not None]
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        ("c1", "handled", False), ("c2", "Not permitted: no.", True),
    ]  # fmt: skip
    assert "".join(d.text for d in deltas).endswith("handled; Not permitted: no.")


async def test_a_gate_runner_replaces_the_handler() -> None:
    ran: list[str] = []

    async def gate(call: ToolCall) -> Verdict:
        async def run() -> str:
            ran.append(f"runner {call.call_id}")
            return "ran"

        return Verdict(run=run)

    await collect(gate, ran)
    assert ran == ["runner c1", "runner c2"]


async def test_a_question_ends_the_response_after_the_other_calls_ran() -> None:
    ran: list[str] = []

    async def gate(call: ToolCall) -> Verdict:
        return PROCEED if call.name == "lookup" else Verdict(ask="May I cancel A1?")

    deltas = await collect(gate, ran)
    assert ran == ["handler"]
    results = [d.tool_result for d in deltas if d.tool_result is not None]
    assert [r.call_id for r in results] == ["c1"]  # the asked call has no result yet
    assert deltas[-1].text == " May I cancel A1?"  # spoken last, apart from "One moment."
    assert "".join(d.text for d in deltas) == "One moment. May I cancel A1?"


async def test_a_refused_client_call_is_answered_here_and_the_turn_goes_on() -> None:
    ran: list[str] = []

    async def gate(call: ToolCall) -> Verdict:
        return Verdict(refused="Not permitted.") if call.name == "cancel" else PROCEED

    deltas = await collect(gate, ran, client=("cancel",))
    results = [d.tool_result for d in deltas if d.tool_result is not None]
    assert [r.call_id for r in results] == ["c1", "c2"]
    assert deltas[-1].text == " handled; Not permitted."  # a second round answered


async def test_an_allowed_client_call_still_ends_the_response() -> None:
    ran: list[str] = []

    async def gate(call: ToolCall) -> Verdict:
        return PROCEED

    deltas = await collect(gate, ran, client=("cancel",))
    results = [d.tool_result for d in deltas if d.tool_result is not None]
    assert [r.call_id for r in results] == ["c1"]
    assert [d.tool_call.call_id for d in deltas if d.tool_call] == ["c1", "c2"]
