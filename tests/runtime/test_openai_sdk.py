"""The official clients, unchanged but for the URL: the ``openai`` SDK (async and sync) and the
``openai-agents`` realtime runner against the real server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from openai import AsyncOpenAI, OpenAI

from journal.events import EventKind, ThreadRef
from pipeline.audio import resample
from plugins.fakes import FakeASR, FakeTTS
from plugins.tts import create_tts
from runtime.config import Settings
from runtime.plugin_factory import build_plugins
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.ga import WEATHER_TOOL, FunctionBrain, strict, unknown_fields
from tests.runtime.test_ga_conformance import silence, tone

RATE = 24_000
CHUNK = RATE // 10 * 2  # 100 ms of PCM16


def sdk(server: RunningServer) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=server.token, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")


def chunks(pcm: bytes) -> list[str]:
    return [base64.b64encode(pcm[i : i + CHUNK]).decode() for i in range(0, len(pcm), CHUNK)]


def checked(event: Any) -> Any:
    """The SDK parsed it; nothing in it is undeclared."""
    assert not unknown_fields(event), (event.type, unknown_fields(event))
    return event


async def thread_events(server: RunningServer, conversation_id: str) -> list[Any]:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    thread = ThreadRef(principal.tenant, principal.user, conversation_id)
    return await server.services.journal.read(thread)


@contextlib.asynccontextmanager
async def scripted_server(tmp_path: Path, **settings: Any) -> AsyncIterator[RunningServer]:
    config = Settings(port=0, storage="memory", data_dir=tmp_path, silence_ms=300,
                      min_interrupt_ms=200, **settings)  # fmt: skip
    plugins = fake_plugins(
        brain=FunctionBrain("Once upon a time there was a small voice agent that listened."),
        asr=FakeASR(["tell me a story", "what is the weather in Paris"]),
        tts=FakeTTS(ms_per_char=40.0),
    )
    async with running_server(config, plugins=plugins) as server:
        yield server


@pytest.fixture
async def fake_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """The default settings: a client function no grant decides goes to the client."""
    async with scripted_server(tmp_path) as server:
        yield server


@pytest.fixture
async def asking_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """``tool_client_undecided="ask"``: the person approves a client function first."""
    async with scripted_server(tmp_path, tool_client_undecided="ask") as server:
        yield server


async def test_the_async_sdk_asks_by_voice_and_hears_a_spoken_answer(tmp_path: Path) -> None:
    tts = create_tts("piper")
    stream = tts.stream("Tell me, who are you?", voice=None, language="en")
    spoken = [resample(c.pcm, c.sample_rate, RATE) async for c in stream]
    question = np.concatenate(spoken).tobytes()
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, brain="rules")
    async with running_server(settings, plugins=build_plugins(settings)) as server:
        async with sdk(server).realtime.connect(model="gpt-realtime") as conn:
            created = checked(await conn.recv())
            assert created.type == "session.created"
            for chunk in chunks(silence(500) + question + silence(1500)):
                await conn.input_audio_buffer.append(audio=chunk)
                await asyncio.sleep(0.1)
            transcript, audio, done = "", b"", None
            async for event in conn:
                checked(event)
                if event.type == "conversation.item.input_audio_transcription.completed":
                    transcript = event.transcript
                elif event.type == "response.output_audio.delta":
                    audio += base64.b64decode(event.delta)
                elif event.type == "response.done":
                    done = event
                    break
    assert "who are you" in transcript.lower()
    assert done is not None and done.response.status == "completed"
    assert len(audio) / 2 / RATE > 1.0  # seconds of speech at GA's 24 kHz


async def test_the_sync_sdk_barges_in_and_the_journal_keeps_what_was_heard(
    fake_server: RunningServer,
) -> None:
    url = f"ws://127.0.0.1:{fake_server.port}/v1"

    def conversation() -> tuple[str, str]:
        client = OpenAI(api_key=fake_server.token, websocket_base_url=url)
        with client.realtime.connect(model="gpt-realtime") as conn:
            assert checked(conn.recv()).type == "session.created"
            for chunk in chunks(silence(200) + tone(600) + silence(600)):
                conn.input_audio_buffer.append(audio=chunk)
                time.sleep(0.1)  # real time: turn-taking runs on the server's clock
            answer_item, conversation_id = "", ""
            for event in conn:
                checked(event)
                if event.type == "response.created":
                    conversation_id = event.response.conversation_id or ""
                if event.type == "response.output_audio.delta" and not answer_item:
                    answer_item = event.item_id
                    for chunk in chunks(tone(600)):  # the person speaks over the answer
                        conn.input_audio_buffer.append(audio=chunk)
                        time.sleep(0.1)
                if event.type == "input_audio_buffer.speech_started" and answer_item:
                    conn.conversation.item.truncate(
                        item_id=answer_item, content_index=0, audio_end_ms=300
                    )
                if event.type == "conversation.item.truncated":
                    assert event.audio_end_ms == 300
                if event.type == "response.done" and answer_item:
                    assert event.response.status == "cancelled"
                    return answer_item, conversation_id
        raise AssertionError("the connection ended first")

    answer_item, conversation_id = await asyncio.to_thread(conversation)
    await asyncio.sleep(0.2)
    events = await thread_events(fake_server, conversation_id)
    answer = next(e for e in events if e.kind is EventKind.ASSISTANT_OUTPUT
                  and e.payload.get("item_id") == answer_item)  # fmt: skip
    assert answer.payload["interrupted"] is True
    assert 0 < len(answer.payload["heard_text"]) < len(answer.payload["text"])


async def test_the_async_sdk_calls_a_function_and_continues_the_turn(
    fake_server: RunningServer,
) -> None:
    async with sdk(fake_server).realtime.connect(model="gpt-realtime") as conn:
        await conn.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL]})  # type: ignore[list-item]
        question = [{"type": "input_text", "text": "What is the weather in Paris?"}]
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": question}  # type: ignore[typeddict-item]
        )
        await conn.response.create()
        call = None
        async for event in conn:
            checked(event)
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                call = event.item
            if event.type == "response.done":
                break
        assert call is not None and call.name == "get_weather" and call.call_id
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        )
        await conn.response.create()
        async for event in conn:
            checked(event)
            if event.type == "response.done":
                transcript = event.response.output[0].content[0].transcript  # type: ignore[union-attr]
                assert transcript is not None and "sunny" in transcript
                break


async def test_the_async_sdk_approves_a_client_function_the_role_may_not_call_yet(
    asking_server: RunningServer,
) -> None:
    """No grant: the server asks for approval with a GA ``mcp_approval_request`` item; the SDK
    answers with ``mcp_approval_response``; the call goes to the client, the turn goes on."""
    async with sdk(asking_server).realtime.connect(model="gpt-realtime") as conn:
        await conn.session.update(session={"type": "realtime", "tools": [WEATHER_TOOL]})  # type: ignore[list-item]
        question = [{"type": "input_text", "text": "What is the weather in Paris?"}]
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": question}  # type: ignore[typeddict-item]
        )
        await conn.response.create()
        request = None
        async for event in conn:
            checked(event)
            added = event.type == "conversation.item.added"
            if added and event.item.type == "mcp_approval_request":
                request = event.item
            if event.type == "response.output_item.done":
                assert event.item.type != "function_call"  # not before the approval
            if event.type == "response.done":
                break
        assert request is not None and request.name == "get_weather"
        assert request.arguments == '{"city": "Paris"}'
        await conn.conversation.item.create(
            item={
                "type": "mcp_approval_response",
                "id": "mcpa_sdk_1",
                "approval_request_id": request.id,
                "approve": True,
            }  # fmt: skip
        )
        call = None
        async for event in conn:
            checked(event)
            added = event.type == "conversation.item.added"
            if added and event.item.type == "mcp_approval_response":
                assert event.item.approve and event.item.approval_request_id == request.id
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                call = event.item
            if event.type == "response.done":
                break
        assert call is not None and call.name == "get_weather"
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        )
        await conn.response.create()
        async for event in conn:
            checked(event)
            if event.type == "response.done":
                transcript = event.response.output[0].content[0].transcript  # type: ignore[union-attr]
                assert transcript is not None and "sunny" in transcript
                break
    principal = await asking_server.services.accounts.authenticate(asking_server.token)
    assert principal is not None
    services = asking_server.services
    grants = [g for role in await services.roles.list(principal.tenant)
              for g in await services.grants.list(principal.tenant, role.id)]  # fmt: skip
    assert [(g.scope, g.status, g.granted_by.id) for g in grants] == [
        ("once", "used", principal.user)
    ]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    WEATHER_CALLS.append(city)
    return "sunny, 21 C"


WEATHER_CALLS: list[str] = []


async def test_the_agents_runner_completes_typed_and_spoken_turns_with_a_tool(
    fake_server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    WEATHER_CALLS.clear()
    agent = RealtimeAgent(name="Assistant", instructions="Be brief.", tools=[get_weather])
    model_config: Any = {
        "url": f"ws://127.0.0.1:{fake_server.port}/v1/realtime?model=gpt-realtime",
        "headers": {"Authorization": f"Bearer {fake_server.token}"},
    }
    raw: list[dict[str, Any]] = []
    with caplog.at_level(logging.DEBUG, logger="openai.agents"):
        session = await RealtimeRunner(agent).run(model_config=model_config)
        async with session:
            await session.send_message("What is the weather in Paris?")
            tools_done = 0
            async for event in session:
                if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    raw.append(event.data.data)
                if event.type == "tool_end":
                    tools_done += 1
                if event.type == "agent_end" and tools_done == 1:
                    break
            # A spoken turn: the fake ASR hears "tell me a story"; the answer is spoken.
            for chunk in chunks(silence(200) + tone(600) + silence(700)):
                await session.send_audio(base64.b64decode(chunk))
                await asyncio.sleep(0.02)
            audio_events = 0
            async for event in session:
                if event.type == "audio":
                    audio_events += 1
                if event.type == "raw_model_event" and event.data.type == "raw_server_event":
                    raw.append(event.data.data)
                if event.type == "agent_end" and audio_events:
                    break
    assert WEATHER_CALLS == ["Paris"]
    assert audio_events > 0
    assert "Failed to validate server event" not in caplog.text
    for event in raw:
        strict(event)
