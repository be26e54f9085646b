"""The rolling latency window (``runtime/latency_window.py``): per-minute p50/p95 per stage,
bounded in minutes and samples, on known inputs and a scripted clock."""

from __future__ import annotations

import pytest

from runtime.latency_window import WINDOW_STAGES, LatencyWindow
from runtime.metrics import turn_stages

MINUTE = 60.0
T0 = 1_800_000_000.0  # a minute boundary (30,000,000 minutes after the epoch)

TURN = {
    "committed": 300.0,
    "asr_final": 420.0,
    "brain_first_token": 700.0,
    "tts_first_audio": 760.0,
    "first_audio_sent": 765.0,
}


def spoken_turn(scale: float) -> dict[str, float]:
    return {mark: value * scale for mark, value in TURN.items()}


def test_each_stage_is_the_metrics_stage_and_first_audio_is_the_mark() -> None:
    window = LatencyWindow()
    window.add(TURN, T0 + 5)
    [minute] = window.summary(T0 + 10)
    assert minute.start == T0
    expected = {s.name: s.end_ms - s.start_ms for s in turn_stages(TURN)}
    expected["first_audio"] = TURN["first_audio_sent"]
    assert list(minute.stages) == list(WINDOW_STAGES)
    for name, duration in expected.items():
        stage = minute.stages[name]
        rounded = round(duration, 2)
        assert (stage.count, stage.p50_ms, stage.p95_ms) == (1, rounded, rounded)


def test_p50_and_p95_of_a_minute_are_the_percentiles_of_its_turns() -> None:
    window = LatencyWindow()
    for i in range(100, 0, -1):  # every stage lasts i ms, i = 100 … 1; first audio at 5·i
        window.add({mark: float(i * k) for k, mark in enumerate(TURN, start=1)}, T0 + i * 0.1)
    [minute] = window.summary(T0 + 30)
    for name in ("endpoint", "asr", "brain", "tts", "send"):
        stage = minute.stages[name]
        assert (stage.count, stage.p50_ms, stage.p95_ms) == (100, 50.5, 95.05), name
    first = minute.stages["first_audio"]
    assert (first.p50_ms, first.p95_ms) == (252.5, 475.25)


def test_a_typed_turn_has_no_endpoint_stage() -> None:
    window = LatencyWindow()
    window.add({"committed": 0.0, "brain_first_token": 50.0, "first_audio_sent": 80.0}, T0)
    [minute] = window.summary(T0)
    assert "endpoint" not in minute.stages and "asr" not in minute.stages
    assert minute.stages["brain"].p50_ms == 50.0


def test_turns_fall_into_their_minutes_and_old_minutes_are_dropped() -> None:
    window = LatencyWindow(minutes=15)
    for m in range(20):
        window.add(spoken_turn(1.0 + m), T0 + m * MINUTE + 1)
    minutes = window.summary(T0 + 19 * MINUTE + 2)
    assert [m.start for m in minutes] == [T0 + k * MINUTE for k in range(5, 20)]
    assert minutes[0].stages["first_audio"].p50_ms == 765.0 * 6
    # Quiet for a while: the window moves on without turns and empties.
    later = window.summary(T0 + 30 * MINUTE)
    assert [m.start for m in later] == [T0 + k * MINUTE for k in range(16, 20)]
    assert window.summary(T0 + 40 * MINUTE) == []


def test_a_turn_dated_before_the_window_is_not_counted() -> None:
    window = LatencyWindow(minutes=2)
    window.add(TURN, T0 + 10 * MINUTE)
    window.add(TURN, T0)  # the clock was set back by ten minutes
    assert [m.start for m in window.summary(T0 + 10 * MINUTE)] == [T0 + 10 * MINUTE]


def test_samples_per_minute_are_bounded_and_every_turn_is_counted() -> None:
    window = LatencyWindow(max_samples=50)
    for i in range(1_000):
        window.add(spoken_turn(1.0 + (i % 10)), T0 + i * 0.01)
    [minute] = window.summary(T0 + 59)
    first = minute.stages["first_audio"]
    assert first.count == 1_000
    assert all(len(series.samples) == 50 for series in window._buckets[int(T0 // 60)].values())
    assert 765.0 <= first.p50_ms <= 765.0 * 10  # a sample of the same values


def test_window_settings_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LatencyWindow(minutes=0)
    with pytest.raises(ValueError):
        LatencyWindow(max_samples=0)


def test_failed_turns_are_counted_per_minute_and_stage_and_expire_with_the_window() -> None:
    window = LatencyWindow(minutes=2)
    window.failed("brain", 60.0)
    window.failed("brain", 61.0)
    window.failed("asr", 61.0)

    (minute,) = window.summary(90.0)
    assert (minute.start, dict(minute.failures), dict(minute.stages)) == (
        60.0,
        {"brain": 2, "asr": 1},
        {},
    )
    assert window.summary(60.0 * 4) == []
