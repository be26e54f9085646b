"""The serving process's event loop and garbage collector.

The loop: uvloop when it is installed (it comes with ``uvicorn[standard]``), as uvicorn itself
would choose; the standard asyncio loop otherwise.

The collector (``tune_gc``): a busy server allocates a few hundred thousand objects a second (per
audio frame, timer, task and outbound message). With CPython's default thresholds (700, 10, 10)
anything that lives longer than a few tens of milliseconds — a paced audio frame, a timer, a
response's bookkeeping — is promoted to the oldest generation, which then fills quickly and is
scanned in full every few seconds: with a few hundred sessions (live or waiting to be resumed)
each full scan stopped the loop for 100–230 ms, the source of the turn-latency p99 spikes in
``benchmarks.capacity``. A larger young generation lets those objects die young, so full scans
become rare; freezing what exists once the server is up (modules, classes, settings, models:
never garbage) takes it out of every scan.
"""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 5_000
"""Allocations (net of frees) between young-generation collections (CPython default: 700)."""
GC_OLDER_THRESHOLDS = (10, 10)
"""Collections of one generation between collections of the next (CPython default)."""


def install_uvloop() -> bool:
    """Make new event loops uvloop loops; False when uvloop is not available."""
    try:
        import uvloop
    except ImportError:
        return False
    uvloop.install()
    return True


def tune_gc() -> None:
    """Set the serving thresholds and freeze every object alive now out of future collections.

    Call once in a server process, after start-up (see the module doc); not in a process that
    runs many servers one after another (tests), where frozen garbage would pile up."""
    gc.collect()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)
    gc.freeze()
