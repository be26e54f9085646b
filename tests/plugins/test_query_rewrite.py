"""The rewritten search queries: what is kept of the model's answer."""

from __future__ import annotations

import pytest

from plugins.brain.query_rewrite import MAX_QUERY_CHARS, rewrite_messages, rewritten_queries


def test_both_languages_are_kept_english_first() -> None:
    answer = '{"chinese": "免费试用期", "english": "free trial period"}'
    assert rewritten_queries(answer, "Can I test-drive it?") == ["free trial period", "免费试用期"]


def test_only_the_translation_is_kept_when_asked() -> None:
    answer = '{"chinese": "免费试用期", "english": "free trial period"}'
    only = {"other_language_only": True}
    assert rewritten_queries(answer, "Can I test-drive it?", **only) == ["免费试用期"]
    assert rewritten_queries(answer, "能先试用吗？", **only) == ["free trial period"]


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        ('{"english": "试用期", "chinese": "trial"}', []),  # each in the wrong language
        ('{"english": "", "chinese": "试用"}', ["试用"]),
        ('{"english": "can i test-drive it?", "chinese": ""}', []),  # what was searched
        ('{"english": "' + "a" * (MAX_QUERY_CHARS + 1) + '"}', []),
        ("not json", []),
        ("[]", []),
    ],
)
def test_only_new_queries_in_their_language_are_kept(answer: str, kept: list[str]) -> None:
    assert rewritten_queries(answer, "can i test-drive it?") == kept


def test_the_prompt_ends_with_the_question() -> None:
    messages = rewrite_messages("有没有学生优惠")
    assert messages[0]["role"] == "system"
    assert messages[-1] == {"role": "user", "content": "有没有学生优惠"}
