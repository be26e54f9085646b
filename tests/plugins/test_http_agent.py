"""The HTTP agent brain (plugins/brain/http_agent.py) against a real HTTP server on 127.0.0.1:
the request it sends, both reply forms, every protocol error by name, connect retries only,
and a cancelled answer closing the stream."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web

from plugins.brain.http_agent import AgentProtocolError, HttpAgentBrain, agent_request
from plugins.contracts import (
    BrainDelta,
    BrainInput,
    HistoryTurn,
    ToolCall,
    ToolChoice,
    ToolResult,
    ToolSpec,
)
from plugins.errors import PluginTimeout, ProviderError

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "agent_protocol.schema.json").read_text())

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def sse(*events: tuple[str, Any]) -> str:
    return "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)


class Agent:
    """A real HTTP server whose reply each test chooses."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.reply: Handler = self.text_reply
        self.closed_early = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        self.headers.append(dict(request.headers))
        return await self.reply(request)

    async def text_reply(self, request: web.Request) -> web.StreamResponse:
        body = sse(("text", {"delta": "Hello "}), ("text", {"delta": "there."}), ("done", {}))
        return web.Response(text=body, content_type="text/event-stream")


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    served = Agent()
    app = web.Application()
    app.router.add_post("/turn", served.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    served.url = f"http://127.0.0.1:{port}/turn"
    try:
        yield served
    finally:
        await runner.cleanup()


def turn(**fields: Any) -> BrainInput:
    base: dict[str, Any] = {
        "system": "You help.\n<memory_data>likes tea</memory_data>",
        "model_text": "…",
        "current_input": "What now?",
        "language": "en",
        "instructions": "You help.",
        "memory_data": "<memory_data>likes tea</memory_data>",
        "role_id": "role_1",
        "thread_id": "th_1",
        "session": "vs_1",
        "response_id": "resp_1",
        "turn_id": 2,
        "history": (
            HistoryTurn("user", "Tell me a story"),
            HistoryTurn("assistant", "Once upon", interrupted=True),
        ),
        "tools": (ToolSpec("knowledge_search", "Search", {"type": "object"}),),
    }
    return BrainInput(**{**base, **fields})


async def collect(brain: HttpAgentBrain, request: BrainInput) -> list[BrainDelta]:
    try:
        return [delta async for delta in brain.stream(request)]
    finally:
        await brain.aclose()


async def test_a_round_sends_the_documented_request_and_streams_the_text(agent: Agent) -> None:
    brain = HttpAgentBrain(agent.url, token="agent-secret")
    deltas = await collect(brain, turn())
    assert "".join(d.text for d in deltas) == "Hello there."
    (body,) = agent.bodies
    jsonschema.validate(body, SCHEMA)
    assert body["previous_answer"] == {"text": "Once upon", "interrupted": True}
    assert body["history"][1] == {"role": "assistant", "text": "Once upon", "interrupted": True}
    assert (body["role_id"], body["thread_id"], body["response_id"]) == ("role_1", "th_1", "resp_1")
    assert body["memory_data"] == "<memory_data>likes tea</memory_data>"
    assert body["instructions"] == "You help." and body["input"] == "What now?"
    assert agent.headers[0]["Authorization"] == "Bearer agent-secret"


async def test_a_tool_round_carries_the_calls_and_results_and_a_json_answer_works(
    agent: Agent,
) -> None:
    async def json_reply(request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {"text": "Found it.", "tool_calls": [
                {"call_id": "c2", "name": "get_weather", "arguments": '{"city": "Paris"}'}]}
        )  # fmt: skip

    agent.reply = json_reply
    request = turn(
        tool_calls=(ToolCall("c1", "knowledge_search", {"query": "hours"}),),
        tool_results=(ToolResult("c1", "knowledge_search", "9 to 6"),),
        tool_choice=ToolChoice("required"),
    )
    deltas = await collect(HttpAgentBrain(agent.url), request)
    assert [d.text for d in deltas if d.text] == ["Found it."]
    assert [d.tool_call for d in deltas if d.tool_call] == [
        ToolCall("c2", "get_weather", {"city": "Paris"})
    ]
    body = agent.bodies[0]
    jsonschema.validate(body, SCHEMA)
    assert body["tool_results"] == [
        {"call_id": "c1", "name": "knowledge_search", "content": "9 to 6", "is_error": False}
    ]
    assert body["tool_choice"] == {"mode": "required", "name": None}
    assert "Authorization" not in agent.headers[0]


@pytest.mark.parametrize(
    ("status", "content_type", "body", "error", "says"),
    [
        (200, "text/plain", "hello", AgentProtocolError, "content type 'text/plain'"),
        (200, "text/event-stream", sse(("text", {"delta": "Hi"})), AgentProtocolError,
         "without a done event"),
        (200, "text/event-stream", "event: text\ndata: {not json\n\n", AgentProtocolError,
         "not JSON"),
        (200, "text/event-stream", sse(("shout", {})), AgentProtocolError, "unknown event"),
        (200, "text/event-stream", sse(("tool_call", {"name": "x", "arguments": {}})),
         AgentProtocolError, "call_id and a name"),
        (200, "text/event-stream", sse(("error", {"message": "db down"})), ProviderError,
         "db down"),
        (200, "application/json", "[1, 2]", AgentProtocolError, "not an object"),
        (503, "application/json", "{}", ProviderError, "HTTP 503"),
    ],
)  # fmt: skip
async def test_a_reply_off_the_protocol_fails_the_turn_saying_what_was_wrong(
    agent: Agent, status: int, content_type: str, body: str, error: type[Exception], says: str
) -> None:
    async def reply(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, text=body, content_type=content_type)

    agent.reply = reply
    with pytest.raises(error, match=says) as raised:
        await collect(HttpAgentBrain(agent.url, token="agent-secret"), turn())
    assert "agent-secret" not in str(raised.value)
    assert len(agent.bodies) == 1  # sent once: never again after it reached the agent


async def test_only_a_failure_to_connect_is_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here once closed
    with pytest.raises(ProviderError, match="could not be reached"):
        await collect(HttpAgentBrain(f"http://127.0.0.1:{port}/turn"), turn())


async def test_a_silent_agent_times_out(agent: Agent) -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.5)
        return web.Response(text="late")

    agent.reply = silent
    with pytest.raises(PluginTimeout):
        await collect(HttpAgentBrain(agent.url, timeout_s=0.3), turn())


async def test_cancelling_the_answer_closes_the_stream_at_the_agent(agent: Agent) -> None:
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            while True:
                await response.write(sse(("text", {"delta": "on and on "})).encode())
                await asyncio.sleep(0.02)
        except (ConnectionResetError, asyncio.CancelledError):
            agent.closed_early.set()
            raise

    agent.reply = endless
    brain = HttpAgentBrain(agent.url)
    first = asyncio.Event()

    async def listen() -> None:
        async for _ in brain.stream(turn()):
            first.set()

    task = asyncio.create_task(listen())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()  # the person interrupted
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(agent.closed_early.wait(), 5)
    await brain.aclose()


def test_the_request_of_a_first_turn_has_no_previous_answer() -> None:
    body = agent_request(turn(history=(), memory_data="", tools=()))
    jsonschema.validate(body, SCHEMA)
    assert body["previous_answer"] is None and body["memory_data"] is None
