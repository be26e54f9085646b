"""``openrealtime eval SCENARIOS…`` (SPEC EVAL-1): run scenario files, write the reports, exit
non-zero when a turn failed — for CI.

Exit codes: 0 every turn passed; 1 some turn or scenario failed; 2 the scenario files or the
target could not be used (nothing was judged).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from evals.checks import JUDGE_SCHEMA, Judge, judge_messages, parse_verdict
from evals.report import report, write_html, write_json
from evals.runner import Runner, ScenarioResult, Target, embedded_target, url_target
from evals.scenario import Scenario, ScenarioError, load


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run scenario files against a server (an embedded one by default)",
        description="Run scenario files (YAML/JSON) against a server and write JSON and HTML "
        "reports; exits 1 when a turn fails. See evals/scenario.py for the format.",
    )
    p.add_argument("scenarios", nargs="+", type=Path, help="scenario files or directories")
    p.add_argument("--url", help="a running server (default: an embedded one, the default stack)")
    p.add_argument("--token", help="bearer token for --url (default: $OPENREALTIME_TOKEN)")
    p.add_argument("--out", type=Path, default=Path("eval-report"), help="report directory")
    p.add_argument(
        "--judge",
        choices=["local", "none"],
        default="local",
        help="the model judge of `judge` checks: the local model, or none (those checks are "
        "reported skipped)",
    )
    p.add_argument(
        "--storage",
        choices=["memory", "postgres"],
        default="memory",
        help="the embedded server's storage (postgres: OPENREALTIME_DATABASE_URL or embedded)",
    )
    p.add_argument("--session-gap", type=float, default=0.3, help="seconds between sessions")
    p.add_argument("--turn-timeout", type=float, default=90.0, help="seconds a turn may take")
    p.add_argument("--keep", action="store_true", help="keep the roles and documents created")


def run(args: argparse.Namespace) -> int:
    try:
        scenarios = load(args.scenarios)
    except ScenarioError as e:
        print(f"openrealtime eval: {e}", file=sys.stderr)
        return 2
    token = args.token or os.environ.get("OPENREALTIME_TOKEN", "")
    if args.url and not token:
        print("openrealtime eval: --url needs --token or OPENREALTIME_TOKEN", file=sys.stderr)
        return 2
    try:
        results = asyncio.run(_run(args, scenarios, token))
    except (OSError, httpx.TransportError) as e:
        print(f"openrealtime eval: cannot reach the server: {e}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    data = report(results)
    write_json(args.out / "report.json", data)
    write_html(args.out / "report.html", results, scenarios, target=args.url or "embedded server")
    s = data["summary"]
    print(
        f"{s['turns_passed']}/{s['turns']} turns passed ({s['scenarios_passed']}/"
        f"{s['scenarios']} scenarios); report: {args.out / 'report.html'}",
        file=sys.stderr,
    )
    return 0 if s["turns_passed"] == s["turns"] and not s["setup_errors"] else 1


async def _run(
    args: argparse.Namespace, scenarios: list[Scenario], token: str
) -> list[ScenarioResult]:
    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    target_cm = url_target(args.url, token) if args.url else embedded_target(storage=args.storage)
    needs_judge = any(t.expect.judge for s in scenarios for se in s.sessions for t in se.turns)
    async with target_cm as target:
        async with _judge(args.judge if needs_judge else "none", target) as judge:
            runner = Runner(
                target,
                judge=judge,
                progress=progress,
                session_gap_s=args.session_gap,
                turn_timeout_s=args.turn_timeout,
                keep=args.keep,
            )
            return await runner.run(scenarios)


@contextlib.asynccontextmanager
async def _judge(kind: str, target: Target) -> AsyncIterator[Judge | None]:
    """The local model as judge: the embedded server's own, or one loaded here."""
    if kind == "none":
        yield None
        return
    from plugins.brain.json_model import LocalJsonModel
    from plugins.brain.local_model import LocalModel, LocalModelSettings, local_model_of

    model = None
    if target.embedded is not None:
        model = local_model_of(target.embedded.services.plugins.brain)
    own = model is None
    if model is None:
        model = LocalModel(LocalModelSettings())
    json_model = LocalJsonModel(model)

    async def judge(criterion: str, question: str, answer: str) -> tuple[bool, str]:
        text = await json_model.complete_json(
            judge_messages(criterion, question, answer),
            JUDGE_SCHEMA,
            max_tokens=120,
            lane="eval-judge",
        )
        return parse_verdict(text)

    try:
        yield judge
    finally:
        if own:
            await model.aclose()
