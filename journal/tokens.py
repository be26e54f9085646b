"""Counting tokens offline: a calibrated estimator of what a BPE tokenizer (cl100k) would count.

Theory of operation
-------------------
The projector asks "how many tokens is this line?" for every event of every turn, so the answer
must be fast, offline (no vocabulary download) and deterministic. ``EstimatingTokenCounter``
follows cl100k's pre-tokenizer — it splits text roughly where cl100k splits it, in one regex
pass whose every match is one token — and charges each piece what cl100k usually charges:

- CJK (Han, kana, Hangul): 1 token a character. cl100k spends 1 on common characters and 2–3
  on rare ones, newer tokenizers (o200k, Qwen, DeepSeek) often less than 1; 1 is the middle.
- Latin words: 1 token up to 7 letters (cl100k holds most words that short whole, with their
  leading space), then 1 more for every further 5 letters ("antidisestablishmentarianism",
  28 letters: 6). A contraction suffix ('s, 'll, …) is 1.
- Other alphabets (Cyrillic, Greek, Arabic, Devanagari, Thai…): 1 token per 2 letters.
- Digits: groups of up to 3 (cl100k's ``\\p{N}{1,3}``); a space before a digit is a token of
  its own ("2 + 2 = 4" is 7).
- Punctuation and symbols: a run of ASCII punctuation is 1 token per 3 characters (rounded up);
  other punctuation (，。「」…) 1 a character; characters outside the BMP (emoji) 2 each.
- Whitespace: a space before a word is part of the word; a line break (run) is 1; a run of
  2+ spaces is 1.

Calibration (``tests/journal/test_tokens.py`` keeps these as fixtures, counts from the tiktoken
README and the OpenAI cookbook "How to count tokens with tiktoken", cl100k_base):
"tiktoken is great!" 6 (we say 5), "antidisestablishmentarianism" 6 (6), "2 + 2 = 4" 7 (7),
"お誕生日おめでとう" 9 (9), "Hello, world!" 4 (4), "The quick brown fox jumps over the lazy dog"
9 (9). Ordinary English prose comes out near 1.3 tokens a word, Chinese at 1 a character plus
its punctuation. The estimate is not exact; size the projector's safety margin for that.

Counts are additive over lines: ``count(a + "\\n" + b) == count(a) + 1 + count(b)`` when ``a``
does not end and ``b`` does not start with whitespace — so a rendering of whole lines can be
budgeted line by line. Counts of texts up to 4,096 characters are cached (an LRU of 32,768)
because the same event lines are counted turn after turn.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Protocol

__all__ = ["EstimatingTokenCounter", "TokenCounter", "count_tokens", "estimate_tokens"]

# Han (incl. extension A and compatibility), kana, Hangul syllables and jamo, CJK symbols are
# handled as punctuation below. Ranges kept small and explicit: this runs for every event.
# Not ``plugins.language``'s Chinese characters on purpose: these are the scripts a BPE
# tokenizer charges by the character, whatever the language.
_CJK_RANGES = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\u1100-\u11ff"  # Hangul jamo
)
_LATIN = "A-Za-z\u00c0-\u024f"

_CJK_RUN = re.compile(f"[{_CJK_RANGES}]+")
_ASTRAL = re.compile(r"[\U00010000-\U0010ffff]")
_ASCII_PUNCT = r"!-/:-@\[-`{-~"

# Every match is one token. Order matters: earlier alternatives win at a position.
_TOKEN = re.compile(
    "|".join(
        (
            r"'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])(?![A-Za-z])",  # contraction suffix
            f"(?<=[{_LATIN}])[{_LATIN}]{{1,5}}",  # the rest of a long Latin word, 5 at a time
            f"[{_LATIN}]{{1,7}}",  # a Latin word: its first 7 letters
            f"[{_CJK_RANGES}]+",  # a run of CJK characters (counted by length below)
            f"[^\\W\\d_{_LATIN}{_CJK_RANGES}]{{1,2}}",  # other alphabets, 2 letters at a time
            r"[ \t]*[\r\n]+",  # a line break (run)
            r"\d{1,3}",  # digits in groups of 3
            r"\s(?=\d)",  # the space before a digit
            f"[{_ASCII_PUNCT}]{{1,3}}",  # ASCII punctuation, 3 at a time
            f"[^\\w\\s{_ASCII_PUNCT}]",  # other punctuation and symbols
            r"[ \t]{2,}(?=\S)",  # a run of spaces before a word
        )
    )
)

_CACHE_SIZE = 32_768
_CACHE_MAX_CHARS = 4096


class TokenCounter(Protocol):
    """Counts the tokens a model would see for ``text``. Plug in an exact counter if you have
    one; the default is ``EstimatingTokenCounter``."""

    def count(self, text: str) -> int: ...


def estimate_tokens(text: str, *, cjk_tokens_per_char: float = 1.0) -> int:
    """The estimate described in the module docstring (uncached)."""
    other, cjk = _estimate_parts(text)
    return other + _cjk_tokens(cjk, cjk_tokens_per_char)


def _cjk_tokens(characters: int, per_char: float) -> int:
    if per_char == 1.0:
        return characters
    return math.ceil(characters * per_char)


def _estimate_parts(text: str) -> tuple[int, int]:
    """(tokens of everything but CJK characters, number of CJK characters)."""
    if not text:
        return 0, 0
    tokens = len(_TOKEN.findall(text))
    if text.isascii():
        return tokens, 0
    runs = _CJK_RUN.findall(text)
    # Emoji and other characters outside the BMP: a second token each.
    return tokens - len(runs) + len(_ASTRAL.findall(text)), sum(map(len, runs))


_lru_parts = functools.lru_cache(maxsize=_CACHE_SIZE)(_estimate_parts)


def _cached_parts(text: str) -> tuple[int, int]:
    # Only lines of ordinary length are kept: the cache stays under ~_CACHE_SIZE × 4 KiB.
    if len(text) > _CACHE_MAX_CHARS:
        return _estimate_parts(text)
    return _lru_parts(text)


def count_tokens(text: str) -> int:
    """``estimate_tokens`` with a bounded cache: event lines repeat turn after turn."""
    other, cjk = _cached_parts(text)
    return other + cjk


class EstimatingTokenCounter:
    """The default ``TokenCounter``: offline, cached, additive over lines.

    ``cjk_tokens_per_char`` (default 1.0) scales the CJK part: about 1.3–1.5 matches cl100k
    (GPT-4, GPT-3.5) on Chinese prose, 0.6–1.0 o200k and Chinese-first models. With a value
    other than 1 a count is rounded up, so counting lines one by one never undercounts the
    joined text.
    """

    def __init__(self, *, cjk_tokens_per_char: float = 1.0) -> None:
        if not 0 < cjk_tokens_per_char <= 4:
            raise ValueError("cjk_tokens_per_char must be in (0, 4]")
        self.cjk_tokens_per_char = cjk_tokens_per_char

    def count(self, text: str) -> int:
        other, cjk = _cached_parts(text)
        return other + _cjk_tokens(cjk, self.cjk_tokens_per_char)
