"""Turn traces (``runtime/tracing.py``): one spoken turn through a real server gives the span
tree end of speech → ASR → brain → TTS → first audio, written to the SDK's in-memory exporter;
no attribute holds the transcript, the prompt or the answer. Off by default: no tracer."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plugins.fakes import FakeASR, FakeBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.tracing import TurnTracing, tracing_from_settings, tracing_to
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

TRANSCRIPT = "where did I park the blue bicycle"
ANSWER = "It is behind the old library. Anything else?"
INSTRUCTIONS = "You are a parking assistant with a secret motto: zebra lanterns."


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, InMemorySpanExporter]]:
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=300, min_interrupt_ms=300
    )
    plugins = fake_plugins(asr=FakeASR([TRANSCRIPT]), brain=FakeBrain([ANSWER]))
    exporter = InMemorySpanExporter()
    async with running_server(settings, plugins=plugins) as server:
        assert server.services.telemetry.tracing is None  # off by default (rule 1)
        server.services.telemetry.tracing = tracing_to(exporter, settings, batch=False)
        yield server, exporter


async def test_a_spoken_turn_is_one_trace_of_its_stages(
    traced: tuple[RunningServer, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    async with RealtimeClient(server.ws_url, server.token) as client:
        session = await client.connect()
        await client.send_json(
            {"type": "session.update", "session": {"instructions": INSTRUCTIONS}}
        )
        await client.wait_type("session.updated")
        await stream(client, SILENCE, 200)
        await stream(client, tone_frame(), 600)
        await stream(client, SILENCE, 500)
        done = await client.wait_type("response.done", timeout=10)
        assert done["response"]["output_text"] == ANSWER
        latency = client.events("openrealtime.turn.latency")[0]
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["turn"]
    root = roots[0]
    children = [s for s in spans if s.parent is not None]
    assert [s.name for s in sorted(children, key=lambda s: s.start_time or 0)] == [
        "turn.endpoint",
        "turn.asr",
        "turn.brain",
        "turn.tts",
        "turn.send",
    ]
    assert {s.parent.span_id for s in children if s.parent} == {root.context.span_id}
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert root.attributes is not None
    assert root.attributes["openrealtime.session_id"] == session["id"]
    assert root.attributes["openrealtime.origin"] == "vad_end"
    assert root.attributes["openrealtime.response_id"] == latency["response_id"]
    # The tree is the turn's own timeline: stages in order, inside the root.
    assert root.start_time is not None and root.end_time is not None
    duration_ms = (root.end_time - root.start_time) / 1e6
    assert duration_ms == pytest.approx(latency["latency_ms"]["first_audio_sent"], abs=0.01)
    previous_end = root.start_time
    for span in sorted(children, key=lambda s: s.start_time or 0):
        assert span.start_time is not None and span.end_time is not None
        assert previous_end - 1000 <= span.start_time <= span.end_time <= root.end_time + 1000
        previous_end = span.end_time
    words = {w.strip(".,?").lower() for w in f"{TRANSCRIPT} {ANSWER} {INSTRUCTIONS}".split()}
    words = {w for w in words if len(w) > 3}
    for span in spans:
        for key, attribute in (span.attributes or {}).items():
            text = str(attribute).lower()
            assert not any(w in text.split() for w in words), (span.name, key, attribute)
            assert TRANSCRIPT not in text and ANSWER.lower() not in text


def test_tracing_is_off_unless_an_exporter_is_set(tmp_path: Path) -> None:
    assert tracing_from_settings(Settings(data_dir=tmp_path)) is None


def test_the_console_exporter_writes_spans(tmp_path: Path) -> None:
    from pipeline import events as ev

    out = io.StringIO()
    tracing = tracing_from_settings(Settings(data_dir=tmp_path, otel_exporter="console"), out=out)
    assert isinstance(tracing, TurnTracing)
    latency = ev.TurnLatency(
        response_id="resp_1",
        generation=1,
        latency_ms={"committed": 300.0, "brain_first_token": 420.0, "first_audio_sent": 480.0},
        origin="committed",
    )
    tracing.turn(latency, session_id="vs_1", now_ns=10**18)
    tracing.shutdown()  # flushes the batch
    written = out.getvalue()
    assert '"name": "turn"' in written and '"name": "turn.brain"' in written
    assert "resp_1" in written


def test_the_otlp_exporter_is_built_from_settings(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    settings = Settings(
        data_dir=tmp_path, otel_exporter="otlp", otel_endpoint="http://127.0.0.1:9/v1/traces"
    )
    tracing = tracing_from_settings(settings)
    assert tracing is not None
    processors = tracing.provider._active_span_processor._span_processors  # noqa: SLF001
    exporters = [getattr(p, "_batch_processor", p) for p in processors]
    assert any(isinstance(getattr(e, "_exporter", None), OTLPSpanExporter) for e in exporters), (
        exporters
    )
    tracing.shutdown()  # nothing was traced: nothing is sent
