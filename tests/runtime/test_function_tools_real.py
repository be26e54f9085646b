"""Function tools on the default stack (SPEC OAI-2, TOOL-6): the official ``openai`` SDK (async
and sync) and the ``openai-agents`` realtime runner, unchanged but for the URL, against the
real server built as ``make run`` builds it — the local model, Silero VAD, Whisper, Piper —
loaded once for the module. Typed turns, one approval accepted and one refused in the runner,
a spoken turn (Piper's voice heard by Whisper) that picks its tool, and an MCP server's tool
(a real MCP server, ``tests.mcp.server``) chosen beside a client function and run by the
runtime inside the response.

How often the model picks the right function is measured by ``benchmarks.tool_calls``; these
tests hold only what must always work: a plain request for the one fitting function, a forced
choice, ``none``, and the answer after the function's output."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from openai import AsyncOpenAI, OpenAI

from pipeline.audio import resample
from plugins.brain.local_model import LocalModel
from plugins.tts import create_tts
from runtime.config import Settings
from runtime.plugin_factory import build_plugins, warm_up
from runtime.server import RunningServer, running_server
from tests.mcp import mcp_server

pytestmark = [
    pytest.mark.skipif(
        LocalModel.unavailable_reason() is not None,
        reason=f"local model not installed: {LocalModel.unavailable_reason()}",
    ),
    pytest.mark.asyncio(loop_scope="module"),
]

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city"}},
        "required": ["city"],
    },
}
TIMER = {
    "type": "function",
    "name": "set_timer",
    "description": "Start a countdown timer for a number of minutes.",
    "parameters": {
        "type": "object",
        "properties": {"minutes": {"type": "integer"}},
        "required": ["minutes"],
    },
}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningServer]:
    data_dir = Path(tmp_path_factory.mktemp("fn"))
    settings = Settings(port=0, storage="memory", data_dir=data_dir, tool_hosts="127.0.0.1")
    plugins = build_plugins(settings)
    await warm_up(plugins)
    async with running_server(settings, plugins=plugins) as running:
        yield running
    close = getattr(plugins.brain, "aclose", None)
    if close is not None:
        await close()  # the local model's worker thread


def client(server: RunningServer) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=server.token, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")


async def ask(conn: Any, text: str) -> None:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await conn.response.create()


async def until_done(conn: Any) -> tuple[Any, list[Any]]:
    calls = []
    async for event in conn:
        if event.type == "response.output_item.done" and event.item.type == "function_call":
            calls.append(event.item)
        if event.type == "response.done":
            return event.response, calls
    raise AssertionError("the connection ended first")


async def test_the_async_sdk_gets_the_fitting_function_and_an_answer_from_its_output(
    server: RunningServer,
) -> None:
    async with client(server).realtime.connect(model="Assistant") as conn:
        await conn.session.update(
            session={"type": "realtime", "output_modalities": ["text"], "tools": [WEATHER, TIMER]}  # type: ignore[list-item]
        )
        await ask(conn, "What's the weather in Paris right now?")
        response, calls = await until_done(conn)
        (call,) = calls
        assert call.name == "get_weather"
        assert "paris" in json.loads(call.arguments)["city"].lower()
        assert response.status == "completed"
        output = '{"city": "Paris", "temperature_c": 17, "sky": "light rain"}'
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": call.call_id, "output": output}
        )
        await conn.response.create()
        response, calls = await until_done(conn)
        assert calls == []  # the output is answered in words, not with another call
        answer = response.output[0].content[0].text
        assert "17" in answer or "rain" in answer.lower()


async def test_the_sync_sdk_forces_a_named_function_and_none_offers_none(
    server: RunningServer,
) -> None:
    def conversation() -> tuple[list[str], list[str]]:
        sync = OpenAI(api_key=server.token, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        forced: list[str] = []
        refused: list[str] = []
        with sync.realtime.connect(model="Assistant") as conn:
            named = {"type": "function", "name": "set_timer"}
            conn.session.update(
                session={"type": "realtime", "output_modalities": ["text"],
                         "tools": [WEATHER, TIMER], "tool_choice": named}  # type: ignore[typeddict-item]
            )  # fmt: skip
            for text, seen in (("Ten minutes, please.", forced),):
                conn.conversation.item.create(item={"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}]})  # fmt: skip
                conn.response.create()
                for event in conn:
                    if event.type == "response.function_call_arguments.done":
                        seen.append(f"{event.name} {event.arguments}")
                    if event.type == "response.done":
                        break
            conn.session.update(session={"type": "realtime", "tool_choice": "none"})
            weather = [{"type": "input_text", "text": "What's the weather in Paris?"}]
            conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": weather}  # type: ignore[typeddict-item]
            )
            conn.response.create()
            for event in conn:
                if event.type == "response.function_call_arguments.done":
                    refused.append(event.name)
                if event.type == "response.done":
                    break
        return forced, refused

    forced, refused = await asyncio.to_thread(conversation)
    (call,) = forced
    name, arguments = call.split(" ", 1)
    assert name == "set_timer" and json.loads(arguments) == {"minutes": 10}
    assert refused == []


RUNS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    RUNS.append(f"weather:{city}")
    return "sunny, 21 degrees"


@function_tool
def set_timer(minutes: int) -> str:
    """Start a countdown timer for a number of minutes."""
    RUNS.append(f"timer:{minutes}")
    return f"timer set for {minutes} minutes"


async def test_the_agents_runner_runs_the_tool_the_model_picks(server: RunningServer) -> None:
    RUNS.clear()
    agent = RealtimeAgent(
        name="Assistant", instructions="Be brief.", tools=[get_weather, set_timer]
    )
    session = await RealtimeRunner(agent).run(model_config=runner_config(server))
    said = ""
    async with session:
        await session.send_message("Please set a timer for 5 minutes.")
        async with asyncio.timeout(120):
            tools_done = 0
            async for event in session:
                if event.type == "tool_end":
                    tools_done += 1
                if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    data = event.data.data
                    if data.get("type") == "response.output_audio_transcript.delta":
                        said += data.get("delta", "")
                if event.type == "agent_end" and tools_done and said:
                    break
    assert RUNS == ["timer:5"]
    assert "5" in said or "five" in said.lower()


@function_tool(needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order by its id."""
    RUNS.append(f"cancel:{order_id}")
    return f"order {order_id} cancelled"


async def approval_turn(server: RunningServer, text: str, *, approve: bool) -> list[str]:
    """One typed turn through the runner; the approval it asks for is given or refused."""
    RUNS.clear()
    tools = [get_weather, cancel_order]
    agent = RealtimeAgent(name="Assistant", instructions="Be brief.", tools=tools)
    session = await RealtimeRunner(agent).run(model_config=runner_config(server))
    asked: list[str] = []
    async with session:
        await session.send_message(text)
        async with asyncio.timeout(120):
            async for event in session:
                if event.type == "tool_approval_required":
                    asked.append(event.tool.name)
                    if approve:
                        await session.approve_tool_call(event.call_id)
                    else:
                        await session.reject_tool_call(event.call_id)
                if event.type == "agent_end" and asked:
                    break
    return asked


def runner_config(server: RunningServer) -> Any:
    return {
        "url": f"ws://127.0.0.1:{server.port}/v1/realtime?model=Assistant",
        "headers": {"Authorization": f"Bearer {server.token}"},
    }


async def test_the_runner_asks_before_a_tool_that_needs_approval_and_runs_it_if_given(
    server: RunningServer,
) -> None:
    asked = await approval_turn(server, "Please cancel my order A1234.", approve=True)

    assert asked == ["cancel_order"]
    assert RUNS == ["cancel:A1234"]


async def test_a_refused_approval_runs_nothing(server: RunningServer) -> None:
    asked = await approval_turn(server, "Please cancel my order B5678.", approve=False)

    assert asked == ["cancel_order"]
    assert RUNS == []


async def test_a_spoken_request_picks_its_tool(server: RunningServer) -> None:
    RUNS.clear()
    tts = create_tts("piper")
    stream = tts.stream("Please set a timer for five minutes.", voice=None, language="en")
    voice = np.concatenate([resample(c.pcm, c.sample_rate, 24_000) async for c in stream])
    pause = np.zeros(24_000 * 3 // 2, dtype=np.int16)
    audio = np.concatenate((np.zeros(12_000, dtype=np.int16), voice, pause)).tobytes()
    agent = RealtimeAgent(
        name="Assistant", instructions="Be brief.", tools=[get_weather, set_timer]
    )
    session = await RealtimeRunner(agent).run(model_config=runner_config(server))
    async with session:
        for start in range(0, len(audio), 4_800):  # 100 ms at a time, in real time
            await session.send_audio(audio[start : start + 4_800])
            await asyncio.sleep(0.1)
        async with asyncio.timeout(120):
            async for event in session:
                if event.type == "agent_end" and RUNS:
                    break
    assert RUNS == ["timer:5"]


async def test_the_default_brain_calls_an_mcp_servers_tool_and_answers_from_it(
    server: RunningServer,
) -> None:
    async with mcp_server() as url:
        shop = {"type": "mcp", "server_label": "shop", "server_url": url,
                "require_approval": "never"}  # fmt: skip
        async with client(server).realtime.connect(model="Assistant") as conn:
            await conn.session.update(
                session={"type": "realtime", "output_modalities": ["text"],
                         "tools": [shop, WEATHER]}  # type: ignore[list-item]
            )  # fmt: skip
            async for event in conn:
                if event.type in ("mcp_list_tools.completed", "mcp_list_tools.failed"):
                    assert event.type == "mcp_list_tools.completed"
                    break
            await ask(conn, "How many bolts do we have in stock?")
            response, calls = await until_done(conn)
    assert calls == []  # nothing for the client to run
    (call,) = [o for o in response.output if o.type == "mcp_call"]
    assert (call.name, call.server_label) == ("stock_level", "shop")
    assert "bolt" in json.loads(call.arguments)["product"].lower()
    assert call.output == "bolts: 17 in stock" and call.error is None
    (answer,) = [o for o in response.output if o.type == "message"]
    assert "17" in answer.content[0].text
