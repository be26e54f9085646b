"""The rules judge with scripted models: quotes checked in code, failures are no decision, and
the decision model's adapter; ``ToolDecider``: grants first, then the cache, then the judge."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from journal.events import ThreadRef
from tools.capability import Capability
from tools.decide import ToolDecider
from tools.grants import GrantedBy, GrantStore, NewGrant
from tools.judge import (
    CONFIRM_SCHEMA,
    DecisionAnswer,
    DecisionModelJudge,
    JudgeLimits,
    LanguageModelJudge,
    checked_quotes,
)
from tools.judgements import JudgementCache
from tools.rules import Author, Rule, RuleStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
READ = (
    "The agent may read any repository of the openbot organization, but must ask before it pushes."
)
NO_MAIL = "助手绝对不能发送邮件。"
CALL = Capability("read_repository", "openbot/web", None)
THREAD = ThreadRef("t", "u", "th1")


def rule(id_: str, text: str, status: str = "active") -> Rule:
    return Rule(id=id_, tenant="t", role_id="r", text=text, author=Author("person", "p"),
                status=status, version=1, created_at=T0, updated_at=T0)  # type: ignore[arg-type]  # fmt: skip


RULES = [rule("r1", READ), rule("r2", NO_MAIL)]


class ScriptedJsonModel:
    """Answers each judging call with the next scripted text (or raises it, or sleeps forever),
    and each confirming call with the next of ``confirms`` ("yes" when they run out)."""

    def __init__(self, *answers: Any, confirms: Sequence[Any] = ()) -> None:
        self.answers = list(answers)
        self.confirms = list(confirms)
        self.calls: list[list[dict[str, str]]] = []
        self.confirm_calls: list[list[dict[str, str]]] = []

    async def complete_json(
        self, messages: list[dict[str, str]], schema: dict[str, Any], *, max_tokens: int, lane: str
    ) -> str:
        if schema == CONFIRM_SCHEMA:
            self.confirm_calls.append(messages)
            answer = self.confirms.pop(0) if self.confirms else {"answer": "yes"}
        else:
            self.calls.append(messages)
            answer = self.answers.pop(0)
        if answer == "hang":
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def answer(decision: str, *quotes: str) -> dict[str, Any]:
    return {"quotes": list(quotes), "decision": decision, "reason": "scripted"}


@pytest.mark.parametrize(
    ("quotes", "real"),
    [
        ([READ], True),
        (["may read any repository of the openbot organization"], True),
        (["The agent  may read any\n repository of the\topenbot organization"], True),
        (["  绝对不能发送邮件 "], True),
        (["The agent may read every repository of openbot"], False),  # a paraphrase
        (["may read any repository of the OpenBot organization"], False),  # case is not space
        (["may"], False),  # too short to be a quote
        ([READ, "the agent may push"], False),  # one unreal quote spoils the rest
        ([], False),
    ],
)
def test_quotes_are_checked_against_the_rules(quotes: list[str], real: bool) -> None:
    assert (checked_quotes(quotes, RULES) is not None) is real


async def test_an_exact_quote_lets_the_judge_decide() -> None:
    model = ScriptedJsonModel(
        answer("allow", "may read any repository of the openbot organization")
    )
    judgement = await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")
    assert judgement.effect == "allow" and judgement.failure is None
    assert [q.rule_id for q in judgement.quotes] == ["r1"]
    prompt = model.calls[0][-1]["content"]
    assert READ in prompt and NO_MAIL in prompt and "read_repository" in prompt


async def test_an_allow_stands_only_when_its_rule_is_confirmed() -> None:
    model = ScriptedJsonModel(answer("allow", READ), answer("allow", READ), answer("allow", READ),
                              confirms=[{"answer": "no"}, "hang", {"answer": "yes"}])  # fmt: skip
    judge = LanguageModelJudge(model, limits=JudgeLimits(timeout_s=0.2))
    refused = await judge.judge(RULES, CALL, lane="th1")
    assert (refused.effect, refused.reason, refused.failure) == (
        "none",
        "allow_not_confirmed",
        None,
    )
    timed_out = await judge.judge(RULES, CALL, lane="th1")
    assert (timed_out.effect, timed_out.failure) == ("none", "model_timeout")
    confirmed = await judge.judge(RULES, CALL, lane="th1")
    assert confirmed.effect == "allow"
    # Each confirmation shows the quoted rule whole and the call.
    asked = model.confirm_calls[0][-1]["content"]
    assert READ in asked and "read_repository" in asked and NO_MAIL not in asked


async def test_a_deny_needs_no_confirmation() -> None:
    model = ScriptedJsonModel(answer("deny", NO_MAIL), confirms=[{"answer": "no"}])
    assert (await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")).effect == "deny"
    assert model.confirm_calls == []


async def test_whitespace_differences_in_a_quote_are_accepted() -> None:
    model = ScriptedJsonModel(answer("deny", "助手绝对不能 发送邮件。\n"))
    judgement = await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")
    assert judgement.effect == "deny" and judgement.quotes[0].rule_id == "r2"


async def test_a_paraphrase_is_no_decision() -> None:
    model = ScriptedJsonModel(answer("allow", "The agent can read openbot repositories."))
    judgement = await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")
    assert judgement.effect == "none" and judgement.reason == "quote_refused"
    assert judgement.failure is None  # a real answer (cached), not a failure


async def test_a_quote_of_a_rule_that_is_not_active_is_no_decision() -> None:
    rules = [rule("r1", READ, status="proposed"), rule("r2", NO_MAIL)]
    model = ScriptedJsonModel(answer("allow", READ))
    assert (await LanguageModelJudge(model).judge(rules, CALL, lane="th1")).effect == "none"
    assert READ not in model.calls[0][-1]["content"]  # a proposed rule is never shown


@pytest.mark.parametrize(
    ("script", "failure"),
    [
        (RuntimeError("the model broke"), "model_error"),
        ("hang", "model_timeout"),
        ("not json", "unparsable"),
        ({"decision": "maybe", "quotes": [], "reason": ""}, "unparsable"),
        ({"decision": "allow", "quotes": "not a list", "reason": ""}, "unparsable"),
    ],
)
async def test_model_failures_are_no_decision(script: Any, failure: str) -> None:
    judge = LanguageModelJudge(ScriptedJsonModel(script), limits=JudgeLimits(timeout_s=0.05))
    judgement = await judge.judge(RULES, CALL, lane="th1")
    assert (judgement.effect, judgement.failure) == ("none", failure)


async def test_no_active_rules_is_no_decision_without_asking_the_model() -> None:
    model = ScriptedJsonModel()
    judgement = await LanguageModelJudge(model).judge([rule("r", READ, "retired")], CALL, lane="x")
    assert judgement.failure == "no_rules" and model.calls == []


class ScriptedDecisionModel:
    def __init__(self, answer: DecisionAnswer | BaseException) -> None:
        self.answer = answer
        self.seen: list[tuple[list[str], str]] = []

    async def classify(self, rules: Sequence[str], request: str, *, lane: str) -> DecisionAnswer:
        self.seen.append((list(rules), request))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "effect", "quoted"),
    [
        (DecisionAnswer("allow", (0.9, 0.1)), "allow", ["r1"]),
        (DecisionAnswer("deny", (0.5, 0.7)), "deny", ["r1", "r2"]),  # 0.5 is quoted
        (DecisionAnswer("allow", (0.49, 0.2)), "none", []),  # no rule backs it
        (DecisionAnswer("no_match", (0.9, 0.9)), "none", []),
        (DecisionAnswer("allow", (0.9,)), "none", []),  # one probability per rule
        (DecisionAnswer("allow", (1.5, 0.0)), "none", []),
    ],
)
async def test_the_decision_model_quotes_every_rule_at_half_or_more(
    answer: DecisionAnswer, effect: str, quoted: list[str]
) -> None:
    model = ScriptedDecisionModel(answer)
    judgement = await DecisionModelJudge(model).judge(RULES, CALL, lane="th1")
    assert judgement.effect == effect
    assert [q.rule_id for q in judgement.quotes] == quoted
    texts = {"r1": READ, "r2": NO_MAIL}
    assert [q.text for q in judgement.quotes] == [texts[r] for r in quoted]  # in full
    assert model.seen[0][0] == [READ, NO_MAIL] and "openbot/web" in model.seen[0][1]


async def test_a_failing_decision_model_is_no_decision() -> None:
    judge = DecisionModelJudge(ScriptedDecisionModel(ConnectionError("down")))
    judgement = await judge.judge(RULES, CALL, lane="th1")
    assert (judgement.effect, judgement.failure) == ("none", "model_error")


PERSON = Author("person", "p")


async def test_decide_grants_first_then_the_cache_then_the_judge(
    grant_store: GrantStore, rule_store: RuleStore, judgement_cache: JudgementCache
) -> None:
    await rule_store.create("t", "r", READ, PERSON)
    model = ScriptedJsonModel(answer("allow", READ), answer("deny", READ))
    decider = ToolDecider(grant_store, rule_store, judgement_cache, LanguageModelJudge(model))
    first = await decider.decide("r", CALL, THREAD)
    assert (first.effect, first.decided_by, first.cached) == ("allow", "judgement", False)
    again = await decider.decide("r", CALL, THREAD)
    assert (again.effect, again.decided_by, again.cached) == ("allow", "judgement", True)
    assert again.quotes == first.quotes and len(model.calls) == 1
    # A new rule version misses the cache: the judge is asked again.
    (stored,) = await rule_store.list("t", "r")
    await rule_store.update("t", "r", stored.id, expected_version=1, by=PERSON, text=READ + " ")
    changed = await decider.decide("r", CALL, THREAD)
    assert (changed.effect, changed.cached) == ("deny", False) and len(model.calls) == 2
    # A grant decides before any rule.
    grant = await grant_store.create("t", "r", NewGrant(
        capability=Capability("read_repository", "*"), effect="allow", scope="thread",
        thread_id="th1", granted_by=GrantedBy("person", "p"),
    ))  # fmt: skip
    granted = await decider.decide("r", CALL, THREAD)
    assert (granted.effect, granted.decided_by, granted.grant_id) == ("allow", "grant", grant.id)
    assert len(model.calls) == 2
    # In another thread the thread grant does not apply; the cached judgement does.
    other = await decider.decide("r", CALL, ThreadRef("t", "u", "th2"))
    assert (other.effect, other.cached) == ("deny", True)


async def test_decide_without_a_judge_or_rules_is_no_decision(
    grant_store: GrantStore, rule_store: RuleStore, judgement_cache: JudgementCache
) -> None:
    decider = ToolDecider(grant_store, rule_store, judgement_cache, None)
    assert (await decider.decide("r", CALL, THREAD)).failure == "no_model"
    model = ScriptedJsonModel()
    decider = ToolDecider(grant_store, rule_store, judgement_cache, LanguageModelJudge(model))
    decision = await decider.decide("r", CALL, THREAD)
    assert (decision.effect, decision.decided_by, decision.failure) == ("none", "none", "no_rules")


async def test_a_failed_judgement_is_asked_again(
    grant_store: GrantStore, rule_store: RuleStore, judgement_cache: JudgementCache
) -> None:
    await rule_store.create("t", "r", READ, PERSON)
    model = ScriptedJsonModel(RuntimeError("busy"), answer("allow", READ))
    decider = ToolDecider(grant_store, rule_store, judgement_cache, LanguageModelJudge(model))
    failed = await decider.decide("r", CALL, THREAD)
    assert (failed.effect, failed.failure) == ("none", "model_error")
    assert (await decider.decide("r", CALL, THREAD)).effect == "allow"
    assert len(model.calls) == 2
