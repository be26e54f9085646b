"""Which characters are Chinese, which language a text is in, what a language code names
(``plugins/language.py``)."""

from __future__ import annotations

import re

import pytest

from plugins.language import (
    CJK_IDEOGRAPHS,
    detect_language,
    dominant_language,
    has_cjk,
    is_cjk_ideograph,
    joins_without_space,
    normalise_language,
    product_language,
    zh_or_en,
)

# ---------------------------------------------------------------- characters

IDEOGRAPHS = ["退", "中", "\u3400", "\u4dbf", "\u9fff", "\uf900", "\U00020000", "\U0002a6d6"]
CJK_NOT_IDEOGRAPHS = ["，", "。", "、", "「", "の", "カ", "ㄅ", "⺀", "？", "Ａ", "ｶ"]
NEITHER = ["a", "Z", "7", " ", ",", "?", "é", "ß", "Я", "한", "\u2e7f", "\U0001f600"]


@pytest.mark.parametrize("char", IDEOGRAPHS)
def test_chinese_characters_are_ideographs_and_join_without_space(char: str) -> None:
    assert is_cjk_ideograph(char)
    assert joins_without_space(char)
    assert re.fullmatch(f"[{CJK_IDEOGRAPHS}]", char)


@pytest.mark.parametrize("char", CJK_NOT_IDEOGRAPHS)
def test_cjk_punctuation_kana_and_full_width_forms_join_but_are_not_chinese(char: str) -> None:
    assert joins_without_space(char)
    assert not is_cjk_ideograph(char)
    assert not re.fullmatch(f"[{CJK_IDEOGRAPHS}]", char)


@pytest.mark.parametrize("char", NEITHER)
def test_latin_other_alphabets_hangul_and_emoji_are_neither(char: str) -> None:
    # Korean is written with spaces between its words.
    assert not is_cjk_ideograph(char)
    assert not joins_without_space(char)


# ---------------------------------------------------------------- text


def test_any_chinese_character_makes_a_text_chinese() -> None:
    assert has_cjk("Nova 耳机") and not has_cjk("hello，world。")
    assert detect_language("退货") == "zh"
    assert detect_language("Nova 耳机") == "zh"
    assert detect_language("hello 123") == "en"
    assert detect_language("") == "en"
    assert detect_language("ひらがな") == "en"  # kana alone is not Chinese


def test_the_dominant_language_weighs_characters_against_words() -> None:
    assert dominant_language("Nova X2 耳机充满电要多长时间?") == "zh"
    assert dominant_language("How many days do I have to return an item to the 星河 shop?") == "en"
    assert dominant_language("12:30") == ""
    assert dominant_language("Tidewater Inn 几点退房?") == "zh"  # four characters, two words
    assert dominant_language("Tidewater Inn 退房") == "zh"
    assert dominant_language("Tidewater Inn 房") == "en"


# ---------------------------------------------------------------- codes


@pytest.mark.parametrize(
    ("code", "normalised"),
    [
        ("zh", "zh"),
        ("zh-CN", "zh"),
        ("zh_TW", "zh"),
        ("ZH-Hans-CN", "zh"),
        ("cmn", "zh"),
        ("zho", "zh"),
        ("chi", "zh"),
        ("en", "en"),
        ("en_US", "en"),
        ("en-GB", "en"),
        ("eng", "en"),
        (" en ", "en"),
        ("fr-CA", "fr"),
        ("klingon", "klingon"),  # not judged: the caller decides what it accepts
        ("", None),
        ("  ", None),
        (None, None),
    ],
)
def test_codes_are_normalised_to_their_primary_subtag(code: str | None, normalised: str) -> None:
    assert normalise_language(code) == normalised


@pytest.mark.parametrize(
    ("code", "product", "either"),
    [
        ("zh", "zh", "zh"),
        ("zh-CN", "zh", "zh"),
        ("cmn", "zh", "zh"),
        ("en", "en", "en"),
        ("en-US", "en", "en"),
        ("fr", None, "en"),
        ("", None, "en"),
        (None, None, "en"),
    ],
)
def test_the_products_languages_are_chinese_and_english(
    code: str | None, product: str | None, either: str
) -> None:
    assert product_language(code) == product
    assert zh_or_en(code) == either
