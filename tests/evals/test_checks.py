"""The checks of a turn (``evals/checks.py``)."""

from __future__ import annotations

from evals.checks import CheckResult, ToolCall, judge_check, parse_verdict, text_checks
from evals.scenario import Expect, ToolExpectation


def statuses(results: list[CheckResult]) -> dict[str, str]:
    return {r.name: r.status for r in results}


def test_text_matches_ignore_case_and_white_space() -> None:
    expect = Expect(contains_any=["7 Days"], contains_all=["refund", "退款"], contains_none=["90"])
    ok = text_checks(expect, "Your REFUND (退款) takes 7days.", [], None)
    assert statuses(ok) == {"contains_any": "passed", "contains_all": "passed",
                            "contains_none": "passed"}  # fmt: skip
    bad = text_checks(expect, "It takes 90 days.", [], None)
    assert statuses(bad) == {"contains_any": "failed", "contains_all": "failed",
                             "contains_none": "failed"}  # fmt: skip
    assert "missing ['refund', '退款']" in bad[1].detail and "says ['90']" in bad[2].detail


def test_dont_know_true_and_false() -> None:
    knows = Expect(dont_know=True)
    assert statuses(text_checks(knows, "I don't know: my documents do not say.", [], None)) == {
        "dont_know": "passed"
    }
    assert statuses(text_checks(knows, "Yes, 5 days.", [], None)) == {"dont_know": "failed"}
    answers = Expect(dont_know=False)
    assert statuses(text_checks(answers, "Yes, 5 days.", [], None)) == {"answers": "passed"}
    empty = text_checks(answers, "  ", [], None)
    assert empty[0].status == "failed" and empty[0].detail == "empty"


def test_tool_matches_a_call_by_name_and_the_given_arguments_only() -> None:
    expect = Expect(tool=ToolExpectation("get_order", {"order": "A7"}))
    calls = [ToolCall("lookup", '{"q": 1}'), ToolCall("get_order", '{"order": "a7", "x": 1}')]
    assert text_checks(expect, "", calls, None)[0].status == "passed"
    wrong = text_checks(expect, "", [ToolCall("get_order", '{"order": "B1"}')], None)[0]
    assert wrong.status == "failed" and "B1" in wrong.detail
    other = text_checks(expect, "", [ToolCall("lookup", "not json")], None)[0]
    assert other.detail == "called ['lookup']"
    none = text_checks(expect, "", [], None)[0]
    assert none.detail == "no tool was called"
    assert text_checks(Expect(tool=ToolExpectation("x", {"n": 2})), "",
                       [ToolCall("x", '{"n": "2"}')], None)[0].status == "failed"  # fmt: skip


def test_no_tool_within_ms_and_max_chars() -> None:
    expect = Expect(no_tool=True, within_ms=500, max_chars=5)
    assert statuses(text_checks(expect, "short", [], 499.0)) == {
        "no_tool": "passed", "within_ms": "passed", "max_chars": "passed"
    }  # fmt: skip
    late = text_checks(expect, "too long", [ToolCall("x", "{}")], None)
    assert statuses(late) == {"no_tool": "failed", "within_ms": "failed", "max_chars": "failed"}
    assert late[1].detail == "no answer"


async def test_the_judge_is_skipped_without_one_and_a_failing_judge_fails_the_check() -> None:
    skipped = await judge_check("says hello", "hi", "hello", None)
    assert skipped.status == "skipped"

    async def yes(criterion: str, question: str, answer: str) -> tuple[bool, str]:
        return criterion in ("says hello",) and answer == "hello", "it does"

    assert (await judge_check("says hello", "hi", "hello", yes)).status == "passed"

    async def broken(criterion: str, question: str, answer: str) -> tuple[bool, str]:
        raise RuntimeError("model gone")

    failed = await judge_check("says hello", "hi", "hello", broken)
    assert failed.status == "failed" and "RuntimeError" in failed.detail


def test_a_verdict_is_parsed_strictly() -> None:
    assert parse_verdict('{"reason": "names Priya", "pass": true}') == (True, "names Priya")
    assert parse_verdict('{"reason": "no", "pass": "true"}') == (False, "no")
    assert parse_verdict("yes")[0] is False


def test_a_number_is_matched_whole() -> None:
    def has(answer: str, needle: str) -> str:
        return statuses(text_checks(Expect(contains_any=[needle]), answer, [], None))[
            "contains_any"
        ]

    assert has("一共 12 元。", "2 元") == "failed"
    assert has("It costs 190 euros.", "90") == "failed"
    assert has("About 19.5 hours.", "9.5") == "failed"
    assert has("It costs 1900.", "190") == "failed"
    assert has("一共 2 元。", "2 元") == "passed"
    assert has("Costs 90, or 190 with breakfast.", "90") == "passed"
    assert has("Room 12B", "12b") == "passed"
