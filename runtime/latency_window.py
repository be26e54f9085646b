"""The last minutes of turn latency, per minute and stage, for the system page (SPEC RT-10).

Theory of operation
-------------------
Rule 1. Sans-I/O: ``add`` takes a turn's latency marks (``openrealtime.turn.latency``) and the
        time ``now`` (seconds since the epoch); ``summary(now)`` answers from what was added.
        Nothing here reads a clock; the outbox tap (``runtime/telemetry.py``) passes one in.
Rule 2. The stages are ``runtime.metrics.turn_stages``' — the same as the Prometheus
        histograms' — plus ``first_audio``: the turn's ``first_audio_sent`` mark (end of speech,
        or a typed turn's commit, to the first audio frame sent).
Rule 3. Bounded: one bucket per minute for the last ``minutes`` minutes (older buckets are
        dropped when a newer minute begins or a summary is asked for), and at most
        ``max_samples`` durations per stage and minute; past that a bucket keeps a uniform
        reservoir sample of its minute (seeded, so a run can be repeated) and counts every
        turn in ``count``.
Rule 4. Per process and in memory: a restart starts empty, and each process of a fleet has
        its own window (Prometheus' histograms are the fleet-wide view).
Rule 5. ``p50`` and ``p95`` are numpy's linear-interpolated percentiles of a minute's samples,
        in milliseconds; a stage with no sample in a minute is absent from that minute.
Rule 6. Failed turns (SPEC RT-11) are counted per minute by the stage they failed in
        (``failed``); a minute that saw only failures is in the summary too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from runtime.metrics import turn_stages

WINDOW_STAGES = ("endpoint", "asr", "brain", "tts", "send", "first_audio")
"""Every series the window keeps, in the order a turn goes through them (rule 2)."""


@dataclass(frozen=True, slots=True)
class StageSummary:
    count: int
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True, slots=True)
class MinuteSummary:
    """One minute of the window: ``start`` is its first second (seconds since the epoch)."""

    start: float
    stages: Mapping[str, StageSummary]
    failures: Mapping[str, int] = field(default_factory=dict)
    """Failed turns of the minute by the stage they failed in (rule 6)."""


@dataclass(slots=True)
class _Series:
    count: int = 0
    samples: list[float] = field(default_factory=list)


class LatencyWindow:
    """Per-minute p50/p95 of each stage for the last ``minutes`` minutes (module rules)."""

    def __init__(self, *, minutes: int = 15, max_samples: int = 2_000, seed: int = 0) -> None:
        if minutes < 1 or max_samples < 1:
            raise ValueError("minutes and max_samples must be at least 1")
        self.minutes = minutes
        self.max_samples = max_samples
        self._buckets: dict[int, dict[str, _Series]] = {}
        self._failures: dict[int, dict[str, int]] = {}
        self._random = random.Random(seed)

    def failed(self, stage: str, now: float) -> None:
        """Count one failed turn in the minute of ``now`` (rule 6)."""
        minute = math.floor(now / 60.0)
        if minute < self._expire(minute):
            return
        counts = self._failures.setdefault(minute, {})
        counts[stage] = counts.get(stage, 0) + 1

    def add(self, latency_ms: Mapping[str, float], now: float) -> None:
        """Count one turn's stages in the minute of ``now``."""
        minute = math.floor(now / 60.0)
        if minute < self._expire(minute):
            return  # older than the window (the clock was set back)
        bucket = self._buckets.setdefault(minute, {})
        durations = {stage.name: stage.end_ms - stage.start_ms for stage in turn_stages(latency_ms)}
        sent = latency_ms.get("first_audio_sent")
        if sent is not None:
            durations["first_audio"] = sent
        for name, value in durations.items():
            self._sample(bucket.setdefault(name, _Series()), max(0.0, float(value)))

    def summary(self, now: float) -> list[MinuteSummary]:
        """The minutes of the window that saw a turn, oldest first."""
        minute = math.floor(now / 60.0)
        self._expire(minute)
        found: list[MinuteSummary] = []
        for start in sorted({*self._buckets, *self._failures}):
            stages: dict[str, StageSummary] = {}
            for name in WINDOW_STAGES:
                series = self._buckets.get(start, {}).get(name)
                if series is None or not series.samples:
                    continue
                p50, p95 = np.percentile(np.asarray(series.samples), [50, 95])
                stages[name] = StageSummary(
                    series.count, round(float(p50), 2), round(float(p95), 2)
                )
            failures = dict(self._failures.get(start, {}))
            found.append(MinuteSummary(start=start * 60.0, stages=stages, failures=failures))
        return found

    def _expire(self, minute: int) -> int:
        """Drop the buckets before the window that ends at ``minute`` (or at the newest
        bucket, if later); returns the window's first minute."""
        oldest = max([minute, *self._buckets, *self._failures]) - self.minutes + 1
        for start in [s for s in self._buckets if s < oldest]:
            del self._buckets[start]
        for start in [s for s in self._failures if s < oldest]:
            del self._failures[start]
        return oldest

    def _sample(self, series: _Series, value: float) -> None:
        series.count += 1
        if len(series.samples) < self.max_samples:
            series.samples.append(value)
            return
        slot = self._random.randrange(series.count)  # reservoir sampling (rule 3)
        if slot < self.max_samples:
            series.samples[slot] = value
