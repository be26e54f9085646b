"""Conversations through the real server with scripted plugins: speech turns, barge-in, the
heard prefix in the journal, history reaching the brain, pause/resume, plugin faults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from journal.events import EventKind, ThreadRef
from plugins.fakes import FakeASR, FakeBrain, FakeTTS, Faults
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

FRAME = 320  # 20 ms at 16 kHz


def tone_frame(amplitude: int = 6000) -> bytes:
    t = np.arange(FRAME)
    return (amplitude * np.sin(2 * np.pi * 220 * t / 16000)).astype("<i2").tobytes()


SILENCE = b"\x00\x00" * FRAME


async def stream(client: RealtimeClient, frame: bytes, ms: int) -> None:
    """Send frames at real-time pace."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(ms // 20):
        await client.send_audio(frame)
        delay = start + (i + 1) * 0.02 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


async def thread_events(server: RunningServer, client: RealtimeClient) -> list[dict[str, object]]:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    ref = ThreadRef(principal.tenant, principal.user, client.session["thread_id"])
    return [{"kind": e.kind, **e.payload} for e in await server.services.journal.read(ref)]


@pytest.fixture
async def long_answer_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    brain = FakeBrain(
        [
            "First sentence of a long answer. Second sentence goes on and on. "
            "Third sentence is here too. Fourth sentence ends it all.",
            "Okay, I stopped.",
        ]
    )
    plugins = fake_plugins(asr=FakeASR(["wait stop"]), brain=brain, tts=FakeTTS(ms_per_char=40))
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=300, min_interrupt_ms=300
    )
    async with running_server(settings, plugins=plugins) as running:
        yield running


async def test_spoken_turn_is_transcribed_answered_and_journaled(server: RunningServer) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await stream(client, SILENCE, 200)
        await stream(client, tone_frame(), 600)
        await stream(client, SILENCE, 500)  # 300 ms VAD hangover + 300 ms endpoint delay
        transcript = await client.wait_type("conversation.item.input_audio_transcription.completed")
        assert transcript["transcript"] == "what is the weather"
        done = await client.wait_type("response.done", timeout=10)
        assert done["response"]["status"] == "completed"
        latency = client.events("openrealtime.turn.latency")[0]
        assert latency["origin"] == "vad_end"
        assert set(latency["latency_ms"]) >= {
            "committed",
            "asr_final",
            "brain_first_token",
            "tts_first_audio",
            "first_audio_sent",
        }
        events = await thread_events(server, client)
        assert [e["kind"] for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
        assert events[0]["text"] == "what is the weather"
        assert events[1]["interrupted"] is False
        assert events[1]["heard_text"] == events[1]["text"]


async def test_barge_in_stops_audio_and_journals_the_heard_prefix(
    long_answer_server: RunningServer,
) -> None:
    server = long_answer_server
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("tell me a story")
        created = await client.wait_type("response.created")
        generation = created["response"]["generation"]
        await client.wait_for(lambda m: m.audio is not None)
        await stream(client, SILENCE, 1000)  # listen for a second
        await client.report_playback(generation, 1000.0)
        await stream(client, tone_frame(), 500)  # talk over the assistant
        interrupted = await client.wait_type("openrealtime.response.interrupted")
        assert interrupted["generation"] == generation
        assert interrupted["reason"] == "barge_in"
        await client.report_playback(generation, 1000.0)
        done = await client.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["interrupted"] is True
        heard = done["response"]["heard_text"]
        full = done["response"]["output_text"]
        assert heard and full.startswith(heard) and len(heard) < len(full)
        # 1000 ms at 40 ms per character is about 25 characters: the first words only.
        assert heard.startswith("First sentence") and len(heard) <= 30
        # No audio of the interrupted generation arrives after the interruption event.
        cut = next(m.seq for m in client.messages if m.type == "openrealtime.response.interrupted")
        assert not [m for m in client.audio(generation) if m.seq > cut]
        # The interrupting speech becomes the next turn.
        await stream(client, SILENCE, 700)
        second = await client.wait_for(lambda m: m.type == "response.done", timeout=10)
        assert second.event is not None
        assert second.event["response"]["output_text"] == "Okay, I stopped."
        events = await thread_events(server, client)
        outputs = [e for e in events if e["kind"] is EventKind.ASSISTANT_OUTPUT]
        assert outputs[0]["interrupted"] is True
        assert outputs[0]["heard_text"] == heard
        users = [e["text"] for e in events if e["kind"] is EventKind.USER_INPUT]
        assert users == ["tell me a story", "wait stop"]


async def test_short_noise_during_speech_does_not_interrupt(
    long_answer_server: RunningServer,
) -> None:
    server = long_answer_server
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("tell me a story")
        await client.wait_for(lambda m: m.audio is not None)
        await stream(client, tone_frame(), 160)  # a cough
        await stream(client, SILENCE, 800)
        assert client.events("openrealtime.response.interrupted") == []
        await client.cancel()
        done = await client.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"


async def test_earlier_turns_reach_the_brain(tmp_path: Path) -> None:
    brain = FakeBrain(["Nice to meet you, Ada.", "Your name is Ada."])
    settings = Settings(port=0, storage="memory", data_dir=tmp_path)
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            await client.send_text("my name is Ada")
            await client.wait_type("response.done")
            await client.send_text("what is my name?")
            await client.wait_type("response.done")
    first, second = brain.requests
    assert "my name is Ada" not in first.model_text.split("Current user input:")[0]
    assert second.model_text == (
        "Recent conversation context:\n"
        "User: my name is Ada\n"
        "Assistant: Nice to meet you, Ada.\n"
        "Current user input:what is my name?"
    )


async def test_paused_microphone_ignores_speech_and_resume_restores_it(
    server: RunningServer,
) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.pause()
        await client.wait_type("openrealtime.input.paused")
        await stream(client, tone_frame(), 500)
        await stream(client, SILENCE, 600)
        assert client.events("input_audio_buffer.speech_started") == []
        await client.resume()
        await client.wait_type("openrealtime.input.resumed")
        await stream(client, tone_frame(), 500)
        await stream(client, SILENCE, 600)
        await client.wait_type("response.done", timeout=10)
        assert client.session["thread_id"]  # same connection, same thread


async def test_a_failing_brain_reports_an_error_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    brain = FakeBrain(["never"], faults=Faults(fail=True))
    settings = Settings(port=0, storage="memory", data_dir=tmp_path)
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            await client.send_text("hello")
            error = await client.wait_type("error")
            assert error["error"]["code"] == "plugin_error"
            assert error["error"]["retryable"] is True
            done = await client.wait_type("response.done")
            assert done["response"]["status"] == "failed"
            brain.faults.fail = False
            await client.send_text("hello again")
            done = await client.wait_type("response.done")
            assert done["response"]["status"] == "completed"


async def test_long_speech_gets_partial_transcripts(tmp_path: Path) -> None:
    # 800 ms end-of-turn silence against the energy VAD's 300 ms hangover: the speculative
    # transcription starts 500 ms before the commit. (Transcript cues off: "what is the
    # weather" is a finished question and would end the turn after 300 ms.)
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=800, transcript_cues=False
    )
    async with (
        running_server(settings, plugins=fake_plugins()) as server,
        RealtimeClient(server.ws_url, server.token) as client,
    ):
        await client.connect()
        await stream(client, tone_frame(), 3200)
        partial = await client.wait_type(
            "conversation.item.input_audio_transcription.delta", timeout=5
        )
        assert partial["transcript"] and partial["transcript"].startswith(partial["delta"])
        await stream(client, SILENCE, 1000)
        final = await client.wait_type("conversation.item.input_audio_transcription.completed")
        assert final["item_id"] == partial["item_id"]
        latency = await client.wait_type("openrealtime.turn.latency")
        marks = latency["latency_ms"]
        # The final transcript is the speculative one started at the pause, before the commit.
        assert marks["asr_started"] < marks["committed"] - 400
        await client.wait_type("response.done")
