"""Golden traces (issue 34 item 1): every server event, with the virtual millisecond it was sent,
of scripted conversations through the whole engine — recorded before the engine is moved into
rooms, and identical after.

Each scenario runs in virtual time on fakes (``tests/conversation_harness.py`` where it fits),
so its trace is a function of the code alone: the test runs it twice and the two must agree
before either is compared with ``tests/pipeline/golden/<scenario>.json``. What is random in a
run — ids (items, responses, calls) — is named by order of first appearance (``item#1``,
``resp#2``); an audio delta is its length in bytes.

A trace that changed on purpose is written again with ``OPENREALTIME_UPDATE_GOLDEN=1``; the
diff of the JSON file is then what a reviewer reads.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline import events as ev
from pipeline.turn_commands import TurnSettings
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolSpec
from plugins.fakes import FakeBrain, Faults
from tests.conversation_harness import Conversation, conversation
from tests.pipeline.test_engine_failures import FlakyJournal
from tests.runtime.test_tool_gate import Session as GateSession
from tests.virtual_time import VirtualTimeLoop

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("OPENREALTIME_UPDATE_GOLDEN") == "1"

Trace = list[tuple[float, dict[str, Any]]]

_ID_KEYS = frozenset(
    {"id", "item_id", "previous_item_id", "response_id", "call_id", "approval_request_id"}
)


class Names:
    """Random ids named by order of first appearance, per prefix (``item_3f…`` → ``item#1``)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def __call__(self, value: str) -> str:
        if value not in self.names:
            prefix = value.split("_", 1)[0]
            self.counts[prefix] = self.counts.get(prefix, 0) + 1
            self.names[value] = f"{prefix}#{self.counts[prefix]}"
        return self.names[value]


def normalised(event: dict[str, Any], names: Names) -> dict[str, Any]:
    def walk(value: Any, key: str | None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, None) for v in value]
        if isinstance(value, str) and key in _ID_KEYS:
            return names(value)
        return value

    out = walk(event, None)
    if out["type"] == "response.output_audio.delta":
        out["delta"] = f"<{len(event['delta']) * 3 // 4} bytes>"
    return dict(out)


class Recorder:
    """A sink that keeps every event with its virtual ms since the recording began."""

    def __init__(self, now_ms: Callable[[], float]) -> None:
        self.now_ms = now_ms
        self.names = Names()
        self.trace: Trace = []

    def send(self, value: ev.ServerEvent) -> None:
        wire = normalised(ev.wire(value, extensions=True), self.names)
        self.trace.append((round(self.now_ms(), 3), wire))


def traced(convo: Conversation) -> Trace:
    """What the harness recorded (Rule 3: every event with its virtual ms), normalised."""
    names = Names()
    return [(round(r.at, 3), normalised(r.wire, names)) for r in convo.recorded]


# ---------------------------------------------------------------- the scenarios

STORY = "Once upon a time there was a lighthouse keeper. She kept the light for forty years."


async def barge_in() -> Trace:
    """A spoken question; words over the answer interrupt it."""
    async with conversation(brain=FakeBrain([STORY, "Sure."])) as convo:
        await convo.say("tell me a story", ms=800)
        await convo.until("response.output_audio.delta")
        await convo.silence(ms=1_000)
        await convo.say("wait stop", ms=600)
        await convo.until("response.done")
        await convo.until("response.done")
        await convo.silence(ms=3_000)
    return traced(convo)


async def hold_then_resume() -> Trace:
    """A backchannel over the answer holds it; the answer goes on from where it stopped."""
    async with conversation(brain=FakeBrain([STORY])) as convo:
        await convo.say("tell me a story", ms=800)
        await convo.until("response.output_audio.delta")
        await convo.silence(ms=1_000)
        await convo.say("uh-huh", ms=500)
        await convo.until("response.done")
        await convo.silence(ms=1_000)
    return traced(convo)


async def preemption() -> Trace:
    """The brain starts in the endpoint wait: its answer is reused after a pause the person
    ended; discarded when the person went on with other words."""
    turns = TurnSettings(silence_delay=0.8, transcript_cues=False)
    brain = FakeBrain(["It is sunny.", "In Paris it rains.", "Yes."], token_delay=0.05)
    async with conversation(brain=brain, turns=turns) as convo:
        await convo.say("what is the weather", ms=700)
        await convo.until("response.done")
        await convo.silence(ms=2_000)
        await convo.say("and tomorrow", ms=600)
        await convo.silence(ms=500)  # a pause inside the endpoint wait: the brain starts …
        await convo.say("in Paris please", ms=700)  # … and the words go on
        await convo.until("response.done")
        await convo.silence(ms=3_000)
    return traced(convo)


WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


class WeatherBrain:
    """Calls the client's function, then answers with its output."""

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        if not request.tool_results:
            yield BrainDelta(tool_call=ToolCall("call_1", "get_weather", {"city": "Paris"}))
            return
        yield BrainDelta(text=f"It says {request.tool_results[-1].content}.")


async def typed_input_and_function_output() -> Trace:
    """A typed question; the client runs the function the answer needs and sends its output."""
    async with conversation(brain=WeatherBrain()) as convo:
        convo.engine.responder.defaults.client_tools = (WEATHER,)
        convo.type("What's the weather in Paris?")
        call = await convo.until("response.done")
        assert call["response"]["output"][0]["type"] == "function_call"
        convo.engine.add_function_output("call_1", '{"sky": "clear", "celsius": 21}')
        convo.engine.create_response()
        await convo.until("response.done")
        await convo.silence(ms=3_000)
    return traced(convo)


async def tool_gate_question() -> Trace:
    """A call the tool gate asks the person about; "yes" typed over the question runs it."""
    session = GateSession(tts_ms=40.0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    recorder = Recorder(lambda: (loop.time() - start) * 1000.0)
    session.engine.sink = recorder
    await session.start()
    try:
        session.engine.push_text("cancel order A10086")
        await session.until(
            lambda: any(
                e["type"] == "conversation.item.added"
                and e["item"]["type"] == "mcp_approval_request"
                for _, e in recorder.trace
            )
        )
        session.engine.push_text("yes")
        await session.until(
            lambda: sum(e["type"] == "response.done" for _, e in recorder.trace) >= 2
        )
        await asyncio.sleep(3.0)
    finally:
        await session.close()
    return recorder.trace


async def brain_error() -> Trace:
    """The brain fails before its first token: the apology, then the next turn is answered."""
    brain = FakeBrain(["Yes."], faults=Faults(fail=True))
    async with conversation(brain=brain, expect_errors=True) as convo:
        await convo.say("first question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=2_000)
        brain.faults.fail = False
        await convo.say("second question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=2_000)
    return traced(convo)


async def journal_outage() -> Trace:
    """The journal's write fails: the turn is apologised for, the next one is journaled."""
    async with conversation(brain=FakeBrain(["Yes."]), expect_errors=True) as convo:
        journal = FlakyJournal(convo)
        convo.engine.conversation.journal = journal  # type: ignore[assignment]
        journal.fail_next = 1
        await convo.say("first question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=2_000)
        await convo.say("second question", ms=600)
        await convo.until("response.done")
        await convo.silence(ms=2_000)
    return traced(convo)


SCENARIOS: dict[str, Callable[[], Awaitable[Trace]]] = {
    "barge_in": barge_in,
    "hold_then_resume": hold_then_resume,
    "preemption": preemption,
    "typed_input_and_function_output": typed_input_and_function_output,
    "tool_gate_question": tool_gate_question,
    "brain_error": brain_error,
    "journal_outage": journal_outage,
}


def run(scenario: Callable[[], Awaitable[Trace]]) -> Trace:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()


def dump(trace: Trace) -> str:
    lines = [json.dumps([at, event], ensure_ascii=False, sort_keys=True) for at, event in trace]
    return "[\n" + ",\n".join(lines) + "\n]\n"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_engine_sends_what_the_golden_trace_holds(name: str) -> None:
    trace = run(SCENARIOS[name])
    again = run(SCENARIOS[name])
    assert dump(trace) == dump(again), "the scenario is not deterministic"
    path = GOLDEN / f"{name}.json"
    if UPDATE or not path.exists():
        assert UPDATE, f"{path} is missing: record it with OPENREALTIME_UPDATE_GOLDEN=1"
        path.parent.mkdir(exist_ok=True)
        path.write_text(dump(trace), encoding="utf-8")
    expected = [(at, event) for at, event in json.loads(path.read_text(encoding="utf-8"))]
    got = json.loads(dump(trace))
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        assert list(want) == have, f"{name}: event {index} differs"
    assert len(got) == len(expected), f"{name}: {len(got)} events, the trace holds {len(expected)}"
