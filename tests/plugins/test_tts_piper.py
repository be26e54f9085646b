"""Piper with the bundled en_US-joe-medium voice: real synthesis, loaded once per session."""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np
import pytest

import plugins.tts.piper as piper_module
from plugins.errors import PluginError, PluginUnavailable
from plugins.tts.piper import PiperTTS
from plugins.tts.piper_voice import LoadedVoice, bundled_joe_model, load_voice, with_duration_output
from tests.plugins.tts_checks import (
    absolute_words,
    assert_speech,
    collect,
    duration_s,
    spoken_spans,
)

SAMPLE_RATE = 22_050
ENGLISH = "The quick brown fox jumps over the lazy dog, then it rests for 42 minutes."
TWO_SENTENCES = "I want to go to the store in the morning. Then we will see what happens."


@pytest.fixture(scope="session")
def joe() -> LoadedVoice:
    return load_voice(bundled_joe_model())


@pytest.fixture
def piper(joe: LoadedVoice) -> PiperTTS:
    """Noise off, so the same text gives the same samples."""
    return PiperTTS(noise_scale=0.0, noise_w_scale=0.0)


def test_bundled_voice_loads_once_with_phoneme_durations(joe: LoadedVoice) -> None:
    assert joe.has_durations
    assert joe.sample_rate == SAMPLE_RATE
    assert load_voice(bundled_joe_model()) is joe

    chunk = next(iter(joe.voice.synthesize("Hello there.", include_alignments=True)))
    assert chunk.phoneme_alignments is not None
    assert sum(a.num_samples for a in chunk.phoneme_alignments) == chunk.audio_int16_array.size


async def test_english_sentence_gives_int16_audio_with_word_timings(piper: PiperTTS) -> None:
    chunks = await collect(piper, ENGLISH, language="en")

    assert 3.0 < duration_s(chunks) < 9.0
    assert_speech(chunks, ENGLISH, sample_rate=SAMPLE_RATE, words=r"\w+")
    assert spoken_spans(chunks, ENGLISH) == [word.strip(",.") for word in ENGLISH.split()]


async def test_each_sentence_streams_as_its_own_chunk(piper: PiperTTS) -> None:
    chunks = await collect(piper, TWO_SENTENCES, language="en-US")

    assert len(chunks) == 2
    assert_speech(chunks, TWO_SENTENCES, sample_rate=SAMPLE_RATE, words=r"\w+")
    assert [TWO_SENTENCES[w.text_start : w.text_end] for w in chunks[1].words] == [
        "Then",
        "we",
        "will",
        "see",
        "what",
        "happens",
    ]


async def test_words_espeak_joins_still_get_their_own_timings(piper: PiperTTS) -> None:
    text = "We met in the morning."  # phonemized as "ɪnðə": one phoneme word for two words
    words = absolute_words(await collect(piper, text))

    assert [text[w.text_start : w.text_end] for w in words] == ["We", "met", "in", "the", "morning"]
    in_, the = words[2], words[3]
    assert in_.end_ms == pytest.approx(the.start_ms)
    assert the.end_ms - the.start_ms > 20


async def test_without_durations_timings_are_spread_over_the_phonemes(
    joe: LoadedVoice, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = LoadedVoice(joe.voice, has_durations=False, phonemize_word=joe.phonemize_word)
    monkeypatch.setattr(piper_module, "load_voice", lambda path: without)
    piper = PiperTTS(noise_scale=0.0, noise_w_scale=0.0)

    chunks = await collect(piper, ENGLISH)

    assert_speech(chunks, ENGLISH, sample_rate=SAMPLE_RATE, words=r"\w+")


async def test_speed_changes_the_duration(joe: LoadedVoice) -> None:
    fast = PiperTTS(speed=1.6, noise_scale=0.0, noise_w_scale=0.0)
    slow = PiperTTS(length_scale=1.6, noise_scale=0.0, noise_w_scale=0.0)

    fast_chunks, slow_chunks = await asyncio.gather(collect(fast, ENGLISH), collect(slow, ENGLISH))

    assert duration_s(fast_chunks) < 0.6 * duration_s(slow_chunks)


async def test_cancelling_between_sentences_returns_promptly_and_next_call_works(
    piper: PiperTTS,
) -> None:
    reference = await collect(piper, ENGLISH)
    long_text = " ".join(f"This is sentence number {n} of a long answer." for n in range(12))
    first_chunk = asyncio.Event()
    chunks_seen = 0

    async def listen() -> None:
        nonlocal chunks_seen
        stream = piper.stream(long_text, voice=None, language="en")
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            async for _ in stream:
                chunks_seen += 1
                first_chunk.set()

    task = asyncio.create_task(listen())
    await first_chunk.wait()
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert time.perf_counter() - started < 0.2
    assert chunks_seen < 12
    after = await collect(piper, ENGLISH)
    assert [c.words for c in after] == [c.words for c in reference]
    assert all(np.array_equal(a.pcm, b.pcm) for a, b in zip(after, reference, strict=True))


async def test_concurrent_calls_do_not_mix_their_audio_or_words(piper: PiperTTS) -> None:
    texts = [ENGLISH, TWO_SENTENCES, "Good morning!"]
    alone = [await collect(piper, text) for text in texts]

    together = await asyncio.gather(*(collect(piper, text) for text in texts * 2))

    for index, chunks in enumerate(together):
        expected = alone[index % len(texts)]
        assert [c.words for c in chunks] == [c.words for c in expected]
        assert all(np.array_equal(a.pcm, b.pcm) for a, b in zip(chunks, expected, strict=True))


async def test_other_languages_are_refused(piper: PiperTTS) -> None:
    with pytest.raises(PluginUnavailable):
        await collect(piper, "你好", language="zh")


async def test_blank_text_yields_nothing_and_overlong_text_is_refused(piper: PiperTTS) -> None:
    assert await collect(piper, " \n") == []
    with pytest.raises(PluginError):
        await collect(piper, "a" * (piper.max_text_chars + 1))


async def test_a_missing_model_is_unavailable() -> None:
    missing = PiperTTS(model_path=bundled_joe_model().with_name("missing.onnx"))

    with pytest.raises(PluginUnavailable):
        await collect(missing, "Hello.")


def test_duration_patch_is_idempotent_and_rejects_garbage(joe: LoadedVoice) -> None:
    model = bundled_joe_model().read_bytes()
    patched = with_duration_output(model)

    assert len(patched) > len(model)
    assert with_duration_output(patched) == patched
    with pytest.raises(ValueError):
        with_duration_output(b"\xff\xff\xff")


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        PiperTTS(speed=1.2, length_scale=0.8)
    with pytest.raises(ValueError):
        PiperTTS(speed=0)
