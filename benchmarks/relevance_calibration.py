"""The relevance decision, calibrated (issue 31 item 4; SPEC KB-4, KB-5).

``python -m benchmarks.relevance_calibration`` prints one JSON object::

    {"turns": {"dev": …, "held_out": …}, "default": {"dev": {…}, "held_out": {…}},
     "chosen": {…}, "curve": [{"margin", "min_coverage", "dev": {…}, "held_out": {…}}, …]}

and writes the trade-off curve to ``docs/reports/relevance_calibration.md``.

What is decided. Whether the documents answer a question is decided in code, first by the
retrieval (``knowledge.retrieval``): a chunk qualifies when it covers ``min_coverage`` of the
question's weight (lexical side), or beats the question's baseline similarity by the semantic
``margin`` (semantic side, with Rules 4b–4e). No qualifying chunk → the agent says its
documents do not say. Both knobs trade the two errors against each other:

- ``false_dont_know`` — of the *answerable* questions (tag ``answerable``), the share that got
  no hit at all (the brain's Rule 3: "my documents don't say");
- ``unanswerable_hit`` — of the *unanswerable* ones (tag ``unanswerable``), the share that got
  a hit (the brain then answers from it unless its later checks refuse).

How. The questions are the conversation eval's (``benchmarks/data/conversations``): every turn
the default brain reads as a question (``plugins.brain.grounding.read_turn``, with its session's
earlier turns as history, so a follow-up is searched as the brain searches it — with the
previous message), labelled answerable or unanswerable, memory questions left out. Each data
file's documents are ingested through ``KnowledgeBase`` (chunks, embeddings) and bound to one
role, as the eval binds them; each question is embedded once, then searched over a grid of the
two knobs (the same index and vectors). The setting is chosen on ``dev`` alone — the fewest
errors of both kinds, each rate weighted equally — and then read off ``held_out``, which was
not looked at to choose it.

What it does not measure: the later checks (the brain's weak-evidence quote, the answer's
support check) and the model's answer — ``benchmarks.conversation_eval`` does. A hit on an
unanswerable question is where a wrong answer can start, not a wrong answer.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit
from evals.scenario import Scenario, load_file
from knowledge.base import DEFAULT_SEMANTIC_MARGIN, KnowledgeBase, KnowledgeLimits
from knowledge.retrieval import DEFAULT_MIN_COVERAGE, DEFAULT_SPECIFICITY
from knowledge.store import InMemoryKnowledgeStore
from pipeline.content import TurnContent
from plugins.brain.grounding import Intent, read_turn
from plugins.contracts import HistoryTurn
from plugins.embedding import REFERENCE_LANGUAGES, E5Embedder
from plugins.text import parse_query

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "benchmarks" / "data" / "conversations"
REPORT = ROOT / "docs" / "reports" / "relevance_calibration.md"
TENANT, USER = "calibration", "calibration-user"
MARGINS = (-0.01, 0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08)
COVERAGES = (0.4, 0.5, 0.6, 0.7)


@dataclass(frozen=True, slots=True)
class Question:
    split: str
    role: str
    query: str
    answerable: bool
    scenario: str
    text: str


def questions(scenarios: list[Scenario], role: str) -> list[Question]:
    """Every turn the default brain searches, as it searches it (module doc)."""
    out = []
    for scenario in scenarios:
        language = scenario.role.language
        for session in scenario.sessions:
            history: list[HistoryTurn] = []
            for turn in session.turns:
                request = TurnContent(
                    "", "", turn.text, language=language, history=tuple(history)
                ).to_brain_input(session="calibration")
                reading = read_turn(request)
                history += [HistoryTurn("user", turn.text), HistoryTurn("assistant", "…")]
                tags = set(turn.tags)
                if reading.intent is not Intent.QUESTION or not reading.query or "memory" in tags:
                    continue
                if "answerable" in tags or "unanswerable" in tags:
                    answerable = "answerable" in tags
                    out.append(
                        Question(
                            scenario.split, role, reading.query, answerable, scenario.id, turn.text
                        )
                    )
    return out


def rates(hit: dict[Question, bool], asked: list[Question]) -> dict[str, Any]:
    answerable = [q for q in asked if q.answerable]
    unanswerable = [q for q in asked if not q.answerable]
    missed = sum(not hit[q] for q in answerable)
    wrongly = sum(hit[q] for q in unanswerable)
    fdk = missed / len(answerable) if answerable else 0.0
    uh = wrongly / len(unanswerable) if unanswerable else 0.0
    return {
        "false_dont_know": round(fdk, 3),
        "unanswerable_hit": round(uh, 3),
        "errors": round(fdk + uh, 3),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
    }


async def bound_sets(
    knowledge: KnowledgeBase, splits: set[str] | None = None
) -> list[tuple[str, list[Scenario]]]:
    """Every data file's scenarios (those of ``splits``; all when None), each file with the role
    its documents are bound to, as the eval binds them; every document is added to
    ``knowledge`` once, bound to each role whose file uses it."""
    out = []
    documents: dict[str, tuple[str, list[str]]] = {}  # name → text, the roles bound to it
    for number, path in enumerate(sorted(SETS.glob("*.json"))):
        scenarios = [s for s in load_file(path) if splits is None or s.split in splits]
        role = f"role_{number}"
        for document in {d.name: d for s in scenarios for d in s.documents}.values():
            documents.setdefault(document.name, (document.text, []))[1].append(role)
        out.append((role, scenarios))
    for name, (text, roles) in documents.items():
        await knowledge.add_document(TENANT, USER, name=name, text=text, role_ids=roles)
    return out


async def main() -> dict[str, Any]:
    embedder = E5Embedder.shared()
    knowledge = KnowledgeBase(
        InMemoryKnowledgeStore(), embedder=embedder, limits=KnowledgeLimits(max_documents=1000)
    )
    sets = await bound_sets(knowledge)
    asked = [q for role, scenarios in sets for q in questions(scenarios, role)]
    index = await knowledge.index(TENANT, USER)
    reference = await embedder.reference()
    vectors = {q.query: await embedder.query(q.query) for q in asked}
    splits = sorted({q.split for q in asked})
    curve = []
    for margin in MARGINS:
        for min_coverage in COVERAGES:
            hit = {}
            for q in asked:
                vector = vectors[q.query]
                found = index.search(
                    parse_query(q.query),
                    vector,
                    role_id=q.role,
                    limit=3,
                    min_coverage=min_coverage,
                    semantic_floor=float(np.max(reference @ vector)) + margin,
                    specificity=DEFAULT_SPECIFICITY,
                    reference=reference,
                    reference_languages=REFERENCE_LANGUAGES,
                )
                hit[q] = bool(found)
            row: dict[str, Any] = {"margin": margin, "min_coverage": min_coverage}
            for split in splits:
                row[split] = rates(hit, [q for q in asked if q.split == split])
            curve.append(row)
    default = next(
        r
        for r in curve
        if r["margin"] == DEFAULT_SEMANTIC_MARGIN and r["min_coverage"] == DEFAULT_MIN_COVERAGE
    )
    chosen = min(curve, key=lambda r: (r["dev"]["errors"], r["margin"] != default["margin"]))
    result = {
        "turns": {s: sum(q.split == s for q in asked) for s in splits},
        "default": {s: default[s] for s in splits}
        | {"margin": DEFAULT_SEMANTIC_MARGIN, "min_coverage": DEFAULT_MIN_COVERAGE},
        "chosen": chosen,
        "curve": curve,
    }
    write_report(result, splits)
    return result


def write_report(result: dict[str, Any], splits: list[str]) -> None:
    lines = [
        "# The relevance decision: trade-off curve",
        "",
        "Generated by `python -m benchmarks.relevance_calibration` (see its docstring for what is",
        'measured). `fdk`: answerable questions with no hit (a false "don\'t know"); `uh`:',
        "unanswerable questions with a hit. The setting is chosen on `dev` alone.",
        "",
        f"Questions: {result['turns']}. Default: margin {result['default']['margin']}, "
        f"min coverage {result['default']['min_coverage']}. Chosen on dev: margin "
        f"{result['chosen']['margin']}, min coverage {result['chosen']['min_coverage']}.",
        "",
        "| margin | min coverage | " + " | ".join(f"{s} fdk | {s} uh" for s in splits) + " |",
        "|---|---|" + "---|---|" * len(splits),
    ]
    for row in result["curve"]:
        cells = " | ".join(
            f"{row[s]['false_dont_know']:.3f} | {row[s]['unanswerable_hit']:.3f}" for s in splits
        )
        lines.append(f"| {row['margin']} | {row['min_coverage']} | {cells} |")
    lines += ["", *reading(result), "", *DECISION]
    REPORT.write_text("\n".join(lines) + "\n", encoding="utf-8")


DECISION = [
    "## Decision",
    "",
    "The retrieval's two knobs cannot meet both targets: every setting that keeps false \"don't",
    'know" near 5 % leaves most unanswerable questions with hits, and the fewest hits cost',
    'several times the false "don\'t know" target. The setting with the fewest errors on dev',
    "also has fewer on held_out than the default, but it moves errors from unanswerable",
    "questions to answerable ones, which are four times as many in conversation; the default",
    "stays. What separates the two kinds after retrieval is the brain's checks (weak evidence,",
    "answer support): measured end to end by `benchmarks.conversation_eval`.",
]

FALSE_DONT_KNOW_TARGET = 0.05
UNANSWERED_TARGET = 0.10


def reading(result: dict[str, Any]) -> list[str]:
    """What the curve says against issue 31's targets (computed, not typed)."""
    curve = result["curve"]

    def show(row: dict[str, Any]) -> str:
        dev, held = row["dev"], row.get("held_out", row["dev"])
        return (
            f"margin {row['margin']}, min coverage {row['min_coverage']}: dev "
            f"{dev['false_dont_know']:.3f} / {dev['unanswerable_hit']:.3f}, held_out "
            f"{held['false_dont_know']:.3f} / {held['unanswerable_hit']:.3f}"
        )

    both = [
        r
        for r in curve
        if r["dev"]["false_dont_know"] <= FALSE_DONT_KNOW_TARGET
        and r["dev"]["unanswerable_hit"] <= UNANSWERED_TARGET
    ]
    low_fdk = [r for r in curve if r["dev"]["false_dont_know"] <= FALSE_DONT_KNOW_TARGET]
    out = ["## Reading (fdk / uh)", ""]
    out.append(
        f"- Settings meeting both targets on dev (fdk ≤ {FALSE_DONT_KNOW_TARGET}, uh ≤ "
        f"{UNANSWERED_TARGET}): {len(both)}."
    )
    if low_fdk:
        best = min(low_fdk, key=lambda r: r["dev"]["unanswerable_hit"])
        out.append(f"- Fewest unanswerable hits with fdk ≤ {FALSE_DONT_KNOW_TARGET}: {show(best)}.")
    fewest = min(curve, key=lambda r: (r["dev"]["unanswerable_hit"], r["dev"]["false_dont_know"]))
    out.append(f"- Fewest unanswerable hits at all: {show(fewest)}.")
    out.append(f"- Fewest errors of both kinds on dev (chosen): {show(result['chosen'])}.")
    default = {
        "margin": result["default"]["margin"],
        "min_coverage": result["default"]["min_coverage"],
    }
    default |= {k: v for k, v in result["default"].items() if isinstance(v, dict)}
    out.append(f"- Default: {show(default)}.")
    return out


def cli() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    emit(asyncio.run(main()))


if __name__ == "__main__":
    cli()
