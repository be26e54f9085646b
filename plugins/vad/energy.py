"""Energy VAD: loudness threshold with hysteresis. The fallback when Silero is unavailable.

Audio is judged in 10 ms windows. Speech starts after ``min_speech_ms`` of consecutive loud
windows (reported at the first loud one) and ends after ``min_silence_ms`` of quiet windows
(reported at the first quiet one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from plugins.audio import INPUT_SAMPLE_RATE, PCM
from plugins.contracts import VADEvent, VADEventKind

_WINDOW = INPUT_SAMPLE_RATE // 100  # 10 ms
_EMPTY = np.zeros(0, dtype=np.int16)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnergyVADSettings:
    threshold_dbfs: float = -40.0
    """A window louder than this (RMS) counts as speech."""
    min_speech_ms: float = 60.0
    min_silence_ms: float = 300.0


class EnergyVAD:
    def __init__(self, settings: EnergyVADSettings | None = None) -> None:
        self.settings = settings or EnergyVADSettings()
        # Compare mean squares instead of computing dB per window.
        self._threshold_ms = (32768.0**2) * 10 ** (self.settings.threshold_dbfs / 10.0)

    def create_stream(self) -> EnergyVADStream:
        return EnergyVADStream(self.settings, self._threshold_ms)


class EnergyVADStream:
    def __init__(self, settings: EnergyVADSettings, threshold_ms: float) -> None:
        self._settings = settings
        self._threshold = threshold_ms
        self._pending = np.zeros(0, dtype=np.int16)
        self._position = 0  # samples consumed, in windows of _WINDOW
        self._speaking = False
        self._run_start: int | None = None  # first sample of the current loud/quiet run
        self._voiced = False

    @property
    def voiced(self) -> bool:
        return self._voiced

    def reset(self) -> None:
        self._position += self._pending.size  # positions stay on the input stream's clock
        self._pending = np.zeros(0, dtype=np.int16)
        self._speaking = False
        self._run_start = None

    async def process(self, pcm: PCM) -> Sequence[VADEvent]:
        return self.process_sync(pcm)

    def process_sync(self, pcm: PCM) -> list[VADEvent]:
        data = np.concatenate((self._pending, pcm)) if self._pending.size else pcm
        whole = data.size - data.size % _WINDOW
        self._pending = data[whole:].copy() if whole < data.size else _EMPTY
        if whole == 0:
            return []
        windows = data[:whole].astype(np.float32).reshape(-1, _WINDOW)
        flags: list[bool] = (
            np.einsum("ij,ij->i", windows, windows) > self._threshold * _WINDOW
        ).tolist()
        self._voiced = flags[-1]
        if self._run_start is None and (all(flags) if self._speaking else not any(flags)):
            # The common case, per frame: nothing changes.
            self._position += whole
            return []
        events: list[VADEvent] = []
        need_speech = self._settings.min_speech_ms * INPUT_SAMPLE_RATE / 1000
        need_silence = self._settings.min_silence_ms * INPUT_SAMPLE_RATE / 1000
        for is_loud in flags:
            window_end = self._position + _WINDOW
            if is_loud != self._speaking:
                if self._run_start is None:
                    self._run_start = self._position
                needed = need_speech if is_loud else need_silence
                if window_end - self._run_start >= needed:
                    self._speaking = is_loud
                    kind = VADEventKind.SPEECH_START if is_loud else VADEventKind.SPEECH_END
                    events.append(VADEvent(kind, self._run_start * 1000 / INPUT_SAMPLE_RATE))
                    self._run_start = None
            else:
                self._run_start = None
            self._position = window_end
        return events
