"""Checks shared by the TTS plugin tests."""

from __future__ import annotations

import re

import numpy as np

from pipeline.audio import WordTiming
from plugins.contracts import TTS, SpeechChunk

EPSILON_MS = 0.5


async def collect(tts: TTS, text: str, **kwargs: str | None) -> list[SpeechChunk]:
    kwargs.setdefault("voice", None)
    kwargs.setdefault("language", None)
    return [chunk async for chunk in tts.stream(text, **kwargs)]


def duration_s(chunks: list[SpeechChunk]) -> float:
    return sum(chunk.pcm.size / chunk.sample_rate for chunk in chunks)


def absolute_words(chunks: list[SpeechChunk]) -> list[WordTiming]:
    """Word timings with ms counted from the start of the first chunk."""
    words: list[WordTiming] = []
    offset = 0.0
    for chunk in chunks:
        for word in chunk.words:
            words.append(
                WordTiming(
                    word.text_start,
                    word.text_end,
                    word.start_ms + offset,
                    word.end_ms + offset,
                )
            )
        offset += chunk.pcm.size * 1000.0 / chunk.sample_rate
    return words


def assert_speech(chunks: list[SpeechChunk], text: str, *, sample_rate: int, words: str) -> None:
    """Audio is mono int16 at ``sample_rate``; every chunk's word timings lie inside it; timings
    run forward in audio and text; every match of the regex ``words`` in ``text`` is inside
    one timing's text span, in order."""
    assert chunks
    for chunk in chunks:
        assert chunk.sample_rate == sample_rate
        assert chunk.pcm.dtype == np.int16
        assert chunk.pcm.ndim == 1
        assert chunk.pcm.size > 0
        length_ms = chunk.pcm.size * 1000.0 / chunk.sample_rate
        for word in chunk.words:
            assert 0.0 <= word.start_ms <= word.end_ms <= length_ms + EPSILON_MS, word
    assert np.abs(np.concatenate([c.pcm for c in chunks]).astype(np.int32)).max() > 1000

    timings = absolute_words(chunks)
    assert timings
    for word in timings:
        assert 0 <= word.text_start < word.text_end <= len(text), word
    for before, after in zip(timings, timings[1:], strict=False):
        assert before.end_ms <= after.start_ms + EPSILON_MS, (before, after)
        assert before.text_end <= after.text_start, (before, after)

    last = 0
    for match in re.finditer(words, text):
        covering = [
            index
            for index, word in enumerate(timings)
            if word.text_start <= match.start() and match.end() <= word.text_end
        ]
        assert covering, f"no timing covers {match.group()!r}"
        assert covering[0] >= last
        last = covering[0]


def spoken_spans(chunks: list[SpeechChunk], text: str) -> list[str]:
    return [text[word.text_start : word.text_end] for word in absolute_words(chunks)]
