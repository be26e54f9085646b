"""Word timings for Piper: from phoneme durations back to the words of the input text.

Theory of operation. Piper phonemizes the text with eSpeak NG into sentences of IPA symbols
(words separated by spaces and punctuation) and, with durations exposed (see
``plugins.tts.piper_voice``), reports how many samples each symbol lasts. What it does not report
is which input word a symbol came from, and the phoneme words do not map one-to-one onto the
text's words: eSpeak joins some ("in the" → ``ɪnðə``), expands others ("42" → ``fˈɔːɹɾi tˈuː``)
and splits sentences at abbreviations ("Dr." ends a sentence).

So, before synthesis, each text word is phonemized on its own and the concatenation of those
symbols is aligned with the sentence symbols (``difflib.SequenceMatcher``). Matched symbols take
the word they came from. Unmatched symbols take the word of their phoneme word's matched symbols;
phoneme words with no match at all go to the next unclaimed text word when there is a gap of
unclaimed words, otherwise to the previous word. Owners never decrease. A text word that ends up
with no symbols (e.g. a contraction eSpeak swallowed) is merged into its neighbour's timing, so
every word is covered, in order. A word's audio runs from the start of its first symbol to the
end of its last; spaces, punctuation pauses and the leading/trailing silence (BOS/EOS) belong to
no word.
"""

from __future__ import annotations

import itertools
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from plugins.audio import WordTiming


@dataclass(frozen=True, slots=True)
class TextWord:
    """A whitespace-separated word of the input, without surrounding punctuation."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Group:
    """One timed span of text and the phoneme symbols (indices in its sentence) it covers."""

    text_start: int
    text_end: int
    symbols: tuple[int, ...]


def _is_separator(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def is_word_symbol(symbol: str) -> bool:
    """Whether a Piper phoneme symbol is part of a word (not a space or punctuation)."""
    return any(not _is_separator(char) for char in symbol)


def text_words(text: str) -> list[TextWord]:
    """The words of ``text``: whitespace-separated, trimmed of punctuation at both ends."""
    words: list[TextWord] = []
    index = 0
    for piece in text.split():
        start = text.index(piece, index)
        index = start + len(piece)
        end = index
        while start < end and _is_separator(text[start]):
            start += 1
        while end > start and _is_separator(text[end - 1]):
            end -= 1
        if start < end:
            words.append(TextWord(start, end))
    return words


@dataclass(frozen=True, slots=True)
class WordPlan:
    """Which span of text each sentence's phoneme symbols speak, computed before synthesis."""

    sentences: tuple[tuple[str, ...], ...]
    groups: tuple[tuple[_Group, ...], ...]

    def timings(
        self, sentence: int, symbol_samples: Sequence[int], sample_rate: int
    ) -> tuple[WordTiming, ...]:
        """Word timings for one synthesised sentence. ``symbol_samples`` holds the samples of
        each symbol with Piper's BOS first and EOS last (``len(phonemes) + 2`` numbers)."""
        starts = list(itertools.accumulate(symbol_samples, initial=0))
        timings = []
        for group in self.groups[sentence]:
            first, last = min(group.symbols) + 1, max(group.symbols) + 1
            timings.append(
                WordTiming(
                    text_start=group.text_start,
                    text_end=group.text_end,
                    start_ms=starts[first] * 1000.0 / sample_rate,
                    end_ms=starts[last + 1] * 1000.0 / sample_rate,
                )
            )
        return tuple(timings)


def plan_words(
    text: str,
    sentences: Sequence[Sequence[str]],
    phonemize_word: Callable[[str], Sequence[str]],
) -> WordPlan:
    """Align ``sentences`` (Piper's phonemes for ``text``) with the words of ``text``."""
    words = text_words(text)
    positions: list[tuple[int, int]] = []
    phoneme_word: list[int] = []
    symbols: list[str] = []
    word_count = -1
    for s_index, sentence in enumerate(sentences):
        in_word = False
        for p_index, symbol in enumerate(sentence):
            if is_word_symbol(symbol):
                word_count += not in_word
                in_word = True
                positions.append((s_index, p_index))
                phoneme_word.append(word_count)
                symbols.append(symbol)
            else:
                in_word = False
    frozen = tuple(tuple(sentence) for sentence in sentences)
    if not words or not symbols:
        return WordPlan(frozen, tuple(() for _ in sentences))

    expected: list[str] = []
    expected_owner: list[int] = []
    for w_index, word in enumerate(words):
        for symbol in phonemize_word(text[word.start : word.end]):
            if is_word_symbol(symbol):
                expected.append(symbol)
                expected_owner.append(w_index)
    owners: list[int | None] = [None] * len(symbols)
    matcher = SequenceMatcher(None, symbols, expected, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            owners[a + k] = expected_owner[b + k]

    filled = _fill_owners(owners, phoneme_word, len(words))
    return WordPlan(frozen, _groups(words, filled, positions, len(sentences)))


def _fill_owners(owners: list[int | None], phoneme_word: list[int], word_total: int) -> list[int]:
    """Give every symbol a word, by the rules in the module docstring."""
    by_phoneme_word: dict[int, list[int]] = {}
    for index, pw in enumerate(phoneme_word):
        by_phoneme_word.setdefault(pw, []).append(index)
    pw_owner: dict[int, int | None] = {}
    pw_last: dict[int, int] = {}
    for pw, indices in by_phoneme_word.items():
        matched = [owner for i in indices if (owner := owners[i]) is not None]
        pw_owner[pw] = matched[0] if matched else None
        if not matched:
            continue
        pw_last[pw] = matched[-1]
        current = matched[0]
        for i in indices:
            found = owners[i]
            current = found if found is not None else current
            owners[i] = current

    order = sorted(by_phoneme_word)
    next_owner: dict[int, int | None] = {}
    upcoming: int | None = None
    for pw in reversed(order):
        next_owner[pw] = upcoming
        if pw_owner[pw] is not None:
            upcoming = pw_owner[pw]
    previous: int | None = None
    for pw in order:
        owner = pw_owner[pw]
        if owner is None:
            after = next_owner[pw]
            first_free = 0 if previous is None else previous + 1
            if first_free < (word_total if after is None else after):
                owner = first_free
            else:
                owner = previous if previous is not None else (after or 0)
            for i in by_phoneme_word[pw]:
                owners[i] = owner
            previous = owner
        else:
            previous = pw_last[pw]

    result: list[int] = []
    running = 0
    for value in owners:
        running = min(max(running, value if value is not None else running), word_total - 1)
        result.append(running)
    return result


def _groups(
    words: list[TextWord],
    owners: list[int],
    positions: list[tuple[int, int]],
    sentence_total: int,
) -> tuple[tuple[_Group, ...], ...]:
    symbols_of: dict[int, list[tuple[int, int]]] = {}
    for owner, position in zip(owners, positions, strict=True):
        symbols_of.setdefault(owner, []).append(position)
    spans: list[tuple[int, int, list[tuple[int, int]]]] = []
    orphans_start: int | None = None
    for index, word in enumerate(words):
        if index in symbols_of:
            start = word.start if orphans_start is None else orphans_start
            spans.append((start, word.end, symbols_of[index]))
            orphans_start = None
        elif spans:
            start, _, positions_ = spans[-1]
            spans[-1] = (start, word.end, positions_)
        elif orphans_start is None:
            orphans_start = word.start
    per_sentence: list[list[_Group]] = [[] for _ in range(sentence_total)]
    for start, end, positions_ in spans:
        sentence = positions_[0][0]
        indices = tuple(p for s, p in positions_ if s == sentence)
        per_sentence[sentence].append(_Group(start, end, indices))
    return tuple(tuple(groups) for groups in per_sentence)
