"""``benchmarks.recordings`` end to end, small: two sessions recorded beside two unrecorded on
real server processes; every recording decodes to exactly what was sent and received, and the
expiry deletes each (SPEC REC-2, REC-4)."""

from __future__ import annotations

import argparse

from benchmarks import recordings


async def test_the_benchmark_prints_its_figures_and_loses_no_audio() -> None:
    args = argparse.Namespace(sessions=2, duration=5.0, period=5.0)
    result = await recordings.main(args)
    assert result["recordings"] == 2 and result["failures"] == {"recorded": 0, "unrecorded": 0}
    assert result["lost_audio_ms"] == 0.0
    assert result["bytes_per_minute"] > 0 and result["expiry_delete_ms"]["p50"] > 0
    for key in ("sessions", "cpu_pct_per_recorded_session", "recording_cpu_overhead"):
        assert key in result
