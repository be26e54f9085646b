"""Speech capture: the microphone buffer of one session and the transcription work on it.

Theory of operation
-------------------
Audio is kept in a bounded *pre-roll* (the last ``preroll_ms``) so that when the coordinator
says a user turn began — possibly well before the VAD was sure, e.g. at a barge-in — the
utterance can start where the speech did. From then on every frame is appended to the
``Utterance`` (at most ``max_utterance_s``).

Transcription is speculative: after ``speculate_after_ms`` of quiet inside an utterance (before
the VAD's hangover confirms the pause) the utterance so far is transcribed; voice coming back
cancels that work. At commit the speculative transcript is used when it exists, so the ASR
latency hides behind the end-of-turn wait. During long speech a partial transcript is made every
``partial_every_s`` (one at a time). All ASR calls are bounded by ``asr_timeout_s``; the ASR
plugin's worker pool bounds the work across sessions.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from plugins.contracts import ASR, Transcript
from plugins.errors import PluginError, PluginTimeout
from plugins.language import product_language

log = logging.getLogger(__name__)

Spawn = Callable[[Awaitable[Any], str], "asyncio.Task[Any]"]


@dataclass
class Utterance:
    turn_id: int
    chunks: list[PCM]
    samples: int = 0
    speculation: asyncio.Task[Transcript] | None = None
    endpoint_task: asyncio.Task[None] | None = None
    partial_task: asyncio.Task[None] | None = None
    speech_end_at: float | None = None
    started_at: float = 0.0
    last_partial_at: float = 0.0
    quiet_since: float | None = None
    asr_started: float | None = None
    """When the transcription that ends up final started and finished (latency breakdown)."""
    asr_done: float | None = None
    speculate_after_ms: float | None = None
    """Quiet that starts the speculation for this utterance (None: the capture's setting)."""

    def audio(self) -> PCM:
        return np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.int16)


class SpeechCapture:
    def __init__(
        self,
        *,
        asr: ASR,
        clock: Callable[[], float],
        spawn: Spawn,
        on_partial: Callable[[int, str], None],
        language: str | None,
        preroll_ms: float,
        max_utterance_s: float,
        asr_timeout_s: float,
        speculate_after_ms: float | None,
        partial_every_s: float | None,
    ) -> None:
        self.asr = asr
        self.clock = clock
        self.spawn = spawn
        self.on_partial = on_partial
        self.language = product_language(language)
        self.preroll_ms = preroll_ms
        self.max_samples = max_utterance_s * INPUT_SAMPLE_RATE
        self.asr_timeout_s = asr_timeout_s
        self.speculate_after_ms = speculate_after_ms
        self.partial_every_s = partial_every_s
        self.utterance: Utterance | None = None
        self._preroll: deque[PCM] = deque()
        self._preroll_samples = 0

    # ------------------------------------------------------------ audio

    def remember(self, pcm: PCM) -> None:
        self._preroll.append(pcm)
        self._preroll_samples += pcm.size
        limit = self.preroll_ms * INPUT_SAMPLE_RATE / 1000
        while self._preroll and self._preroll_samples - self._preroll[0].size >= limit:
            self._preroll_samples -= self._preroll.popleft().size
        utterance = self.utterance
        if utterance is not None and utterance.samples + pcm.size <= self.max_samples:
            utterance.chunks.append(pcm)
            utterance.samples += pcm.size

    def clear_preroll(self) -> None:
        self._preroll.clear()
        self._preroll_samples = 0

    # ------------------------------------------------------------ turn boundaries

    def begin(
        self, turn_id: int, at: float, now: float, *, speculate_after_ms: float | None = None
    ) -> None:
        """A user turn began at ``at``: start the utterance there (plus 200 ms of margin).
        ``speculate_after_ms`` overrides the quiet that starts its speculation."""
        back_ms = max(0.0, (now - at) * 1000.0) + 200.0
        keep = int(min(back_ms, self.preroll_ms) * INPUT_SAMPLE_RATE / 1000)
        chunks: list[PCM] = []
        total = 0
        for chunk in reversed(self._preroll):
            if total >= keep:
                break
            chunks.append(chunk)
            total += chunk.size
        chunks.reverse()
        self.cancel()
        self.utterance = Utterance(
            turn_id, chunks, total, started_at=now, speculate_after_ms=speculate_after_ms
        )

    def pause(self, at: float) -> PCM | None:
        """The VAD confirmed a pause at ``at``: transcribe speculatively (unless that started
        already on this pause). Returns the utterance audio, or None without an utterance."""
        utterance = self.utterance
        if utterance is None:
            return None
        utterance.speech_end_at = at
        _cancel_partial(utterance)
        audio = utterance.audio()
        if utterance.speculation is None:
            utterance.speculation = self.spawn(self._timed(utterance, audio), "asr-speculative")
        return audio

    def resume(self) -> None:
        """Speech resumed within the endpoint window: the pause's work is stale."""
        self.cancel()
        if self.utterance is not None:
            self.utterance.speech_end_at = None

    def drop(self) -> None:
        self.cancel()
        self.utterance = None

    def take(self) -> Utterance | None:
        """The utterance of a committed turn (its speculation keeps running for the response)."""
        utterance, self.utterance = self.utterance, None
        return utterance

    def cancel(self) -> None:
        utterance = self.utterance
        if utterance is None:
            return
        for task in (utterance.speculation, utterance.endpoint_task, utterance.partial_task):
            if task is not None:
                task.cancel()
        utterance.speculation = utterance.endpoint_task = utterance.partial_task = None

    # ------------------------------------------------------------ per frame

    def after_frame(self, voiced: bool, now: float) -> None:
        if self.utterance is not None:
            self._speculate_early(self.utterance, voiced, now)
            self._maybe_partial(self.utterance, now)

    def _speculate_early(self, utterance: Utterance, voiced: bool, now: float) -> None:
        after = utterance.speculate_after_ms or self.speculate_after_ms
        if after is None or utterance.speech_end_at is not None:
            return
        if voiced:
            utterance.quiet_since = None
            if utterance.speculation is not None:
                utterance.speculation.cancel()
                utterance.speculation = None
            return
        if utterance.quiet_since is None:
            utterance.quiet_since = now
        elif utterance.speculation is None and (now - utterance.quiet_since) * 1000 >= after:
            _cancel_partial(utterance)
            utterance.speculation = self.spawn(
                self._timed(utterance, utterance.audio()), "asr-speculative"
            )

    def _maybe_partial(self, utterance: Utterance, now: float) -> None:
        every = self.partial_every_s
        if (
            every is None
            or utterance.speech_end_at is not None
            or (utterance.partial_task is not None and not utterance.partial_task.done())
            or now - max(utterance.started_at, utterance.last_partial_at) < every
        ):
            return
        utterance.last_partial_at = now
        utterance.partial_task = self.spawn(
            self._partial(utterance.turn_id, utterance.audio()), "asr-partial"
        )

    async def _partial(self, turn_id: int, audio: PCM) -> None:
        try:
            transcript = await self.transcribe(audio)
        except PluginError as e:
            log.info("partial transcription failed: %s", e)
            return
        if transcript.text.strip() and self.utterance is not None:
            self.on_partial(turn_id, transcript.text.strip())

    # ------------------------------------------------------------ transcription

    async def final_transcript(self, utterance: Utterance | None) -> Transcript:
        if utterance is None:
            return Transcript("")
        _cancel_partial(utterance)
        if utterance.speculation is not None:
            return await utterance.speculation
        return await self._timed(utterance, utterance.audio())

    async def _timed(self, utterance: Utterance, audio: PCM) -> Transcript:
        utterance.asr_started, utterance.asr_done = self.clock(), None
        transcript = await self.transcribe(audio)
        utterance.asr_done = self.clock()
        return transcript

    async def transcribe(self, audio: PCM) -> Transcript:
        if audio.size == 0:
            return Transcript("")
        try:
            # asyncio.timeout, not wait_for: no extra task, so no extra trip round the loop.
            async with asyncio.timeout(self.asr_timeout_s):
                return await self.asr.transcribe(audio, language=self.language)
        except TimeoutError as e:
            raise PluginTimeout(f"ASR took longer than {self.asr_timeout_s}s") from e


def _cancel_partial(utterance: Utterance) -> None:
    if utterance.partial_task is not None:
        utterance.partial_task.cancel()
        utterance.partial_task = None
