"""The false-interruption benchmark's own parts (the full run needs the models: see README)."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from benchmarks.false_interruptions import ChargedPool, cough, knocks, noise_burst, typing
from benchmarks.speech_data import audible_span
from tests.virtual_time import in_virtual_time


@in_virtual_time
async def test_a_charged_call_costs_its_wall_time_on_the_virtual_clock() -> None:
    pool = ChargedPool("asr")
    loop = asyncio.get_running_loop()
    before = loop.time()

    def work() -> str:
        time.sleep(0.05)
        return "done"

    assert await pool.run(work) == "done"
    assert loop.time() - before >= 0.05
    assert len(pool.calls_ms) == 1 and pool.calls_ms[0] >= 50.0
    pool.shutdown()


def test_the_noises_are_audible_bounded_and_drawn_from_the_seed() -> None:
    for make in (cough, knocks, noise_burst, typing):
        first = make(np.random.default_rng(3))
        again = make(np.random.default_rng(3))
        assert np.array_equal(first, again)
        start, end = audible_span(first)
        assert end > start and first.dtype == np.int16
        assert 0.05 < first.size / 16_000 < 2.0
