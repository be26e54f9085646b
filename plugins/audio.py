"""Audio primitives shared by the pipeline and the plugins.

Inside the pipeline audio is mono PCM16 held in ``numpy.int16`` arrays with an explicit
sample rate. Conversion happens at the edges only: bytes from the transport become arrays once,
and TTS output is resampled once to the session's output rate (python-soxr).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PCM = npt.NDArray[np.int16]

INPUT_SAMPLE_RATE = 16_000
"""Client microphone audio is always 16 kHz PCM16 mono."""


def pcm_from_bytes(data: bytes) -> PCM:
    """Interpret little-endian PCM16 bytes. The caller has checked the length is even."""
    return np.frombuffer(data, dtype="<i2").astype(np.int16, copy=False)


def duration_ms(samples: int, sample_rate: int) -> float:
    return samples * 1000.0 / sample_rate


def rms_dbfs(pcm: PCM) -> float:
    """Loudness of a frame in dB relative to full scale; silence is -100."""
    if pcm.size == 0:
        return -100.0
    mean_square = float(np.mean(pcm.astype(np.float32) ** 2))
    if mean_square <= 0.0:
        return -100.0
    return 10.0 * float(np.log10(mean_square / (32768.0**2)))


def resample(pcm: PCM, from_rate: int, to_rate: int) -> PCM:
    """Resample a whole chunk (TTS sentences are resampled one chunk at a time)."""
    if from_rate == to_rate or pcm.size == 0:
        return pcm
    import soxr  # imported lazily: only sessions whose rates differ pay for it

    out = soxr.resample(pcm, from_rate, to_rate, quality="HQ")
    return np.asarray(out, dtype=np.int16)


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One spoken word: its character span in the sentence text and its audio span in ms."""

    text_start: int
    text_end: int
    start_ms: float
    end_ms: float
