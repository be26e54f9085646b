"""JSON answers for thread memory: the local model's adapter and ``OpenAIBrain.complete_json``
(against the scripted OpenAI-compatible server)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from memory.thread_consolidation import JsonModel
from plugins.brain.json_model import LocalJsonModel
from plugins.brain.openai_brain import OpenAIBrain
from plugins.errors import PluginTimeout, ProviderError
from tests.plugins.openai_server import API_KEY, MODEL, OpenAIServer, Reply, running_openai_server

MESSAGES = [{"role": "system", "content": "Keep facts."}, {"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"changes": {"type": "array"}}}


class RecordingLocalModel:
    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces
        self.calls: list[tuple[dict[str, Any], str]] = []
        self.background: list[bool] = []

    async def chat(
        self, payload: dict[str, Any], *, lane: str, background: bool = False
    ) -> AsyncGenerator[str, None]:
        self.calls.append((payload, lane))
        self.background.append(background)
        for piece in self.pieces:
            yield piece


async def test_background_json_work_goes_to_the_models_background_class() -> None:
    local = RecordingLocalModel(["{}"])
    model: JsonModel = LocalJsonModel(local)  # type: ignore[arg-type]  # a recording stand-in
    await model.complete_json(MESSAGES, SCHEMA, max_tokens=9, lane="t", background=True)
    await model.complete_json(MESSAGES, SCHEMA, max_tokens=9, lane="t")
    assert local.background == [True, False]


async def test_the_local_adapter_sends_a_json_schema_payload_on_the_lane() -> None:
    local = RecordingLocalModel(['{"chan', 'ges": []}'])
    model: JsonModel = LocalJsonModel(local)  # type: ignore[arg-type]  # a recording stand-in
    text = await model.complete_json(MESSAGES, SCHEMA, max_tokens=99, lane="thread-7")
    assert text == '{"changes": []}'
    payload, lane = local.calls[0]
    assert lane == "thread-7"
    assert payload == {
        "messages": MESSAGES,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": SCHEMA},
        },
        "temperature": 0,
        "max_tokens": 99,
    }


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


@pytest.fixture
async def brain(server: OpenAIServer) -> AsyncIterator[OpenAIBrain]:
    brain = OpenAIBrain(base_url=server.base_url, api_key=API_KEY, model=MODEL, timeout=1.0)
    yield brain
    await brain.aclose()


async def test_the_openai_brain_answers_json_with_the_schema(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(text='{"changes": [] }'))
    model: JsonModel = brain
    text = await model.complete_json(MESSAGES, SCHEMA, max_tokens=50, lane="x")
    assert text.replace(" ", "") == '{"changes":[]}'
    sent = server.last("/chat/completions").json
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA},
    }
    assert (sent["messages"], sent["max_tokens"], sent["temperature"]) == (MESSAGES, 50, 0)


async def test_the_openai_brain_maps_errors_and_timeouts(
    brain: OpenAIBrain, server: OpenAIServer
) -> None:
    server.chat.append(Reply(status=500))
    with pytest.raises(ProviderError):
        await brain.complete_json(MESSAGES, SCHEMA, max_tokens=50, lane="x")
    server.chat.append(Reply(text="{}", delay=3.0))
    with pytest.raises(PluginTimeout):
        await brain.complete_json(MESSAGES, SCHEMA, max_tokens=50, lane="x")
