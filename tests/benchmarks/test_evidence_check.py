"""The evidence benchmark decides as the brain does, and its figures count what they say."""

from __future__ import annotations

from pathlib import Path

from benchmarks.evidence_check import TENANT, USER, Decision, asked, curve, decide, summary
from evals.scenario import load_file
from knowledge.base import KnowledgeBase
from knowledge.store import InMemoryKnowledgeStore
from plugins.brain.llm import LLMBrain
from tests.plugins.test_llm_brain import FakeModel

SCENARIO = """
documents:
  - name: Shop
    text: "Returns are accepted within 7 days of delivery. Shipping costs 5 euros. Gift
      wrapping is offered. Boxes are recycled."
scenarios:
  - id: shop
    split: dev
    role: {language: en}
    sessions:
      - turns:
          - user: "How many days do I have for returns after delivery?"
            tags: [answerable]
            expect: {contains_any: ["7 days"]}
          - user: "What's my name?"
            tags: [memory, answerable]
          - user: "Are gift boxes for returns shipped free?"
            tags: [unanswerable]
"""


async def test_a_question_is_decided_as_the_brain_decides_it(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    questions = asked(load_file(path), "role_0")
    assert [q.reading.text for q in questions] == [
        "How many days do I have for returns after delivery?",
        "Are gift boxes for returns shipped free?",
    ]
    knowledge = KnowledgeBase(InMemoryKnowledgeStore())
    text = (
        "Returns are accepted within 7 days of delivery. Shipping costs 5 euros. Gift "
        "wrapping is offered. Boxes are recycled."
    )
    await knowledge.add_document(TENANT, USER, name="Shop", text=text, role_ids=["role_0"])
    model = FakeModel(["NONE"])
    brain = LLMBrain(model, check_weak_evidence=False)  # type: ignore[arg-type]

    covered = await decide(brain, knowledge, questions[0])
    checked = await decide(brain, knowledge, questions[1])

    # Both are quoted (the curve needs every verdict); the model said NONE to both. The first
    # shares most of its words with the returns sentence: the brain would not check it.
    assert covered.cause == "admitted" and covered.quote_holds is False
    assert covered.covered is not None and covered.covered >= 0.5
    assert covered.evidence[0].startswith("Returns are accepted within 7 days")
    # The second's words are spread over the passage: the two best sentences cover under
    # half of them, and Rule 4 refuses it at the default share.
    assert checked.cause == "weak_evidence" and checked.quote_holds is False
    assert checked.covered is not None and checked.covered < 0.5
    assert not checked.evidence
    assert len(model.calls) == 2


def test_refusals_at_each_share_follow_the_check_and_the_search() -> None:
    nothing = Decision("no_passage", [], [])
    weak = Decision("admitted", ["s"], [], covered=0.4, quote_holds=False)
    quoted = Decision("admitted", ["s"], [], covered=0.2, quote_holds=True)
    unjudged = Decision("admitted", ["s"], [], covered=None, quote_holds=None)

    assert nothing.refused_at(0.0) and nothing.refused_at(1.01)
    assert not weak.refused_at(0.4) and weak.refused_at(0.5)
    assert not quoted.refused_at(1.01)
    assert not unjudged.refused_at(1.01)


def test_the_figures_count_refusals_admissions_and_where_the_answer_was_shown() -> None:
    def row(answerable: bool, cause: str, answer_in: list[bool]) -> dict[str, object]:
        return {
            "answerable": answerable,
            "cause": cause,
            "answer_in": answer_in,
            "answer_at": None,
        }

    rows = [
        row(True, "admitted", [True, False]),
        row(True, "admitted", [False, True]),
        row(True, "admitted", [False]),
        row(True, "weak_evidence", []),
        row(False, "admitted", []),
        row(False, "no_passage", []),
    ]

    figures = summary(rows)  # type: ignore[arg-type]

    assert figures["false_dont_know"] == 0.25
    assert figures["unanswerable_admitted"] == 0.5
    assert figures["answer_first"] == round(1 / 3, 3)
    assert figures["answer_shown"] == round(2 / 3, 3)


async def test_the_curve_moves_questions_between_the_two_errors(tmp_path: Path) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    answerable, unanswerable = asked(load_file(path), "role_0")
    decided = [
        (answerable, Decision("admitted", ["s"], [], covered=0.45, quote_holds=False)),
        (unanswerable, Decision("admitted", ["s"], [], covered=0.35, quote_holds=False)),
    ]

    rows = {row["weak_coverage"]: row["dev"] for row in curve(decided, ["dev"])}

    assert rows[0.0] == {"false_dont_know": 0.0, "unanswerable_admitted": 1.0}
    assert rows[0.4] == {"false_dont_know": 0.0, "unanswerable_admitted": 0.0}
    assert rows[0.5] == {"false_dont_know": 1.0, "unanswerable_admitted": 0.0}
