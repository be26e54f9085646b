"""The checks of one turn (scenario Rule 2): what was heard back, judged against ``expect``.

Theory of operation
-------------------
Rule 1. A check is ``CheckResult(name, status, detail)``; ``status`` is ``passed``, ``failed``
        or ``skipped`` (a judge check with no judge). A turn passes when none failed; a skipped
        check is reported, never counted as passed.
Rule 2. Text matching ignores case and white space (Chinese has none to ignore, English answers
        differ in spacing around numbers): "7 days" matches "7days" and "7 Days". A number is
        matched whole: "2 元" is not found in "12 元", nor "90" in "190" or "9.5" in "19.5".
Rule 3. ``tool`` passes when some function call of the turn has that name and its arguments
        include every expected one: strings compared like text (Rule 2), other values equal.
        Arguments that are not a JSON object count as none.
Rule 4. ``dont_know`` uses the brain's own test for a don't-know answer
        (``plugins.brain.grounding.says_dont_know``); ``dont_know: false`` also fails an empty
        answer.
Rule 5. The model judge is given the criterion, the question and the answer, and answers by
        constrained JSON ``{"pass": bool, "reason": str}``; the reason is shown in the report.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from evals.scenario import Expect
from plugins.brain.grounding import says_dont_know

Status = Literal["passed", "failed", "skipped"]
Judge = Callable[[str, str, str], Awaitable[tuple[bool, str]]]
"""``judge(criterion, question, answer)`` → (passes, reason)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    status: Status
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str

    def parsed(self) -> dict[str, Any]:
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


def _norm(text: str) -> str:
    return "".join(text.lower().split())


def _has(answer: str, needle: str) -> bool:
    """Rule 2: ``needle`` in ``answer``, case and spaces aside, a number not inside a longer one."""
    text, wanted = _norm(answer), _norm(needle)
    if not wanted:
        return True
    start = text.find(wanted)
    while start >= 0:
        end = start + len(wanted)
        before = wanted[0].isdigit() and start > 0 and _in_number(text[start - 1])
        after = wanted[-1].isdigit() and end < len(text) and text[end].isdigit()
        if not before and not after:
            return True
        start = text.find(wanted, start + 1)
    return False


def _in_number(char: str) -> bool:
    return char.isdigit() or char == "."


def _same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str) and isinstance(actual, str):
        return _norm(expected) == _norm(actual)
    return bool(expected == actual)


def _result(name: str, ok: bool, detail: str = "") -> CheckResult:
    return CheckResult(name, "passed" if ok else "failed", "" if ok else detail)


def text_checks(
    expect: Expect, answer: str, calls: list[ToolCall], first_ms: float | None
) -> list[CheckResult]:
    """Every check but the judge's (Rules 2–4)."""
    out: list[CheckResult] = []
    if expect.contains_any:
        ok = any(_has(answer, s) for s in expect.contains_any)
        out.append(_result("contains_any", ok, f"none of {list(expect.contains_any)}"))
    if expect.contains_all:
        missing = [s for s in expect.contains_all if not _has(answer, s)]
        out.append(_result("contains_all", not missing, f"missing {missing}"))
    if expect.contains_none:
        present = [s for s in expect.contains_none if _has(answer, s)]
        out.append(_result("contains_none", not present, f"says {present}"))
    if expect.dont_know is True:
        out.append(_result("dont_know", says_dont_know(answer), "answered instead"))
    elif expect.dont_know is False:
        ok = bool(answer.strip()) and not says_dont_know(answer)
        out.append(_result("answers", ok, "said it does not know" if answer.strip() else "empty"))
    if expect.tool is not None:
        want = expect.tool
        named = [c for c in calls if c.name == want.name]
        ok = any(all(k in c.parsed() and _same(v, c.parsed()[k]) for k, v in want.arguments.items())
                 for c in named)  # fmt: skip
        if ok:
            detail = ""
        elif not calls:
            detail = "no tool was called"
        elif not named:
            detail = f"called {[c.name for c in calls]}"
        else:
            detail = f"arguments {[c.arguments for c in named]}"
        out.append(_result("tool", ok, detail))
    if expect.no_tool:
        out.append(_result("no_tool", not calls, f"called {[c.name for c in calls]}"))
    if expect.within_ms is not None:
        ok = first_ms is not None and first_ms <= expect.within_ms
        took = "no answer" if first_ms is None else f"first answer after {first_ms:.0f} ms"
        out.append(_result("within_ms", ok, took))
    if expect.max_chars is not None:
        out.append(
            _result("max_chars", len(answer) <= expect.max_chars, f"{len(answer)} characters")
        )
    return out


async def judge_check(
    criterion: str, question: str, answer: str, judge: Judge | None
) -> CheckResult:
    """The model judge's check (Rule 5); skipped without a judge."""
    if judge is None:
        return CheckResult("judge", "skipped", "no judge (--judge none)")
    try:
        ok, reason = await judge(criterion, question, answer)
    except Exception as e:  # a judge that fails is a failed check, not a crashed run
        return CheckResult("judge", "failed", f"the judge failed: {type(e).__name__}")
    return CheckResult("judge", "passed" if ok else "failed", reason)


JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string", "maxLength": 300}, "pass": {"type": "boolean"}},
    "required": ["reason", "pass"],
}


def judge_messages(criterion: str, question: str, answer: str) -> list[dict[str, str]]:
    return [
        {
            "role": "system",
            "content": "You grade one answer of a voice assistant against a written criterion. "
            "Judge only the criterion, not style. Give a one-sentence reason, then pass.",
        },
        {
            "role": "user",
            "content": f"Criterion: {criterion}\nQuestion: {question}\nAnswer: {answer}",
        },
    ]


def parse_verdict(text: str) -> tuple[bool, str]:
    try:
        data: Mapping[str, Any] = json.loads(text)
    except ValueError:
        return False, "the judge's answer was not JSON"
    return data.get("pass") is True, str(data.get("reason") or "")[:300]
