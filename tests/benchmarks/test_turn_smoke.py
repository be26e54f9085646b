"""The behavioural smoke of ``benchmarks.turn_overhead`` in the suite (issue 33): a real server
process, 5 sessions × 4 turns through the real protocol — our extensions and the plain GA
protocol — with a barge-in on every second turn. Every turn is answered and no frame of an
interrupted answer follows its interruption. Behaviour only: the timings are the benchmark's."""

from __future__ import annotations

import pytest

from benchmarks.turn_overhead import measure


@pytest.mark.parametrize("ga", [False, True], ids=["extensions", "plain_ga"])
async def test_every_turn_is_answered_and_nothing_follows_an_interruption(ga: bool) -> None:
    results = await measure("benchmarks.fake_server", ours=True, sessions=5, turns=4, seed=3, ga=ga)
    assert results.failures == 0
    assert len(results.overhead_ms) == 5 * 4  # every turn got its first audio
    assert len(results.bargein_ms) == 5 * 2  # every barge-in interrupted its answer
    assert len(results.output_stop_ms) == 5 * 2
    assert results.frames_after_interrupt == 0
