"""Process metrics (SPEC RT-10): event-loop lag and live sessions, served at ``GET /metrics``.

``LoopLagMonitor`` wakes every ``interval`` and records how late it woke: the delay any frame,
timer or message of any session saw at that moment. It keeps a bounded window of samples;
``/metrics?reset=1`` starts a new window (benchmarks use it per step). No conversation content
is ever part of a metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

import numpy as np


class LoopLagMonitor:
    def __init__(self, *, interval: float = 0.02, window: int = 6_000) -> None:
        self.interval = interval
        self.samples: deque[float] = deque(maxlen=window)
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
            self.samples.append(max(0.0, (time.perf_counter() - expected) * 1000.0))
