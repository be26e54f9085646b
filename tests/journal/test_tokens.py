"""The offline token counter: calibrated against known cl100k counts, CJK, additive, fast."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from journal.tokens import EstimatingTokenCounter, count_tokens, estimate_tokens

# (text, cl100k_base count, our estimate). The cl100k counts are published: the tiktoken README
# ("tiktoken is great!" encodes to [83, 1609, 5963, 374, 2294, 0]) and the OpenAI cookbook
# "How to count tokens with tiktoken", section "Comparing encodings" (the next three), plus the
# usual worked examples of cl100k ("Hello, world!" → Hello , world !; the pangram → 9 words).
CL100K_FIXTURES = [
    ("tiktoken is great!", 6, 5),  # t|ik|token: a made-up word splits more than we guess
    ("antidisestablishmentarianism", 6, 6),  # ant|idis|establish|ment|arian|ism
    ("2 + 2 = 4", 7, 7),  # 2| +| |2| =| |4: a space before a digit stands alone
    ("お誕生日おめでとう", 9, 9),  # one per kana/kanji here
    ("Hello, world!", 4, 4),
    ("The quick brown fox jumps over the lazy dog", 9, 9),
]


@pytest.mark.parametrize(("text", "cl100k", "estimate"), CL100K_FIXTURES)
def test_estimate_against_known_cl100k_counts(text: str, cl100k: int, estimate: int) -> None:
    assert estimate_tokens(text) == estimate
    assert abs(estimate - cl100k) <= max(1, cl100k // 5)


def test_estimate_is_within_ten_percent_of_cl100k_over_the_fixtures() -> None:
    ours = sum(estimate_tokens(text) for text, _, _ in CL100K_FIXTURES)
    theirs = sum(cl100k for _, cl100k, _ in CL100K_FIXTURES)
    assert abs(ours - theirs) <= theirs * 0.1


def test_english_prose_is_about_one_point_three_tokens_a_word() -> None:
    prose = (
        "I'd like to return the shoes I bought last week. They arrived on Monday, but they are "
        "too small, and the colour is not what the website showed. Could you tell me who pays "
        "for the return shipping, and how long the refund usually takes? I would prefer a "
        "refund to my card rather than store credit, if that is possible."
    )
    ratio = estimate_tokens(prose) / len(prose.split())
    assert 1.1 <= ratio <= 1.45


def test_cjk_characters_are_about_one_token_each() -> None:
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("星河商店的退货期限为签收后七天") == 15
    # Chinese punctuation is a token each; digits group by three; a space before a digit counts.
    assert estimate_tokens("签收后 7 天。") == 3 + 1 + 1 + 1 + 1
    assert estimate_tokens("안녕하세요") == 5
    mixed = "我想用 Python 写一个 WebSocket server。"
    assert estimate_tokens(mixed) == 3 + 1 + 3 + 2 + 1 + 1  # WebSocket: 9 letters, 2
    # Other alphabets: about one token per two letters.
    assert estimate_tokens("Привет мир") == 5


def test_cjk_weight_scales_only_cjk_and_rounds_up() -> None:
    counter = EstimatingTokenCounter(cjk_tokens_per_char=1.5)
    assert counter.count("你好世界") == 6
    assert counter.count("你好") == 3
    assert counter.count("hello world") == 2
    with pytest.raises(ValueError):
        EstimatingTokenCounter(cjk_tokens_per_char=0)


def test_whitespace_punctuation_and_symbols() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a\nb") == 3
    assert estimate_tokens("a\n\n\nb") == 3  # a run of line breaks is one token
    assert estimate_tokens("I'm fine, it's ok") == 7  # 'm and 's are one token each
    assert estimate_tokens("wait...") == 2
    assert estimate_tokens("🙂") == 2
    assert estimate_tokens("12345678") == 3


_LINE = st.text(
    alphabet=st.sampled_from(list("abcXYZ 012345,.!?'你好世界。，é🙂Жж\t")), max_size=40
).map(str.strip)


@given(st.lists(_LINE.filter(bool), min_size=1, max_size=6))
def test_counts_are_additive_over_lines(lines: list[str]) -> None:
    joined = "\n".join(lines)
    assert count_tokens(joined) == sum(count_tokens(line) for line in lines) + len(lines) - 1


@given(st.text(max_size=200))
def test_any_text_is_counted_without_error(text: str) -> None:
    assert estimate_tokens(text) >= 0
    assert count_tokens(text) == estimate_tokens(text)


def test_counting_is_fast_enough_to_run_per_event_per_turn() -> None:
    lines = [
        f"Assistant: Sure! You can return unused items within {i} days of delivery; the shop "
        f"pays for defects. 助手:资料规定签收后 {i} 天内可以退货，质量问题由商店承担运费。"
        for i in range(2000)
    ]
    started = time.perf_counter()
    for line in lines:
        estimate_tokens(line)
    uncached = (time.perf_counter() - started) / len(lines)
    started = time.perf_counter()
    for line in lines:
        count_tokens(line)
        count_tokens(line)
    assert uncached < 200e-6  # ~20 µs on a laptop; generous for a loaded CI machine
    assert time.perf_counter() - started < 1.0
