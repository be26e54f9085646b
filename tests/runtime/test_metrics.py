"""``GET /metrics`` in the Prometheus format (SPEC OPS-3, ``runtime/metrics.py``).

A real server on scripted plugins holds a spoken conversation, a typed one and a client error;
the scrape, parsed with prometheus_client's own parser, has every family an operator's panels
use, and the ones the conversation touched moved. The local model's families are read from a
``LocalModel`` on a scripted backend (no llama.cpp).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import plugins.brain.local_model as local_model_module
from plugins.brain.llm import LLMBrain
from plugins.brain.local_model import LocalModel, LocalModelSettings
from plugins.fakes import FakeBrain, Faults
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.services import open_services
from tests.plugins.test_local_model import FakeBackend, ask, timings_chunk
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

__all__ = ["pg_pool", "postgres_url"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """(family name → type, (sample name, labels) → value) of one scrape."""
    families: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)
    )


async def scrape(server: RunningServer) -> tuple[dict[str, str], Samples]:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        response = await http.get("/metrics", headers={"Authorization": f"Bearer {server.token}"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


EXPECTED_FAMILIES = {
    "openrealtime_turn_latency_seconds": "histogram",
    "openrealtime_turn_stage_seconds": "histogram",
    "openrealtime_errors": "counter",
    "openrealtime_responses": "counter",
    "openrealtime_response_tokens": "counter",
    "openrealtime_sessions_created": "counter",
    "openrealtime_live_sessions": "gauge",
    "openrealtime_sessions_waiting_for_resume": "gauge",
    "openrealtime_connections": "gauge",
    "openrealtime_journal_buffered_events": "gauge",
    "openrealtime_draining": "gauge",
    "openrealtime_model_queue_wait_seconds": "histogram",
    "openrealtime_model_first_token_seconds": "histogram",
    "openrealtime_model_tokens": "counter",
    "openrealtime_loop_lag_seconds": "histogram",
    "openrealtime_turn_failures": "counter",
    "openrealtime_model_busy_seconds": "counter",
    "process_resident_memory_bytes": "gauge",
}


async def test_a_scrape_after_a_conversation_has_every_family_and_they_moved(
    server: RunningServer,
) -> None:
    families, before = await scrape(server)
    for name, kind in EXPECTED_FAMILIES.items():
        assert families.get(name) == kind, name
    assert value(before, "openrealtime_live_sessions") == 0
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await stream(client, SILENCE, 200)
        await stream(client, tone_frame(), 600)
        await stream(client, SILENCE, 500)  # 300 ms VAD hangover + 300 ms endpoint delay
        await client.wait_type("response.done", timeout=10)
        await client.send_raw("{not json")  # a client error: counted by its code
        error = await client.wait_type("error")
        _, during = await scrape(server)
        assert value(during, "openrealtime_live_sessions") == 1
        assert value(during, "openrealtime_connections") == 1
        assert value(during, "openrealtime_sessions_waiting_for_resume") == 0
    _, after = await scrape(server)

    spoken = {"mark": "first_audio_sent", "origin": "vad_end"}
    assert value(after, "openrealtime_turn_latency_seconds_count", **spoken) == 1
    for mark in ("committed", "asr_final", "brain_first_token", "tts_first_audio"):
        count = value(after, "openrealtime_turn_latency_seconds_count", mark=mark, origin="vad_end")
        assert count == 1, mark
    for stage in ("endpoint", "asr", "brain", "tts", "send"):
        assert value(after, "openrealtime_turn_stage_seconds_count", stage=stage) == 1, stage
    endpoint = value(after, "openrealtime_turn_stage_seconds_sum", stage="endpoint")
    assert endpoint > 0  # the endpoint delay is real time after the end of speech
    code = error["error"]["code"]
    assert value(after, "openrealtime_errors_total", code=code, type="invalid_request_error") == 1
    assert value(after, "openrealtime_responses_total", status="completed") == 1
    assert value(after, "openrealtime_response_tokens_total", direction="output") > 0
    assert value(after, "openrealtime_response_tokens_total", direction="input") > 0
    assert value(after, "openrealtime_sessions_created_total") == 1
    assert total(after, "openrealtime_loop_lag_seconds_count") > total(
        before, "openrealtime_loop_lag_seconds_count"
    )
    # The session's client could resume it (seq): it waits, no connection holds it.
    assert value(after, "openrealtime_live_sessions") == 1
    assert value(after, "openrealtime_sessions_waiting_for_resume") == 1
    assert value(after, "openrealtime_connections") == 0


async def test_two_servers_count_apart(server: RunningServer, tmp_path: Path) -> None:
    """Each process has its own registry (rule 1): another server's errors are not here."""
    settings = Settings(port=0, storage="memory", data_dir=tmp_path / "other")
    other = await open_services(settings, plugins=fake_plugins())
    try:
        other.telemetry.metrics.error("bad_request_x", "invalid_request_error")
        _, here = await scrape(server)
        assert value(here, "openrealtime_errors_total", code="bad_request_x") == 0
        _, there = parse(other.telemetry.metrics.render().decode())
        labels = {"code": "bad_request_x", "type": "invalid_request_error"}
        assert value(there, "openrealtime_errors_total", **labels) == 1
    finally:
        await other.close()


def test_error_codes_are_bounded() -> None:
    from runtime.metrics import MAX_ERROR_CODES, ProcessState, RuntimeMetrics

    metrics = RuntimeMetrics(lambda: ProcessState(0, 0, 0, 0, False))
    for i in range(MAX_ERROR_CODES + 10):
        metrics.error(f"code_{i}", "server_error")
    _, samples = parse(metrics.render().decode())
    codes = {
        dict(labels)["code"] for (name, labels) in samples if name == "openrealtime_errors_total"
    }
    assert len(codes) == MAX_ERROR_CODES + 1 and "other" in codes
    assert value(samples, "openrealtime_errors_total", code="other", type="server_error") == 10


@pytest.fixture
def no_model_file(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(
        local_model_module, "ensure_model_file", lambda cache_dir, model: Path("/fake/model.gguf")
    )
    yield


async def test_the_local_models_queue_and_tokens(no_model_file: None, tmp_path: Path) -> None:
    backend = FakeBackend(["Hel", "lo", timings_chunk(prompt_n=120, cache_n=100, predicted_n=9)])
    model = LocalModel(LocalModelSettings(max_waiting=7), backend_factory=lambda p, s: backend)
    settings = Settings(port=0, storage="memory", data_dir=tmp_path)
    services = await open_services(settings, plugins=fake_plugins(brain=LLMBrain(model)))
    try:
        metrics = services.telemetry.metrics
        families, before = parse(metrics.render().decode())
        assert families["openrealtime_model_queue_depth"] == "gauge"
        assert value(before, "openrealtime_model_queue_capacity") == 7
        assert value(before, "openrealtime_model_requests_total", outcome="started") == 0
        pieces: list[Any] = [piece async for piece in model.chat(ask(), lane="vs_1")]
        assert "".join(pieces) == "Hello"
        _, after = parse(metrics.render().decode())
        assert value(after, "openrealtime_model_requests_total", outcome="started") == 1
        assert value(after, "openrealtime_model_queue_depth") == 0
        assert value(after, "openrealtime_model_queue_wait_seconds_count") == 1
        assert value(after, "openrealtime_model_first_token_seconds_count") == 1
        assert value(after, "openrealtime_model_tokens_total", kind="prompt") == 120
        assert value(after, "openrealtime_model_tokens_total", kind="cached") == 100
        assert value(after, "openrealtime_model_tokens_total", kind="generated") == 9
    finally:
        await services.close()
        await model.aclose()
    assert model.observers == []  # the closed services stopped listening


async def test_the_journal_buffer_gauge_follows_an_outage(tmp_path: Path) -> None:
    """The outage of ``tests/runtime/test_journal_outage.py``: while the store is down the
    session's unsaved events show, and the outage's error is counted as a server error."""
    from tests.runtime.test_journal_outage import FlakyStore

    settings = Settings(port=0, data_dir=tmp_path, storage="memory")
    services = await open_services(settings, plugins=fake_plugins())
    store = FlakyStore()
    services.journal = store
    try:
        async with running_server(settings, services=services) as server:
            async with RealtimeClient(server.ws_url, server.token) as client:
                await client.connect()
                store.down = True
                await client.send_text("remember this while the database is down")
                await client.wait_type("error")
                await client.wait_type("response.done")
                _, down = await scrape(server)
                assert value(down, "openrealtime_journal_buffered_events") >= 1
                labels = {"code": "journal_unavailable", "type": "server_error"}
                assert value(down, "openrealtime_errors_total", **labels) >= 1
                store.down = False
                await client.wait_type("openrealtime.journal.recovered", timeout=15)
                _, recovered = await scrape(server)
                assert value(recovered, "openrealtime_journal_buffered_events") == 0
    finally:
        await services.close()


async def test_resumes_are_counted_live_here_or_from_the_journal(
    pg_pool: Any, postgres_url: str, tmp_path: Path
) -> None:
    """A dropped client resumes on the process holding its session (``live``), then on
    another process sharing the database (``journal``): each process counts its own."""
    settings = Settings(
        port=0, data_dir=tmp_path, database_url=postgres_url, knowledge_semantic=False
    )
    async with (
        running_server(settings, plugins=fake_plugins()) as a,
        running_server(settings, plugins=fake_plugins()) as b,
    ):
        async with RealtimeClient(a.ws_url, a.token) as client:
            await client.connect()
            await client.send_text("hello there")
            await client.wait_type("response.done")
            await client.drop()
            await client.reconnect()
            _, on_a = await scrape(a)
            assert value(on_a, "openrealtime_resumes_total", kind="live") == 1
            assert value(on_a, "openrealtime_resumes_total", kind="journal") == 0
            await client.drop()
            client.url = b.ws_url
            await client.reconnect()
            _, on_b = await scrape(b)
            assert value(on_b, "openrealtime_resumes_total", kind="journal") == 1
            assert value(on_b, "openrealtime_resumes_total", kind="live") == 0


def test_the_http_api_doc_lists_every_openrealtime_family() -> None:
    from runtime.metrics import ModelState, ProcessState, RuntimeMetrics

    model = ModelState(waiting=0, capacity=1, requests=0, expired=0, rejected=0, stopped_early=0)
    metrics = RuntimeMetrics(lambda: ProcessState(0, 0, 0, 0, False, model))
    families, _ = parse(metrics.render().decode())
    ours = {name for name in families if name.startswith("openrealtime_")}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "http_api.md").read_text()
    section = doc.split("## Metrics and probes", 1)[1]
    listed = set()
    for line in section.splitlines():
        if line.startswith("| `openrealtime_"):
            for name in line.split("|")[1].split(","):
                listed.add(name.strip().strip("`").removesuffix("_total"))
    assert listed == ours


async def test_a_failed_turn_is_counted_logged_and_shown_and_the_next_is_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    brain = FakeBrain(["The answer."], faults=Faults(fail=True))
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory")
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            with caplog.at_level("WARNING", logger="pipeline.turn_failure"):
                await client.send_text("a secret question")
                done = await client.wait_type("response.done", timeout=10)
            assert done["response"]["status"] == "failed"
            brain.faults.fail = False
            await client.send_text("again")
            done = await client.wait_type("response.done", timeout=10)
            assert done["response"]["output_text"] == "The answer."
        _, after = await scrape(server)
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            system = (
                await http.get("/api/system", headers={"Authorization": f"Bearer {server.token}"})
            ).json()
    line = next(r for r in caplog.records if r.getMessage().startswith("turn failed"))
    assert line.levelname == "WARNING"
    fields = {k: getattr(line, k) for k in ("session_id", "thread_id", "stage", "code")}
    assert fields["stage"] == "brain" and fields["code"] == "plugin_error"
    assert fields["session_id"].startswith("vs_") and fields["thread_id"]
    assert isinstance(line.waited_ms, float) and isinstance(line.elapsed_ms, float)  # type: ignore[attr-defined]
    assert "secret" not in line.getMessage()
    failures = value(after, "openrealtime_turn_failures_total", stage="brain", code="plugin_error")
    assert failures == 1
    assert [m["failures"] for m in system["latency"]["minutes"] if m["failures"]] == [{"brain": 1}]
