from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest

from plugins.brain.openai_brain import NOT_RUN, OpenAIBrain, chat_messages
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolResult, ToolSpec
from plugins.errors import PluginError, PluginTimeout, ProviderError
from tests.plugins.openai_server import (
    API_KEY,
    MODEL,
    OpenAIServer,
    Reply,
    ScriptedToolCall,
    running_openai_server,
)

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
REQUEST = BrainInput(
    system="Be brief.",
    model_text="Current user input:what is the weather in Paris?",
    current_input="what is the weather in Paris?",
    tools=(WEATHER,),
)


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


@pytest.fixture
async def brain(server: OpenAIServer) -> AsyncIterator[OpenAIBrain]:
    brain = OpenAIBrain(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=2.0)
    yield brain
    await brain.aclose()


async def collect(brain: OpenAIBrain, request: BrainInput = REQUEST) -> list[BrainDelta]:
    return [delta async for delta in brain.stream(request)]


async def test_streams_text_deltas_as_they_arrive(brain: OpenAIBrain, server: OpenAIServer) -> None:
    server.chat.append(Reply(text="Sunny and mild in Paris today."))
    deltas = await collect(brain)
    assert len(deltas) > 3
    assert "".join(d.text for d in deltas) == "Sunny and mild in Paris today."
    assert all(d.tool_call is None for d in deltas)


async def test_sends_system_user_tools_and_key(brain: OpenAIBrain, server: OpenAIServer) -> None:
    await collect(brain)
    sent = server.last("/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.json is not None
    assert sent.json["model"] == MODEL
    assert sent.json["stream"] is True
    assert sent.json["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": REQUEST.model_text},
    ]
    assert sent.json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]


async def test_no_tools_key_when_none_are_offered(brain: OpenAIBrain, server: OpenAIServer) -> None:
    await collect(brain, BrainInput(system="", model_text="hi", current_input="hi"))
    sent = server.last("/chat/completions").json
    assert sent is not None
    assert "tools" not in sent
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


async def test_tool_call_fragments_are_assembled_into_one_call(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    arguments = '{"city": "Paris", "days": [1, 2], "note": "東京 \\"quoted\\""}'
    server.chat.append(
        Reply(
            text="Let me check.",
            tool_calls=[ScriptedToolCall("get_weather", arguments, call_id="call_w1")],
            argument_fragment_chars=3,
        )
    )
    deltas = await collect(brain)
    calls = [d.tool_call for d in deltas if d.tool_call is not None]
    assert calls == [ToolCall("call_w1", "get_weather", json.loads(arguments))]
    assert "".join(d.text for d in deltas) == "Let me check."
    assert deltas[-1].tool_call is not None  # calls come after the text, once complete


async def test_parallel_tool_calls_keep_their_order(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(
        Reply(
            tool_calls=[
                ScriptedToolCall("get_weather", '{"city": "Paris"}'),
                ScriptedToolCall("get_weather", '{"city": "Oslo"}'),
                ScriptedToolCall("get_time", ""),
            ]
        )
    )
    calls = [d.tool_call for d in await collect(brain) if d.tool_call is not None]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        ("call_0_abc", "get_weather", {"city": "Paris"}),
        ("call_1_abc", "get_weather", {"city": "Oslo"}),
        ("call_2_abc", "get_time", {}),
    ]


@pytest.mark.parametrize("arguments", ['{"city": "Par', "[1, 2]", "not json"])
async def test_invalid_tool_arguments_raise_a_plugin_error(
    brain: OpenAIBrain, server: OpenAIServer, arguments: str
) -> None:
    server.chat.append(Reply(tool_calls=[ScriptedToolCall("get_weather", arguments)]))
    with pytest.raises(ProviderError) as caught:
        await collect(brain)
    assert caught.value.retryable
    assert "get_weather" in str(caught.value)


async def test_a_tool_round_sends_the_calls_and_their_results(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    call = ToolCall("call_1", "get_weather", {"city": "Paris"})
    forgotten = ToolCall("call_2", "get_weather", {"city": "Rome"})
    request = BrainInput(
        system="Be brief.",
        model_text="Current user input:weather?",
        current_input="weather?",
        tools=(WEATHER,),
        tool_calls=(call, forgotten),
        tool_results=(ToolResult("call_1", "get_weather", "Sunny, 21 °C"),),
    )
    await collect(brain, request)
    sent = server.last("/chat/completions").json
    assert sent is not None
    assert sent["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 °C"},
        {"role": "tool", "tool_call_id": "call_2", "content": NOT_RUN},
    ]


def test_results_without_their_calls_still_make_a_valid_conversation() -> None:
    request = BrainInput(
        system="",
        model_text="q",
        current_input="q",
        tool_results=(ToolResult("call_9", "knowledge_search", "nothing"),),
    )
    messages = chat_messages(request)
    assert messages[1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "knowledge_search", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "nothing"},
    ]


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (403, False), (429, True), (500, True), (503, True)]
)
async def test_http_errors_map_to_provider_errors(
    brain: OpenAIBrain, server: OpenAIServer, status: int, retryable: bool
) -> None:
    server.chat.append(Reply(status=status, error_message="the scripted failure"))
    with pytest.raises(ProviderError) as caught:
        await collect(brain)
    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert "the scripted failure" in str(caught.value)


async def test_a_wrong_key_is_not_retryable_and_never_appears_in_the_error(
    server: OpenAIServer,
) -> None:
    secret = "sk-wrong-key-0123456789abcdef"
    brain = OpenAIBrain(base_url=server.base_url, api_key=secret, model=MODEL, timeout=2.0)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(brain)
    finally:
        await brain.aclose()
    assert caught.value.status == 401
    assert not caught.value.retryable
    assert "Incorrect API key provided" in str(caught.value)  # the server echoed the key …
    assert secret not in str(caught.value)  # … and the message lost it
    assert "sk-wrong" not in str(caught.value)


async def test_slow_headers_time_out(server: OpenAIServer) -> None:
    server.chat.append(Reply(delay=5.0))
    brain = OpenAIBrain(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=0.3)
    try:
        with pytest.raises(PluginTimeout):
            await collect(brain)
    finally:
        await brain.aclose()


@pytest.mark.parametrize("keepalive", [False, True])
async def test_a_stalled_stream_times_out_and_is_closed(
    server: OpenAIServer, keepalive: bool
) -> None:
    server.chat.append(Reply(text="one two three four", stall_after=3, keepalive=keepalive))
    # The stall never ends, so the timeout only sets how long the test waits; 0.3 s failed
    # under a loaded CI machine before the first words came (the full suite beside a model run).
    brain = OpenAIBrain(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=2.0)
    received: list[str] = []
    try:
        with pytest.raises(PluginTimeout) as caught:
            async for delta in brain.stream(REQUEST):
                received.append(delta.text)
    finally:
        await brain.aclose()
    assert caught.value.retryable
    assert "".join(received) == "one two "
    assert await server.wait_for_disconnect() == "/v1/chat/completions"


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    brain = OpenAIBrain(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, model=MODEL, timeout=2.0
    )
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(brain)
    finally:
        await brain.aclose()
    assert caught.value.retryable
    assert caught.value.status is None


async def test_cancelling_the_consumer_closes_the_http_stream(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(text="one two three four five", stall_after=3))
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in brain.stream(REQUEST):
            first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await server.wait_for_disconnect() == "/v1/chat/completions"
    assert server.completed == []


async def test_closing_the_stream_early_closes_the_http_stream(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(text="one two three four five", stall_after=3))
    stream = brain.stream(REQUEST)
    assert (await anext(stream)).text == "one "
    await stream.aclose()
    assert await server.wait_for_disconnect() == "/v1/chat/completions"


async def test_the_brain_is_usable_after_a_cancelled_response(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(text="one two three", stall_after=2))
    task = asyncio.create_task(collect(brain))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    server.chat.append(Reply(text="Still here."))
    assert "".join(d.text for d in await collect(brain)) == "Still here."


async def test_errors_are_plugin_errors(brain: OpenAIBrain, server: OpenAIServer) -> None:
    server.chat.append(Reply(status=502))
    with pytest.raises(PluginError):
        await collect(brain)
