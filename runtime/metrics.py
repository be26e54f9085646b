"""Process metrics (SPEC RT-10, OPS-3), served at ``GET /metrics`` in the Prometheus format.

Theory of operation
-------------------
Rule 1. One registry per process: ``RuntimeMetrics.registry``, never prometheus_client's
        global one, so a test can run several servers side by side. ``GET /metrics`` renders it
        in the text exposition format (``render``); ``GET /metrics.json`` keeps the small JSON
        summary benchmarks read (sessions, the loop lag window).
Rule 2. Events are counted where they happen. Every event a client is sent passes the outbox's
        tap (``runtime/telemetry.py``): a turn's latency breakdown (``turn``), errors by code
        (``error``), the end of a response (``response_done``), a new session; the connection
        counts resumes (``resumes``: live or from the journal). The local
        model's worker reports each request (``model_request``, on its thread: the
        instruments are thread-safe), the loop-lag monitor each wake-up.
Rule 3. State is read when scraped: live sessions, those waiting for a resume, open
        connections, journal events buffered through an outage, the model queue's depth and
        its counters, draining. ``ProcessState`` is a plain snapshot the services take
        (``Services.operating_state``); nothing here holds a session.
Rule 4. Bounded labels. Every label's values come from a closed set written in code (marks,
        stages, token kinds, statuses); error codes are ours, and past ``MAX_ERROR_CODES``
        distinct ones the rest count as ``other``.
Rule 5. No conversation content is ever part of a metric: no text, and no id of a person,
        thread or session in a label.

``LoopLagMonitor`` wakes every ``interval`` and records how late it woke: the delay any frame,
timer or message of any session saw at that moment. It keeps a bounded window of samples for
the JSON summary (``/metrics.json?reset=1`` starts a new window; benchmarks use it per step)
and hands every sample to ``on_sample`` (the ``openrealtime_loop_lag_seconds`` histogram).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from plugins.brain.local_model import Generation

# The ``*_created`` series double every counter and histogram for a timestamp Prometheus does
# not use; prometheus_client only offers a process-wide switch.
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format."""

MAX_ERROR_CODES = 64

TURN_FAILURE_STAGES = frozenset(
    {"turn", "asr", "journal", "context", "brain", "brain_stream", "tts", "playout", "finalize"}
)
"""The stages a turn fails in (``pipeline.response.Response.stage``); others count as other."""
"""Distinct error codes counted by name (rule 4); later ones count as ``other``."""

LATENCY_MARKS = (
    "committed",
    "asr_final",
    "brain_first_token",
    "tts_first_audio",
    "first_audio_sent",
)
"""The turn's marks (``openrealtime.turn.latency``) counted by ``turn_latency_seconds``."""

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
STAGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
QUEUE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage of a turn: from ``start_ms`` to ``end_ms`` after the turn's origin."""

    name: str
    start_ms: float
    end_ms: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_ms - self.start_ms) / 1000.0


def turn_stages(latency_ms: Mapping[str, float]) -> list[Stage]:
    """The stages of one turn from its latency marks (ms after VAD end, or after the commit
    of a typed turn): ``endpoint`` (end of speech → commit), ``asr`` (commit → final
    transcript), ``brain`` (→ first token), ``tts`` (→ first synthesized audio), ``send``
    (→ first audio frame sent). A stage whose end mark is missing is left out; a brain that
    started before the commit (preempted) has a stage of no length at its first token."""
    stages: list[Stage] = []
    committed = latency_ms.get("committed", 0.0)
    if committed > 0.0:
        stages.append(Stage("endpoint", 0.0, committed))
    asr_final = latency_ms.get("asr_final")
    if asr_final is not None:
        stages.append(Stage("asr", committed, max(committed, asr_final)))
    heard = max(committed, asr_final) if asr_final is not None else committed
    first_token = latency_ms.get("brain_first_token")
    if first_token is not None:
        stages.append(Stage("brain", min(heard, first_token), first_token))
    tts = latency_ms.get("tts_first_audio")
    if tts is not None and first_token is not None:
        stages.append(Stage("tts", first_token, max(first_token, tts)))
    sent = latency_ms.get("first_audio_sent")
    if sent is not None and tts is not None:
        stages.append(Stage("send", tts, max(tts, sent)))
    return stages


@dataclass(frozen=True, slots=True)
class ModelState:
    """The local model's queue and counters at one moment."""

    waiting: int
    capacity: int
    requests: int
    expired: int
    rejected: int
    stopped_early: int


@dataclass(frozen=True, slots=True)
class ProcessState:
    """What the process holds at one moment (rule 3)."""

    live_sessions: int
    waiting_for_resume: int
    connections: int
    journal_buffered: int
    draining: bool
    model: ModelState | None = None


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], ProcessState]) -> None:
        self._state = state

    def collect(self) -> Iterable[Metric]:
        state = self._state()
        yield _gauge(
            "openrealtime_live_sessions",
            "Voice sessions live in this process (connected or waiting for a resume).",
            state.live_sessions,
        )
        yield _gauge(
            "openrealtime_sessions_waiting_for_resume",
            "Live voice sessions whose connection dropped, waiting for their client.",
            state.waiting_for_resume,
        )
        yield _gauge(
            "openrealtime_connections",
            "Realtime connections open (WebSocket and WebRTC calls).",
            state.connections,
        )
        yield _gauge(
            "openrealtime_journal_buffered_events",
            "Journal events kept in memory because the database could not take them.",
            state.journal_buffered,
        )
        yield _gauge(
            "openrealtime_draining",
            "1 while the process drains (not ready for new sessions).",
            int(state.draining),
        )
        model = state.model
        if model is None:
            return
        yield _gauge(
            "openrealtime_model_queue_depth",
            "Requests waiting for the local model.",
            model.waiting,
        )
        yield _gauge(
            "openrealtime_model_queue_capacity",
            "Requests that may wait for the local model at most (more: model_busy).",
            model.capacity,
        )
        requests = CounterMetricFamily(
            "openrealtime_model_requests",
            "Requests of the local model by outcome.",
            labels=["outcome"],
        )
        requests.add_metric(["started"], model.requests)
        requests.add_metric(["expired"], model.expired)
        requests.add_metric(["rejected"], model.rejected)
        requests.add_metric(["stopped_early"], model.stopped_early)
        yield requests


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class RuntimeMetrics:
    """The process's instruments and registry (module rules)."""

    def __init__(self, state: Callable[[], ProcessState]) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=registry)
        GCCollector(registry=registry)
        PlatformCollector(registry=registry)
        registry.register(_StateCollector(state))
        self.turn_latency = Histogram(
            "openrealtime_turn_latency_seconds",
            "Time from the end of the user's speech (origin vad_end; a typed turn: its commit)"
            " to each mark of the turn.",
            ["mark", "origin"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.turn_stage = Histogram(
            "openrealtime_turn_stage_seconds",
            "Duration of each stage of a turn: endpoint, asr, brain, tts, send.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            "openrealtime_errors",
            "Error events sent to clients, by code and type.",
            ["code", "type"],
            registry=registry,
        )
        self.responses = Counter(
            "openrealtime_responses",
            "Responses finished, by status.",
            ["status"],
            registry=registry,
        )
        self.response_tokens = Counter(
            "openrealtime_response_tokens",
            "Tokens of finished responses as reported in response.done (estimated).",
            ["direction"],
            registry=registry,
        )
        self.resumes = Counter(
            "openrealtime_resumes",
            "Sessions resumed here: live (taken over from this process's copy) or journal "
            "(continued from the journal: the process that held it is gone or elsewhere).",
            ["kind"],
            registry=registry,
        )
        for kind in ("live", "journal"):
            self.resumes.labels(kind)
        self.sessions_created = Counter(
            "openrealtime_sessions_created",
            "Voice sessions started in this process.",
            registry=registry,
        )
        self.model_queue_wait = Histogram(
            "openrealtime_model_queue_wait_seconds",
            "Time a request waited in the local model's fair queue before it ran.",
            buckets=QUEUE_BUCKETS,
            registry=registry,
        )
        self.model_first_token = Histogram(
            "openrealtime_model_first_token_seconds",
            "Time from a local model request's start to its first token.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.model_tokens = Counter(
            "openrealtime_model_tokens",
            "Tokens of the local model: prompt (computed), cached (prompt from the cache), "
            "generated.",
            ["kind"],
            registry=registry,
        )
        self.loop_lag = Histogram(
            "openrealtime_loop_lag_seconds",
            "How late the event loop woke for a timer (every 20 ms).",
            buckets=LAG_BUCKETS,
            registry=registry,
        )
        self.model_busy = Counter(
            "openrealtime_model_busy_seconds",
            "Time the local model spent on requests, by class: foreground (a person's answer) "
            "or background (memory learning, run in the pauses; SPEC RT-11).",
            ["class"],
            registry=registry,
        )
        for kind in ("foreground", "background"):
            self.model_busy.labels(kind)
        self.turn_failures = Counter(
            "openrealtime_turn_failures",
            "Turns that failed (SPEC RT-11), by the stage they failed in and the error code.",
            ["stage", "code"],
            registry=registry,
        )
        self._error_codes: set[str] = set()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # ------------------------------------------------------------ events (rule 2)

    def turn(self, latency_ms: Mapping[str, float], origin: str) -> None:
        origin = origin if origin in ("vad_end", "committed") else "other"
        for mark in LATENCY_MARKS:
            value = latency_ms.get(mark)
            if value is not None:
                self.turn_latency.labels(mark, origin).observe(max(0.0, value) / 1000.0)
        for stage in turn_stages(latency_ms):
            self.turn_stage.labels(stage.name).observe(stage.seconds)

    def error(self, code: str, kind: str) -> None:
        kind = kind if kind in ("invalid_request_error", "server_error") else "other"
        self.errors.labels(self._bounded_code(code), kind).inc()

    def turn_failed(self, stage: str, code: str) -> None:
        stage = stage if stage in TURN_FAILURE_STAGES else "other"
        self.turn_failures.labels(stage, self._bounded_code(code)).inc()

    def _bounded_code(self, code: str) -> str:
        if code not in self._error_codes:
            if len(self._error_codes) >= MAX_ERROR_CODES:
                return "other"
            self._error_codes.add(code)
        return code

    def response_done(self, status: str, input_tokens: int, output_tokens: int) -> None:
        known = ("completed", "cancelled", "failed", "incomplete")
        self.responses.labels(status if status in known else "other").inc()
        self.response_tokens.labels("input").inc(max(0, input_tokens))
        self.response_tokens.labels("output").inc(max(0, output_tokens))

    def model_request(self, generation: Generation) -> None:
        if generation.queue_wait_s is not None and not generation.background:
            self.model_queue_wait.observe(max(0.0, generation.queue_wait_s))
        if generation.first_token_s is not None:
            self.model_first_token.observe(max(0.0, generation.first_token_s))
        kind = "background" if generation.background else "foreground"
        self.model_busy.labels(kind).inc(max(0.0, generation.busy_s))
        timings = generation.timings
        if timings is not None:
            self.model_tokens.labels("prompt").inc(max(0, timings.prompt_tokens))
            self.model_tokens.labels("cached").inc(max(0, timings.cached_tokens))
            self.model_tokens.labels("generated").inc(max(0, timings.generated_tokens))

    def loop_lag_sample(self, lag_ms: float) -> None:
        self.loop_lag.observe(lag_ms / 1000.0)


class LoopLagMonitor:
    def __init__(self, *, interval: float = 0.02, window: int = 6_000) -> None:
        self.interval = interval
        self.samples: deque[float] = deque(maxlen=window)
        self.on_sample: Callable[[float], None] | None = None
        """Called with every sample (ms): the process's histogram."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="loop-lag-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def reset(self) -> None:
        self.samples.clear()

    def summary(self) -> dict[str, float | int | None]:
        if not self.samples:
            return {"samples": 0, "p50": None, "p99": None, "max": None}
        values = np.asarray(self.samples)
        return {
            "samples": int(values.size),
            "p50": round(float(np.percentile(values, 50)), 3),
            "p99": round(float(np.percentile(values, 99)), 3),
            "max": round(float(values.max()), 3),
        }

    async def _run(self) -> None:
        while True:
            expected = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            lag = max(0.0, (time.perf_counter() - expected) * 1000.0)
            self.samples.append(lag)
            if self.on_sample is not None:
                self.on_sample(lag)
