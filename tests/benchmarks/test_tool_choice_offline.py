"""benchmarks.tool_choice_offline's scoring (the model runs only in the benchmark): the right
tool, the precision of no calls, and picks a "no" from the second look would have undone."""

from __future__ import annotations

from benchmarks.tool_choice_offline import summary


def row(expected: str | None, picked: str | None, fits: bool | None = None) -> dict[str, object]:
    found: dict[str, object] = {"expected": expected, "picked": picked, "decision_ms": 100}
    if fits is not None:
        found["fits"] = fits
    return found


def test_the_scores_and_what_the_second_look_would_change() -> None:
    rows = [
        row("set_timer", "set_timer", fits=True),
        row("set_alarm", "set_timer", fits=False),  # wrong, and rejected: still not right
        row(None, "lock_door", fits=False),  # no tool fits: the rejection makes it right
        row(None, None),
        row("set_timer", None),
        row("set_timer", "set_timer", fits=False),  # right, rejected: lost
    ]
    got = summary(rows, "dev", None, verify=True)
    assert got["right_tool_rate"] == round(3 / 6, 3)
    assert got["no_call_precision"] == 0.5 and got["no_fit_called"] == 1
    assert got["verify"] == {
        "rejected_right": 1, "rejected_wrong": 2, "right_tool_rate_after": round(3 / 6, 3)
    }  # fmt: skip
