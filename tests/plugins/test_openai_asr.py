from __future__ import annotations

import io
import wave
from collections.abc import AsyncIterator

import numpy as np
import pytest

from plugins.asr.openai_asr import OpenAIASR, wav_bytes
from plugins.errors import PluginTimeout, ProviderError
from tests.plugins.openai_server import (
    API_KEY,
    MODEL,
    OpenAIServer,
    Reply,
    running_openai_server,
)

UTTERANCE = (np.sin(np.arange(8000) / 10.0) * 8000).astype(np.int16)  # 0.5 s at 16 kHz


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


@pytest.fixture
async def asr(server: OpenAIServer) -> AsyncIterator[OpenAIASR]:
    asr = OpenAIASR(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=2.0)
    yield asr
    await asr.aclose()


def test_wav_bytes_is_16_khz_mono_pcm16() -> None:
    with wave.open(io.BytesIO(wav_bytes(UTTERANCE)), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (1, 2, 16_000)
        frames = wav.readframes(wav.getnframes())
    assert np.array_equal(np.frombuffer(frames, dtype="<i2"), UTTERANCE)


async def test_uploads_a_wav_with_model_and_language(asr: OpenAIASR, server: OpenAIServer) -> None:
    server.transcriptions.append(Reply(text=" 你好,世界 "))
    transcript = await asr.transcribe(UTTERANCE, language="zh-CN")
    assert transcript.text == "你好,世界"
    assert transcript.language == "zh"
    assert transcript.final
    sent = server.last("/audio/transcriptions")
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.form["model"] == MODEL
    assert sent.form["language"] == "zh"
    assert sent.form["response_format"] == "json"
    assert sent.files["file"] == wav_bytes(UTTERANCE)


async def test_language_is_optional_and_has_a_default(server: OpenAIServer) -> None:
    plain = OpenAIASR(base_url=server.base_url, api_key=API_KEY, model=MODEL)
    english = OpenAIASR(
        base_url=server.base_url, api_key=API_KEY, model=MODEL, language="en", prompt="Rex"
    )
    try:
        transcript = await plain.transcribe(UTTERANCE)
        assert transcript == type(transcript)(text="hello world", language=None)
        assert "language" not in server.last("/audio/transcriptions").form
        assert (await english.transcribe(UTTERANCE)).language == "en"
        sent = server.last("/audio/transcriptions").form
        assert (sent["language"], sent["prompt"]) == ("en", "Rex")
    finally:
        await plain.aclose()
        await english.aclose()


async def test_an_empty_utterance_needs_no_request(asr: OpenAIASR, server: OpenAIServer) -> None:
    transcript = await asr.transcribe(np.zeros(0, dtype=np.int16), language="en")
    assert transcript.text == ""
    assert server.requests == []


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (429, True), (500, True)])
async def test_http_errors_map_to_provider_errors(
    asr: OpenAIASR, server: OpenAIServer, status: int, retryable: bool
) -> None:
    server.transcriptions.append(Reply(status=status))
    with pytest.raises(ProviderError) as caught:
        await asr.transcribe(UTTERANCE)
    assert (caught.value.status, caught.value.retryable) == (status, retryable)


async def test_a_wrong_key_never_appears_in_the_error(server: OpenAIServer) -> None:
    secret = "sk-asr-wrong-key-0123456789"
    asr = OpenAIASR(base_url=server.base_url, api_key=secret, model=MODEL)
    try:
        with pytest.raises(ProviderError) as caught:
            await asr.transcribe(UTTERANCE)
    finally:
        await asr.aclose()
    assert caught.value.status == 401 and not caught.value.retryable
    assert secret not in str(caught.value)
    assert secret not in str(caught.value.__cause__)


async def test_a_slow_server_times_out(server: OpenAIServer) -> None:
    server.transcriptions.append(Reply(delay=5.0))
    asr = OpenAIASR(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=0.3)
    try:
        with pytest.raises(PluginTimeout):
            await asr.transcribe(UTTERANCE)
    finally:
        await asr.aclose()
