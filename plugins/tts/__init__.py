"""Embedded text-to-speech: Piper for English, eSpeak NG for Mandarin and as the fallback.

``create_tts("auto")`` gives a ``LanguageRoutingTTS``: Chinese (language "zh", or text with CJK
ideographs) goes to eSpeak NG's ``cmn`` voice, English to Piper's ``en_US-joe-medium``, other
languages to eSpeak NG's voice for that language. If Piper cannot be loaded, English goes to
eSpeak NG from then on. The engines are imported lazily, so importing this package is cheap.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from plugins.contracts import TTS, SpeechChunk
from plugins.errors import PluginUnavailable
from plugins.language import has_cjk, normalise_language

logger = logging.getLogger(__name__)

TTS_NAMES = ("auto", "piper", "espeak")
_ESPEAK_WORDS_PER_MINUTE = 175


class LanguageRoutingTTS:
    """Sends each sentence to the engine for its language.

    Chinese goes to ``chinese`` with language "zh"; English (or no language) to ``english``,
    falling back to ``fallback`` for good once ``english`` raises ``PluginUnavailable`` before
    its first chunk; any other language goes to ``fallback``. ``voice`` is passed to ``english``
    only: the other engines choose theirs from the language.
    """

    def __init__(self, *, english: TTS, chinese: TTS, fallback: TTS) -> None:
        self.english = english
        self.chinese = chinese
        self.fallback = fallback
        self.english_available = True

    async def stream(
        self, text: str, *, voice: str | None = None, language: str | None = None
    ) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` with the engine for its language."""
        base = normalise_language(language)
        if base == "zh" or has_cjk(text):
            async for chunk in self.chinese.stream(text, voice=None, language="zh"):
                yield chunk
            return
        if base in (None, "en") and self.english_available:
            started = False
            try:
                async for chunk in self.english.stream(text, voice=voice, language=language):
                    started = True
                    yield chunk
                return
            except PluginUnavailable as e:
                if started:
                    raise
                self.english_available = False
                logger.warning("English TTS unavailable, using the fallback from now on: %s", e)
        async for chunk in self.fallback.stream(text, voice=None, language=language or "en"):
            yield chunk

    async def warm_up(self) -> None:
        """Load every engine now, so the first sentence does not pay for it."""
        for engine in {id(e): e for e in (self.english, self.chinese, self.fallback)}.values():
            warm = getattr(engine, "warm_up", None)
            if warm is None:
                continue
            try:
                await warm()
            except PluginUnavailable as e:
                if engine is self.english:
                    self.english_available = False
                logger.warning("TTS engine unavailable at start: %s", e)


def create_tts(name: str = "auto", *, speed: float = 1.0) -> TTS:
    """The embedded TTS called ``name`` ("auto", "piper" or "espeak"). ``speed`` scales the
    speaking rate of every engine (1.0 is each voice's normal pace)."""
    from plugins.tts.espeak import EspeakTTS
    from plugins.tts.piper import PiperTTS

    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    words_per_minute = min(450, max(80, round(_ESPEAK_WORDS_PER_MINUTE * speed)))
    if name == "espeak":
        return EspeakTTS(words_per_minute=words_per_minute)
    if name == "piper":
        return PiperTTS(speed=speed)
    if name == "auto":
        espeak = EspeakTTS(words_per_minute=words_per_minute)
        return LanguageRoutingTTS(english=PiperTTS(speed=speed), chinese=espeak, fallback=espeak)
    raise ValueError(f"unknown TTS {name!r}; expected one of {', '.join(TTS_NAMES)}")
