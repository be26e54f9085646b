"""The echo benchmark in a reduced run (four cases of the tuning seed and one of each stress
group: an echo-only case) and its case draw."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import echo


def test_cases_are_drawn_from_the_seed() -> None:
    first, again, other = echo.draw_cases(1, 6), echo.draw_cases(1, 6), echo.draw_cases(2, 6)

    assert first == again and first != other
    assert [c.interjection is None for c in first] == [True, False] * 3
    for case in first:
        assert 20 <= case.path.delay_ms <= 250 and 6 <= case.path.attenuation_db <= 30
        assert case.path.stall is None and case.path.clip_db is None


def test_stress_groups_draw_cases_of_their_own() -> None:
    stalls = echo.draw_cases(1, 4, "playback_stall")
    clipping = echo.draw_cases(1, 4, "clipping_speaker")

    assert stalls != echo.draw_cases(1, 4)
    assert all(c.path.stall is not None and 60 <= c.path.stall[1] <= 200 for c in stalls)
    assert all(c.path.clip_db is not None and c.path.attenuation_db <= 12 for c in clipping)


def test_the_pacer_schedule_sends_the_first_frame_at_once_then_within_the_lead() -> None:
    output = np.zeros(echo.OUTPUT_RATE * 2, dtype=np.int16)
    schedule = echo.send_schedule(output, 150)
    start = round(echo.ANSWER_START_S / echo.FRAME_S) - 1
    sent = np.cumsum([sum(m.size for m in messages) for messages in schedule])

    assert all(not messages for messages in schedule[:start])
    assert [m.size for m in schedule[start]][0] == echo.OUTPUT_RATE * 40 // 1000
    assert sent[-1] == output.size
    for index in range(start, len(schedule)):
        played_ms = (index + 1 - start - 1) * 20.0
        assert sent[index] * 1000 / echo.OUTPUT_RATE - played_ms <= echo.PLAYOUT_LEAD_MS + 40


def test_echo_benchmark_reduced_run(capsys: pytest.CaptureFixture[str]) -> None:
    echo.main(["--seeds", "1", "--cases", "4", "--stress-cases", "1"])

    (line,) = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    assert result["cases"] == 4
    assert result["self_interruptions"] == 0
    assert result["bargein_over_echo_caught_rate"] == 1.0
    without = result["all_seeds"]["without_guard"]
    assert without["self_interruptions"] >= 1  # the echo interrupts an unguarded answer
    assert result["per_frame_cost_us"]["judge"]["count"] > 100
    assert {"settings", "by_seed", "per_frame_cost_us"} <= result.keys()
    assert set(result["stress"]) == set(echo.STRESS)
    assert all(group["cases"] == 1 for group in result["stress"].values())
