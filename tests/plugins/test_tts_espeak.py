"""eSpeak NG through ctypes: real synthesis with the library shipped in espeakng-loader."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

import plugins.tts.espeak as espeak_module
from pipeline.audio import PCM
from plugins.errors import PluginError, PluginUnavailable
from plugins.tts.espeak import SAMPLE_RATE, EspeakTTS
from plugins.tts.espeak_words import WordChunker
from tests.plugins.tts_checks import (
    absolute_words,
    assert_speech,
    collect,
    duration_s,
    spoken_spans,
)

ENGLISH = "The quick brown fox jumps over the lazy dog, then it rests for 42 minutes."
MANDARIN = "今天天气很好，我们一起去公园散步吧。"
HAN = r"[\u4e00-\u9fff]"


@pytest.fixture(scope="module")
def espeak() -> EspeakTTS:
    return EspeakTTS()


async def test_english_sentence_streams_int16_audio_with_word_timings(espeak: EspeakTTS) -> None:
    chunks = await collect(espeak, ENGLISH, language="en")

    assert len(chunks) > 1
    assert 3.0 < duration_s(chunks) < 9.0
    assert_speech(chunks, ENGLISH, sample_rate=SAMPLE_RATE, words=r"\w+")
    assert spoken_spans(chunks, ENGLISH)[:3] == ["The", "quick", "brown"]


async def test_mandarin_sentence_times_every_character(espeak: EspeakTTS) -> None:
    chunks = await collect(espeak, MANDARIN, language="zh")

    assert 2.0 < duration_s(chunks) < 9.0
    assert_speech(chunks, MANDARIN, sample_rate=SAMPLE_RATE, words=HAN)


async def test_word_positions_count_characters_not_bytes(espeak: EspeakTTS) -> None:
    mixed = "我喜欢Python和音乐。"
    accented = "Café naïve — résumé “test”"

    mixed_spans = spoken_spans(await collect(espeak, mixed, language="zh"), mixed)
    accented_spans = spoken_spans(await collect(espeak, accented, language="en"), accented)

    assert "Python" in mixed_spans
    assert "".join(mixed_spans) == "我喜欢Python和音乐"
    assert accented_spans == ["Café", "naïve", "résumé", "test"]


async def test_chinese_text_without_language_uses_mandarin_voice(espeak: EspeakTTS) -> None:
    assert espeak.voice_for(MANDARIN, voice=None, language=None) == "cmn"
    assert espeak.voice_for(ENGLISH, voice=None, language=None) == "en-us"
    assert espeak.voice_for(ENGLISH, voice=None, language="zh-CN") == "cmn"
    assert espeak.voice_for(ENGLISH, voice="en-gb", language="zh") == "en-gb"


async def test_words_per_minute_sets_the_speaking_rate() -> None:
    fast = EspeakTTS(words_per_minute=320)
    slow = EspeakTTS(words_per_minute=120)

    fast_chunks, slow_chunks = await asyncio.gather(
        collect(fast, ENGLISH, language="en"), collect(slow, ENGLISH, language="en")
    )

    assert duration_s(fast_chunks) < 0.6 * duration_s(slow_chunks)


LONG_TEXT = " ".join([ENGLISH] * 24)


@pytest.fixture
def received_samples(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the sample buffers eSpeak hands to the synth callback from now on."""
    received: list[int] = []

    class CountingChunker(WordChunker):
        def add_audio(self, samples: PCM) -> None:
            received.append(samples.size)
            super().add_audio(samples)

    monkeypatch.setattr(espeak_module, "WordChunker", CountingChunker)
    return received


async def _listen_until_cancelled(stream: AsyncIterator[object], first: asyncio.Event) -> None:
    async for _ in stream:
        first.set()
        await asyncio.sleep(3600)


async def _drain_espeak_worker() -> None:
    """Returns once every eSpeak job queued so far has finished (the pool has one thread)."""
    await espeak_module._espeak_pool().run(lambda: None)


async def test_cancelling_mid_sentence_aborts_synthesis_and_engine_stays_usable(
    espeak: EspeakTTS, received_samples: list[int]
) -> None:
    reference = await collect(espeak, ENGLISH, language="en")
    slow = EspeakTTS(words_per_minute=80, max_text_chars=len(LONG_TEXT))
    full_samples = sum(chunk.pcm.size for chunk in await collect(slow, LONG_TEXT))
    received_samples.clear()
    first_chunk = asyncio.Event()

    async def listen() -> None:
        stream = slow.stream(LONG_TEXT, voice=None, language="en")
        async with contextlib.aclosing(stream):  # type: ignore[type-var]
            await _listen_until_cancelled(stream, first_chunk)

    task = asyncio.create_task(listen())
    await first_chunk.wait()
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert time.perf_counter() - started < 1.0
    assert sum(received_samples) < full_samples / 2
    after = await collect(espeak, ENGLISH, language="en")
    assert spoken_spans(after, ENGLISH) == spoken_spans(reference, ENGLISH)
    assert duration_s(after) == pytest.approx(duration_s(reference), rel=0.02)


async def test_a_stream_dropped_by_a_cancelled_task_is_finalized_and_aborts(
    received_samples: list[int],
) -> None:
    slow = EspeakTTS(words_per_minute=80, max_text_chars=len(LONG_TEXT))
    full_samples = sum(chunk.pcm.size for chunk in await collect(slow, LONG_TEXT))
    received_samples.clear()
    first_chunk = asyncio.Event()

    task = asyncio.create_task(
        _listen_until_cancelled(slow.stream(LONG_TEXT, voice=None, language="en"), first_chunk)
    )
    await first_chunk.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _drain_espeak_worker()

    assert sum(received_samples) < full_samples / 2


async def test_closing_the_stream_early_leaves_the_engine_usable(espeak: EspeakTTS) -> None:
    stream = espeak.stream(" ".join([ENGLISH] * 10), voice=None, language="en")
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]

    chunks = await collect(espeak, MANDARIN, language="zh")
    assert_speech(chunks, MANDARIN, sample_rate=SAMPLE_RATE, words=HAN)


async def test_concurrent_calls_do_not_mix_their_audio_or_words(espeak: EspeakTTS) -> None:
    english_alone = await collect(espeak, ENGLISH, language="en")
    mandarin_alone = await collect(espeak, MANDARIN, language="zh")

    results = await asyncio.gather(
        *(
            collect(espeak, text, language=lang)
            for text, lang in [(ENGLISH, "en"), (MANDARIN, "zh")] * 3
        )
    )

    for index, chunks in enumerate(results):
        text, alone = (ENGLISH, english_alone) if index % 2 == 0 else (MANDARIN, mandarin_alone)
        assert spoken_spans(chunks, text) == spoken_spans(alone, text)
        assert duration_s(chunks) == pytest.approx(duration_s(alone), rel=0.02)
        starts = [word.start_ms for word in absolute_words(chunks)]
        assert starts == pytest.approx([w.start_ms for w in absolute_words(alone)], abs=30)


async def test_an_unknown_voice_falls_back_to_the_language_voice(espeak: EspeakTTS) -> None:
    named = await collect(espeak, MANDARIN, voice="alloy", language="zh")
    plain = await collect(espeak, MANDARIN, language="zh")

    assert spoken_spans(named, MANDARIN) == spoken_spans(plain, MANDARIN)
    assert duration_s(named) == pytest.approx(duration_s(plain), rel=0.02)


async def test_no_usable_voice_is_unavailable_and_engine_recovers() -> None:
    broken = EspeakTTS(default_voice="no-such-voice")

    with pytest.raises(PluginUnavailable):
        await collect(broken, ENGLISH, voice="nor-this-one")

    assert_speech(
        await collect(broken, ENGLISH, language="en"),
        ENGLISH,
        sample_rate=SAMPLE_RATE,
        words=r"\w+",
    )


async def test_blank_text_yields_nothing_and_overlong_text_is_refused(espeak: EspeakTTS) -> None:
    assert await collect(espeak, "  \n ") == []
    with pytest.raises(PluginError):
        await collect(espeak, "a" * (espeak.max_text_chars + 1))


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="words_per_minute"):
        EspeakTTS(words_per_minute=10)
    with pytest.raises(ValueError, match="pitch"):
        EspeakTTS(pitch=200)
