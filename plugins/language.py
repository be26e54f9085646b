"""Languages: which characters are Chinese, which language a text is in, what a language code
names. The one home of these rules: the brains, speech, the pipeline, the journal, memory and
the knowledge base import them from here (it imports nothing of the project).

The product speaks Chinese and English, so most questions end in "zh" or "en".

Characters
----------
- ``is_cjk_ideograph``: a Chinese character (Han ideograph): the CJK Unified Ideographs with
  Extension A and the supplementary-plane extensions, and the Compatibility Ideographs. This is
  what "Chinese text" means everywhere below, and what the Mandarin voice, the Chinese endpoint
  cues and the Chinese bigram terms work on. ``CJK_IDEOGRAPHS`` is the same ranges for a regex.
- ``joins_without_space``: a character that takes no space next to it — the ideographs and the
  rest of CJK writing (radicals, kana, bopomofo, CJK symbols and punctuation, the full-width and
  half-width forms). It is wider than ``is_cjk_ideograph`` on purpose: "，", "。" and "の" are
  not Chinese characters, yet a word joined to them takes no space either.

Text
----
- ``has_cjk`` / ``detect_language``: a person's turn is Chinese ("zh") when it has any Chinese
  character, else English ("en"): "Nova 耳机" is Chinese.
- ``dominant_language``: a text is Chinese when it has at least as many Chinese characters as
  Latin words, English when it has more words, "" without letters: an English sentence naming
  星河 stays English, 「Tidewater Inn 几点退房?」 is Chinese. The knowledge base labels its
  passages by it; the brain reads the person's turn by it.

Codes
-----
- ``normalise_language``: a language code's primary subtag, lower-case, the ISO 639-1 code
  where we know one ("zh-CN", "cmn", "zho" → "zh"; "en_US", "eng" → "en"; "fr-CA" → "fr");
  None for no code. It does not judge whether the code is a language.
- ``product_language``: which of the product's languages a code names ("zh", "en"), or None.
- ``zh_or_en``: the product's language for a setting, English unless it names Chinese (the
  labels, prompts and fixed sentences come in these two).
"""

from __future__ import annotations

import re
from typing import Literal

ProductLanguage = Literal["zh", "en"]

_IDEOGRAPH_RANGES = (
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0x20000, 0x2FA1F),  # Extensions B–F and the Compatibility Ideographs Supplement
)
CJK_IDEOGRAPHS = "".join(f"{chr(low)}-{chr(high)}" for low, high in _IDEOGRAPH_RANGES)
"""The ranges of ``is_cjk_ideograph`` as the inside of a regex character class."""

_IDEOGRAPH = re.compile(f"[{CJK_IDEOGRAPHS}]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_ALIASES = {"cmn": "zh", "zho": "zh", "chi": "zh", "eng": "en"}


def is_cjk_ideograph(char: str) -> bool:
    """Whether ``char`` (one character) is a Chinese character."""
    code = ord(char)
    return any(low <= code <= high for low, high in _IDEOGRAPH_RANGES)


def joins_without_space(char: str) -> bool:
    """Whether ``char`` (one character) takes no space next to it (CJK writing)."""
    return (
        "\u2e80" <= char <= "\u9fff"  # radicals … CJK punctuation, kana, … Unified Ideographs
        or "\uf900" <= char <= "\ufaff"  # Compatibility Ideographs
        or "\uff00" <= char <= "\uffef"  # half-width and full-width forms
        or "\U00020000" <= char <= "\U0002fa1f"  # ideographs of the supplementary planes
    )


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese character."""
    return _IDEOGRAPH.search(text) is not None


def detect_language(text: str) -> ProductLanguage:
    """``zh`` when ``text`` has a Chinese character, else ``en``."""
    return "zh" if has_cjk(text) else "en"


def dominant_language(text: str) -> Literal["zh", "en", ""]:
    """``zh`` when ``text`` has at least as many Chinese characters as Latin words (a Chinese
    word is one or two characters), else ``en``; empty for no letters. So "Nova X2 耳机充满电要
    多长时间?" and 「Tidewater Inn 几点退房?」 are Chinese, and an English sentence naming 星河 is
    English. Letters were counted before: the two English words of an inn's name outweighed
    the four characters of the question."""
    chinese = len(_IDEOGRAPH.findall(text))
    latin = len(_LATIN_WORD.findall(text))
    if not chinese and not latin:
        return ""
    return "zh" if chinese >= latin else "en"


def normalise_language(code: str | None) -> str | None:
    """``"zh-CN"``, ``"cmn"`` → ``"zh"``; ``"en_US"``, ``"eng"`` → ``"en"``; ``"fr-CA"`` →
    ``"fr"``; None for None or a blank code."""
    if code is None:
        return None
    primary = code.strip().lower().replace("_", "-").split("-")[0]
    return _ALIASES.get(primary, primary) if primary else None


def product_language(code: str | None) -> ProductLanguage | None:
    """``"zh"`` or ``"en"`` when ``code`` names one of them, else None."""
    primary = normalise_language(code)
    if primary == "zh":
        return "zh"
    return "en" if primary == "en" else None


def zh_or_en(code: str | None) -> ProductLanguage:
    """``"zh"`` when ``code`` names Chinese, else ``"en"``."""
    return product_language(code) or "en"


__all__ = [
    "CJK_IDEOGRAPHS",
    "ProductLanguage",
    "detect_language",
    "dominant_language",
    "has_cjk",
    "is_cjk_ideograph",
    "joins_without_space",
    "normalise_language",
    "product_language",
    "zh_or_en",
]
