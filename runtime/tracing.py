"""OpenTelemetry traces of a turn (SPEC OPS-3): end of speech → ASR → brain → TTS → first audio.

Theory of operation
-------------------
Rule 1. Off unless an exporter is configured (``OPENREALTIME_OTEL_EXPORTER``: ``none``, the
        default, ``console`` or ``otlp``). Off, there is no tracer at all: the outbox tap skips
        tracing with one ``is None`` check, and OpenTelemetry's SDK is never imported.
Rule 2. One tracer provider per process, never OpenTelemetry's global one (a test can run
        several servers side by side); spans leave through a ``BatchSpanProcessor`` (bounded
        queue, exported off the event loop) and the provider is shut down with the services.
Rule 3. A turn's spans are written once, when its first audio frame is sent — the moment the
        engine sends the ``openrealtime.turn.latency`` event, which the tap sees. The root
        ``turn`` spans from its origin (VAD end, or the commit of a typed turn) to the first
        audio sent; each stage of ``runtime.metrics.turn_stages`` is a child with its measured
        start and end (the marks are relative to the origin; the wall clock of the last one is
        the moment of the event). Nothing is traced, waited for or allocated on the way to the
        first audio.
Rule 4. Attributes are ids and numbers only — session and response ids, generation, origin,
        preempted, milliseconds — never a transcript, a prompt or an answer.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TextIO

from pipeline import events as ev
from runtime.config import Settings
from runtime.metrics import turn_stages

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

TRACER_NAME = "openrealtime.turn"
MAX_QUEUED_SPANS = 4096
"""Spans waiting for export at most (the batch processor drops beyond it)."""


class TurnTracing:
    """Writes each turn's span tree (rule 3) through ``provider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(TRACER_NAME)

    def turn(self, latency: ev.TurnLatency, *, session_id: str | None, now_ns: int) -> None:
        from opentelemetry import trace

        marks = latency.latency_ms
        sent = marks.get("first_audio_sent")
        if sent is None:
            return
        origin_ns = now_ns - int(sent * 1_000_000)

        def at(ms: float) -> int:
            return origin_ns + int(ms * 1_000_000)

        stages = turn_stages(marks)
        attributes: dict[str, Any] = {
            "openrealtime.response_id": latency.response_id,
            "openrealtime.generation": latency.generation,
            "openrealtime.origin": latency.origin,
            "openrealtime.preempted": latency.preempted,
            "openrealtime.first_audio_ms": sent,
        }
        if session_id is not None:
            attributes["openrealtime.session_id"] = session_id
        start = min([0.0, *(stage.start_ms for stage in stages)])
        root = self.tracer.start_span("turn", start_time=at(start), attributes=attributes)
        context = trace.set_span_in_context(root)
        for stage in stages:
            span = self.tracer.start_span(
                f"turn.{stage.name}",
                context=context,
                start_time=at(stage.start_ms),
                attributes={"openrealtime.stage": stage.name},
            )
            span.end(end_time=at(stage.end_ms))
        root.end(end_time=at(sent))

    def shutdown(self) -> None:
        self.provider.shutdown()


def tracing_from_settings(settings: Settings, *, out: TextIO | None = None) -> TurnTracing | None:
    """The process's tracing as ``settings`` configure it (None: off, rule 1). ``out`` is
    where the console exporter writes (default stdout)."""
    if settings.otel_exporter == "none":
        return None
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    exporter: SpanExporter
    if settings.otel_exporter == "console":
        exporter = ConsoleSpanExporter(out=out or sys.stdout)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # endpoint None: the exporter's own OTEL_EXPORTER_OTLP_* settings and default.
        exporter = OTLPSpanExporter(
            endpoint=settings.otel_endpoint, timeout=int(settings.otel_timeout_s)
        )
    return tracing_to(exporter, settings, batch=True)


def tracing_to(exporter: SpanExporter, settings: Settings, *, batch: bool) -> TurnTracing:
    """Tracing of this process to ``exporter``: batched (rule 2), or span by span (tests)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service}))
    if batch:
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=MAX_QUEUED_SPANS))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TurnTracing(provider)
