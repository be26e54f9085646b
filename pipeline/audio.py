"""The audio vocabulary, as the pipeline names it: it lives on the plugins' floor
(``plugins/audio.py``) so plugins never import the pipeline."""

from __future__ import annotations

from plugins.audio import (
    INPUT_SAMPLE_RATE,
    PCM,
    WordTiming,
    duration_ms,
    pcm_from_bytes,
    resample,
    rms_dbfs,
)

__all__ = [
    "INPUT_SAMPLE_RATE",
    "PCM",
    "WordTiming",
    "duration_ms",
    "pcm_from_bytes",
    "resample",
    "rms_dbfs",
]
