"""The TTS factory and the language router, with scripted fake engines."""

from __future__ import annotations

from collections.abc import AsyncIterator

import numpy as np
import pytest

from plugins.contracts import SpeechChunk
from plugins.errors import PluginUnavailable
from plugins.tts import LanguageRoutingTTS, create_tts
from plugins.tts.espeak import EspeakTTS
from plugins.tts.piper import PiperTTS
from plugins.tts.piper_voice import bundled_joe_model
from tests.plugins.tts_checks import assert_speech, collect


class ScriptedTTS:
    """Records its calls; yields one silent chunk, or raises ``error`` before any audio."""

    def __init__(self, name: str, *, error: Exception | None = None) -> None:
        self.name = name
        self.error = error
        self.calls: list[tuple[str, str | None, str | None]] = []

    async def stream(
        self, text: str, *, voice: str | None = None, language: str | None = None
    ) -> AsyncIterator[SpeechChunk]:
        self.calls.append((text, voice, language))
        if self.error is not None:
            raise self.error
        yield SpeechChunk(pcm=np.zeros(10, np.int16), sample_rate=16_000)


def make_router(
    *, english_error: Exception | None = None
) -> tuple[LanguageRoutingTTS, ScriptedTTS, ScriptedTTS, ScriptedTTS]:
    english = ScriptedTTS("english", error=english_error)
    chinese = ScriptedTTS("chinese")
    fallback = ScriptedTTS("fallback")
    return (
        LanguageRoutingTTS(english=english, chinese=chinese, fallback=fallback),
        english,
        chinese,
        fallback,
    )


async def test_chinese_by_language_or_by_characters_goes_to_the_chinese_engine() -> None:
    router, english, chinese, _ = make_router()

    await collect(router, "你好。")
    await collect(router, "ni hao", language="zh-CN")
    await collect(router, "Hello there.", voice="joe", language="en")

    assert chinese.calls == [("你好。", None, "zh"), ("ni hao", None, "zh")]
    assert english.calls == [("Hello there.", "joe", "en")]


async def test_unavailable_english_engine_falls_back_for_good() -> None:
    router, english, _, fallback = make_router(english_error=PluginUnavailable("no model"))

    assert len(await collect(router, "Hello.")) == 1
    assert len(await collect(router, "Again.", language="en")) == 1

    assert len(english.calls) == 1
    assert fallback.calls == [("Hello.", None, "en"), ("Again.", None, "en")]
    assert not router.english_available


async def test_other_languages_go_to_the_fallback() -> None:
    router, english, _, fallback = make_router()

    await collect(router, "Bonjour.", language="fr")

    assert english.calls == []
    assert fallback.calls == [("Bonjour.", None, "fr")]


def test_create_tts_builds_the_named_engine() -> None:
    auto = create_tts()
    assert isinstance(auto, LanguageRoutingTTS)
    assert isinstance(auto.english, PiperTTS)
    assert isinstance(auto.chinese, EspeakTTS)
    assert isinstance(create_tts("espeak", speed=2.0), EspeakTTS)
    assert create_tts("espeak", speed=2.0).words_per_minute == 350  # type: ignore[attr-defined]
    assert isinstance(create_tts("piper"), PiperTTS)
    with pytest.raises(ValueError, match="bogus"):
        create_tts("bogus")


async def test_real_router_speaks_mandarin_with_espeak_and_falls_back_without_piper() -> None:
    espeak = EspeakTTS()
    missing_piper = PiperTTS(model_path=bundled_joe_model().with_name("missing.onnx"))
    router = LanguageRoutingTTS(english=missing_piper, chinese=espeak, fallback=espeak)

    mandarin = await collect(router, "我们一起去公园散步吧。")
    english = await collect(router, "Nobody could load the Piper voice.", language="en")

    assert_speech(mandarin, "我们一起去公园散步吧。", sample_rate=22_050, words=r"[\u4e00-\u9fff]")
    assert_speech(english, "Nobody could load the Piper voice.", sample_rate=22_050, words=r"\w+")
    assert not router.english_available
