"""GA session behaviour over a real socket: audio formats, text-only and out-of-band
responses, manual turns, idle timeouts, turn-detection mapping, the browser auth convention."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import websockets
from websockets.typing import Subprotocol

from journal.events import EventKind
from pipeline.audio_formats import ulaw_decode, ulaw_encode
from plugins.contracts import ToolChoice
from plugins.fakes import FakeASR, FakeTTS
from runtime.config import Settings
from runtime.realtime.session import VoiceSession
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.ga import WEATHER_TOOL, FunctionBrain
from tests.runtime.test_ga_conformance import GAConnection, journal_of, say, silence, tone


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, silence_ms=300)
    plugins = fake_plugins(brain=FunctionBrain("Hello there."), asr=FakeASR(["good morning"]),
                           tts=FakeTTS(ms_per_char=10.0))  # fmt: skip
    async with running_server(settings, plugins=plugins) as running:
        yield running


async def connect(server: RunningServer) -> tuple[websockets.ClientConnection, GAConnection]:
    ws = await websockets.connect(
        server.ws_url, additional_headers={"Authorization": f"Bearer {server.token}"}
    )
    conn = GAConnection(ws)
    await conn.wait("session.created")
    return ws, conn


async def update(conn: GAConnection, session: dict[str, Any]) -> dict[str, Any]:
    await conn.send({"type": "session.update", "session": session})
    return await conn.wait("session.updated")


def live(server: RunningServer) -> VoiceSession:
    (session,) = [s for s in server.services.live_sessions.values() if isinstance(s, VoiceSession)]
    return session


async def test_g711_mu_law_in_and_out(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        await update(conn, {"audio": {"input": {"format": {"type": "audio/pcmu"}},
                                      "output": {"format": {"type": "audio/pcmu"}}}})  # fmt: skip
        pcm24 = np.frombuffer(silence(200) + tone(600) + silence(700), dtype=np.int16)
        mulaw = ulaw_encode(pcm24[::3])  # 24 kHz → 8 kHz (a test tone needs no filter)
        for start in range(0, len(mulaw), 160):
            chunk = base64.b64encode(mulaw[start : start + 160]).decode()
            await conn.send({"type": "input_audio_buffer.append", "audio": chunk})
            await asyncio.sleep(0.02)
        transcribed = await conn.wait("conversation.item.input_audio_transcription.completed")
        assert transcribed["transcript"] == "good morning"
        await conn.wait("response.done")
        audio = b"".join(base64.b64decode(e["delta"]) for e in conn.events
                         if e["type"] == "response.output_audio.delta")  # fmt: skip
    # FakeTTS speaks 10 ms per character: "Hello there. " is about 130 ms at 8,000 bytes/s.
    assert 0.08 < len(audio) / 8000 < 0.3
    assert np.abs(ulaw_decode(audio).astype(np.int32)).max() > 1000


async def test_text_only_and_out_of_band_responses(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        await update(conn, {"output_modalities": ["text"]})
        await say(conn, "hi")
        done = await conn.wait("response.done")
        assert done["response"]["output_modalities"] == ["text"]
        assert done["response"]["output"][0]["content"][0] == {
            "type": "output_text",
            "text": "Hello there. ",
        }
        assert "response.output_text.delta" in conn.types()
        assert "response.output_audio.delta" not in conn.types()
        await conn.send({"type": "response.create", "response": {
            "conversation": "none", "output_modalities": ["audio"],
            "instructions": "Classify the mood.",
            "input": [{"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "I feel great"}]}]}})  # fmt: skip
        out_of_band = await conn.wait("response.done")
        assert out_of_band["response"]["status"] == "completed"
        assert "conversation_id" not in out_of_band["response"]
        thread_id = done["response"]["conversation_id"]
    brain = server.services.plugins.brain
    assert isinstance(brain, FunctionBrain)
    assert brain.requests[-1].current_input == "I feel great"
    assert brain.requests[-1].system.startswith("Classify the mood.")
    events = await journal_of(server, thread_id)
    assert [e.kind for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]


async def test_manual_turns_commit_and_answer_only_when_asked(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        updated = await update(conn, {"audio": {"input": {"turn_detection": None}}})
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        await conn.stream(tone(400))
        await conn.send({"type": "input_audio_buffer.commit"})
        await conn.wait("input_audio_buffer.committed")
        await conn.wait("conversation.item.input_audio_transcription.completed")
        await conn.stream(silence(300))
        assert "response.created" not in conn.types()
        await conn.send({"type": "response.create"})
        done = await conn.wait("response.done")
        assert done["response"]["status"] == "completed"
        await conn.send({"type": "input_audio_buffer.commit"})
        empty = await conn.wait("error")
        assert empty["error"]["code"] == "input_audio_buffer_commit_empty"


async def test_an_idle_timeout_is_reported(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        await update(conn, {"audio": {"input": {"turn_detection": {
            "type": "server_vad", "idle_timeout_ms": 5000}}}})  # fmt: skip
        live(server).engine.idle_timeout_s = 0.2  # type: ignore[union-attr]  # not 5 s in a test
        await say(conn, "hi")
        await conn.wait("response.done")
        timeout = await conn.wait("input_audio_buffer.timeout_triggered", timeout=5)
        assert timeout["audio_end_ms"] >= timeout["audio_start_ms"]


async def test_turn_detection_maps_onto_the_turn_taking_settings(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        await update(
            conn,
            {
                "audio": {
                    "input": {
                        "turn_detection": {
                            "type": "server_vad",
                            "silence_duration_ms": 700,
                            "interrupt_response": False,
                        }
                    }
                }
            },
        )
        turns = live(server).engine.coordinator.settings  # type: ignore[union-attr]
        assert turns.silence_delay == pytest.approx(0.7)
        assert turns.min_interrupt >= 3600  # no barge-in
        assert turns.eagerness == "medium"  # the server's
        for eagerness, expected in (("high", "high"), ("low", "low"), ("auto", "medium")):
            updated = await update(conn, {"audio": {"input": {"turn_detection": {
                "type": "semantic_vad", "eagerness": eagerness}}}})  # fmt: skip
            detection = updated["session"]["audio"]["input"]["turn_detection"]
            assert detection == {"type": "semantic_vad", "eagerness": eagerness,
                                 "create_response": True, "interrupt_response": True}  # fmt: skip
            turns = live(server).engine.coordinator.settings  # type: ignore[union-attr]
            assert turns.eagerness == expected
            # Unscaled: the coordinator scales the delays by its eagerness (endpoint_cues).
            assert turns.silence_delay == pytest.approx(0.3)  # the server's silence_ms
            assert turns.incomplete_delay == pytest.approx(2.5)
        await update(conn, {"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
        assert live(server).engine.coordinator.settings.eagerness == "medium"  # type: ignore[union-attr]
        await conn.send({"type": "session.update", "session": {"audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_ms": 3}}}}})  # fmt: skip
        error = await conn.wait("error")
        assert error["error"]["code"] == "unknown_parameter"
        assert error["error"]["param"] == "session.audio.input.turn_detection.silence_ms"


async def test_the_server_eagerness_holds_until_a_session_chooses_its_own(tmp_path: Path) -> None:
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, eagerness="high", transcript_cues=False
    )
    async with running_server(settings, plugins=fake_plugins()) as server:
        ws, conn = await connect(server)
        async with ws:
            turns = live(server).engine.coordinator.settings  # type: ignore[union-attr]
            assert (turns.eagerness, turns.transcript_cues) == ("high", False)
            await update(conn, {"audio": {"input": {"turn_detection": {
                "type": "server_vad", "silence_duration_ms": 500}}}})  # fmt: skip
            turns = live(server).engine.coordinator.settings  # type: ignore[union-attr]
            assert (turns.eagerness, turns.silence_delay) == ("high", pytest.approx(0.5))
            await update(conn, {"audio": {"input": {"turn_detection": {
                "type": "semantic_vad", "eagerness": "low"}}}})  # fmt: skip
            turns = live(server).engine.coordinator.settings  # type: ignore[union-attr]
            assert (turns.eagerness, turns.transcript_cues) == ("low", False)


async def test_browsers_authenticate_with_the_key_subprotocol(server: RunningServer) -> None:
    protocols = [Subprotocol("realtime"), Subprotocol(f"openai-insecure-api-key.{server.token}")]
    async with websockets.connect(server.ws_url, subprotocols=protocols) as ws:
        assert ws.subprotocol == "realtime"
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created"
    async with websockets.connect(server.ws_url + f"?api_key={server.token}") as ws:
        refused = json.loads(await ws.recv())
        assert refused["error"]["code"] == "token_in_url"


async def test_push_to_talk_commit_then_response_create_answers_that_turn(
    server: RunningServer,
) -> None:
    ws, conn = await connect(server)
    async with ws:
        reduction = {"type": "near_field"}  # accepted, no effect (and once crashed the session)
        await update(conn, {"audio": {"input": {"turn_detection": None,
                                                "noise_reduction": reduction}}})  # fmt: skip
        await conn.stream(tone(400))
        await conn.send({"type": "input_audio_buffer.commit"})
        await conn.send({"type": "response.create"})  # at once, while it is transcribed
        created = await conn.wait("response.created")
        done = await conn.wait("response.done")
        assert done["response"]["id"] == created["response"]["id"]
        assert done["response"]["status"] == "completed"
    brain = server.services.plugins.brain
    assert isinstance(brain, FunctionBrain)
    assert brain.requests[-1].current_input == "good morning"


async def test_a_ga_session_ends_with_its_connection(server: RunningServer) -> None:
    ws, conn = await connect(server)
    async with ws:
        await say(conn, "hi")
        await conn.wait("response.done")
    for _ in range(100):  # the server sees the close a moment later
        if not server.services.live_sessions:
            break
        await asyncio.sleep(0.02)
    assert not server.services.live_sessions  # no resume is possible without seq


async def test_max_output_tokens_cuts_the_answer_and_ends_it_incomplete(
    server: RunningServer,
) -> None:
    ws, conn = await connect(server)
    async with ws:
        await update(conn, {"output_modalities": ["text"], "max_output_tokens": 2})
        await say(conn, "hi")
        done = await conn.wait("response.done")
        response = done["response"]
        assert response["status"] == "incomplete"
        assert response["status_details"]["reason"] == "max_output_tokens"
        assert response["output"][0]["content"][0]["text"] == "Hello there"
        assert response["output"][0]["status"] == "incomplete"
        assert response["usage"]["output_tokens"] <= 2
        # A response's own limit wins over the session's; "inf" lifts it.
        await conn.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "again"}]}})  # fmt: skip
        await conn.send({"type": "response.create", "response": {"max_output_tokens": 1}})
        done = await conn.wait("response.done")
        assert done["response"]["output"][0]["content"][0]["text"].strip() == "Hello"
        await conn.send({"type": "response.create", "response": {"max_output_tokens": "inf"}})
        done = await conn.wait("response.done")
        assert done["response"]["status"] == "completed"
        await conn.send({"type": "response.create", "response": {"max_output_tokens": 0}})
        error = await conn.wait("error")
        assert error["error"]["param"] == "response.max_output_tokens"


async def test_a_responses_own_tools_and_tool_choice_reach_the_brain(
    server: RunningServer,
) -> None:
    minutes = {"type": "object", "properties": {"minutes": {"type": "integer"}}}
    timer = {"type": "function", "name": "set_timer", "description": "Start a timer.",
             "parameters": minutes}  # fmt: skip
    ws, conn = await connect(server)
    async with ws:
        await update(conn, {"output_modalities": ["text"], "tools": [WEATHER_TOOL],
                            "tool_choice": "none"})  # fmt: skip
        await say(conn, "what is the weather?")
        await conn.wait("response.done")
        brain = server.services.plugins.brain
        assert isinstance(brain, FunctionBrain)
        session_request = brain.requests[-1]
        assert "get_weather" not in {t.name for t in session_request.tools}  # none: not offered
        assert session_request.tool_choice == ToolChoice("none")
        choice = {"type": "function", "name": "set_timer"}
        await conn.send({"type": "response.create",
                         "response": {"tools": [timer], "tool_choice": choice}})  # fmt: skip
        await conn.wait("response.done")
        own = brain.requests[-1]
        offered = {t.name for t in own.tools}
        assert "set_timer" in offered and "get_weather" not in offered
        assert own.tool_choice == ToolChoice("function", "set_timer")
        await conn.send({"type": "response.create", "response": {"tool_choice": "sometimes"}})
        error = await conn.wait("error")
        assert error["error"]["param"] == "response.tool_choice"
