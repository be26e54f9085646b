"""The rule store and judgement cache contracts, run against the in-memory and PostgreSQL stores."""

from __future__ import annotations

import asyncio

import pytest

from tools.capability import Capability
from tools.errors import InvalidRule, RuleNotFound, RuleVersionConflict, ToolLimitExceeded
from tools.judgements import Judgement, JudgementCache, Quote, judgement_key
from tools.rules import Author, RuleStore

PERSON = Author("person", "p1")
AGENT = Author("role", "r")
TEXT = "The agent may read any repository of the openbot organization."


async def test_a_persons_rule_is_active_at_once(rule_store: RuleStore) -> None:
    rule = await rule_store.create("t", "r", f"  {TEXT}\n", PERSON)
    assert (rule.text, rule.status, rule.version, rule.author) == (TEXT, "active", 1, PERSON)
    assert await rule_store.get("t", "r", rule.id) == rule
    assert await rule_store.list("t", "r", status="active") == [rule]


async def test_an_agents_rule_waits_for_a_person(rule_store: RuleStore) -> None:
    rule = await rule_store.create("t", "r", "助手可以搜索知识库。", AGENT)
    assert rule.status == "proposed"
    assert await rule_store.list("t", "r", status="active") == []
    with pytest.raises(InvalidRule):
        await rule_store.update("t", "r", rule.id, expected_version=1, by=AGENT, status="active")
    active = await rule_store.update("t", "r", rule.id, expected_version=1, by=PERSON,
                                     status="active")  # fmt: skip
    assert (active.status, active.version) == ("active", 2)
    assert await rule_store.list("t", "r", status="active") == [active]
    # The agent editing an active rule sends it back to review.
    edited = await rule_store.update("t", "r", rule.id, expected_version=2, by=AGENT,
                                     text="助手可以搜索任何东西。")  # fmt: skip
    assert (edited.status, edited.version, edited.text) == ("proposed", 3, "助手可以搜索任何东西。")


async def test_update_is_a_compare_and_set_on_the_version(rule_store: RuleStore) -> None:
    rule = await rule_store.create("t", "r", TEXT, PERSON)
    moved = await rule_store.update("t", "r", rule.id, expected_version=1, by=PERSON,
                                    text="The agent may read nothing.")  # fmt: skip
    with pytest.raises(RuleVersionConflict) as raised:
        await rule_store.update("t", "r", rule.id, expected_version=1, by=PERSON,
                                status="retired")  # fmt: skip
    assert raised.value.current == moved
    assert raised.value.code == "rule_conflict"
    assert (await rule_store.get("t", "r", rule.id)).status == "active"


async def test_two_concurrent_updates_at_one_version_exactly_one_wins(
    rule_store: RuleStore,
) -> None:
    rule = await rule_store.create("t", "r", TEXT, PERSON)
    for round_ in range(4):
        results = await asyncio.gather(
            rule_store.update("t", "r", rule.id, expected_version=rule.version, by=PERSON,
                              text=f"First edit {round_}."),
            rule_store.update("t", "r", rule.id, expected_version=rule.version, by=PERSON,
                              text=f"Second edit {round_}."),
            return_exceptions=True,
        )  # fmt: skip
        wins = [r for r in results if not isinstance(r, BaseException)]
        losses = [r for r in results if isinstance(r, RuleVersionConflict)]
        assert len(wins) == 1 and len(losses) == 1, results
        rule = await rule_store.get("t", "r", rule.id)
        assert rule == wins[0] and losses[0].current == rule


async def test_rules_are_scoped_and_listed_in_creation_order(rule_store: RuleStore) -> None:
    made = [await rule_store.create("t", "r", f"Rule number {n}.", PERSON) for n in range(3)]
    assert [r.id for r in await rule_store.list("t", "r")] == [r.id for r in made]
    assert await rule_store.list("t", "other") == []
    assert await rule_store.list("t2", "r") == []
    with pytest.raises(RuleNotFound):
        await rule_store.get("t", "other", made[0].id)
    with pytest.raises(RuleNotFound):
        await rule_store.update("t2", "r", made[0].id, expected_version=1, by=PERSON,
                                status="retired")  # fmt: skip


@pytest.mark.parametrize("text", ["", "   ", "x" * 1001])
async def test_a_bad_text_is_refused(rule_store: RuleStore, text: str) -> None:
    with pytest.raises(InvalidRule):
        await rule_store.create("t", "r", text, PERSON)


async def test_a_role_holds_a_bounded_number_of_live_rules(rule_store: RuleStore) -> None:
    made = [await rule_store.create("t", "r", f"Rule {n}.", PERSON) for n in range(5)]
    with pytest.raises(ToolLimitExceeded):
        await rule_store.create("t", "r", "One more.", PERSON)
    await rule_store.update("t", "r", made[0].id, expected_version=1, by=PERSON, status="retired")
    await rule_store.create("t", "r", "One more.", PERSON)
    with pytest.raises(ToolLimitExceeded):  # bringing the retired one back would pass the bound
        await rule_store.update("t", "r", made[0].id, expected_version=2, by=PERSON,
                                status="active")  # fmt: skip


CALL = Capability("read_repository", "openbot/web", None)


async def test_a_judgement_is_reused_until_a_rule_changes(
    rule_store: RuleStore, judgement_cache: JudgementCache
) -> None:
    rule = await rule_store.create("t", "r", TEXT, PERSON)
    rules = await rule_store.list("t", "r", status="active")
    key = judgement_key(rules, CALL, "llm")
    assert await judgement_cache.get("t", "r", key) is None
    judged = Judgement(effect="allow", quotes=(Quote(rule.id, TEXT),), reason="rule 1 allows it")
    await judgement_cache.put("t", "r", key, judged)
    assert await judgement_cache.get("t", "r", key) == judged
    assert await judgement_cache.get("t", "other", key) is None
    # A new version of the rule is another key: a miss.
    await rule_store.update("t", "r", rule.id, expected_version=1, by=PERSON, text=TEXT + " ")
    changed = await rule_store.list("t", "r", status="active")
    assert judgement_key(changed, CALL, "llm") != key
    assert judgement_key(rules, CALL, "other-judge") != key
    assert judgement_key(rules, Capability("read_repository", "openbot/api"), "llm") != key


async def test_a_failed_judgement_is_never_cached(judgement_cache: JudgementCache) -> None:
    await judgement_cache.put("t", "r", "k", Judgement(effect="none", failure="model_timeout"))
    assert await judgement_cache.get("t", "r", "k") is None
    none = Judgement(effect="none", reason="no rule is about this")
    await judgement_cache.put("t", "r", "k", none)
    assert await judgement_cache.get("t", "r", "k") == none


async def test_the_cache_keeps_a_bounded_number_per_role(judgement_cache: JudgementCache) -> None:
    for n in range(5):
        await judgement_cache.put("t", "r", f"k{n}", Judgement(effect="deny", reason=str(n)))
    kept = [n for n in range(5) if await judgement_cache.get("t", "r", f"k{n}") is not None]
    assert kept == [2, 3, 4]
