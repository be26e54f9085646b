from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from plugins.contracts import SpeechChunk
from plugins.errors import PluginTimeout, ProviderError
from plugins.tts.openai_tts import OpenAITTS
from tests.plugins.openai_server import (
    API_KEY,
    MODEL,
    OpenAIServer,
    Reply,
    running_openai_server,
)

SAMPLES = (np.arange(12_000) % 2000 - 1000).astype(np.int16)  # 0.5 s at 24 kHz
AUDIO = SAMPLES.astype("<i2").tobytes()


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


@pytest.fixture
async def tts(server: OpenAIServer) -> AsyncIterator[OpenAITTS]:
    tts = OpenAITTS(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=2.0)
    yield tts
    await tts.aclose()


async def speak(tts: OpenAITTS, text: str = "Hello there.", **options: str) -> list[SpeechChunk]:
    return [chunk async for chunk in tts.stream(text, voice=options.get("voice"), language=None)]


async def test_streams_pcm_chunks_as_bytes_arrive_across_odd_boundaries(
    tts: OpenAITTS, server: OpenAIServer
) -> None:
    server.speech.append(Reply(audio=AUDIO, chunk_bytes=1001, chunk_delay=0.002))
    chunks = await speak(tts)
    assert len(chunks) > 5
    assert all(c.sample_rate == 24_000 and c.words == () for c in chunks)
    assert all(c.pcm.dtype == np.int16 for c in chunks)
    assert np.array_equal(np.concatenate([c.pcm for c in chunks]), SAMPLES)


async def test_sends_model_voice_text_and_pcm_format(tts: OpenAITTS, server: OpenAIServer) -> None:
    await speak(tts, "Good morning.")
    await speak(tts, "Good evening.", voice="verse")
    first, second = [r.json for r in server.requests]
    assert first == {
        "model": MODEL,
        "voice": "alloy",
        "input": "Good morning.",
        "response_format": "pcm",
    }
    assert second is not None and second["voice"] == "verse"
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_rate_voice_speed_and_instructions_are_settings(server: OpenAIServer) -> None:
    tts = OpenAITTS(
        base_url=server.base_url,
        api_key=API_KEY,
        model=MODEL,
        voice="nova",
        sample_rate=22_050,
        speed=1.25,
        instructions="Speak warmly.",
    )
    try:
        chunks = await speak(tts)
    finally:
        await tts.aclose()
    assert {c.sample_rate for c in chunks} == {22_050}
    sent = server.last("/audio/speech").json
    assert sent is not None
    assert (sent["voice"], sent["speed"], sent["instructions"]) == ("nova", 1.25, "Speak warmly.")


async def test_blank_text_needs_no_request(tts: OpenAITTS, server: OpenAIServer) -> None:
    assert await speak(tts, "   ") == []
    assert server.requests == []


async def test_a_trailing_odd_byte_is_dropped(tts: OpenAITTS, server: OpenAIServer) -> None:
    server.speech.append(Reply(audio=AUDIO[:1001], chunk_bytes=333))
    chunks = await speak(tts)
    assert sum(c.pcm.size for c in chunks) == 500


@pytest.mark.parametrize(
    ("status", "retryable"), [(401, False), (400, False), (429, True), (503, True)]
)
async def test_http_errors_map_to_provider_errors(
    tts: OpenAITTS, server: OpenAIServer, status: int, retryable: bool
) -> None:
    server.speech.append(Reply(status=status))
    with pytest.raises(ProviderError) as caught:
        await speak(tts)
    assert (caught.value.status, caught.value.retryable) == (status, retryable)


async def test_a_wrong_key_never_appears_in_the_error(server: OpenAIServer) -> None:
    secret = "sk-tts-wrong-key-0123456789"
    tts = OpenAITTS(base_url=server.base_url, api_key=secret, model=MODEL)
    try:
        with pytest.raises(ProviderError) as caught:
            await speak(tts)
    finally:
        await tts.aclose()
    assert caught.value.status == 401
    assert secret not in str(caught.value)


async def test_slow_headers_time_out(server: OpenAIServer) -> None:
    server.speech.append(Reply(delay=5.0))
    tts = OpenAITTS(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=0.3)
    try:
        with pytest.raises(PluginTimeout):
            await speak(tts)
    finally:
        await tts.aclose()


async def test_a_stalled_stream_times_out_and_is_closed(server: OpenAIServer) -> None:
    server.speech.append(Reply(audio=AUDIO, chunk_bytes=1000, stall_after=2))
    tts = OpenAITTS(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=0.3)
    received: list[SpeechChunk] = []
    try:
        with pytest.raises(PluginTimeout):
            async for chunk in tts.stream("Hello.", voice=None, language=None):
                received.append(chunk)
    finally:
        await tts.aclose()
    assert sum(c.pcm.size for c in received) == 1000
    assert await server.wait_for_disconnect() == "/v1/audio/speech"


async def test_cancelling_the_consumer_closes_the_http_stream(
    tts: OpenAITTS, server: OpenAIServer
) -> None:
    server.speech.append(Reply(audio=AUDIO, chunk_bytes=1000, stall_after=2))
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in tts.stream("Hello.", voice=None, language=None):
            first.set()

    task = asyncio.create_task(consume())
    async with asyncio.timeout(5):
        await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await server.wait_for_disconnect() == "/v1/audio/speech"
    # The plugin stays usable.
    assert len(await speak(tts)) > 0
