"""The brain's evidence decision, question by question (issue 31 item 4; SPEC BRAIN-3, KB-5).

``python -m benchmarks.evidence_check [--split dev] [--show] [--report]`` prints one JSON
object::

    {"questions": {split: n}, "rule4": "judge" | "quote",
     split: {"false_dont_know", "unanswerable_admitted", "answer_first", "answer_shown",
             "answer_at": {...}, "causes": {...}},
     "curve": [{"weak_coverage", split: {"false_dont_know", "unanswerable_admitted"}}, ...]}

What is measured. ``benchmarks.relevance_calibration`` stops at the retrieval's hit; this goes
one step further, through the default brain's own decision on what it found: the passages as
the brain reads them (``grounding.passages``, ``in_focus``), the sentences it shows the model
(``LLMBrain.admitted_evidence``, Rule 5) and Rule 4's weak-evidence check with the real local
models (temperature 0: the same verdicts every run) — the 1.5B relevance judge
(``plugins.brain.relevance``) as the default brain has it, or with ``--quote`` the 0.5B model's
quote check it replaced (``"rule4"`` says which) — without the answer itself. Per split:

- ``false_dont_know`` — answerable questions (tag ``answerable``) the brain refuses: no hit,
  no sentence, or Rule 4's check;
- ``unanswerable_admitted`` — unanswerable questions whose evidence the brain answers from
  (its support check may still drop the model's sentences);
- ``answer_first`` / ``answer_shown`` — of the answerable questions admitted that name an
  expected answer (``contains_any``), the share whose first sentence shown holds it / any
  sentence shown does. The model answers from the first as often as not, and code reads the
  first when the model's sentences do not hold up: ``answer_first`` followed the conversation
  eval where ``answer_shown`` did not (a ranking that raised ``answer_shown`` on held_out and
  lowered ``answer_first`` lowered dev's pass rate, 0.919 → 0.867);
- ``answer_at`` — where the expected answer is among the passages found (``where``);
- ``causes`` — how each question was decided;
- ``curve`` — Rule 4's trade-off: the same questions refused when the check applies below
  each share of the question's words covered (``WEAK_COVERAGE``; 0: never checked, 1.01:
  every question the check may judge). Written to ``docs/reports/evidence_check.md`` with
  ``--report``.

The questions are the conversation eval's, read as ``relevance_calibration`` reads them
(memory questions left out), over every data file's documents at once. Rule 3's second search
(with the previous message) and Rule 8's computation are not run: the first needs the session,
the second is its own check. A turn's history is the person's earlier messages with a
placeholder for each answer, so a follow-up is searched as the brain searches it but
``in_focus`` has no cited source to keep to. About two minutes on this VM (one short model
call per question Rule 4 may judge); it reports no timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import emit
from benchmarks.relevance_calibration import TENANT, USER, bound_sets
from evals.checks import text_checks
from evals.scenario import Expect, Scenario
from knowledge.base import KnowledgeBase, KnowledgeLimits
from knowledge.store import InMemoryKnowledgeStore
from knowledge.tool import TOOL_NAME, format_hits
from pipeline.content import TurnContent
from plugins.brain.grounding import (
    Intent,
    Passage,
    Reading,
    best_sentences,
    coverage,
    in_focus,
    passages,
    read_turn,
)
from plugins.brain.llm import (
    WEAK_COVERAGE,
    LLMBrain,
    checked_evidence,
    judged_question,
    may_check,
)
from plugins.brain.local_model import LocalModel, LocalModelSettings
from plugins.brain.relevance import RelevanceJudge
from plugins.contracts import BrainInput, HistoryTurn, ToolResult
from plugins.embedding import E5Embedder

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "reports" / "evidence_check.md"
SHARES = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 1.01)
RULE4 = {
    "judge": "the 1.5B relevance judge, `plugins/brain/relevance.py`",
    "quote": "the 0.5B model's quote check, `--quote`",
}


@dataclass(frozen=True, slots=True)
class Asked:
    split: str
    role: str
    scenario: str
    request: BrainInput
    reading: Reading
    answerable: bool
    expect: Expect
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """One question as the brain decides it, and what Rule 4 would say at any share."""

    cause: str
    """``no_passage``, ``no_sentence``, ``weak_evidence`` or ``admitted``."""
    evidence: list[str]
    """The sentences shown to the model, when admitted."""
    found: list[Passage]
    covered: float | None = None
    """The share of the question's words the checked sentences cover (None: not judgeable)."""
    quote_holds: bool | None = None
    """Rule 4's verdict (None: the check may not judge this question)."""

    def refused_at(self, share: float) -> bool:
        if self.cause in ("no_passage", "no_sentence"):
            return True
        if self.covered is None or self.covered >= share:
            return False
        return not self.quote_holds


def asked(scenarios: list[Scenario], role: str) -> list[Asked]:
    """Every answerable or unanswerable question the brain searches (module doc)."""
    out = []
    for scenario in scenarios:
        for session in scenario.sessions:
            history: list[HistoryTurn] = []
            for turn in session.turns:
                request = TurnContent(
                    "", "", turn.text, language=scenario.role.language, history=tuple(history)
                ).to_brain_input(session=f"check-{scenario.id}")
                reading = read_turn(request)
                history += [HistoryTurn("user", turn.text), HistoryTurn("assistant", "…")]
                tags = set(turn.tags)
                if reading.intent is not Intent.QUESTION or not reading.query or "memory" in tags:
                    continue
                if "answerable" in tags or "unanswerable" in tags:
                    out.append(
                        Asked(
                            scenario.split,
                            role,
                            scenario.id,
                            request,
                            reading,
                            "answerable" in tags,
                            turn.expect,
                            turn.tags,
                        )
                    )
    return out


async def decide(brain: LLMBrain, knowledge: KnowledgeBase, question: Asked) -> Decision:
    """The brain's decision (``admitted_evidence`` with Rule 4 set aside, then Rule 4 as the
    brain applies it: on the two best sentences, in the same language, not a follow-up)."""
    reading = question.reading
    hits = await knowledge.search(TENANT, USER, reading.query or "", role_id=question.role)
    result = ToolResult(call_id="check", name=TOOL_NAME, content=format_hits(hits))
    found = passages([result]) if hits else []
    found = in_focus(reading.text, reading.language, question.request.history, found)
    if not found:
        return Decision("no_passage", [], [])
    session = question.request.session
    evidence = await brain.admitted_evidence(reading, found, session=session)
    if evidence is None:
        return Decision("no_sentence", [], found)
    checked = checked_evidence(reading.text, evidence, found)
    if not may_check(reading, checked):
        return Decision("admitted", [p.text for p in evidence], found)
    covered = coverage(judged_question(reading), checked)
    holds_up = await brain.evidence_answers(session, reading, checked)
    decision = Decision("admitted", [p.text for p in evidence], found, covered, holds_up)
    if decision.refused_at(WEAK_COVERAGE):
        return Decision("weak_evidence", [], found, covered, holds_up)
    return decision


def holds(text: str, expect: Expect) -> bool:
    """``text`` holds one of the turn's expected strings (the eval's own check)."""
    checks = text_checks(Expect(contains_any=expect.contains_any), text, [], None)
    return all(c.status == "passed" for c in checks)


def where(question: Asked, found: list[Passage]) -> str:
    """Where the expected answer is among the passages found: ``closest`` (the sentence
    closest in meaning), ``words1``/``words2``/``words3`` (the best sentences by shared words,
    Rule 5), ``passage`` (elsewhere in a passage), ``none``."""
    if not any(holds(p.text, question.expect) for p in found):
        return "none"
    if found[0].closest and holds(found[0].closest, question.expect):
        return "closest"
    for number, sentence in enumerate(best_sentences(question.reading.text, found, limit=3), 1):
        if holds(sentence.text, question.expect):
            return f"words{number}"
    return "passage"


def share(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 0.0


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    shown = [r for r in answerable if r["cause"] == "admitted" and r["answer_in"]]
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "false_dont_know": share(
            sum(r["cause"] != "admitted" for r in answerable), len(answerable)
        ),
        "unanswerable_admitted": share(
            sum(r["cause"] == "admitted" for r in unanswerable), len(unanswerable)
        ),
        "answer_first": share(sum(r["answer_in"][0] for r in shown), len(shown)),
        "answer_shown": share(sum(any(r["answer_in"]) for r in shown), len(shown)),
        "answer_at": dict(Counter(r["answer_at"] for r in answerable if r["answer_at"])),
        "causes": {
            "answerable": dict(Counter(r["cause"] for r in answerable)),
            "unanswerable": dict(Counter(r["cause"] for r in unanswerable)),
        },
    }


def curve(decided: list[tuple[Asked, Decision]], splits: list[str]) -> list[dict[str, Any]]:
    out = []
    for at in SHARES:
        row: dict[str, Any] = {"weak_coverage": at}
        for split in splits:
            mine = [(q, d) for q, d in decided if q.split == split]
            answerable = [d for q, d in mine if q.answerable]
            unanswerable = [d for q, d in mine if not q.answerable]
            row[split] = {
                "false_dont_know": share(
                    sum(d.refused_at(at) for d in answerable), len(answerable)
                ),
                "unanswerable_admitted": share(
                    sum(not d.refused_at(at) for d in unanswerable), len(unanswerable)
                ),
            }
        out.append(row)
    return out


async def main(splits: set[str] | None, show: bool, with_judge: bool = True) -> dict[str, Any]:
    embedder = E5Embedder.shared()
    knowledge = KnowledgeBase(
        InMemoryKnowledgeStore(), embedder=embedder, limits=KnowledgeLimits(max_documents=1000)
    )
    sets = await bound_sets(knowledge, splits)
    questions = [q for role, scenarios in sets for q in asked(scenarios, role)]
    judge = None
    if with_judge and RelevanceJudge.unavailable_reason() is None:
        judge = RelevanceJudge.local(LocalModelSettings(start_deadline_s=60.0, context_tokens=2048))
    brain = LLMBrain(
        LocalModel(LocalModelSettings(start_deadline_s=60.0)),
        check_weak_evidence=False,
        judge=judge,
    )
    await brain.warm_up()
    rows: list[dict[str, Any]] = []
    decided: list[tuple[Asked, Decision]] = []
    for question in questions:
        decision = await decide(brain, knowledge, question)
        decided.append((question, decision))
        checkable = question.answerable and bool(question.expect.contains_any)
        row = {
            "split": question.split,
            "scenario": question.scenario,
            "question": question.reading.text,
            "answerable": question.answerable,
            "tags": list(question.tags),
            "cause": decision.cause,
            "covered": decision.covered,
            "quote_holds": decision.quote_holds,
            "answer_at": where(question, decision.found) if checkable and decision.found else None,
            "answer_in": [holds(e, question.expect) for e in decision.evidence]
            if checkable
            else [],
            "evidence": decision.evidence,
        }
        rows.append(row)
        if show:
            print(json.dumps(row, ensure_ascii=False), flush=True)
    await brain.aclose()
    names = sorted({r["split"] for r in rows})
    result: dict[str, Any] = {
        "questions": {s: sum(r["split"] == s for r in rows) for s in names},
        "rule4": "judge" if judge is not None else "quote",
    }
    for split in names:
        result[split] = summary([r for r in rows if r["split"] == split])
    result["curve"] = curve(decided, names)
    return result


def write_report(result: dict[str, Any]) -> None:
    splits = [s for s in result["questions"]]
    lines = [
        "# The brain's evidence check (Rule 4): trade-off curve",
        "",
        "Generated by `python -m benchmarks.evidence_check --report` (its docstring says what is",
        "measured). Rule 4 here: " + RULE4[result.get("rule4", "judge")] + ".",
        "For each share of the question's words the evidence covers, below which Rule 4",
        "judges the evidence: `fdk`, answerable questions the brain refuses (a false \"don't",
        'know", whatever the cause: no passage, no sentence, the',
        "check); `ua`, unanswerable questions it answers from the evidence. 0 never checks;",
        "1.01 checks every question the check may judge (same language, not a follow-up).",
        f"Default: {WEAK_COVERAGE}. Questions: {result['questions']}.",
        "",
        "| share | " + " | ".join(f"{s} fdk | {s} ua" for s in splits) + " |",
        "|---|" + "---|---|" * len(splits),
    ]
    for row in result["curve"]:
        cells = " | ".join(
            f"{row[s]['false_dont_know']:.3f} | {row[s]['unanswerable_admitted']:.3f}"
            for s in splits
        )
        lines.append(f"| {row['weak_coverage']} | {cells} |")
    lines += ["", "Per split at the default:", ""]
    for split in splits:
        figures = {k: v for k, v in result[split].items() if k != "causes"}
        lines.append(f"- `{split}`: {json.dumps(figures, ensure_ascii=False)}")
    REPORT.write_text("\n".join(lines) + "\n", encoding="utf-8")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", action="append", help="only these splits (repeatable)")
    parser.add_argument("--show", action="store_true", help="print each question's decision")
    parser.add_argument("--report", action="store_true", help=f"write {REPORT.name}")
    parser.add_argument(
        "--quote", action="store_true", help="Rule 4 by the 0.5B model's quote, not the judge"
    )
    args = parser.parse_args()
    splits = set(args.split) if args.split else None
    result = asyncio.run(main(splits, args.show, with_judge=not args.quote))
    if args.report:
        write_report(result)
    emit(result)


if __name__ == "__main__":
    cli()
