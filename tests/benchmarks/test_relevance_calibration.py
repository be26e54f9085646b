"""The calibration's questions are the ones the brain searches, searched as it searches them,
and its rates count what they say."""

from __future__ import annotations

from pathlib import Path

from benchmarks.relevance_calibration import Question, questions, rates
from evals.scenario import load_file

SCENARIO = """
documents:
  - name: Shop
    text: "Returns are accepted within 7 days."
scenarios:
  - id: shop
    split: dev
    role: {language: en}
    sessions:
      - turns:
          - user: "How long do I have to return a jacket?"
            tags: [answerable]
          - user: "And for shoes?"
            tags: [answerable, followup]
          - user: "I bought it last week."
            tags: [statement]
          - user: "What's my name?"
            tags: [memory, answerable]
          - user: "Do you sell gift cards?"
            tags: [unanswerable]
"""


def test_only_searched_questions_count_and_follow_ups_carry_the_previous_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "set.yaml"
    path.write_text(SCENARIO, encoding="utf-8")

    asked = questions(load_file(path), "role_0")

    assert [(q.text, q.answerable) for q in asked] == [
        ("How long do I have to return a jacket?", True),
        ("And for shoes?", True),
        ("Do you sell gift cards?", False),
    ]
    assert asked[1].query == "How long do I have to return a jacket? And for shoes?"


def test_rates_count_misses_of_answerable_and_hits_of_unanswerable() -> None:
    def q(text: str, answerable: bool) -> Question:
        return Question("dev", "r", text, answerable, "s", text)

    asked = [q("a1", True), q("a2", True), q("u1", False), q("u2", False)]
    hit = {asked[0]: True, asked[1]: False, asked[2]: True, asked[3]: False}

    figures = rates(hit, asked)

    assert (figures["false_dont_know"], figures["unanswerable_hit"]) == (0.5, 0.5)
    assert figures["errors"] == 1.0
