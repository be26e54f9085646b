"""Silero VAD on onnxruntime, using the ONNX model that ships inside ``pipecat-ai``.

Theory of operation
-------------------
The model scores 512-sample windows of 16 kHz audio (32 ms). Each call also takes the last 64
samples of the previous window ("context") and a recurrent state, and returns the probability
that the window holds speech plus the next state. One ``InferenceSession`` is shared by every
stream in the process; each stream owns its state, context and a buffer of samples that do not
yet fill a window, so ``process`` accepts audio of any length.

Decisions use hysteresis over window probabilities ``p`` (windows quieter than the energy floor
count as ``p = 0``):

- QUIET → PENDING_START when ``p >= threshold``; speech is assumed to begin at that window.
- PENDING_START → SPEAKING once speech has lasted ``min_speech_ms``: emit SPEECH_START with the
  position of the first speech window. A window with ``p < threshold - 0.15`` first drops the
  candidate (a click or a cough is not a turn).
- SPEAKING → PENDING_END when ``p < threshold - 0.15``; speech is assumed to end where that
  window begins.
- PENDING_END → QUIET after ``min_silence_ms`` of such windows: emit SPEECH_END with the position
  where speech ended. ``p >= threshold`` before that returns to SPEAKING (a pause inside a turn).

The model's recurrent state drifts during long non-speech and then under-reports the next speech,
so the state is cleared after every ``_STATE_RESET_INTERVAL_MS`` of audio, at the first moment
the stream is QUIET and the last few windows were clearly silent.

Cost: one window takes 0.13–0.26 ms of one core (≈ 0.1–0.15 ms per 20 ms frame of speech,
≈ 0.01 ms per frame below the energy floor, where the model is skipped), so 40 talking sessions
use about a quarter of one core. That is less than the cost of handing each frame to a thread,
so the model runs inline on the event loop; a call carrying more than ``inline_max_windows``
windows (a client sending a large chunk at once) goes to a worker pool instead, so the loop is
never held for long.
"""

from __future__ import annotations

import enum
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from plugins.audio import INPUT_SAMPLE_RATE, PCM
from plugins.contracts import VADEvent, VADEventKind
from plugins.errors import PluginError, PluginUnavailable
from plugins.workers import WorkerPool

WINDOW_SAMPLES = 512
"""Samples per model window at 16 kHz (32 ms)."""

_CONTEXT_SAMPLES = 64
_STATE_SHAPE = (2, 1, 128)
_HYSTERESIS = 0.15
_STATE_RESET_INTERVAL_MS = 2000.0
_STATE_RESET_QUIET_PROBABILITY = 0.1
_STATE_RESET_QUIET_WINDOWS = 5

Samples = npt.NDArray[np.float32]


def bundled_model_path() -> Path:
    """Path of ``silero_vad.onnx`` inside the installed ``pipecat-ai`` (without importing it)."""
    spec = importlib.util.find_spec("pipecat")
    if spec is None or spec.origin is None:
        raise PluginUnavailable("silero vad: the pipecat-ai package is not installed")
    path = Path(spec.origin).parent / "audio" / "vad" / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise PluginUnavailable(f"silero vad: model file missing at {path}")
    return path


class SileroModel:
    """One onnxruntime session for the Silero model, shared by all streams of a process.

    ``run`` is thread-safe: the session keeps no per-call state (it is passed in and out).
    """

    def __init__(self, path: Path) -> None:
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            self._session: Any = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # onnxruntime raises its own untyped exceptions
            raise PluginUnavailable(f"silero vad: cannot load {path}: {e}") from e
        self._sample_rate = np.array(INPUT_SAMPLE_RATE, dtype=np.int64)

    def run(self, window: Samples, state: Samples) -> tuple[float, Samples]:
        """Score one window (context + 512 samples, shape ``(1, 576)``); returns p, next state."""
        try:
            probability, next_state = self._session.run(
                None, {"input": window, "state": state, "sr": self._sample_rate}
            )
        except Exception as e:
            raise PluginError(f"silero vad: inference failed: {e}") from e
        return float(probability[0, 0]), np.asarray(next_state, dtype=np.float32)


_shared_model: SileroModel | None = None
_shared_model_lock = threading.Lock()


def shared_model() -> SileroModel:
    """The process-wide model for the bundled ONNX file, loaded on first use."""
    global _shared_model
    with _shared_model_lock:
        if _shared_model is None:
            _shared_model = SileroModel(bundled_model_path())
        return _shared_model


class _State(enum.Enum):
    QUIET = "quiet"
    PENDING_START = "pending_start"
    SPEAKING = "speaking"
    PENDING_END = "pending_end"


class SileroVAD:
    """Silero VAD (implements ``plugins.contracts.VAD``).

    Args:
        threshold: window probability at or above which a window counts as speech.
        min_speech_ms: speech must last this long before SPEECH_START is emitted.
        min_silence_ms: silence must last this long before SPEECH_END is emitted.
        energy_floor_dbfs: windows quieter than this (RMS, dB full scale) count as silence
            without asking the model.
        inline_max_windows: calls with more windows than this run in ``pool``, not inline.
        model: the loaded model; defaults to the process-wide bundled one.
        pool: worker pool for large calls; a small one is created if not given.
    """

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        min_speech_ms: float = 200.0,
        min_silence_ms: float = 400.0,
        energy_floor_dbfs: float = -60.0,
        inline_max_windows: int = 4,
        model: SileroModel | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold}")
        self.threshold = threshold
        self.min_speech_ms = min_speech_ms
        self.min_silence_ms = min_silence_ms
        self.energy_floor_dbfs = energy_floor_dbfs
        self.inline_max_windows = inline_max_windows
        self._model = model or shared_model()
        self._pool = pool or WorkerPool("vad", max_workers=1, max_pending=64)

    def create_stream(self) -> SileroVADStream:
        return SileroVADStream(self, self._model, self._pool)


class SileroVADStream:
    """Per-session VAD state (implements ``plugins.contracts.VADStream``).

    Calls to ``process`` must not overlap (one session feeds its stream in order).
    """

    def __init__(self, settings: SileroVAD, model: SileroModel, pool: WorkerPool) -> None:
        self._settings = settings
        self._model = model
        self._pool = pool
        # Mean square below which a window is silent without asking the model.
        self._energy_floor = 10.0 ** (settings.energy_floor_dbfs / 10.0)
        self._pending: Samples = np.zeros(0, dtype=np.float32)
        self._pending_start = 0
        self._busy = False
        self._clear_model_state()
        self._state = _State.QUIET
        self._candidate_at = 0
        self._windows_since_reset = 0
        self._quiet_windows = 0
        self._voiced = False
        self.threshold = settings.threshold
        """This session's speech threshold (a GA ``turn_detection.threshold`` sets it)."""

    @property
    def voiced(self) -> bool:
        """Whether the latest window scored as speech (before min_speech/min_silence)."""
        return self._voiced

    async def process(self, pcm: PCM) -> Sequence[VADEvent]:
        """Feed 16 kHz int16 audio of any length; returns the decisions it caused, in order."""
        if self._busy:
            raise RuntimeError("SileroVADStream.process called while a previous call is running")
        samples = np.asarray(pcm, dtype=np.float32).reshape(-1) / 32768.0
        windows = (self._pending.size + samples.size) // WINDOW_SAMPLES
        if windows <= self._settings.inline_max_windows:
            return self._feed(samples)
        self._busy = True
        try:
            return await self._pool.run(self._feed, samples)
        finally:
            self._busy = False

    def reset(self) -> None:
        """Forget speech state, buffered samples and model state; positions keep counting."""
        self._pending_start += self._pending.size
        self._pending = np.zeros(0, dtype=np.float32)
        self._clear_model_state()
        self._state = _State.QUIET
        self._windows_since_reset = 0
        self._quiet_windows = 0
        self._voiced = False

    def _clear_model_state(self) -> None:
        self._model_state: Samples = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._context: Samples = np.zeros(_CONTEXT_SAMPLES, dtype=np.float32)

    def _feed(self, samples: Samples) -> list[VADEvent]:
        buffered = np.concatenate((self._pending, samples)) if self._pending.size else samples
        events: list[VADEvent] = []
        offset = 0
        while buffered.size - offset >= WINDOW_SAMPLES:
            window = buffered[offset : offset + WINDOW_SAMPLES]
            event = self._on_window(window, self._pending_start + offset)
            if event is not None:
                events.append(event)
            offset += WINDOW_SAMPLES
        self._pending = buffered[offset:].copy()
        self._pending_start += offset
        return events

    def _score(self, window: Samples) -> float:
        model_input = np.concatenate((self._context, window)).reshape(1, -1)
        self._context = window[-_CONTEXT_SAMPLES:].copy()
        if float(np.mean(window * window)) < self._energy_floor:
            # Skipping the model here is what keeps idle sessions cheap; the recurrent state
            # simply does not advance over near-digital silence.
            return 0.0
        probability, self._model_state = self._model.run(model_input, self._model_state)
        return probability

    def _on_window(self, window: Samples, start: int) -> VADEvent | None:
        probability = self._score(window)
        end = start + WINDOW_SAMPLES
        settings = self._settings
        threshold = self.threshold
        speech = probability >= threshold
        self._voiced = speech
        silence = probability < threshold - _HYSTERESIS
        event: VADEvent | None = None
        if self._state is _State.QUIET:
            if speech:
                self._state, self._candidate_at = _State.PENDING_START, start
        elif self._state is _State.PENDING_START:
            if silence:
                self._state = _State.QUIET
            elif _ms(end - self._candidate_at) >= settings.min_speech_ms:
                self._state = _State.SPEAKING
                event = VADEvent(VADEventKind.SPEECH_START, _ms(self._candidate_at))
        elif self._state is _State.SPEAKING:
            if silence:
                self._state, self._candidate_at = _State.PENDING_END, start
        elif speech:
            self._state = _State.SPEAKING
        elif _ms(end - self._candidate_at) >= settings.min_silence_ms:
            self._state = _State.QUIET
            event = VADEvent(VADEventKind.SPEECH_END, _ms(self._candidate_at))
        self._maybe_reset_model_state(probability)
        return event

    def _maybe_reset_model_state(self, probability: float) -> None:
        self._windows_since_reset += 1
        if probability < _STATE_RESET_QUIET_PROBABILITY:
            self._quiet_windows += 1
        else:
            self._quiet_windows = 0
        if (
            self._state is _State.QUIET
            and self._quiet_windows >= _STATE_RESET_QUIET_WINDOWS
            and _ms(self._windows_since_reset * WINDOW_SAMPLES) >= _STATE_RESET_INTERVAL_MS
        ):
            self._clear_model_state()
            self._windows_since_reset = 0


def _ms(samples: int) -> float:
    return samples * 1000.0 / INPUT_SAMPLE_RATE
