"""A session's models, timed for its usage (``runtime.usage`` Rule 5): the ASR, the brain and the
TTS the session's engine calls, each call's waiting added to the session's model time.

Only the time spent waiting on the model is counted: for a stream, the time inside each
``__anext__`` (the brain's next piece, the TTS's next chunk), not what the session does with a
piece before it asks for the next. Everything else a plugin has (``prepare``, ``load``, a model's
attributes) is the plugin's own, read through.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar

from pipeline.engine_config import Plugins
from pipeline.speaker import aclose
from plugins.audio import PCM
from plugins.contracts import ASR, TTS, Brain, BrainDelta, BrainInput, SpeechChunk, Transcript

T = TypeVar("T")
Used = Callable[[float], None]
"""Where a wait goes: milliseconds (``UsageMeter.used_model``)."""


async def timed(
    stream: AsyncIterator[T], used: Used, clock: Callable[[], float] = time.perf_counter
) -> AsyncGenerator[T, None]:
    """``stream``'s items, the wait for each one counted; closed when the consumer stops."""
    try:
        while True:
            start = clock()
            try:
                item = await anext(stream)
            except StopAsyncIteration:
                return
            finally:
                used((clock() - start) * 1000.0)
            yield item
    finally:
        await aclose(stream)


class _Through:
    def __init__(self, inner: Any, used: Used) -> None:
        self.inner = inner
        self.used = used

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class TimedASR(_Through):
    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        start = time.perf_counter()
        try:
            transcript: Transcript = await self.inner.transcribe(utterance, language=language)
            return transcript
        finally:
            self.used((time.perf_counter() - start) * 1000.0)


class TimedBrain(_Through):
    def stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        return timed(self.inner.stream(request), self.used)


class TimedTTS(_Through):
    def stream(
        self, text: str, *, voice: str | None, language: str | None
    ) -> AsyncGenerator[SpeechChunk, None]:
        return timed(self.inner.stream(text, voice=voice, language=language), self.used)


def metered(plugins: Plugins, used: Used) -> Plugins:
    """``plugins`` with their ASR, brain and TTS timed into ``used``."""
    asr: ASR = TimedASR(plugins.asr, used)
    brain: Brain = TimedBrain(plugins.brain, used)
    tts: TTS = TimedTTS(plugins.tts, used)
    return dataclasses.replace(plugins, asr=asr, brain=brain, tts=tts)
