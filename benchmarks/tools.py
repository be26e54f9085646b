"""Tool permissions (SPEC TOOL-2, TOOL-3): how long a decision takes, and how well the judge judges.

``python -m benchmarks.tools`` prints one JSON object::

    {"decision_ms": {"grant": {"p50", "p99"}, "cached": {…}, "judge": {…} | null},
     "judge_eval": {"pairs", "accuracy", "wrong_allows", "wrong_denies", "by_expected", …},
     "judge_heldout": {…}, "details": {…}}

- ``decision_ms.grant``: ``ToolDecider.decide`` answered by a grant — a role holding 200
  grants (other actions, other targets, a pinned-arguments allow) and the call's lifetime
  allow among them.
- ``decision_ms.cached``: no grant decides, the judgement cache answers (one active rule set).
- ``decision_ms.judge``: no grant, no cached judgement: the local model judges
  (``LanguageModelJudge`` on ``LocalJsonModel``, Qwen2.5-Coder-0.5B-Instruct, loaded and warmed
  up first, not timed) — every eval decision below that reached the judge; null with the reason
  when the model's packages are missing or with ``--no-llm``.
- ``judge_eval``: the judge over ``benchmarks/data/tool_judge_eval.jsonl`` (rules, request,
  expected allow/deny/none; Chinese and English). ``wrong_allows`` counts allows where the
  expected answer was deny or none — the failure that matters; ``wrong_denies`` the reverse.
- ``judge_heldout``: the same over ``tool_judge_heldout.jsonl``, never used to tune the prompt.

Stores: PostgreSQL when ``--database-url`` (or ``DATABASE_URL``) names a server where a
benchmark database may be created (made and dropped here); in memory otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import emit, p50_p99
from journal.events import ThreadRef
from tools.capability import Capability
from tools.decide import ToolDecider
from tools.grants import GrantedBy, GrantStore, InMemoryGrantStore, NewGrant
from tools.judge import Judge, JudgeLimits, LanguageModelJudge
from tools.judgements import InMemoryJudgementCache, Judgement, JudgementCache
from tools.rules import Author, InMemoryRuleStore, Rule, RuleStore

DATA = Path(__file__).parent / "data"
EVAL = DATA / "tool_judge_eval.jsonl"
HELDOUT = DATA / "tool_judge_heldout.jsonl"
THREAD = ThreadRef("bench", "user", "thread-1")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
PERSON = GrantedBy("person", "owner")


@dataclass(frozen=True, slots=True)
class Stores:
    grants: GrantStore
    rules: RuleStore
    judgements: JudgementCache
    backend: str


@contextlib.asynccontextmanager
async def stores(database_url: str | None) -> AsyncIterator[Stores]:
    if database_url is None:
        yield Stores(InMemoryGrantStore(), InMemoryRuleStore(), InMemoryJudgementCache(), "memory")
        return
    import asyncpg

    from benchmarks.journal import bench_database
    from runtime.migrations import apply_migrations
    from tools.postgres_grants import PostgresGrantStore
    from tools.postgres_rules import PostgresJudgementCache, PostgresRuleStore

    async with bench_database(database_url) as url:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2, command_timeout=60)
        try:
            await apply_migrations(pool, ["tools"])
            yield Stores(PostgresGrantStore(pool), PostgresRuleStore(pool),
                         PostgresJudgementCache(pool), "postgres")  # fmt: skip
        finally:
            await pool.close()


def pairs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def rules_of(pair: dict[str, Any]) -> list[Rule]:
    return [
        Rule(id=f"{pair['id']}-r{n}", tenant="bench", role_id="role", text=text,
             author=Author("person", "owner"), status="active", version=1, created_at=T0,
             updated_at=T0)
        for n, text in enumerate(pair["rules"], 1)
    ]  # fmt: skip


def capability_of(pair: dict[str, Any]) -> Capability:
    request = pair["request"]
    return Capability(request["action"], request["target"], request["arguments"])


class ScriptedJudge:
    """Answers at once (the cached and grant measurements never reach it)."""

    name = "scripted"

    async def judge(self, rules: Any, capability: Capability, *, lane: str) -> Judgement:
        return Judgement(effect="none", reason="scripted")


async def measure_grant(s: Stores, samples: int) -> list[float]:
    role = "grant-role"
    for n in range(200):
        await s.grants.create(THREAD.tenant, role, NewGrant(
            capability=Capability(f"tool_{n % 20}", f"target-{n}", {"n": n} if n % 3 else None),
            effect="deny" if n % 7 == 0 else "allow", scope="lifetime", granted_by=PERSON,
        ))  # fmt: skip
    call = Capability("lookup_order", "order-7", {"order_id": "order-7"})
    await s.grants.create(THREAD.tenant, role, NewGrant(
        capability=Capability("lookup_order", "*"), effect="allow", scope="lifetime",
        granted_by=PERSON,
    ))  # fmt: skip
    decider = ToolDecider(s.grants, s.rules, s.judgements, ScriptedJudge())
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        decision = await decider.decide(role, call, THREAD)
        times.append((time.perf_counter() - started) * 1000)
        assert decision.decided_by == "grant"
    return times


async def measure_cached(s: Stores, samples: int) -> list[float]:
    role = "cached-role"
    for text in ("The agent may look up orders.", "The agent must not cancel orders."):
        await s.rules.create(THREAD.tenant, role, text, Author("person", "owner"))
    decider = ToolDecider(s.grants, s.rules, s.judgements, ScriptedJudge())
    call = Capability("lookup_order", "order-7", {"order_id": "order-7"})
    await decider.decide(role, call, THREAD)  # fills the cache
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        decision = await decider.decide(role, call, THREAD)
        times.append((time.perf_counter() - started) * 1000)
        assert decision.cached
    return times


async def evaluate(
    s: Stores,
    judge: Judge,
    path: Path,
    judge_ms: list[float],
    limit: int | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Each pair through ``ToolDecider.decide`` (its rules on a role of its own, no grants, an
    empty cache), so every pair with rules is one judge decision; their times go to
    ``judge_ms``. Past ``deadline`` (``time.monotonic``) no new pair starts: ``pairs`` counts
    the pairs judged, ``pairs_in_file`` the file's."""
    in_file = pairs(path)[:limit]
    rows: list[dict[str, Any]] = []
    decider = ToolDecider(s.grants, s.rules, s.judgements, judge)
    wrong: list[dict[str, str]] = []
    confusion: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for pair in in_file:
        if deadline is not None and time.monotonic() > deadline:
            break
        rows.append(pair)
        role = f"{path.stem}-{pair['id']}"
        for text in pair["rules"]:
            await s.rules.create(THREAD.tenant, role, text, Author("person", "owner"))
        started = time.perf_counter()
        decision = await decider.decide(role, capability_of(pair), THREAD)
        elapsed = (time.perf_counter() - started) * 1000
        if pair["rules"]:
            judge_ms.append(elapsed)
        confusion[f"{pair['expected']}->{decision.effect}"] += 1
        if decision.failure:
            failures[decision.failure] += 1
        print(f"{path.stem} {pair['id']}: expected {pair['expected']}, got {decision.effect}"
              f" ({decision.failure or ''}) {elapsed:.0f} ms",
              file=sys.stderr, flush=True)  # fmt: skip
        if decision.effect != pair["expected"]:
            wrong.append({"id": pair["id"], "expected": pair["expected"],
                          "got": decision.effect})  # fmt: skip
    correct = len(rows) - len(wrong)
    return {
        "pairs": len(rows),
        "pairs_in_file": len(in_file),
        "accuracy": round(correct / len(rows), 3) if rows else None,
        "wrong_allows": sum(1 for w in wrong if w["got"] == "allow"),
        "wrong_denies": sum(1 for w in wrong if w["got"] == "deny"),
        "confusion": dict(sorted(confusion.items())),
        "no_decision_because": dict(failures),
        "wrong": wrong,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    database_url = args.database_url or os.environ.get("DATABASE_URL") or None
    details: dict[str, Any] = {}
    result: dict[str, Any] = {"decision_ms": {}, "judge_eval": None, "judge_heldout": None}
    async with stores(database_url) as s:
        details["stores"] = s.backend
        result["decision_ms"]["grant"] = p50_p99(await measure_grant(s, args.samples))
        result["decision_ms"]["cached"] = p50_p99(await measure_cached(s, args.samples))
        result["decision_ms"]["judge"] = None
        if args.no_llm:
            details["llm_skipped"] = "--no-llm"
        else:
            from plugins.brain.json_model import LocalJsonModel
            from plugins.brain.local_model import LocalModel, LocalModelSettings

            reason = LocalModel.unavailable_reason()
            if reason is not None:
                details["llm_skipped"] = reason
            else:
                model = LocalModel(
                    LocalModelSettings(start_deadline_s=120.0, max_generation_s=args.judge_timeout)
                )
                try:
                    await model.warm_up()
                    limits = JudgeLimits(timeout_s=args.judge_timeout)
                    judge = LanguageModelJudge(LocalJsonModel(model), name="local", limits=limits)
                    details["judge_timeout_s"] = args.judge_timeout
                    timed: list[float] = []
                    deadline = None if args.budget_s is None else time.monotonic() + args.budget_s
                    if not args.heldout_only:
                        result["judge_eval"] = await evaluate(s, judge, EVAL, timed, args.limit,
                                                              deadline)  # fmt: skip
                    if args.heldout:
                        result["judge_heldout"] = await evaluate(s, judge, HELDOUT, timed,
                                                                 deadline=deadline)  # fmt: skip
                    result["decision_ms"]["judge"] = p50_p99(timed)
                    details["judge_calls"] = len(timed)
                finally:
                    await model.aclose()
    result["details"] = details
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="server to create the benchmark database on")
    parser.add_argument("--samples", type=int, default=500, help="timed grant/cached decisions")
    parser.add_argument("--no-llm", action="store_true", help="skip the local model")
    parser.add_argument("--judge-timeout", type=float, default=300.0,
                        help="seconds per judge call (a loaded machine is slow; accuracy is "
                        "measured here, the runtime's default is 20 s)")  # fmt: skip
    parser.add_argument("--limit", type=int, help="only the first pairs of the main set")
    parser.add_argument("--heldout-only", action="store_true", help="skip the main set")
    parser.add_argument("--budget-s", type=float,
                        help="start no judge pair after this many seconds")  # fmt: skip
    parser.add_argument("--no-heldout", dest="heldout", action="store_false",
                        help="skip the held-out set (while tuning the prompt)")  # fmt: skip
    emit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
