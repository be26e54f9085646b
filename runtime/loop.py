"""The serving process's event loop and garbage collector.

The loop: uvloop when it is installed (it comes with ``uvicorn[standard]``), as uvicorn itself
would choose; the standard asyncio loop otherwise.

The signals (``stop_signals``): SIGINT stops the process; SIGTERM drains it first (SPEC OPS-1),
then stops it.

The collector (``tune_gc``): a busy server allocates a few hundred thousand objects a second (per
audio frame, timer, task and outbound message). With CPython's default thresholds (700, 10, 10)
anything that lives longer than a few tens of milliseconds — a paced audio frame, a timer, a
response's bookkeeping — is promoted to the oldest generation, which then fills quickly and is
scanned in full every few seconds: with a few hundred sessions (live or waiting to be resumed)
each full scan stopped the loop for 100–230 ms, the source of the turn-latency p99 spikes in
``benchmarks.capacity``. A larger young generation lets those objects die young, so full scans
become rare; freezing what exists once the server is up (modules, classes, settings, models:
never garbage) takes it out of every scan.

But the oldest generation is then collected only every ``5_000 × 10 × 10`` net allocations, and
everything that dies in a reference cycle (a session and its connection, a response and its
tasks: a few thousand objects a turn) waits for that collection. At a fleet process's load that
took minutes, and the garbage waiting — 100–250 MB of it — read as a steady RSS growth of
22 MB/min over a 10-minute soak (``benchmarks.fleet``). So the oldest generation has a deadline
too (``FullCollectionDeadline``): once ``GC_FULL_AT_LEAST_EVERY_S`` passed without a full
collection, the next collection the thresholds trigger is a full one. Under heavy load full
collections come sooner anyway and the deadline adds none; it only adds them when the load is
light — when a full scan is cheap.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from typing import Any

GC_YOUNG_THRESHOLD = 5_000
"""Allocations (net of frees) between young-generation collections (CPython default: 700)."""
GC_OLDER_THRESHOLDS = (10, 10)
"""Collections of one generation between collections of the next (CPython default)."""
GC_FULL_AT_LEAST_EVERY_S = 30.0
"""The longest the oldest generation goes uncollected while the process allocates."""


class FullCollectionDeadline:
    """The oldest generation's threshold after each collection (module doc): the usual one, or
    0 — collect it next — once ``every_s`` passed since the last full collection."""

    def __init__(self, *, now: float, every_s: float = GC_FULL_AT_LEAST_EVERY_S) -> None:
        self.every_s = every_s
        self.last_full = now

    def oldest_threshold(self, generation: int, now: float) -> int:
        """After a collection of ``generation`` at ``now``."""
        if generation == len(GC_OLDER_THRESHOLDS):
            self.last_full = now
        elif now - self.last_full >= self.every_s:
            return 0
        return GC_OLDER_THRESHOLDS[-1]


_deadline: FullCollectionDeadline | None = None


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and _deadline is not None:
        oldest = _deadline.oldest_threshold(int(info["generation"]), time.monotonic())
        gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS[:-1], oldest)


def install_uvloop() -> bool:
    """Make new event loops uvloop loops; False when uvloop is not available."""
    try:
        import uvloop
    except ImportError:
        return False
    uvloop.install()
    return True


def tune_gc() -> None:
    """Set the serving thresholds, freeze every object alive now out of future collections, and
    give the oldest generation its deadline.

    Call once in a server process, after start-up (see the module doc); not in a process that
    runs many servers one after another (tests), where frozen garbage would pile up."""
    global _deadline
    gc.collect()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)
    gc.freeze()
    _deadline = FullCollectionDeadline(now=time.monotonic())
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def untune_gc() -> None:
    """Stop the deadline ``tune_gc`` set (tests)."""
    global _deadline
    _deadline = None
    if _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)


def stop_signals() -> tuple[asyncio.Event, asyncio.Event]:
    """(stop, drain) on the running loop: SIGINT sets stop; SIGTERM sets drain, then stop."""
    stop, drain = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)

    def on_sigterm() -> None:
        drain.set()
        stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    return stop, drain
