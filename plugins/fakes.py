"""Scriptable fakes for every plugin contract, for tests and the runtime-overhead benchmarks.

Each fake takes a script (what to answer, in order) and faults: ``delay`` (seconds before each
result), ``fail`` (raise ``PluginError``), ``hang`` (never answer; the caller's timeout must
fire). Fakes never stand in for a real component in the product: ``make run`` uses the embedded
plugins.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from plugins.audio import PCM, WordTiming
from plugins.contracts import (
    BrainDelta,
    BrainInput,
    EndpointVerdict,
    SpeechChunk,
    Transcript,
    VADEvent,
)
from plugins.errors import PluginError


@dataclass(kw_only=True)
class Faults:
    delay: float = 0.0
    fail: bool = False
    hang: bool = False

    async def apply(self, what: str) -> None:
        if self.hang:
            await asyncio.Event().wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise PluginError(f"fake {what} failed as scripted", retryable=True)


class ScriptedVADStream:
    """Returns scripted events for successive ``process`` calls (then none)."""

    def __init__(self, script: Sequence[Sequence[VADEvent]] = ()) -> None:
        self._script = list(script)

    async def process(self, pcm: PCM) -> Sequence[VADEvent]:
        return self._script.pop(0) if self._script else ()

    def reset(self) -> None:
        self._script.clear()

    @property
    def voiced(self) -> bool:
        return False


class FakeEndpointer:
    def __init__(self, verdicts: Sequence[bool | None] = (), *, faults: Faults | None = None):
        self._verdicts = list(verdicts)
        self.faults = faults or Faults()
        self.calls = 0

    async def predict(self, utterance: PCM) -> EndpointVerdict:
        self.calls += 1
        await self.faults.apply("endpointer")
        complete = self._verdicts.pop(0) if self._verdicts else None
        return EndpointVerdict(complete, 1.0 if complete else 0.0)


class FakeASR:
    """Answers each utterance with the next scripted text (the last one repeats)."""

    def __init__(self, texts: Sequence[str] = ("hello",), *, faults: Faults | None = None):
        self._texts = list(texts)
        self.faults = faults or Faults()
        self.calls = 0

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        self.calls += 1
        await self.faults.apply("asr")
        text = self._texts.pop(0) if len(self._texts) > 1 else self._texts[0]
        return Transcript(text=text, language=language or "en")


T = TypeVar("T")

RECORDED_MAX = 1000
"""A fake keeps the last this many requests it was given (``requests``, ``texts``) for tests to
look at: a fake serving a benchmark for minutes must not keep every one."""


def _record(log: list[T], item: T) -> None:
    log.append(item)
    if len(log) > RECORDED_MAX:
        del log[: len(log) - RECORDED_MAX]


class FakeBrain:
    """Streams scripted replies token by token (one reply per call, the last one repeats)."""

    def __init__(
        self,
        replies: Sequence[str] = ("Sure. Here is the answer. Anything else?",),
        *,
        token_delay: float = 0.0,
        faults: Faults | None = None,
    ) -> None:
        self._replies = list(replies)
        self.token_delay = token_delay
        self.faults = faults or Faults()
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        _record(self.requests, request)
        await self.faults.apply("brain")
        reply = self._replies.pop(0) if len(self._replies) > 1 else self._replies[0]
        for token in _tokens(reply):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            yield BrainDelta(text=token)


class FakeTTS:
    """Produces ``ms_per_char`` of constant-level audio per character, with word timings, in
    chunks of ``chunk_ms``. Not speech: for exercising the runtime only. ``tone_hz`` makes it
    a tone at that level instead (a codec such as Opus keeps no constant level)."""

    def __init__(
        self,
        *,
        sample_rate: int = 24_000,
        ms_per_char: float = 10.0,
        chunk_ms: float = 100.0,
        chunk_delay: float = 0.0,
        faults: Faults | None = None,
        tone_hz: float | None = None,
    ) -> None:
        self.tone_hz = tone_hz
        self.sample_rate = sample_rate
        self.ms_per_char = ms_per_char
        self.chunk_ms = chunk_ms
        self.chunk_delay = chunk_delay
        self.faults = faults or Faults()
        self.texts: list[str] = []

    async def stream(
        self, text: str, *, voice: str | None, language: str | None
    ) -> AsyncIterator[SpeechChunk]:
        _record(self.texts, text)
        await self.faults.apply("tts")
        total_ms = max(len(text), 1) * self.ms_per_char
        words = _word_spans(text)
        per_chunk = int(self.sample_rate * self.chunk_ms / 1000)
        total = int(self.sample_rate * total_ms / 1000)
        level = np.int16(3000)
        offset = 0
        while offset < total:
            n = min(per_chunk, total - offset)
            start_ms = offset * 1000 / self.sample_rate
            end_ms = (offset + n) * 1000 / self.sample_rate
            chunk_words = tuple(
                WordTiming(a, b, ws - start_ms, we - start_ms)
                for a, b, ws, we in (
                    (a, b, a * self.ms_per_char, b * self.ms_per_char) for a, b in words
                )
                if start_ms <= ws < end_ms
            )
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            if self.tone_hz is None:
                pcm = np.full(n, level, dtype=np.int16)
            else:
                t = np.arange(offset, offset + n) / self.sample_rate
                pcm = (float(level) * np.sin(2 * np.pi * self.tone_hz * t)).astype(np.int16)
            yield SpeechChunk(pcm, self.sample_rate, chunk_words)
            offset += n


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    word = ""
    for ch in text:
        word += ch
        if ch == " ":
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out


def _word_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for i, ch in enumerate(text):
        if ch.isspace():
            if start is not None:
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans
