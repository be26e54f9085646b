"""The echo guard's values: its settings, its judgement of a frame, and the band analysis.

``pipeline/echo.py`` (its rules) builds on these; ``pipeline/echo_path.py`` and the gate
(``pipeline/echo_gate.py``) read the judgements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from plugins.audio import INPUT_SAMPLE_RATE

Floats = npt.NDArray[np.float64]

HOP_MS = 10
"""Spacing of the output's history (and of the delays searched)."""
STEP_MS = 20
"""The microphone is judged every 20 ms (the engine's frame)."""
WINDOW_MS = 32
STEP_SAMPLES = INPUT_SAMPLE_RATE * STEP_MS // 1000
FULL_SCALE = 32768.0**2
"""The power of a full-scale int16 sample."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoSettings:
    """Settings of ``EchoGuard`` (see the module's rules)."""

    output_sample_rate: int = 24_000
    max_delay_ms: int = 400
    """Longest echo delay searched (devices, the client's buffer, the network, the room)."""
    ahead_ms: int = 2_000
    """Output kept in front of the microphone (the pacer sends at most ``playout_lead_ms``)."""
    bands: int = 24
    low_hz: float = 200.0
    high_hz: float = 7_000.0
    margin_db: float = 6.0
    """Headroom of the echo bound over the echo gain times the output's envelope."""
    distortion_db: float = -30.0
    """Floor of the echo bound in every band, relative to its loudest band (a speaker's
    distortion puts some of the loud bands' energy everywhere)."""
    reverb_decay_db_per_s: float = 200.0
    """How fast the output's envelope decays after it stops (a room's tail; 60 dB in 0.3 s)."""
    near_end_db: float = 1.0
    """Mean excess over the echo bound, across bands, that makes a frame near-end."""
    correlation_tau_ms: float = 1_000.0
    jump_tau_ms: float = 250.0
    """Time constant of the fast correlation that notices a delay jump (a playback stall)."""
    lock_correlation: float = 0.4
    lock_contrast: float = 0.2
    release_correlation: float = 0.2
    acquire_ms: float = 1_000.0
    """Audible output this long without a lock means there is no echo to guard against."""
    stop_margin_ms: float = 100.0
    """Output still played after ``stop`` (the clear takes a network trip to the client)."""

    def __post_init__(self) -> None:
        if self.output_sample_rate <= 0 or self.output_sample_rate % (1000 // HOP_MS):
            raise ValueError(
                f"EchoSettings.output_sample_rate must be a positive multiple of 100, "
                f"got {self.output_sample_rate}"
            )
        if not 0 <= self.max_delay_ms <= 2_000:
            raise ValueError(f"EchoSettings.max_delay_ms must be 0..2000, got {self.max_delay_ms}")
        if self.ahead_ms < 0:
            raise ValueError("EchoSettings.ahead_ms must be >= 0")
        if not 0 < self.low_hz < self.high_hz <= INPUT_SAMPLE_RATE / 2:
            raise ValueError("EchoSettings needs 0 < low_hz < high_hz <= 8000")
        if self.high_hz > self.output_sample_rate / 2:
            raise ValueError("EchoSettings.high_hz is above the output's Nyquist frequency")
        if self.bands < 4:
            raise ValueError("EchoSettings.bands must be >= 4")


@dataclass(frozen=True, slots=True)
class EchoJudgement:
    """What the guard made of one microphone frame."""

    samples: int
    """Length of the frame judged."""
    reference: bool
    """Output was audible within the delay range: this frame may hold echo."""
    near_end: bool
    """There is sound the echo does not explain (always True without ``reference``)."""
    delay_ms: float | None
    """The locked echo delay on the guard's timeline (None: no lock)."""
    echo_dbfs: float
    """Level of the echo bound over the bands (-100: none)."""
    residual_db: float
    """Microphone energy above the echo bound, relative to the microphone's (0: none of it is
    explained by echo, -100: all of it)."""
    excess_db: float
    """Mean excess over the echo bound across bands (compared with ``near_end_db``)."""


NO_ECHO = EchoJudgement(0, False, True, None, -100.0, 0.0, 0.0)
NO_ECHO_STEP = EchoJudgement(STEP_SAMPLES, False, True, None, -100.0, 0.0, 0.0)
NO_LOCK_STEP = EchoJudgement(STEP_SAMPLES, True, True, None, -100.0, 0.0, 0.0)


def mel(hz: Floats) -> Floats:
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def band_matrix(rate: int, size: int, edges: Floats, window: Floats) -> Floats:
    """(bins, bands) sums of |X|² per band, scaled so that a signal has the same band power
    whatever the sample rate and window."""
    freqs = np.fft.rfftfreq(size, 1.0 / rate)
    matrix = np.zeros((freqs.size, edges.size - 1))
    for band in range(edges.size - 1):
        matrix[(freqs >= edges[band]) & (freqs < edges[band + 1]), band] = 1.0
    return matrix * (2.0 / (size * float(np.sum(window * window))))


def band_bins(matrix: Floats) -> npt.NDArray[np.int64]:
    """(2, bands): the first and after-last bin each band of a band matrix sums (its nonzero
    rows: one run), so the kernels skip the zeros."""
    runs = np.zeros((2, matrix.shape[1]), dtype=np.int64)  # an empty band sums nothing
    for band, column in enumerate(matrix.T):
        rows = np.flatnonzero(column)
        if rows.size:
            runs[:, band] = rows[0], rows[-1] + 1
    return runs


def dbfs(power: float) -> float:
    return 10.0 * math.log10(power / FULL_SCALE) if power > 0 else -100.0


def no_reference(samples: int) -> EchoJudgement:
    """The judgement of a frame with no output to compare it with: near-end, as ``judge``
    gives it when nothing audible played (for a caller that skips ``judge``)."""
    return with_samples(NO_ECHO, samples)


def with_samples(judgement: EchoJudgement, samples: int) -> EchoJudgement:
    if judgement.samples == samples:
        return judgement  # judgements are immutable: share it
    return EchoJudgement(
        samples,
        judgement.reference,
        judgement.near_end,
        judgement.delay_ms,
        judgement.echo_dbfs,
        judgement.residual_db,
        judgement.excess_db,
    )


__all__ = [
    "FULL_SCALE",
    "HOP_MS",
    "NO_ECHO",
    "NO_ECHO_STEP",
    "NO_LOCK_STEP",
    "STEP_MS",
    "STEP_SAMPLES",
    "WINDOW_MS",
    "EchoJudgement",
    "EchoSettings",
    "band_bins",
    "band_matrix",
    "dbfs",
    "mel",
    "no_reference",
    "with_samples",
]
