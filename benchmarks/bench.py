"""``make bench``: the quick benchmarks, their figures kept beside the commit that measured them,
compared with a committed baseline (SPEC OPS-5).

``python -m benchmarks.bench [--only NAME,…] [--baseline PATH] [--write-baseline]`` runs each
benchmark of ``RUNS`` as a process of its own, one after the other (never two at once: they share
the machine's cores), reads the one JSON object each prints and picks the figures of
``FIGURES``. It writes ``docs/benchmarks/latest.json``::

    {"commit", "dirty", "date", "machine": {"cpu", "cores", "load_average"},
     "figures": {name: value}, "runs": {benchmark: {"seconds", "argv", "error"?}}}

then compares each figure with ``docs/benchmarks/baseline.json`` (the same shape) and prints a
table: figure, baseline, now, ratio, verdict. A figure is *worse* when it moved the wrong way by
more than its tolerance: for a time or a count where lower is better, now > baseline × tolerance
(and, for a figure whose baseline is 0 — failures, frames after an interruption — now > its
``slack``); for a rate or a capacity, now < baseline / tolerance. The default tolerance is 1.5×.
The exit status is 1 when a figure is worse or a benchmark failed, else 0. ``--write-baseline``
makes the run the new baseline (after a change that is meant to move a figure, reviewed in the
diff). The README's benchmark table is generated from these files (``benchmarks.readme_table``,
``make bench-readme``), never typed.

A figure is only true for the commit and the machine that measured it: both are in the file,
and the load average is there to say how quiet the machine was.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks"
LATEST = DOCS / "latest.json"
BASELINE = DOCS / "baseline.json"
DEFAULT_TOLERANCE = 1.5
RUN_TIMEOUT_S = 1_800


@dataclasses.dataclass(frozen=True)
class Run:
    """One benchmark process: ``python -m benchmarks.<module> <args>``."""

    name: str
    module: str
    args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure: where it is in a run's JSON (keys joined by dots), which way is better."""

    name: str
    run: str
    path: str
    better: Literal["lower", "higher"] = "lower"
    tolerance: float = DEFAULT_TOLERANCE
    slack: float = 0.0
    """How far a figure whose baseline is 0 may rise (failures: 0)."""
    label: str = ""


RUNS = (
    Run("turn_overhead_1", "turn_overhead",
        ("--sessions", "1", "--turns", "10", "--skip-pipecat")),
    Run("turn_overhead_50", "turn_overhead",
        ("--sessions", "50", "--turns", "10", "--skip-pipecat")),
    Run("capacity", "capacity", ("--steps", "25,50,100,150,200,250", "--duration", "8",
                                 "--skip-pipecat")),
    Run("resume", "resume", ("--turns", "200")),
    Run("journal", "journal", ("--samples", "100", "--appends-one", "500", "--appends-each", "50")),
    Run("memory", "memory", ("--users", "100", "--samples", "200", "--pool-entries", "2000",
                             "--pool-samples", "50", "--pool-purges", "5")),
    Run("voice_latency", "voice_latency", ("--turns", "10")),
    Run("echo", "echo", ("--seeds", "1,2", "--cases", "40", "--stress-cases", "10")),
)  # fmt: skip

FIGURES = (
    Figure("turn_overhead.1.server_p50_ms", "turn_overhead_1", "server_side_turn_overhead_ms.p50",
           label="1 session, server side commit → first audio p50 (ms)"),
    Figure("turn_overhead.1.p50_ms", "turn_overhead_1", "turn_overhead_ms.p50",
           label="1 session, commit → first audio at the client p50 (ms)"),
    Figure("turn_overhead.50.p50_ms", "turn_overhead_50", "turn_overhead_ms.p50",
           label="50 sessions, commit → first audio p50 (ms)"),
    Figure("turn_overhead.50.p99_ms", "turn_overhead_50", "turn_overhead_ms.p99",
           label="50 sessions, commit → first audio p99 (ms)"),
    Figure("turn_overhead.50.failures", "turn_overhead_50", "failures", slack=0,
           label="50 sessions, turns without audio (binary)"),
    Figure("turn_overhead.50.ga_p50_ms", "turn_overhead_50", "ga.turn_overhead_ms.p50",
           label="50 sessions, plain GA protocol p50 (ms)"),
    Figure("turn_overhead.50.ga_failures", "turn_overhead_50", "ga.failures", slack=0,
           label="50 sessions, turns without audio (plain GA)"),
    Figure("bargein.output_stop_p99_ms", "turn_overhead_50", "bargein_output_stop_ms.p99",
           tolerance=2.0, slack=20, label="barge-in: crossing frame → answer paused p99 (ms)"),
    Figure("bargein.confirmed_p50_ms", "turn_overhead_50", "bargein_confirmed_ms.p50",
           label="barge-in: crossing frame → interruption confirmed p50 (ms)"),
    Figure("bargein.frames_after_interrupt", "turn_overhead_50", "frames_after_interrupt",
           slack=0, label="audio frames after an interruption"),
    Figure("capacity.max_sessions", "capacity", "max_sessions", better="higher",
           label="sessions one process carries within +50 ms p99"),
    Figure("capacity.cpu_ms_per_session_s", "capacity", "cpu_ms_per_session_s",
           label="server CPU per conversing session-second (ms)"),
    Figure("resume.p99_ms", "resume", "resume_ms.p99", label="resume p99 (ms)"),
    Figure("resume.lost_events", "resume", "lost_events", slack=0, label="events lost"),
    Figure("journal.append_p99_ms", "journal", "append_latency_ms.one_thread.p99",
           label="journal append p99, one thread (ms)"),
    Figure("journal.projection_10000_p99_ms", "journal", "projection_ms.10000.p99",
           label="history projection of a 10,000-event thread p99 (ms)"),
    Figure("memory.inject_p99_ms", "memory", "inject_ms.p99",
           label="memory injection read p99 (ms)"),
    Figure("voice_latency.p50_ms", "voice_latency", "end_of_speech_to_first_audio_ms.p50",
           tolerance=1.3, label="end of speech → first audio p50 (ms), local model"),
    Figure("voice_latency.p99_ms", "voice_latency", "end_of_speech_to_first_audio_ms.p99",
           label="end of speech → first audio p99 (ms), local model"),
    Figure("voice_latency.model_p50_ms", "voice_latency",
           "model_end_of_speech_to_first_audio_ms.p50", tolerance=1.3,
           label="end of speech → first audio p50 (ms), questions the model answers"),
    Figure("echo.self_interruptions", "echo", "self_interruptions", slack=0,
           label="echo: self-interruptions"),
    Figure("echo.caught_rate", "echo", "bargein_over_echo_caught_rate", better="higher",
           tolerance=1.05, label="echo: barge-in over echo caught"),
)  # fmt: skip


def pick(data: Any, path: str) -> float | None:
    """The number at ``path`` (keys joined by dots), or None."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return float(data) if isinstance(data, int | float) and not isinstance(data, bool) else None


def verdict(figure: Figure, baseline: float | None, now: float | None) -> str:
    """``ok``, ``worse``, ``better``, ``new`` (no baseline) or ``missing`` (not measured)."""
    if now is None:
        return "missing"
    if baseline is None:
        return "new"
    if figure.better == "lower":
        if baseline == 0:
            return "worse" if now > figure.slack else "ok"
        if now > baseline * figure.tolerance and now - baseline > figure.slack:
            return "worse"
        return "better" if now < baseline / figure.tolerance else "ok"
    if now < baseline / figure.tolerance:
        return "worse"
    return "better" if now > baseline * figure.tolerance else "ok"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with_info = Path("/proc/cpuinfo")
    if with_info.exists():
        for line in with_info.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


def commit() -> tuple[str, bool]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    # The figures' own files (a partial run after a full one) and the README's table are no
    # change to the code measured.
    changed = git("status", "--porcelain", "--", ".", ":!docs/benchmarks", ":!README.md")
    return git("rev-parse", "--short", "HEAD"), bool(changed)


def run_one(run: Run) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    argv = [sys.executable, "-m", f"benchmarks.{run.module}", *run.args]
    started = time.monotonic()
    info: dict[str, Any] = {"argv": argv[1:]}
    try:
        done = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        info |= {"seconds": round(time.monotonic() - started, 1), "error": "timed out"}
        return None, info
    info["seconds"] = round(time.monotonic() - started, 1)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        info["error"] = f"exit {done.returncode}: {done.stderr.strip()[-500:]}"
        return None, info
    try:
        return json.loads(lines[-1]), info
    except ValueError:
        info["error"] = "the last line is not JSON"
        return None, info


def table(figures: list[Figure], base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    rows = [f"{'figure':44} {'baseline':>10} {'now':>10} {'ratio':>7}  verdict"]
    for figure in figures:
        b, n = base.get(figure.name), now.get(figure.name)
        ratio = f"{n / b:.2f}" if b not in (None, 0) and n is not None else "-"
        rows.append(
            f"{figure.name:44} {_fmt(b):>10} {_fmt(n):>10} {ratio:>7}  {verdict(figure, b, n)}"
        )
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="", help="comma-separated run names (default: all)")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--write-baseline", action="store_true")
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    runs = [r for r in RUNS if not only or r.name in only]
    head, dirty = commit()
    figures: dict[str, float | None] = {}
    infos: dict[str, Any] = {}
    failed = False
    for run in runs:
        print(f"running {run.name} …", file=sys.stderr, flush=True)
        data, info = run_one(run)
        infos[run.name] = info
        failed |= data is None
        for figure in FIGURES:
            if figure.run == run.name:
                figures[figure.name] = pick(data, figure.path) if data is not None else None
    result: dict[str, Any] = {
        "commit": head,
        "dirty": dirty,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "figures": figures,
        "runs": infos,
    }
    if only and LATEST.exists():  # a partial run keeps the other figures of the last one
        previous = json.loads(LATEST.read_text())
        result["figures"] = {**previous.get("figures", {}), **figures}
        result["runs"] = {**previous.get("runs", {}), **infos}
    DOCS.mkdir(parents=True, exist_ok=True)
    LATEST.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    if args.write_baseline:
        args.baseline.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    base = (
        json.loads(args.baseline.read_text()).get("figures", {}) if args.baseline.exists() else {}
    )
    chosen = [f for f in FIGURES if f.run in {r.name for r in runs}]
    print("\n".join(table(chosen, base, result["figures"])))
    worse = [f.name for f in chosen if verdict(f, base.get(f.name), figures.get(f.name)) == "worse"]
    if worse:
        print(f"worse than the baseline: {', '.join(worse)}", file=sys.stderr)
    if failed:
        errors = {k: v["error"] for k, v in infos.items() if "error" in v}
        print(f"benchmarks that failed: {errors}", file=sys.stderr)
    sys.exit(1 if worse or failed else 0)


if __name__ == "__main__":
    main()
