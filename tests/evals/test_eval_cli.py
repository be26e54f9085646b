"""``openrealtime eval`` on the default stack, as a user runs it from a fresh clone: the
example scenarios against an embedded server with the real local model, Piper and Whisper (the
spoken turn goes through the server's VAD and ASR), the local model as judge; both reports
written. Model quality is the eval's business, not this test's: it asserts that every turn
was run, answered and checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_runs_on_the_default_stack_and_writes_both_reports(tmp_path: Path) -> None:
    out = tmp_path / "report"
    run = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "eval", str(ROOT / "examples" / "evals"),
         "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr[-3000:]
    assert "turns passed" in run.stderr.splitlines()[-1]
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    summary = data["summary"]
    assert (summary["scenarios"], summary["turns"], summary["errors"]) == (2, 7, 0)
    assert run.returncode == (0 if summary["turns_passed"] == 7 else 1)
    turns = [t for s in data["scenarios"] for t in s["turns"]]
    assert all(t["answer"].strip() for t in turns)
    assert all(t["first_ms"] is not None and t["first_ms"] > 0 for t in turns)
    (spoken,) = [t for t in turns if t["spoken"]]
    assert "saturday" in (spoken["heard"] or "").lower()  # Whisper heard Piper
    judged = [c for t in turns for c in t["checks"] if c["name"] == "judge"]
    assert len(judged) == 1 and judged[0]["status"] in ("passed", "failed")
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "bike-shop-answers" in page and "heard:" in page


def test_a_bad_scenario_file_exits_2_naming_the_place(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sessions: [{turns: [{usr: hi}]}]\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "eval", str(bad)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2
    assert "sessions[0].turns[0]: unknown key(s) usr" in run.stderr
    assert not (tmp_path / "eval-report").exists()


def test_a_url_without_a_token_exits_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "eval", str(ROOT / "examples" / "evals"),
         "--url", "http://127.0.0.1:9"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert run.returncode == 2 and "--url needs --token" in run.stderr


def test_an_unreachable_url_exits_2(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "runtime.cli", "eval", str(ROOT / "examples" / "evals"),
         "--url", "http://127.0.0.1:9", "--token", "t", "--judge", "none"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2 and "cannot reach the server" in run.stderr
