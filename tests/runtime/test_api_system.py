"""``GET /api/system`` (``runtime/http/system.py``) and the model registry it reads
(``runtime/model_facts.py``): what runs, the database's kind without its URL, version, uptime,
sessions, and the rolling latency window fed by real turns through the real server."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.app import create_app
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.metrics import turn_stages
from runtime.model_facts import MODEL_FACTS, running_models
from runtime.plugin_factory import build_plugins
from runtime.server import RunningServer
from runtime.services import open_services
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

__all__ = ["pg_pool", "postgres_url"]


async def get_system(server: RunningServer, token: str | None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        return await http.get("/api/system", headers=headers)


async def test_it_lists_the_running_plugins_version_database_and_sessions(
    server: RunningServer,
) -> None:
    response = await get_system(server, server.token)
    assert response.status_code == 200
    body = response.json()
    assert body["version"] == importlib.metadata.version("openrealtime")
    assert body["uptime_s"] >= 0
    assert body["database"] == {"kind": "memory", "host": None}
    assert [(m["stage"], m["plugin"]) for m in body["models"]] == [
        ("vad", "EnergyVAD"),
        ("endpointing", "SilenceEndpointer"),
        ("asr", "FakeASR"),
        ("brain", "FakeBrain"),
        ("tts", "FakeTTS"),
    ]
    assert {m["runs"] for m in body["models"]} == {"offline"}
    assert body["live_sessions"] == 0
    assert body["latency"]["window_minutes"] == 15
    assert body["latency"]["minutes"] == []


async def test_an_unauthenticated_caller_gets_401(server: RunningServer) -> None:
    assert (await get_system(server, None)).status_code == 401
    assert (await get_system(server, "ort_not_a_token")).status_code == 401


async def test_a_spoken_turn_lands_in_the_latency_window_with_its_stages(
    server: RunningServer,
) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await stream(client, SILENCE, 200)
        await stream(client, tone_frame(), 600)
        await stream(client, SILENCE, 500)
        latency = await client.wait_type("openrealtime.turn.latency", timeout=10)
        await client.wait_type("response.done", timeout=10)
        during = (await get_system(server, server.token)).json()
    assert during["live_sessions"] == 1 and during["connections"] == 1
    [minute] = during["latency"]["minutes"]
    marks = latency["latency_ms"]
    expected = {s.name: round(s.end_ms - s.start_ms, 2) for s in turn_stages(marks)}
    expected["first_audio"] = marks["first_audio_sent"]
    assert set(minute["stages"]) == set(expected) == set(during["latency"]["stages"])
    for name, duration in expected.items():
        assert minute["stages"][name] == {"count": 1, "p50_ms": duration, "p95_ms": duration}


@pytest.fixture
async def external(pg_pool: Any, postgres_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    settings = Settings(
        port=0, data_dir=tmp_path, database_url=postgres_url, knowledge_semantic=False
    )
    services = await open_services(settings, plugins=fake_plugins())
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            yield http, services
    finally:
        await services.close()


async def test_an_external_database_shows_its_host_and_never_its_url(
    external: Any, postgres_url: str
) -> None:
    http, services = external
    response = await http.get(
        "/api/system", headers={"Authorization": f"Bearer {services.local_token}"}
    )
    assert response.status_code == 200
    database = response.json()["database"]
    host = httpx.URL(postgres_url).host or "a unix socket"  # ?host=/socket/dir: no hostname
    assert database["kind"] == "external"
    assert database["host"].split(":")[0] == host
    assert postgres_url not in response.text
    user = httpx.URL(postgres_url).username
    assert not user or f"{user}@" not in response.text


def test_remote_stages_show_host_and_model_and_no_secret(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path, storage="memory", asr="openai", brain="openai", tts="openai",
        brain_base_url="https://alice:pw-in-url@llm.example.com:8443/v1?key=url-key",
        brain_api_key="sk-brain-secret", brain_model="qwen-72b",
        asr_base_url="http://speech.internal:9000/v1", asr_api_key="sk-asr-secret",
        tts_base_url="https://api.openai.com/v1", tts_api_key="sk-tts-secret",
    )  # fmt: skip
    models = {m.facts.stage: m for m in running_models(build_plugins(settings), settings)}
    assert models["brain"].endpoint_host == "llm.example.com:8443"
    assert models["brain"].facts.model == "qwen-72b"
    assert models["asr"].endpoint_host == "speech.internal:9000"
    assert models["tts"].endpoint_host == "api.openai.com"
    assert all(models[s].facts.remote for s in ("asr", "brain", "tts"))
    assert not models["vad"].facts.remote
    text = json.dumps([str(m) for m in models.values()])
    for secret in ("pw-in-url", "alice", "url-key", "sk-brain-secret", "sk-asr-secret", "/v1"):
        assert secret not in text


def test_the_embedded_stack_is_in_the_registry_with_sizes_and_licences(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, storage="memory", vad="silero", endpointing="smart_turn")
    models = {m.facts.stage: m for m in running_models(build_plugins(settings), settings)}
    plugins = [models[stage].plugin for stage in ("vad", "endpointing", "asr", "tts")]
    assert plugins == ["SileroVAD", "SmartTurnEndpointer", "WhisperASR", "LanguageRoutingTTS"]
    assert models["brain"].plugin in ("LLMBrain", "LocalBrain")  # rules without the model
    for model in models.values():
        assert model.plugin in MODEL_FACTS and model.facts.licence not in ("", "?")
        assert not model.facts.remote and model.endpoint_host is None


def test_the_registrys_sizes_are_the_shipped_files() -> None:
    from plugins.asr.whisper import _PART_PACKAGES, _wheel_data
    from plugins.endpointing.smart_turn import bundled_model_path as smart_turn_path
    from plugins.tts.piper_voice import bundled_joe_model
    from plugins.vad.silero import bundled_model_path as silero_path

    parts = [_wheel_data(package) for package in _PART_PACKAGES]
    whisper = sum((part / f"model.bin.part{i}").stat().st_size for i, part in enumerate(parts, 1))
    assert MODEL_FACTS["SileroVAD"].size_bytes == silero_path().stat().st_size
    assert MODEL_FACTS["SmartTurnEndpointer"].size_bytes == smart_turn_path().stat().st_size
    assert MODEL_FACTS["PiperTTS"].size_bytes == bundled_joe_model().stat().st_size
    assert MODEL_FACTS["WhisperASR"].size_bytes == whisper
