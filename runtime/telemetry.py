"""Telemetry: the process's metrics and traces, and the outbox tap that feeds both.

Theory of operation
-------------------
Rule 1. Every server event a session sends goes through its outbox's ``send``; the outbox hands
        it to its tap first (``Outbox.tap``), before media, extension filtering and encoding,
        so every event is seen once, whatever the client negotiated and whether or not a
        connection is attached. Replayed messages are not sent again through ``send``, so a
        resume counts nothing twice.
Rule 2. The tap is synchronous and cheap: one type lookup per event; audio frames, the most
        frequent, return at once. It reads ids, codes and numbers from the event — never its
        text (``runtime/metrics.py`` rule 5, ``runtime/tracing.py`` rule 4).
Rule 3. A tap belongs to one outbox; the connection names the session it serves
        (``session_id``) once the session exists, for the traces.
Rule 4. A turn's latency also goes into the process's rolling window of the last minutes
        (``runtime/latency_window.py``), which the system page charts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline import events as ev
from runtime.latency_window import LatencyWindow
from runtime.metrics import ProcessState, RuntimeMetrics
from runtime.tracing import TurnTracing


class Telemetry:
    """Metrics (always) and turn traces (when an exporter is configured) of one process."""

    def __init__(self, state: Callable[[], ProcessState], tracing: TurnTracing | None) -> None:
        self.metrics = RuntimeMetrics(state)
        self.tracing = tracing
        self.latency_window = LatencyWindow()
        self.started_at = time.time()
        """When this process's telemetry began (seconds since the epoch): its uptime."""

    def tap(self) -> OutboxTap:
        return OutboxTap(self)

    def close(self) -> None:
        tracing, self.tracing = self.tracing, None
        if tracing is not None:
            tracing.shutdown()


class OutboxTap:
    """What one outbox's events tell the process's telemetry (module rules)."""

    __slots__ = ("session_id", "telemetry")

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self.session_id: str | None = None

    def __call__(self, event: ev.ServerEvent) -> None:
        kind = type(event)
        if kind is ev.OutputAudioDelta:
            return
        metrics = self.telemetry.metrics
        if kind is ev.TurnLatency:
            assert isinstance(event, ev.TurnLatency)
            metrics.turn(event.latency_ms, event.origin)
            self.telemetry.latency_window.add(event.latency_ms, time.time())
            tracing = self.telemetry.tracing
            if tracing is not None:
                tracing.turn(event, session_id=self.session_id, now_ns=time.time_ns())
        elif kind is ev.Error:
            assert isinstance(event, ev.Error)
            metrics.error(event.error.code, event.error.type)
        elif kind is ev.ResponseDone:
            assert isinstance(event, ev.ResponseDone)
            usage = event.response.usage
            metrics.response_done(
                event.response.status,
                usage.input_tokens if usage is not None else 0,
                usage.output_tokens if usage is not None else 0,
            )
        elif kind is ev.SessionCreated:
            metrics.sessions_created.inc()
