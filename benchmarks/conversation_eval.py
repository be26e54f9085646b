"""Scripted conversations through the real server, checked by machine (SPEC BRAIN-1 … BRAIN-5,
BRAIN-7), run by ``openrealtime eval`` (``evals/``).

``python -m benchmarks.conversation_eval [--brains llm,rules] [--split dev|held_out|all]``
prints one JSON object::

    {"conversations", "turns", "pass_rate": {"dev", "held_out", "fresh"},
     "pass_rate_by_brain": {"dev": {"llm", "rules"}, …},
     "false_dont_know_rate", "unanswerable_answered_rate", "plugin_timeouts", "memory_recall",
     "followup_pass_rate", "cross_language_pass_rate", "combination_pass_rate",
     "ttft_ms": {"cold": {"p50", "p99"}, "warm": {"p50", "p99"}},
     "first_sentence_ms": {"warm": {"p50", "p99"}}, "queue_wait_ms": {"p50", "p99"},
     "tokens_per_s", "rss_mb", "prefix_cache", "failures", "failures_by_cause", "decisions"}

The sets are scenario files (``benchmarks/data/conversations/``, the format of
``evals/scenario.py``); a scenario's ``split`` says which set it is in: ``dev`` (tuned on),
``held_out`` (written before the tuning it measures, never tuned on) and ``fresh`` (written after
the work, run once with ``--split fresh``, then relabelled ``held_out``). Turns are tagged by
what they test (``evals.scenario.TAGS``); ``memory_recall`` and the ``*_pass_rate`` figures are
the pass rates of the ``llm`` brain's turns with that tag, every split run together.

A scenario has one or more *sessions*: each is a new voice session on a new thread of
the same user and role, so long-term memory carries over and history does not. Every scenario
gets its own role (memory is per user×role), with all its documents bound and memory on;
manual memory entries are added through the HTTP API first.

Each turn is typed text over the real WebSocket protocol (``evals.runner.Runner``) against the
real server (uvicorn, the real stores, knowledge with semantic recall, memory extraction), with
the brain under test; only TTS is an instant fake (answers are checked as text). The checks are
``evals.checks``'. ``false_dont_know_rate``: turns that expect an answer (``dont_know: false``
or text to contain) answered with a don't-know; ``unanswerable_answered_rate``: turns that
expect a don't-know answered otherwise (``llm`` only, both splits). Each failure carries
``causes``, the brain's trail for that turn (``plugins.brain.llm.CAUSES``, its Rule 12), and
``failures_by_cause`` counts the failures of the ``llm`` brain by the trail's last cause;
``decisions`` counts every turn's last cause, passed and failed, by what the turn expects
(``answerable``, ``unanswerable``, ``other``): how often a rule decided right, not only wrong.

Timing (``llm`` only; the model's own figures, from ``LocalModel``): ``ttft_ms.cold`` — the
first model call of each session (its prompt's prefix not yet cached), ``ttft_ms.warm`` — the
later ones; ``first_sentence_ms.warm`` — from the turn's commit to the first sentence handed to
TTS (``tts_first_audio`` of ``openrealtime.turn.latency``, TTS being instant) on warm model
turns; ``queue_wait_ms`` — waits in the model's queue; ``tokens_per_s`` — generation rate;
``prefix_cache`` — the share of prompt tokens taken from llama.cpp's cache on warm turns;
``rss_mb`` — this process's peak resident memory (the model loaded, server and client in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import emit, p50_p99, percentile
from evals.report import summary
from evals.runner import Runner, ScenarioResult, TurnResult, embedded_target
from evals.scenario import Scenario, Turn, load
from pipeline.engine import Plugins
from plugins.brain.grounding import says_dont_know
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.plugin_factory import build_plugins, warm_up

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "benchmarks" / "data" / "conversations"
SPLITS = ("dev", "held_out", "fresh")
TURN_TIMEOUT_S = 60.0
TAG_KEYS = {
    "memory": "memory_recall",
    "followup": "followup_pass_rate",
    "cross_language": "cross_language_pass_rate",
    "combination": "combination_pass_rate",
}
"""The figures per kind of turn (``llm``): the pass rate of the turns with that tag."""


def load_split(name: str) -> list[Scenario]:
    """The scenarios labelled ``split: name`` in every file of the sets."""
    return [s for s in load([SETS]) if s.split == name]


def expects_answer(turn: Turn) -> bool:
    e = turn.expect
    return e.dont_know is False or (e.dont_know is None and bool(e.contains_any or e.contains_all))


class Timing:
    """The model's figures per turn, read from the brain after each turn (``on_turn``)."""

    def __init__(self, brain: Any) -> None:
        self.brain = brain
        self.cold: list[float] = []
        self.warm: list[float] = []
        self.first_sentence_warm: list[float] = []
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self._model_turns: dict[tuple[str, int], int] = {}
        self.causes: dict[tuple[str, int, int], list[str]] = {}
        """Why each turn was answered as it was (``LLMBrain.decisions``, its Rule 12), by
        (conversation, session, turn): turns run one at a time, so the brain's decisions
        since the last turn are this one's."""

    def on_turn(self, scenario: Scenario, turn: Turn, result: TurnResult) -> None:
        decisions = getattr(self.brain, "decisions", None)
        if decisions is not None:
            self.causes[(scenario.id, result.session, result.index)] = [c for _, c in decisions]
            decisions.clear()
        generation = getattr(self.brain, "last_generation", None)
        if hasattr(self.brain, "last_generation"):
            self.brain.last_generation = None  # the next turn's, if it calls the model
        if generation is None or not generation.first_token_s:
            return
        key = (scenario.id, result.session)
        ms = generation.first_token_s * 1000
        if self._model_turns.get(key, 0) == 0:
            self.cold.append(ms)
        else:
            self.warm.append(ms)
            if result.marks.get("tts_first_audio") is not None:
                self.first_sentence_warm.append(result.marks["tts_first_audio"])
            if generation.timings is not None:
                t = generation.timings
                self.prompt_tokens += t.prompt_tokens + t.cached_tokens
                self.cached_tokens += t.cached_tokens
        self._model_turns[key] = self._model_turns.get(key, 0) + 1


async def run_scenarios(
    scenarios: list[Scenario], plugins: Plugins, timing: Timing
) -> list[ScenarioResult]:
    with tempfile.TemporaryDirectory(prefix="conversation-eval-") as data_dir:
        # One local user drives every conversation: lift the per-user live-session limit.
        settings = Settings(
            storage="memory", port=0, data_dir=Path(data_dir), max_live_sessions_per_user=10_000
        )
        async with embedded_target(settings=settings, plugins=plugins) as target:
            runner = Runner(
                target,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
                turn_timeout_s=TURN_TIMEOUT_S,
                on_turn=timing.on_turn,
            )
            return await runner.run(scenarios)


def eval_plugins(brain_name: str, options: dict[str, Any] | None = None) -> Plugins:
    """The brain under test as the server would build it; instant fakes for the rest.
    ``options`` set attributes of the brain (``--brain-option name=value``: variants)."""
    settings = Settings.model_validate({"brain": brain_name})
    brain = build_plugins(settings).brain
    for name, value in (options or {}).items():
        if hasattr(brain, name):
            setattr(brain, name, value)
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(),
        brain=brain,
        tts=FakeTTS(ms_per_char=1.0),
        endpointer=None,
    )


async def main(
    brains: list[str],
    splits: list[str],
    limit: int | None,
    only: set[str] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data: dict[str, list[Scenario]] = {}
    for name in splits:
        scenarios = load_split(name)
        if not scenarios:
            continue
        if only:
            scenarios = [s for s in scenarios if s.id in only]
        data[name] = scenarios[:limit] if limit is not None else scenarios
    every = [s for scenarios in data.values() for s in scenarios]
    result: dict[str, Any] = {
        "conversations": len(every),
        "turns": sum(s.turns for s in every),
        # The default brain's figure per split, as tools read it (``pass_rate.dev``); None for
        # a split not run or with no scenarios yet (``fresh`` until it is written).
        "pass_rate": {name: None for name in SPLITS},
        "pass_rate_by_brain": {name: {} for name in data},
        "failures": [],
    }
    timing = None
    stats = None
    for brain_name in brains:
        plugins = eval_plugins(brain_name, options)
        await warm_up(plugins)
        model = getattr(plugins.brain, "model", None)
        measured = Timing(plugins.brain)
        try:
            outcomes = await run_scenarios(every, plugins, measured)
        finally:
            if model is not None:
                stats = model.stats
                await model.aclose()
        if brain_name == "llm" or timing is None:
            timing = measured
        turns = {s.id: [t for se in s.sessions for t in se.turns] for s in every}
        for name, scenarios in data.items():
            ids = {s.id for s in scenarios}
            done = [t for o in outcomes if o.id in ids for t in o.turns]
            rate = sum(t.passed for t in done) / len(done) if done else None
            figure = None if rate is None else round(rate, 3)
            result["pass_rate_by_brain"][name][brain_name] = figure
            if brain_name == "llm" or (result["pass_rate"][name] is None and "llm" not in brains):
                result["pass_rate"][name] = figure
        answerable = unanswerable = false_dont_know = answered = timeouts = 0
        by_cause: dict[str, int] = {}
        decided: dict[str, dict[str, dict[str, int]]] = {}
        for outcome in outcomes:
            for turn, got in zip(turns[outcome.id], outcome.turns, strict=False):
                if got.error is not None and "plugin_timeout" in got.error:
                    timeouts += 1
                trail = measured.causes.get((outcome.id, got.session, got.index), [])
                kind = (
                    "answerable"
                    if expects_answer(turn)
                    else "unanswerable"
                    if turn.expect.dont_know is True
                    else "other"
                )
                last = trail[-1] if trail else "none"
                counts = decided.setdefault(kind, {}).setdefault(last, {"passed": 0, "failed": 0})
                counts["passed" if got.passed else "failed"] += 1
                if expects_answer(turn):
                    answerable += 1
                    false_dont_know += says_dont_know(got.answer)
                elif turn.expect.dont_know is True:
                    unanswerable += 1
                    answered += bool(got.answer.strip()) and not says_dont_know(got.answer)
                if not got.passed:
                    decisive = trail[-1] if trail else "error" if got.error else "unknown"
                    by_cause[decisive] = by_cause.get(decisive, 0) + 1
                    result["failures"].append(
                        {
                            "brain": brain_name,
                            "split": outcome.split,
                            "conversation": outcome.id,
                            "session": got.session,
                            "user": got.text,
                            "answer": got.answer or got.error,
                            "failed": [c.name for c in got.checks if c.status == "failed"]
                            + (["error"] if got.error else []),
                            "causes": trail,
                        }
                    )
        if brain_name == "llm":
            tags = summary(outcomes)["tags"]
            for tag, key in TAG_KEYS.items():
                result[key] = tags[tag]["pass_rate"] if tag in tags else None
            result["false_dont_know_rate"] = (
                round(false_dont_know / answerable, 3) if answerable else None
            )
            result["unanswerable_answered_rate"] = (
                round(answered / unanswerable, 3) if unanswerable else None
            )
            result["plugin_timeouts"] = timeouts
            result["failures_by_cause"] = dict(sorted(by_cause.items(), key=lambda kv: -kv[1]))
            result["decisions"] = decided
    assert timing is not None
    result["ttft_ms"] = {"cold": p50_p99(timing.cold), "warm": p50_p99(timing.warm)}
    result["first_sentence_ms"] = {"warm": p50_p99(timing.first_sentence_warm)}
    waits = list(stats.queue_waits_ms) if stats else []
    result["queue_wait_ms"] = p50_p99(waits)
    result["tokens_per_s"] = percentile(list(stats.tokens_per_s), 50) if stats else None
    result["prefix_cache"] = (
        round(timing.cached_tokens / timing.prompt_tokens, 3) if timing.prompt_tokens else None
    )
    result["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["model_turns"] = {"cold": len(timing.cold), "warm": len(timing.warm)}
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brains", default="llm,rules")
    parser.add_argument("--split", choices=[*SPLITS, "all"], default="all")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    parser.add_argument("--only", default="", help="comma-separated conversation ids")
    parser.add_argument(
        "--brain-option", action="append", default=[], help="NAME=JSON, e.g. source_prefill=false"
    )
    args = parser.parse_args()
    splits = ["dev", "held_out"] if args.split == "all" else [args.split]
    only = set(filter(None, args.only.split(","))) or None
    options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.brain_option)}
    result = asyncio.run(main(args.brains.split(","), splits, args.limit, only, options))
    if options:
        result["brain_options"] = options
    emit(result)


if __name__ == "__main__":
    cli()
