from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pipeline.content import TurnContent
from plugins.brain.local import KNOWLEDGE_TOOL, LocalBrain
from plugins.brain.openai_brain import OpenAIBrain
from plugins.brain.tool_loop import ToolHandler, run_brain_with_tools
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolResult, ToolSpec
from tests.plugins.openai_server import (
    API_KEY,
    MODEL,
    OpenAIServer,
    Reply,
    ScriptedToolCall,
    running_openai_server,
)

KNOWLEDGE = ToolSpec(
    name=KNOWLEDGE_TOOL,
    description="Search the role's documents.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
REFUNDS = (
    "[source: Refund policy]\n<untrusted_knowledge>Refunds are accepted within 30 days of "
    "purchase. Bring the receipt. Gift cards cannot be refunded, exchanged or turned into cash "
    "under any circumstances whatsoever, as stated in section four of the store's "
    "terms.</untrusted_knowledge>"
)


def request_for(text: str, *tools: ToolSpec, language: str | None = None) -> BrainInput:
    content = TurnContent("be brief", "", text, language=language, tools=tools)
    return content.to_brain_input()


async def run(
    brain: Any, request: BrainInput, tools: dict[str, ToolHandler], **options: Any
) -> list[BrainDelta]:
    return [delta async for delta in run_brain_with_tools(brain, request, tools, **options)]


def text_of(deltas: list[BrainDelta]) -> str:
    return "".join(d.text for d in deltas)


def calls_of(deltas: list[BrainDelta]) -> list[ToolCall]:
    return [d.tool_call for d in deltas if d.tool_call is not None]


def results_of(deltas: list[BrainDelta]) -> list[ToolResult]:
    return [d.tool_result for d in deltas if d.tool_result is not None]


class Knowledge:
    """A knowledge_search handler that records its queries."""

    def __init__(self, answer: str = REFUNDS) -> None:
        self.answer = answer
        self.queries: list[str] = []

    async def __call__(self, arguments: dict[str, Any]) -> str:
        self.queries.append(arguments["query"])
        return self.answer


# ---------------------------------------------------------------- with the local brain


async def test_local_brain_answers_a_question_through_the_knowledge_tool() -> None:
    knowledge = Knowledge()
    deltas = await run(
        LocalBrain(),
        request_for("how long do I have to return something?", KNOWLEDGE),
        {KNOWLEDGE_TOOL: knowledge},
    )
    assert knowledge.queries == ["how long do I have to return something?"]
    assert [(c.name, c.arguments) for c in calls_of(deltas)] == [
        (KNOWLEDGE_TOOL, {"query": "how long do I have to return something?"})
    ]
    [result] = results_of(deltas)
    assert result.content == REFUNDS and not result.is_error
    assert result.call_id == calls_of(deltas)[0].call_id
    # The call and its result come before the spoken answer.
    assert deltas[0].tool_call is not None and deltas[1].tool_result is not None
    # One sentence is quoted, never the whole passage.
    assert text_of(deltas) == (
        'According to "Refund policy": Refunds are accepted within 30 days of purchase.'
    )


async def test_local_brain_answers_in_chinese_from_chinese_knowledge() -> None:
    knowledge = Knowledge(
        "[source: 退货政策]\n<untrusted_knowledge>购买后三十天内可以退货。请带好收据。"
        "</untrusted_knowledge>"
    )
    deltas = await run(
        LocalBrain(), request_for("多久可以退货?", KNOWLEDGE), {"knowledge_search": knowledge}
    )
    assert text_of(deltas) == "根据《退货政策》:购买后三十天内可以退货。"


async def test_local_brain_answers_with_the_sentence_that_matches_the_question() -> None:
    knowledge = Knowledge(
        "[source: Nova]\n<untrusted_knowledge>The battery lasts 30 hours. A full charge takes "
        "two hours. Accidental damage is not covered.</untrusted_knowledge>\n"
        "[source: 售后]\n<untrusted_knowledge>退货期限为签收后 7 天。"
        "退货运费规则:质量问题由商店承担。</untrusted_knowledge>"
    )
    tools = {KNOWLEDGE_TOOL: knowledge}
    charging = await run(
        LocalBrain(), request_for("How long does charging take?", KNOWLEDGE), tools
    )
    assert text_of(charging) == 'According to "Nova": A full charge takes two hours.'
    postage = await run(LocalBrain(), request_for("那运费谁承担?", KNOWLEDGE), tools)
    assert text_of(postage) == "根据《售后》:退货运费规则:质量问题由商店承担。"
    # Nothing in common with the question: the first sentence of the best-ranked block.
    vague = await run(LocalBrain(), request_for("tell me something", KNOWLEDGE), tools)
    assert text_of(vague).startswith('According to "Nova": The battery lasts 30 hours.')


@pytest.mark.parametrize(
    "answer", ["", "No documents matched.", "<untrusted_knowledge> </untrusted_knowledge>"]
)
async def test_local_brain_says_it_does_not_know_when_nothing_is_found(answer: str) -> None:
    deltas = await run(
        LocalBrain(),
        request_for("what is the capital of Peru?", KNOWLEDGE),
        {KNOWLEDGE_TOOL: Knowledge(answer)},
    )
    assert len(results_of(deltas)) == 1
    assert "do not know" in text_of(deltas)


async def test_local_brain_answers_social_turns_without_a_tool() -> None:
    knowledge = Knowledge()
    deltas = await run(
        LocalBrain(), request_for("hello there", KNOWLEDGE), {KNOWLEDGE_TOOL: knowledge}
    )
    assert knowledge.queries == []
    assert calls_of(deltas) == []
    assert "Hello" in text_of(deltas)


async def test_local_brain_without_the_tool_keeps_admitting_it_does_not_know() -> None:
    deltas = await run(LocalBrain(), request_for("what is the capital of Peru?"), {})
    assert calls_of(deltas) == []
    assert "do not know" in text_of(deltas)


async def test_an_unknown_tool_gives_an_error_result_not_a_crash() -> None:
    deltas = await run(LocalBrain(), request_for("what is the capital of Peru?", KNOWLEDGE), {})
    [result] = results_of(deltas)
    assert result.is_error
    assert "no tool named 'knowledge_search'" in result.content
    assert "do not know" in text_of(deltas)


async def test_a_failing_handler_gives_an_error_result_and_is_logged_without_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError(f"database exploded while looking for {arguments['query']}")

    with caplog.at_level(logging.WARNING, logger="plugins.brain.tool_loop"):
        deltas = await run(
            LocalBrain(),
            request_for("where is my secret parcel?", KNOWLEDGE),
            {KNOWLEDGE_TOOL: broken},
        )
    [result] = results_of(deltas)
    assert result.is_error and "failed" in result.content
    assert "exploded" not in result.content
    assert "do not know" in text_of(deltas)
    assert "knowledge_search" in caplog.text and "RuntimeError" in caplog.text
    assert "secret parcel" not in caplog.text


async def test_a_slow_handler_times_out_into_an_error_result() -> None:
    async def hangs(arguments: dict[str, Any]) -> str:
        await asyncio.Event().wait()
        return ""

    deltas = await run(
        LocalBrain(),
        request_for("what is the capital of Peru?", KNOWLEDGE),
        {KNOWLEDGE_TOOL: hangs},
        tool_timeout=0.1,
    )
    [result] = results_of(deltas)
    assert result.is_error and "in time" in result.content


async def test_long_results_are_cut() -> None:
    deltas = await run(
        LocalBrain(),
        request_for("what is the capital of Peru?", KNOWLEDGE),
        {KNOWLEDGE_TOOL: Knowledge("x" * 100)},
        max_result_chars=10,
    )
    assert results_of(deltas)[0].content == "x" * 10


class AlwaysCallsBrain:
    """Calls ``get_weather`` in every round tools are offered (and, if ``stubborn``, in every
    round); records the requests it sees."""

    def __init__(self, *, stubborn: bool = False) -> None:
        self.stubborn = stubborn
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        n = len(self.requests)
        if request.tools or self.stubborn:
            yield BrainDelta(text=f"round {n}. ")
            yield BrainDelta(tool_call=ToolCall(f"c{n}", "get_weather", {"city": f"city{n}"}))
            return
        yield BrainDelta(text="final answer")


async def weather(arguments: dict[str, Any]) -> str:
    return f"sunny in {arguments['city']}"


async def test_max_rounds_bounds_the_loop_and_the_last_round_offers_no_tools() -> None:
    brain = AlwaysCallsBrain()
    deltas = await run(
        brain, request_for("weather?", WEATHER), {"get_weather": weather}, max_rounds=3
    )
    assert len(brain.requests) == 3
    assert [bool(r.tools) for r in brain.requests] == [True, True, False]
    assert [c.call_id for c in calls_of(deltas)] == ["c1", "c2"]
    assert [r.content for r in results_of(deltas)] == ["sunny in city1", "sunny in city2"]
    assert text_of(deltas) == "round 1. round 2. final answer"
    # Each round sees every earlier call and result, in order.
    assert [c.call_id for c in brain.requests[2].tool_calls] == ["c1", "c2"]
    assert [r.content for r in brain.requests[2].tool_results] == [
        "sunny in city1",
        "sunny in city2",
    ]
    assert brain.requests[1].tool_calls == (ToolCall("c1", "get_weather", {"city": "city1"}),)


async def test_calls_in_the_last_round_are_dropped_not_run() -> None:
    ran: list[str] = []

    async def recording(arguments: dict[str, Any]) -> str:
        ran.append(arguments["city"])
        return "ok"

    brain = AlwaysCallsBrain(stubborn=True)
    deltas = await run(
        brain, request_for("weather?", WEATHER), {"get_weather": recording}, max_rounds=2
    )
    assert len(brain.requests) == 2
    assert ran == ["city1"]
    assert [c.call_id for c in calls_of(deltas)] == ["c1"]
    assert text_of(deltas) == "round 1. round 2. "


async def test_max_rounds_one_means_no_tools() -> None:
    brain = AlwaysCallsBrain()
    deltas = await run(
        brain, request_for("weather?", WEATHER), {"get_weather": weather}, max_rounds=1
    )
    assert text_of(deltas) == "final answer"
    with pytest.raises(ValueError, match="max_rounds"):
        await run(brain, request_for("weather?", WEATHER), {}, max_rounds=0)


async def test_calls_of_one_round_run_concurrently_and_results_keep_call_order() -> None:
    class TwoCalls:
        async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
            if request.tool_results:
                yield BrainDelta(text="done")
                return
            yield BrainDelta(tool_call=ToolCall("slow", "wait", {"s": 0.2}))
            yield BrainDelta(tool_call=ToolCall("fast", "wait", {"s": 0.0}))

    finished: list[str] = []

    async def wait(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(arguments["s"])
        finished.append(str(arguments["s"]))
        return str(arguments["s"])

    deltas = await run(TwoCalls(), request_for("go", WEATHER), {"wait": wait})
    assert finished == ["0.0", "0.2"]
    assert [r.call_id for r in results_of(deltas)] == ["slow", "fast"]


async def test_cancelling_during_a_tool_call_cancels_the_handler() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def hangs(arguments: dict[str, Any]) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ""

    task = asyncio.create_task(
        run(
            LocalBrain(),
            request_for("what is the capital of Peru?", KNOWLEDGE),
            {KNOWLEDGE_TOOL: hangs},
        )
    )
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()


# ---------------------------------------------------------------- with the OpenAI brain


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


@pytest.fixture
async def brain(server: OpenAIServer) -> AsyncIterator[OpenAIBrain]:
    brain = OpenAIBrain(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=2.0)
    yield brain
    await brain.aclose()


def tool_messages(server: OpenAIServer, n: int) -> list[dict[str, Any]]:
    sent = [r for r in server.requests if r.path.endswith("/chat/completions")][n].json
    assert sent is not None
    return [m for m in sent["messages"] if m["role"] in ("assistant", "tool")]


async def test_openai_tool_call_round_trip(brain: OpenAIBrain, server: OpenAIServer) -> None:
    server.chat += [
        Reply(
            text="Let me check.",
            tool_calls=[ScriptedToolCall("get_weather", '{"city": "Paris"}', call_id="call_p")],
        ),
        Reply(text="It is sunny in Paris."),
    ]
    deltas = await run(brain, request_for("weather in Paris?", WEATHER), {"get_weather": weather})
    kinds = ["call" if d.tool_call else "result" if d.tool_result else "text" for d in deltas]
    assert kinds[-1] == "text" and kinds.count("call") == 1 and kinds.count("result") == 1
    assert kinds.index("call") < kinds.index("result")
    assert text_of(deltas) == "Let me check. It is sunny in Paris."
    assert results_of(deltas) == [ToolResult("call_p", "get_weather", "sunny in Paris")]
    assert tool_messages(server, 1) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_p",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_p", "content": "sunny in Paris"},
    ]


async def test_openai_unknown_tool_is_reported_back_to_the_model(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat += [
        Reply(tool_calls=[ScriptedToolCall("launch_rockets", '{"count": 3}', call_id="call_r")]),
        Reply(text="I cannot do that."),
    ]
    deltas = await run(brain, request_for("launch!", WEATHER), {"get_weather": weather})
    assert text_of(deltas) == "I cannot do that."
    assert tool_messages(server, 1)[1] == {
        "role": "tool",
        "tool_call_id": "call_r",
        "content": "Error: there is no tool named 'launch_rockets'.",
    }


async def test_openai_handler_failure_is_reported_back_to_the_model(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    async def broken(arguments: dict[str, Any]) -> str:
        raise ConnectionError("weather service down")

    server.chat += [
        Reply(tool_calls=[ScriptedToolCall("get_weather", '{"city": "Oslo"}')]),
        Reply(text="The weather service is not answering."),
    ]
    deltas = await run(brain, request_for("weather in Oslo?", WEATHER), {"get_weather": broken})
    assert text_of(deltas) == "The weather service is not answering."
    [result] = results_of(deltas)
    assert result.is_error
    assert tool_messages(server, 1)[1]["content"] == "Error: the tool 'get_weather' failed."


async def test_openai_max_rounds(brain: OpenAIBrain, server: OpenAIServer) -> None:
    call = ScriptedToolCall("get_weather", '{"city": "Paris"}')
    server.chat += [Reply(tool_calls=[call]), Reply(tool_calls=[call]), Reply(tool_calls=[call])]
    deltas = await run(
        brain, request_for("weather?", WEATHER), {"get_weather": weather}, max_rounds=2
    )
    chats = [r.json for r in server.requests if r.path.endswith("/chat/completions")]
    assert len(chats) == 2
    assert chats[0] is not None and "tools" in chats[0]
    assert chats[1] is not None and "tools" not in chats[1]
    assert len(calls_of(deltas)) == 1 and len(results_of(deltas)) == 1
    assert json.loads(chats[1]["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }


async def test_cancelling_the_loop_closes_the_brains_http_stream(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat += [
        Reply(tool_calls=[ScriptedToolCall("get_weather", '{"city": "Paris"}')]),
        Reply(text="It is sunny in Paris today.", stall_after=3),
    ]
    second_round_text = asyncio.Event()

    async def consume() -> None:
        async for delta in run_brain_with_tools(
            brain, request_for("weather?", WEATHER), {"get_weather": weather}
        ):
            if delta.text:
                second_round_text.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await second_round_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await server.wait_for_disconnect() == "/v1/chat/completions"
    assert server.completed == ["/v1/chat/completions"]  # the first round finished normally


async def test_leaving_the_loop_early_closes_the_brains_http_stream(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(text="one two three four", stall_after=3))
    deltas = run_brain_with_tools(brain, request_for("count", WEATHER), {})
    assert (await anext(deltas)).text == "one "
    await deltas.aclose()
    assert await server.wait_for_disconnect() == "/v1/chat/completions"


class TwoCallsBrain:
    """Calls the knowledge tool and the client's get_weather in one round."""

    def __init__(self) -> None:
        self.rounds = 0

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.rounds += 1
        yield BrainDelta(tool_call=ToolCall("c1", KNOWLEDGE_TOOL, {"query": "refunds"}))
        yield BrainDelta(tool_call=ToolCall("c2", "get_weather", {"city": "Paris"}))


async def test_a_client_tool_call_ends_the_response_after_the_server_tools_ran() -> None:
    ran: list[str] = []

    async def search(arguments: dict[str, Any]) -> str:
        ran.append(arguments["query"])
        return REFUNDS

    brain = TwoCallsBrain()
    deltas = await run(
        brain,
        request_for("refunds and weather?", KNOWLEDGE, WEATHER),
        {KNOWLEDGE_TOOL: search},
        client_tools={"get_weather"},
    )
    assert [c.name for c in calls_of(deltas)] == [KNOWLEDGE_TOOL, "get_weather"]
    results = [d.tool_result for d in deltas if d.tool_result is not None]
    assert [r.call_id for r in results] == ["c1"]  # the client runs get_weather itself
    assert ran == ["refunds"] and brain.rounds == 1  # no second round: the client continues
