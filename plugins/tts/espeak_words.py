"""Cutting eSpeak NG output into speech chunks with word timings.

Theory of operation. eSpeak NG hands its synth callback a buffer of samples plus the events that
fall inside that buffer, in order: a *word* event carries the 1-based character position of the
word in the input text (characters, not UTF-8 bytes: checked with Chinese and emoji) and the
absolute sample where its audio starts; *phoneme* events (enabled at initialisation) carry the
phoneme mnemonic, pauses start with ``_``.

The text is split into tokens: runs of characters that are neither whitespace nor punctuation,
except that each CJK ideograph is a token of its own. A word event opens a new word at the token
containing its position (or the token before, when the position falls between tokens). An event
that points into the current word's first token continues that word: "42" is spoken "forty two"
with two events but is one token. A word spans the tokens from its own first token to the token
before the next word's, so every token of the text belongs to exactly one word, in order; the
first word also takes any tokens before it.

A word's audio runs from its event's sample to the first pause after one of its phonemes, or to
the next word's start when no pause comes first. A chunk is cut at the start of the newest word
once enough audio has piled up, so each chunk holds whole words and every word's timing lies
inside its chunk; ``finish`` flushes the rest. This is plain bookkeeping with no I/O, fed by the
callback in ``plugins.tts.espeak``.
"""

from __future__ import annotations

import bisect
import unicodedata
from dataclasses import dataclass

import numpy as np

from plugins.audio import PCM, WordTiming
from plugins.contracts import SpeechChunk
from plugins.language import is_cjk_ideograph

_PAUSE_PHONEMES = frozenset({b"_", b"_:", b"_!", b"_!!"})


def text_tokens(text: str) -> list[tuple[int, int]]:
    """Character spans of the text's tokens (see the module docstring)."""
    tokens: list[tuple[int, int]] = []
    start: int | None = None
    for index, char in enumerate(text):
        separator = char.isspace() or unicodedata.category(char).startswith("P")
        if separator or is_cjk_ideograph(char):
            if start is not None:
                tokens.append((start, index))
                start = None
            if not separator:
                tokens.append((index, index + 1))
        elif start is None:
            start = index
    if start is not None:
        tokens.append((start, len(text)))
    return tokens


@dataclass(slots=True)
class _Word:
    first_token: int
    start_sample: int
    last_token: int = -1
    end_sample: int | None = None
    voiced: bool = False
    pause_sample: int | None = None


class WordChunker:
    """Collects samples and events of one synthesis and cuts them into ``SpeechChunk``s."""

    def __init__(self, text: str, *, sample_rate: int, min_chunk_samples: int) -> None:
        self._tokens = text_tokens(text)
        self._token_starts = [start for start, _ in self._tokens]
        self._sample_rate = sample_rate
        self._min_chunk_samples = min_chunk_samples
        self._pending: list[PCM] = []
        self._received = 0
        self._chunk_start = 0
        self._closed: list[_Word] = []
        self._open: _Word | None = None

    def add_audio(self, samples: PCM) -> None:
        if samples.size:
            self._pending.append(samples)
            self._received += samples.size

    def word_started(self, text_position: int, sample: int) -> None:
        """A word event: ``text_position`` is eSpeak's 1-based character position."""
        if not self._tokens:
            return
        token = max(0, bisect.bisect_right(self._token_starts, text_position - 1) - 1)
        sample = max(sample, self._open.start_sample if self._open else self._chunk_start)
        if self._open is None:
            self._open = _Word(first_token=0, start_sample=sample)
        elif token > self._open.first_token:
            self._close_open(last_token=token - 1, next_start=sample)
            self._open = _Word(first_token=token, start_sample=sample)

    def phoneme(self, name: bytes, sample: int) -> None:
        word = self._open
        if word is None or sample < word.start_sample:
            return
        if name in _PAUSE_PHONEMES:
            if word.voiced and word.pause_sample is None:
                word.pause_sample = sample
        elif not name.startswith(b"_"):
            word.voiced = True
            word.pause_sample = None

    def take_ready(self) -> list[SpeechChunk]:
        """Chunks that can be sent now: whole words, at least the minimum length."""
        if self._open is None or not self._closed:
            return []
        boundary = self._open.start_sample
        length = boundary - self._chunk_start
        if boundary > self._received or length <= 0 or length < self._min_chunk_samples:
            return []
        return [self._cut(boundary)]

    def finish(self) -> list[SpeechChunk]:
        """The rest of the audio, once the engine has finished the text."""
        if self._open is not None:
            self._close_open(last_token=len(self._tokens) - 1, next_start=self._received)
            self._open = None
        if self._received <= self._chunk_start:
            return []
        return [self._cut(self._received)]

    def _close_open(self, *, last_token: int, next_start: int) -> None:
        word = self._open
        assert word is not None
        word.last_token = last_token
        end = word.pause_sample if word.pause_sample is not None else next_start
        word.end_sample = max(word.start_sample, min(end, next_start))
        self._closed.append(word)

    def _cut(self, boundary: int) -> SpeechChunk:
        audio = np.concatenate(self._pending) if self._pending else np.zeros(0, np.int16)
        length = boundary - self._chunk_start
        chunk_pcm, rest = audio[:length], audio[length:]
        self._pending = [rest] if rest.size else []
        words = tuple(self._timing(word) for word in self._closed)
        self._closed = []
        self._chunk_start = boundary
        return SpeechChunk(pcm=chunk_pcm, sample_rate=self._sample_rate, words=words)

    def _timing(self, word: _Word) -> WordTiming:
        end_sample = word.end_sample if word.end_sample is not None else word.start_sample
        return WordTiming(
            text_start=self._tokens[word.first_token][0],
            text_end=self._tokens[word.last_token][1],
            start_ms=self._ms(word.start_sample),
            end_ms=self._ms(end_sample),
        )

    def _ms(self, sample: int) -> float:
        return (sample - self._chunk_start) * 1000.0 / self._sample_rate
