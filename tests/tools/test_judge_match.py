"""How one rule bears on one call, decided in code (``tools.judge_match``): the model's kind is
overridden towards safety, a permitting rule allows only a call it names within its target,
limit and condition, and the verdicts combine deny first."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tools.capability import Capability
from tools.judge_match import (
    RuleKind,
    RuleText,
    RuleVerdict,
    action_words,
    chinese_number,
    combine,
    effective_kind,
    verdict,
)


def judged(text: str, call: Capability, kind: RuleKind = "permits", english: str = "") -> str:
    rule = RuleText(text, english)
    return verdict(effective_kind(kind, rule), rule, call)


def call(action: str, target: str = "*", arguments: dict[str, Any] | None = None) -> Capability:
    return Capability(action, target, arguments)


@pytest.mark.parametrize(
    ("text", "model_kind", "english", "kind"),
    [
        ("The agent may archive old tickets.", "permits", "", "permits"),
        ("The agent may never archive tickets.", "permits", "", "forbids"),  # the model missed it
        ("Do not archive tickets.", "permits", "", "forbids"),
        (
            "Check with the person before you archive tickets; ask first.",
            "permits",
            "",
            "ask_first",
        ),
        ("Archiving needs the person's approval.", "permits", "", "ask_first"),
        ("The agent may archive tickets, but no more than five.", "permits", "", "other"),
        ("助手禁止归档工单。", "permits", "The agent may archive tickets.", "forbids"),
        ("归档工单之前必须先问用户。", "permits", "Archive tickets.", "ask_first"),
        ("助手可以给别人发消息。", "permits", "The agent may message others.", "permits"),
        ("The agent may archive tickets.", "forbids", "", "forbids"),  # towards deny is kept
    ],
)
def test_cues_override_the_models_kind_towards_safety(
    text: str, model_kind: RuleKind, english: str, kind: RuleKind
) -> None:
    assert effective_kind(model_kind, RuleText(text, english)) == kind


def test_action_words_split_snake_and_camel_case_and_stem() -> None:
    assert action_words("order_status") == {"order", "statu"}
    assert action_words("createReminders") == {"create", "reminder"}
    assert action_words("book-flights") == {"book", "flight"}


@pytest.mark.parametrize(
    ("text", "capability", "expected"),
    [
        ("The agent may archive old tickets.", call("archive_ticket", "T-99"), "allows"),
        # A permitting rule about another action is refused, whatever the model says.
        ("The agent may archive old tickets.", call("delete_ticket", "T-99"), "related"),
        ("The agent may water the plants.", call("archive_ticket", "T-99"), "unrelated"),
        # The target must be named when it has words (an id has none).
        ("The agent may read wiki pages of the docs space.", call("read_page", "docs/intro"),
         "allows"),
        ("The agent may read wiki pages of the docs space.", call("read_page", "hr/salaries"),
         "out_of_scope"),
        ("助手可以打开客厅的空调。", call("aircon_on", "卧室"), "unrelated"),
        # A number in the rule is a limit the call's numbers must keep to.
        ("The agent may tip up to 5 dollars.", call("tip", "*", {"usd": 4}), "allows"),
        ("The agent may tip up to 5 dollars.", call("tip", "*", {"usd": 40}), "out_of_scope"),
        ("The agent may tip up to 5 dollars.", call("tip", "*", {"note": "thanks"}),
         "out_of_scope"),
        # Untranslated, a Chinese rule names no English action.
        ("助手可以打赏，最多五十元。", call("tip", "*", {"yuan": 30}), "unrelated"),
        # A condition must be spoken to by the arguments.
        ("The agent may mute the call when the person is driving.",
         call("mute_call", "*", {"why": "person is driving"}), "allows"),
        ("The agent may mute the call when the person is driving.",
         call("mute_call", "*", {"why": "it is loud"}), "out_of_scope"),
    ],
)  # fmt: skip
def test_a_permitting_rule_allows_only_a_call_it_names_within_its_scope(
    text: str, capability: Capability, expected: RuleVerdict
) -> None:
    assert judged(text, capability) == expected


def test_a_translated_rule_is_matched_on_its_translation_and_its_own_characters() -> None:
    tip = call("tip", "*", {"yuan": 30})
    assert judged(
        "助手可以打赏，最多五十元。", tip, english="The agent may tip, at most 50 yuan."
    ) == ("allows")
    too_much = call("tip", "*", {"yuan": 80})
    assert judged("助手可以打赏，最多五十元。", too_much, english="The agent may tip.") == (
        "out_of_scope"
    )
    hall = call("lights_on", "客厅")
    assert judged("助手可以打开客厅的灯。", hall, english="Turn on the lights.") == "allows"
    bedroom = call("lights_on", "卧室")
    assert judged("助手可以打开客厅的灯。", bedroom, english="Turn on the lights.") == (
        "out_of_scope"
    )


def test_chinese_numerals() -> None:
    assert [chinese_number(t) for t in ("二十", "十二", "一百零五", "两千", "三万五千", "七")] == [
        20, 12, 105, 2000, 35000, 7
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "capability", "expected"),
    [
        ("The agent must not archive tickets.", call("archive_ticket", "T-1"), "forbids"),
        # Part of the action and a word of the call's context: forbidden.
        ("The agent must never post in the lobby channel.",
         call("post_message", "#lobby"), "forbids"),
        # Part of the action only (the same object, another verb): not this call.
        ("The agent must not archive tickets.", call("ticket_status", "T-1"), "related"),
        # Only the context: it bears on the call and blocks an allow, without denying.
        ("Never mention the person's salary.",
         call("send_email", "boss@example.com", {"body": "salary figures"}), "blocks"),
        ("助手不能透露用户的住址。", call("share_contact", "*", {"field": "住址"}), "blocks"),
    ],
)  # fmt: skip
def test_a_forbidding_rule_forbids_only_a_call_it_names(
    text: str, capability: Capability, expected: RuleVerdict
) -> None:
    assert judged(text, capability, kind="forbids") == expected


@pytest.mark.parametrize(
    ("verdicts", "effect", "backing"),
    [
        (["allows"], "allow", (0,)),
        (["allows", "forbids"], "deny", (1,)),  # deny beats allow
        (["forbids", "asks"], "deny", (0,)),
        (["allows", "asks"], "none", ()),
        (["allows", "blocks"], "none", ()),
        (["allows", "out_of_scope"], "none", ()),
        (["allows", "related", "unrelated"], "allow", (0,)),
        (["allows", "allows"], "allow", (0, 1)),
        (["related", "unrelated"], "none", ()),
        ([], "none", ()),
    ],
)
def test_verdicts_combine_deny_first_then_anything_undecided_then_allow(
    verdicts: list[RuleVerdict], effect: str, backing: tuple[int, ...]
) -> None:
    assert combine(verdicts) == (effect, backing)


# ---------------------------------------------------------------- Rule 8: named values

SEED_RULES = (
    ("The assistant may use lookup for any item.", "permits"),
    ("The assistant must not use lookup for the item omega.", "forbids"),
)


def judged_all(rules: tuple[tuple[str, RuleKind], ...], capability: Capability) -> Any:
    verdicts = []
    for text, kind in rules:
        rule = RuleText(text)
        verdicts.append(verdict(effective_kind(kind, rule), rule, capability))
    return combine(verdicts)


def test_the_seed_probe_a_rule_for_omega_does_not_decide_another_item() -> None:
    assert judged_all(SEED_RULES, call("lookup", "*", {"item": "l11"})) == ("allow", (0,))
    assert judged_all(SEED_RULES, call("lookup", "*", {"item": "omega"})) == ("deny", (1,))
    assert judged_all(SEED_RULES, call("lookup", "*", {"item": "OMEGA"})) == ("deny", (1,))


@pytest.mark.parametrize(
    ("text", "arguments", "expected"),
    [
        # A description is no name: the rule still bears on every item.
        ("The assistant must not use lookup for sensitive items.", {"item": "l11"}, "forbids"),
        ("Never use lookup for an item the person did not name.", {"item": "l11"}, "forbids"),
        # Names: an id, a capitalised word.
        ("Never use lookup for the item A-17.", {"item": "b-2"}, "related"),
        ("Never use lookup for the item A-17.", {"item": "a-17"}, "forbids"),
        ("Never book flights for the city Paris.", {"city": "Lyon"}, "unrelated"),
    ],
)
def test_only_a_name_after_an_arguments_name_narrows_a_rule(
    text: str, arguments: dict[str, Any], expected: RuleVerdict
) -> None:
    action = "book_flight" if "city" in arguments else "lookup"
    got = judged(text, call(action, "*", arguments), kind="forbids")
    assert got == (expected if expected != "unrelated" else "related")


_NAME = st.text(alphabet="qxzjkvw", min_size=4, max_size=8)
_ACTION = st.sampled_from(["lookup", "fetch_record", "delete_entry", "send_invoice"])
_KIND = st.sampled_from(["forbids", "permits", "ask_first", "other"])


@given(target=_NAME, other=_NAME, action=_ACTION, kind=_KIND)
def test_a_rule_naming_target_t_never_decides_a_call_whose_target_is_not_t(
    target: str, other: str, action: str, kind: RuleKind
) -> None:
    assume(target != other)
    spoken = action.replace("_", " ")
    rule = RuleText(f"The assistant must not use {spoken} for the item {target}.")
    if kind == "permits":
        rule = RuleText(f"The assistant may use {spoken} for the item {target}.")

    elsewhere = verdict(effective_kind(kind, rule), rule, call(action, "*", {"item": other}))
    there = verdict(effective_kind(kind, rule), rule, call(action, "*", {"item": target}))

    assert elsewhere in ("related", "unrelated")  # neither allows, forbids, asks nor blocks
    assert there not in ("related", "unrelated")
