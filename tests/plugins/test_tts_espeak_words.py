"""Cutting eSpeak's samples and events into chunks of whole words, with scripted events."""

from __future__ import annotations

import numpy as np

from plugins.contracts import SpeechChunk
from plugins.tts.espeak_words import WordChunker, text_tokens

RATE = 1000  # one sample per millisecond keeps the numbers readable


def audio(samples: int) -> np.ndarray:
    return np.ones(samples, dtype=np.int16)


def spans(text: str, chunks: list[SpeechChunk]) -> list[tuple[str, float, float]]:
    out = []
    offset = 0.0
    for chunk in chunks:
        for w in chunk.words:
            out.append((text[w.text_start : w.text_end], w.start_ms + offset, w.end_ms + offset))
        offset += chunk.pcm.size * 1000 / chunk.sample_rate
    return out


def test_tokens_split_on_space_and_punctuation_and_per_ideograph() -> None:
    text = "Hi, 42 — 你好Python！"

    assert [text[a:b] for a, b in text_tokens(text)] == ["Hi", "42", "你", "好", "Python"]


def test_words_span_to_the_next_word_and_end_at_the_first_pause() -> None:
    text = "Hello world, again."
    chunker = WordChunker(text, sample_rate=RATE, min_chunk_samples=0)
    chunker.add_audio(audio(1000))
    chunker.word_started(1, 0)
    chunker.phoneme(b"h", 0)
    chunker.word_started(7, 300)
    chunker.phoneme(b"w", 300)
    chunker.phoneme(b"_:", 700)
    chunker.word_started(14, 850)
    chunker.phoneme(b"@", 850)
    chunker.phoneme(b"_:", 980)

    chunks = chunker.take_ready() + chunker.finish()

    assert spans(text, chunks) == [
        ("Hello", 0.0, 300.0),
        ("world", 300.0, 700.0),
        ("again", 850.0, 980.0),
    ]
    assert sum(c.pcm.size for c in chunks) == 1000


def test_a_second_event_inside_the_same_token_continues_the_word() -> None:
    text = "at 42 now"  # eSpeak says "forty two": events at "4" and at "2"
    chunker = WordChunker(text, sample_rate=RATE, min_chunk_samples=0)
    chunker.add_audio(audio(900))
    for position, sample in [(1, 0), (4, 100), (5, 400), (7, 700)]:
        chunker.word_started(position, sample)
        chunker.phoneme(b"a", sample)

    assert spans(text, chunker.finish()) == [
        ("at", 0.0, 100.0),
        ("42", 100.0, 700.0),
        ("now", 700.0, 900.0),
    ]


def test_an_event_between_tokens_belongs_to_the_word_before() -> None:
    text = '😀 "Hello"'  # eSpeak says "grinning face" and reports "face" at the space
    chunker = WordChunker(text, sample_rate=RATE, min_chunk_samples=0)
    chunker.add_audio(audio(1000))
    for position, sample in [(1, 0), (2, 300), (4, 700)]:
        chunker.word_started(position, sample)
        chunker.phoneme(b"a", sample)

    assert spans(text, chunker.finish()) == [("😀", 0.0, 700.0), ("Hello", 700.0, 1000.0)]


def test_chunks_are_cut_at_word_starts_once_long_enough() -> None:
    text = "one two three four"
    chunker = WordChunker(text, sample_rate=RATE, min_chunk_samples=250)
    cut: list[SpeechChunk] = []
    for position, sample in [(1, 0), (5, 200), (9, 400), (15, 600)]:
        chunker.add_audio(audio(200))
        chunker.word_started(position, sample)
        chunker.phoneme(b"a", sample)
        cut += chunker.take_ready()
    chunker.add_audio(audio(200))
    cut += chunker.finish()

    assert [c.pcm.size for c in cut] == [400, 600]
    assert [len(c.words) for c in cut] == [2, 2]
    assert all(0 <= w.start_ms <= w.end_ms <= c.pcm.size for c in cut for w in c.words)
    assert [w for w, _, _ in spans(text, cut)] == ["one", "two", "three", "four"]


def test_text_before_the_first_event_belongs_to_the_first_word() -> None:
    text = "Mr Smith"
    chunker = WordChunker(text, sample_rate=RATE, min_chunk_samples=0)
    chunker.add_audio(audio(500))
    chunker.word_started(4, 0)

    assert spans(text, chunker.finish()) == [("Mr Smith", 0.0, 500.0)]
