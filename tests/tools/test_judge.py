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
    DecisionAnswer,
    DecisionModelJudge,
    JudgeLimits,
    LanguageModelJudge,
    checked_quotes,
)
from tools.judge_prompts import READ_AND_TRANSLATE_SCHEMA, READ_SCHEMA
from tools.judgements import JudgementCache
from tools.rules import Author, Rule, RuleStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
READ = "The agent may read any repository of the openbot organization."
NO_MAIL = "助手绝对不能发送邮件。"
CALL = Capability("read_repository", "openbot/web", None)
THREAD = ThreadRef("t", "u", "th1")


def rule(id_: str, text: str, status: str = "active") -> Rule:
    return Rule(id=id_, tenant="t", role_id="r", text=text, author=Author("person", "p"),
                status=status, version=1, created_at=T0, updated_at=T0)  # type: ignore[arg-type]  # fmt: skip


RULES = [rule("r1", READ), rule("r2", NO_MAIL)]


class ScriptedJsonModel:
    """Answers each reading with the next scripted answer (or raises it, or sleeps forever)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[list[dict[str, str]]] = []
        self.schemas: list[dict[str, Any]] = []

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        self.calls.append(messages)
        self.schemas.append(schema)
        answer = self.answers.pop(0)
        if answer == "hang":
            await asyncio.Event().wait()
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)


def reading(kind: str, english: str | None = None) -> dict[str, Any]:
    return {"kind": kind} if english is None else {"kind": kind, "english": english}


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


async def test_a_permitting_rule_that_names_the_call_allows_it_quoted_whole() -> None:
    model = ScriptedJsonModel(
        reading("permits"), reading("forbids", "The agent must never send emails.")
    )
    judgement = await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")
    assert (judgement.effect, judgement.failure) == ("allow", None)
    assert [(q.rule_id, q.text) for q in judgement.quotes] == [("r1", READ)]


async def test_each_rule_is_read_alone_without_the_call() -> None:
    model = ScriptedJsonModel(
        reading("permits"), reading("forbids", "The agent must never send emails.")
    )
    await LanguageModelJudge(model).judge(RULES, CALL, lane="th1")
    first, second = (m[-1]["content"] for m in model.calls)
    assert READ in first and NO_MAIL not in first and NO_MAIL in second
    assert not any("read_repository" in m["content"] or "openbot/web" in m["content"]
                   for messages in model.calls for m in messages)  # fmt: skip
    # A rule in plain ASCII is matched on its own words; another is translated too.
    assert model.schemas == [READ_SCHEMA, READ_AND_TRANSLATE_SCHEMA]


async def test_a_reading_is_reused_for_the_same_rule_text_in_the_same_tenant_only() -> None:
    model = ScriptedJsonModel(reading("permits"), reading("permits"))
    judge = LanguageModelJudge(model)
    await judge.judge([rule("r1", READ)], CALL, lane="th1")
    await judge.judge([rule("r9", READ)], Capability("read_repository", "openbot/api"), lane="x")
    assert len(model.calls) == 1
    other_tenant = Rule(id="r1", tenant="t2", role_id="r", text=READ, author=Author("person", "p"),
                        status="active", version=1, created_at=T0, updated_at=T0)  # fmt: skip
    await judge.judge([other_tenant], CALL, lane="th1")
    assert len(model.calls) == 2


async def test_a_model_that_permits_everything_cannot_allow_another_action() -> None:
    # The model reads the rule as permitting; the rule is about reading, the call deletes.
    model = ScriptedJsonModel(reading("permits"))
    delete = Capability("delete_repository", "openbot/web", None)
    judgement = await LanguageModelJudge(model).judge([rule("r1", READ)], delete, lane="th1")
    assert (judgement.effect, judgement.quotes) == ("none", ())


async def test_a_forbidding_rule_denies_even_when_another_rule_permits() -> None:
    rules = [rule("r1", "The agent may send emails."), rule("r2", NO_MAIL)]
    model = ScriptedJsonModel(
        reading("permits"), reading("forbids", "The agent must never send emails.")
    )
    judgement = await LanguageModelJudge(model).judge(
        rules, Capability("send_email", "anna@example.com", {"subject": "Hi"}), lane="th1"
    )
    assert judgement.effect == "deny"
    assert [q.rule_id for q in judgement.quotes] == ["r2"]


async def test_a_rule_that_is_not_active_is_never_read_or_quoted() -> None:
    rules = [rule("r1", READ, status="proposed"), rule("r2", NO_MAIL)]
    model = ScriptedJsonModel(reading("forbids", "The agent must never send emails."))
    assert (await LanguageModelJudge(model).judge(rules, CALL, lane="th1")).effect == "none"
    assert len(model.calls) == 1 and READ not in model.calls[0][-1]["content"]


@pytest.mark.parametrize(
    ("script", "failure"),
    [
        (RuntimeError("the model broke"), "model_error"),
        ("hang", "model_timeout"),
        ("not json", "unparsable"),
        ({"kind": "maybe"}, "unparsable"),
        ({"english": "no kind"}, "unparsable"),
    ],
)
async def test_model_failures_are_no_decision(script: Any, failure: str) -> None:
    judge = LanguageModelJudge(ScriptedJsonModel(script), limits=JudgeLimits(timeout_s=0.05))
    judgement = await judge.judge([rule("r1", READ)], CALL, lane="th1")
    assert (judgement.effect, judgement.failure) == ("none", failure)


async def test_a_failed_reading_is_not_kept() -> None:
    model = ScriptedJsonModel("not json", reading("permits"))
    judge = LanguageModelJudge(model)
    assert (await judge.judge([rule("r1", READ)], CALL, lane="th1")).failure == "unparsable"
    assert (await judge.judge([rule("r1", READ)], CALL, lane="th1")).effect == "allow"


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
    model = ScriptedJsonModel(reading("permits"), reading("forbids"))
    decider = ToolDecider(grant_store, rule_store, judgement_cache, LanguageModelJudge(model))
    first = await decider.decide("r", CALL, THREAD)
    assert (first.effect, first.decided_by, first.cached) == ("allow", "judgement", False)
    again = await decider.decide("r", CALL, THREAD)
    assert (again.effect, again.decided_by, again.cached) == ("allow", "judgement", True)
    assert again.quotes == first.quotes and len(model.calls) == 1
    # A new rule version misses the cache: the judge is asked again.
    (stored,) = await rule_store.list("t", "r")
    never = "The agent must never read any repository of the openbot organization."
    await rule_store.update("t", "r", stored.id, expected_version=1, by=PERSON, text=never)
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
    model = ScriptedJsonModel(RuntimeError("busy"), reading("permits"))
    decider = ToolDecider(grant_store, rule_store, judgement_cache, LanguageModelJudge(model))
    failed = await decider.decide("r", CALL, THREAD)
    assert (failed.effect, failed.failure) == ("none", "model_error")
    assert (await decider.decide("r", CALL, THREAD)).effect == "allow"
    assert len(model.calls) == 2
