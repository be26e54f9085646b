"""``openrealtime serve-models`` (runtime/model_server.py) through the runtime's own
OpenAI-compatible providers, on a real HTTP server: fakes behind it, except in the one test
marked for the real embedded language model."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

from plugins.asr.openai_asr import OpenAIASR
from plugins.brain.model_queue import ModelQueueFull
from plugins.brain.openai_brain import OpenAIBrain
from plugins.contracts import BrainInput
from plugins.errors import ProviderError
from plugins.fakes import FakeASR, FakeTTS
from plugins.tts.openai_tts import OpenAITTS
from runtime.model_server import ModelBackends, ModelServerLimits, create_model_app

KEYS = "alpha:key-alpha,beta:key-beta"


class FakeChat:
    """Streams a scripted reply in pieces; records the lanes it was asked on; ``busy`` makes
    it refuse as a full queue does."""

    def __init__(self, reply: str = "Hello there. How can I help?") -> None:
        self.reply = reply
        self.lanes: list[str] = []
        self.payloads: list[dict[str, Any]] = []
        self.busy = False

    async def chat(
        self, payload: dict[str, Any], *, lane: str, background: bool = False
    ) -> AsyncIterator[str]:
        if self.busy:
            raise ModelQueueFull("local model: 32 requests already waiting (at most 32)")
        self.lanes.append(lane)
        self.payloads.append(payload)
        for word in self.reply.split(" "):
            await asyncio.sleep(0)
            yield word + " "


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture
async def models() -> AsyncIterator[tuple[str, FakeChat]]:
    chat = FakeChat()
    backends = ModelBackends(asr=FakeASR(["hello from the model server"]), tts=FakeTTS(), chat=chat)
    app = create_model_app(
        backends, api_keys=KEYS, limits=ModelServerLimits(max_request_bytes=256 * 1024)
    )
    async with serving(app) as url:
        yield url, chat


def request(text: str = "hi") -> BrainInput:
    return BrainInput(system="Be brief.", model_text=text, current_input=text, session="vs_1")


async def test_the_openai_brain_streams_a_chat_completion_queued_by_caller(
    models: tuple[str, FakeChat],
) -> None:
    url, chat = models
    brain = OpenAIBrain(base_url=url, api_key="key-alpha", model="local")
    other = OpenAIBrain(base_url=url, api_key="key-beta", model="local")
    text = "".join([d.text or "" async for d in brain.stream(request())])
    text += "".join([d.text or "" async for d in other.stream(request())])
    assert text.split() == (chat.reply + " " + chat.reply).split()
    assert chat.lanes == ["alpha", "beta"]  # one queue lane per caller, not per session
    assert chat.payloads[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


async def test_the_openai_asr_and_tts_work_against_it(models: tuple[str, FakeChat]) -> None:
    url, _ = models
    asr = OpenAIASR(base_url=url, api_key="key-alpha", model="whisper-base")
    transcript = await asr.transcribe(np.zeros(16_000, dtype=np.int16), language="en")
    assert transcript.text == "hello from the model server"
    tts = OpenAITTS(base_url=url, api_key="key-alpha", model="piper", voice="joe")
    chunks = [c async for c in tts.stream("Hello there.")]
    expected = [c async for c in FakeTTS().stream("Hello there.", voice=None, language=None)]
    assert {c.sample_rate for c in chunks} == {24_000}
    assert sum(c.pcm.size for c in chunks) == sum(c.pcm.size for c in expected)
    await asr.aclose()
    await tts.aclose()


async def test_a_full_queue_is_a_retryable_429_and_a_bad_key_is_not_retryable(
    models: tuple[str, FakeChat],
) -> None:
    url, chat = models
    chat.busy = True
    with pytest.raises(ProviderError) as busy:
        [d async for d in OpenAIBrain(base_url=url, api_key="key-alpha", model="x").stream(
            request())]  # fmt: skip
    assert busy.value.status == 429 and busy.value.retryable
    chat.busy = False
    with pytest.raises(ProviderError) as refused:
        [d async for d in OpenAIBrain(base_url=url, api_key="wrong", model="x").stream(
            request())]  # fmt: skip
    assert refused.value.status == 401 and not refused.value.retryable


async def test_errors_have_stable_codes_and_bodies_are_bounded(
    models: tuple[str, FakeChat],
) -> None:
    url, _ = models
    auth = {"Authorization": "Bearer key-beta"}
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        none = await http.get("/models")
        assert none.status_code == 401 and none.json()["error"]["code"] == "invalid_api_key"
        listed = await http.get("/models", headers=auth)
        assert listed.status_code == 200 and len(listed.json()["data"]) == 3
        big = await http.post("/audio/transcriptions", headers=auth, content=b"x" * 300_000)
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        empty = await http.post("/chat/completions", headers=auth, json={"messages": []})
        assert empty.status_code == 422 and empty.json()["error"]["code"] == "invalid_request"
        whole = await http.post(
            "/chat/completions",
            headers=auth,
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 20},
        )
        assert whole.json()["choices"][0]["message"]["content"].split()[0] == "Hello"
        not_wav = await http.post(
            "/audio/transcriptions",
            headers=auth,
            files={"file": ("a.wav", b"not a wav", "audio/wav")},
            data={"model": "whisper"},
        )
        assert not_wav.status_code == 400
        assert not_wav.json()["error"]["code"] == "unsupported_audio"


async def test_the_real_local_model_answers_through_the_openai_brain() -> None:
    from plugins.brain.local_model import LocalModel, LocalModelSettings

    if LocalModel.unavailable_reason() is not None:
        pytest.skip(f"no local model: {LocalModel.unavailable_reason()}")
    model = LocalModel(LocalModelSettings(context_tokens=1024))
    backends = ModelBackends(asr=FakeASR(), tts=FakeTTS(), chat=model)
    try:
        async with serving(create_model_app(backends, api_keys=KEYS)) as url:
            brain = OpenAIBrain(base_url=url, api_key="key-alpha", model="local", max_tokens=16)
            text = "".join(
                [d.text or "" async for d in brain.stream(request("Say hello in one word."))]
            )
    finally:
        await model.aclose()
    assert text.strip()
