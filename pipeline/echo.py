"""Echo guard: the assistant's own voice coming back through the microphone is not a barge-in.

Theory of operation
-------------------
A laptop without echo cancellation plays the answer on its speaker and hears it again in its
microphone: delayed (the client's playout buffer, the audio devices, the room), quieter (−6 to
−30 dB), coloured (a small speaker, reverberation) and mixed with noise. Without a guard the VAD
hears a voice and the coordinator interrupts the answer with its own echo (TT-4). Two pieces,
both sans-I/O (inputs are calls carrying ``now``, nothing awaits or reads a clock): the guard
here, the gate in ``pipeline/echo_gate.py``.

``EchoGuard`` compares the microphone with the output actually sent and judges every microphone
frame: is there sound the echo of that output does not explain? It works on band powers (24
mel-spaced bands, 200 Hz–7 kHz, 32 ms Hann windows), not waveforms: band powers survive the
speaker's filtering, the room and a few milliseconds of misalignment, where a waveform canceller
needs a long adaptive filter and seconds to converge.

``EchoGate`` (``pipeline/echo_gate.py``) sits between the VAD and the ``TurnCoordinator``: it
passes the VAD's decisions on while nothing is playing, holds back speech that is only echo, and
starts speech itself when a person talks over the echo, so a barge-in is still detected while the
VAD is already "in speech" because of the echo.

Rule 1 — one timeline. Positions count microphone samples (16 kHz) as ``judge`` receives them:
``judge`` must see every microphone frame, in order, even while the microphone is paused for
the VAD. Output is placed on the same timeline in 10 ms hops: a frame passed to ``played``
follows the previous one without a gap (the client plays its buffer in order, however far ahead
the pacer sent it), unless the previous one has finished playing by ``now`` — then it starts at
``now``, mapped onto the timeline from the last judged frame. What the timeline gets wrong (the
network, the client's buffer, the devices) is part of the echo delay the guard searches.

Rule 2 — bounded history. The output is kept as band powers of 10 ms hops at the output's own
rate (bands are in Hz, so this is what resampling to 16 kHz would give, without a resampler) in a
ring covering ``max_delay_ms`` behind the microphone and ``ahead_ms`` in front of it; output
scheduled further ahead overwrites the oldest hops, which makes the guard judge more frames
near-end, never fewer. ``stop`` (the client was told to clear its playback) drops what was
scheduled after ``now + stop_margin_ms``. ``pause`` (the client was told to pause it, keeping its
buffer: a held answer) takes what was scheduled after ``now`` off the timeline, leaving the
first ``stop_margin_ms`` in place too, and ``resume`` puts it back from ``now`` on.

Rule 3 — delay. For each 20 ms microphone step the guard correlates the microphone's band
log-powers (each band minus its running mean) with the output's at every lag from 0 to
``max_delay_ms`` (10 ms apart), averaged over about ``correlation_tau_ms``. A lag locks when its
correlation reaches ``lock_correlation`` and stands ``lock_contrast`` above the median lag's;
another lag takes over only when it is clearly better; the lock is dropped when its correlation
falls below ``release_correlation`` (the echo went away: headphones, client echo cancellation).
A second average over ``jump_tau_ms`` watches for a delay that jumped (the client's playback
stalled and went on later): while a lock holds and another lag passes the same test on it, that
lag is a *candidate*: the echo bound covers both lags (and the gains learn at whichever
correlates better) until the slow average moves the lock or the candidate fades.

Rule 4 — judgement. With a lock, the echo bound in each band is the output's reverberant
envelope (its power, decaying by ``reverb_decay_db_per_s`` after it stops) at the locked lag (and
the candidate's) ±20 ms, times the band's echo gain, but no lower than ``distortion_db`` below
the bound's loudest band (a speaker driven hard spreads energy into every band), times
``margin_db``; the gains are running medians of microphone/output power while the output is loud
in the band (a person talking only raises the ratio, so a median stays near the echo's own gain).
The frame's excess is the mean over the bands of how far the microphone rises above that bound
plus the noise floor, in dB; the frame is *near-end* when the excess reaches ``near_end_db``.
Without a lock (the first moments of playback) the bound is the loudest output anywhere in the
delay range at full level: a frame is near-end only if it is louder than the output itself. If
no lock comes within ``acquire_ms`` of audible output, there is no echo to guard against and
every frame is near-end until a lock comes. With nothing audible in the delay range, every frame
is near-end.

Cost: a step with output audible in the delay range is one call of ``echo_kernel.audible_step`` —
its 512-point FFT and Rules 3 and 4 compiled by numba (it was about 60 small numpy calls, whose
fixed cost, not the arithmetic, was most of it: a third of a conversing session's CPU). An idle
step (nothing audible: its judgement needs no spectrum) only keeps its samples; the idle steps'
spectra go through one FFT and their noise floor and mean are replayed in order when an audible
step comes or 50 steps wait. Output frames are queued and analysed together (one 768-point FFT per
10 ms hop, the ring updated frame by frame as before) when the microphone reaches them or 64 hops
wait. The batches do the same operations on the same values, and the kernel the same operations in
the same order (its sums over the bands run in order, numpy's pairwise: the figures agree to
rounding), so the state and every judgement are those of analysing each step and frame when it
comes (``tests/pipeline/echo_reference.py`` keeps that version and the tests hold the guard to it).
Measured on the 2-vCPU VM (µs per 20 ms while output plays, ``judge`` + ``played`` with the pacer's
300 ms lead): 89 with the numpy step, 25 compiled (2026-12-05); idle 11. ``warm_up`` compiles the
kernel (≈3 s, 0.15 s from numba's cache) before a server takes sessions.

Wiring (``pipeline/echo_path.py`` for the engine): ``guard.played(frame, now)`` where the pacer
sends a response's audio; ``judgement = guard.judge(pcm, now)`` first thing for every microphone
frame; the VAD's events and voiced flag go through ``gate.feed(events, voiced, judgement)`` and
``gate.voiced`` before they reach the coordinator; ``gate.reset()`` wherever the VAD is reset;
``guard.stop(now)`` when a response is interrupted (its playback is cleared);
``guard.pause(now)``/``guard.resume(now)`` when an answer is held and resumed; ``guard.reset()``
only for a new audio path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from pipeline import echo_kernel as kernel
from pipeline.echo_values import (
    FULL_SCALE,
    HOP_MS,
    NO_ECHO,
    NO_ECHO_STEP,
    NO_LOCK_STEP,
    STEP_MS,
    STEP_SAMPLES,
    WINDOW_MS,
    EchoJudgement,
    EchoSettings,
    band_bins,
    band_matrix,
    dbfs,
    mel,
    with_samples,
)
from plugins.audio import INPUT_SAMPLE_RATE, PCM

Floats = npt.NDArray[np.float64]
Samples = Floats | PCM
"""One step of microphone samples, as floats or as the frame's int16."""

_HOP = INPUT_SAMPLE_RATE * HOP_MS // 1000
_STEP = STEP_SAMPLES
_FULL_SCALE = FULL_SCALE
_POWER_FLOOR = 1e-11 * _FULL_SCALE
"""-110 dBFS: keeps logarithms finite."""
_OUTPUT_FLOOR = 10 ** (-75 / 10) * _FULL_SCALE
"""Output band powers are compressed above this floor before they are correlated."""
_AUDIBLE = 1e-8 * _FULL_SCALE
"""Output quieter than this (-80 dBFS over the bands) cannot leave an echo worth judging."""
_GAIN_MIN_POWER = 1e-7 * _FULL_SCALE
"""A band's echo gain learns only while the output in it is above -70 dBFS."""
_WARM_UP_STEPS = 15
"""Correlation averages need this many steps before a lag may lock."""
_NEIGHBOURS = 2
"""The echo bound takes the loudest output within ±2 hops of the locked lag."""
_CHUNK_HOPS = 64
"""The output's running mean moves once per this many hops of a frame at most."""
_QUEUED_HOPS = 64
"""Output is analysed at the latest when this many hops wait (the pacer's lead is 30)."""
_IDLE_STEPS = 50
"""Idle steps (nothing audible) whose spectra wait for one batched FFT: at most 1 s of audio."""
_LOG_OUTPUT_FLOOR = math.log10(_OUTPUT_FLOOR)
_QUIET_MARGIN = 1.0 - 1e-9
"""An estimate of the output's loudness this far below ``_AUDIBLE`` is inaudible for certain
(the estimate differs from the exact figure by rounding only, ~1e-15)."""


_EMPTY: Floats = np.zeros(0)


class EchoGuard:
    """Judges microphone frames against the output sent (one per session; Rules 1–4)."""

    def __init__(self, settings: EchoSettings | None = None) -> None:
        self.settings = s = settings or EchoSettings()
        hz = np.linspace(mel(np.array(s.low_hz)), mel(np.array(s.high_hz)), s.bands + 1)
        edges = 700.0 * (10.0 ** (hz / 2595.0) - 1.0)
        self._out_window_len = round(WINDOW_MS * s.output_sample_rate / 1000)
        self._out_window = np.hanning(self._out_window_len)
        self._out_bands = band_matrix(
            s.output_sample_rate, self._out_window_len, edges, self._out_window
        )
        self._out_taps = np.arange(self._out_window_len)
        self._out_hop = s.output_sample_rate * HOP_MS // 1000
        mic_window_len = INPUT_SAMPLE_RATE * WINDOW_MS // 1000
        self._mic_window = np.hanning(mic_window_len)
        self._mic_bands = band_matrix(INPUT_SAMPLE_RATE, mic_window_len, edges, self._mic_window)
        self._lags = s.max_delay_ms // HOP_MS + 1
        self._middle = self._lags // 2  # the median lag's index once partitioned
        self._ring = self._lags + 2 * _NEIGHBOURS + s.ahead_ms // HOP_MS + 1
        self._decay = 10.0 ** (-s.reverb_decay_db_per_s * HOP_MS / 1000 / 10)
        self._margin = 10.0 ** (s.margin_db / 10)
        self._spread = 10.0 ** (s.distortion_db / 10)
        self._near_end = s.near_end_db / 10.0  # in log10 units
        self._tau = 1.0 - math.exp(-STEP_MS / s.correlation_tau_ms)
        self._taus = np.array(
            [[self._tau], [1.0 - math.exp(-STEP_MS / s.jump_tau_ms)]], dtype=np.float64
        )
        self._hop_tau = 1.0 - math.exp(-HOP_MS / s.correlation_tau_ms)
        self._acquire_steps = math.ceil(s.acquire_ms / STEP_MS)
        self._band_bins = band_bins(self._mic_bands)
        self._fft_order, self._twiddles = kernel.fft_tables(mic_window_len)
        self._out_band_bins = band_bins(self._out_bands)
        params = np.zeros(kernel.PARAMS_SIZE)
        params[kernel.TAU] = self._tau
        params[kernel.MARGIN] = self._margin
        params[kernel.SPREAD] = self._spread
        params[kernel.NEAR_END] = self._near_end
        params[kernel.DECAY] = self._decay
        params[kernel.LOCK_CORRELATION] = s.lock_correlation
        params[kernel.LOCK_CONTRAST] = s.lock_contrast
        params[kernel.RELEASE_CORRELATION] = s.release_correlation
        params[kernel.POWER_FLOOR] = _POWER_FLOOR
        params[kernel.GAIN_MIN_POWER] = _GAIN_MIN_POWER
        params[kernel.HOP_TAU] = self._hop_tau
        params[kernel.OUTPUT_FLOOR] = _OUTPUT_FLOOR
        self._params = params
        self._geometry = np.array(
            [0, 0, self._lags, _NEIGHBOURS, _WARM_UP_STEPS, self._acquire_steps, self._middle],
            dtype=np.int64,
        )
        self._judged = np.zeros(4)  # the kernel's figures of a step
        # Scratch of _audible's exact test.
        self._around = np.zeros((self._lags + 2 * _NEIGHBOURS, s.bands))
        self._around_valid = np.zeros(self._lags + 2 * _NEIGHBOURS, dtype=np.bool_)
        self.reset()

    # ------------------------------------------------------------ state

    def reset(self) -> None:
        """Forget everything: the output, the delay, the gains (a new audio path)."""
        bands, ring = self.settings.bands, self._ring
        self._envelope: Floats = np.zeros((ring, bands))
        self._powers: Floats = np.zeros((ring, bands))
        self._held: tuple[Floats, Floats] | None = None  # hop powers, raw tail (a paused answer)
        self._features: Floats = np.zeros((ring, bands))
        # Per ring row, kept with the rows: the envelope's sum over the bands (the audibility
        # test) and the features' energy (the correlation's normalisation).
        self._envelope_sums: Floats = np.zeros(ring)
        self._feature_energies: Floats = np.zeros(ring)
        self._out_mean: Floats = np.zeros(bands)  # once kernel.OUT_MEAN_SET is set
        self._written = -1  # last hop whose band powers are in the ring
        self._out_end = -math.inf  # where the scheduled output ends, in hops
        self._raw: Floats = np.zeros(0)
        self._raw_size = 0  # of ``_raw`` once the queued frames are in hops
        # Output frames whose hops are not yet in the ring, and their hop counts (_write_queued).
        self._queue: list[Floats] = []
        self._queued_frames: list[int] = []
        self._queued_hops = 0
        self._mic_position = 0
        self._mic_now: float | None = None
        self._mic_frame: Floats = np.zeros(self._mic_window.size)
        # Idle steps not yet analysed: the frame before the first of them, then their samples.
        self._idle: Floats = np.zeros(self._mic_window.size + _IDLE_STEPS * _STEP)
        self._idle_steps = 0
        self._mic_pending: Floats = np.zeros(0)
        # Per band: the noise floor, the microphone's mean log-power, the echo gains (log10)
        # and their update counts; one array the kernel updates, and views of it by name.
        self._band_state: Floats = np.zeros((4, bands))
        self._noise: Floats = self._band_state[kernel.NOISE]
        self._mic_mean: Floats = self._band_state[kernel.MEAN]
        self._gains: Floats = self._band_state[kernel.GAINS]
        self._gain_updates: Floats = self._band_state[kernel.GAIN_UPDATES]
        # The lock, the candidate, warm-up counts and flags (``echo_kernel``'s indices).
        self._state = np.zeros(kernel.STATE_SIZE, dtype=np.int64)
        self._state[kernel.LOCKED] = self._state[kernel.CANDIDATE] = -1
        # Correlation averages, row 0 slow (the lock), row 1 fast (a delay that jumped).
        # They move together: one array, updated in one go, and views of it by name.
        lags = self._lags
        self._averages: Floats = np.zeros((2, 2 * lags + 1))
        self._products = self._averages[:, :lags]
        self._out_energy = self._averages[:, lags : 2 * lags]
        self._mic_energy = self._averages[:, 2 * lags :]
        self._last = NO_ECHO

    @property
    def delay_hops(self) -> int | None:
        """The locked echo delay, in hops (None: no lock)."""
        locked = int(self._state[kernel.LOCKED])
        return None if locked < 0 else locked

    @property
    def delay_ms(self) -> float | None:
        locked = self.delay_hops
        return None if locked is None else float(locked * HOP_MS)

    # ------------------------------------------------------------ output

    def played(self, pcm: PCM, now: float) -> None:
        """Output audio (at ``output_sample_rate``) sent to the client at ``now``."""
        if pcm.size == 0:
            return
        now_hop = self._hop_at(now)
        if self._out_end < now_hop:
            # The client's buffer ran dry (or this is the first output): the frame plays now.
            self._write_queued()
            start = math.ceil(now_hop)
            self._silence_until(start)
            self._set_raw(np.zeros(self._out_window_len))
        # The frame's hops are analysed when the microphone reaches them (_write_queued): the
        # pacer sends ahead, so several frames go through one FFT.
        self._queue.append(pcm.astype(np.float64))
        self._raw_size += pcm.size
        hops = (self._raw_size - self._out_window_len) // self._out_hop
        if hops > 0:
            self._queued_frames.append(hops)
            self._queued_hops += hops
            self._raw_size -= hops * self._out_hop
        scheduled = self._written + self._queued_hops
        self._out_end = scheduled + (self._raw_size - self._out_window_len) / self._out_hop
        if self._queued_hops >= _QUEUED_HOPS:
            self._write_queued()

    def _write_queued(self) -> None:
        """Analyse the queued frames' hops into the ring, frame by frame as ``played`` did
        before the queue (the same products, chunks and mean updates: the same ring)."""
        if not self._queue:
            return
        raw = np.concatenate((self._raw, *self._queue))
        self._queue.clear()
        hops, step = self._queued_hops, self._out_hop
        if hops > 0:
            # The hops follow each other: one window every ``step`` samples after the first.
            windows = sliding_window_view(raw, self._out_window_len)[step::step][:hops]
            spectra = np.fft.rfft(windows * self._out_window)
            powers = np.empty((hops, self.settings.bands))
            kernel.band_powers(spectra, self._out_bands, self._out_band_bins, powers)
            self._write_hops(powers, self._queued_frames)
        self._queued_frames.clear()
        self._queued_hops = 0
        self._set_raw(raw[hops * step :])

    def _set_raw(self, raw: Floats) -> None:
        """The output's samples not yet in hops (the last window's, then the rest)."""
        self._raw = raw
        self._raw_size = raw.size

    def stop(self, now: float) -> None:
        """The client was told to clear its playback: forget output scheduled after
        ``now + stop_margin_ms`` (what already played still echoes)."""
        self._held = None
        self._write_queued()
        self._cut(math.ceil(self._hop_at(now) + self.settings.stop_margin_ms / HOP_MS))

    def pause(self, now: float) -> None:
        """The client was told to pause its playback and keep its buffer (a held answer):
        output scheduled after ``now`` waits for ``resume``; what plays until the client has
        paused (``stop_margin_ms``) is kept where it is as well (Rule 2)."""
        self._write_queued()
        start = math.floor(self._hop_at(now))
        first = max(start + 1, self._written - self._ring + 1)
        rows = np.arange(first, self._written + 1) % self._ring
        tail = self._raw[self._out_window_len :].copy()
        self._held = (self._powers[rows].copy(), tail)
        self._cut(math.ceil(self._hop_at(now) + self.settings.stop_margin_ms / HOP_MS))

    def resume(self, now: float) -> None:
        """The client plays on from where it paused: the output held by ``pause`` plays now."""
        held, self._held = self._held, None
        if held is None:
            return
        powers, tail = held
        self._write_queued()
        self._silence_until(max(math.ceil(self._hop_at(now)), self._written))
        if powers.size:
            self._write_hops(powers, [powers.shape[0]])
        self._set_raw(np.concatenate((np.zeros(self._out_window_len), tail)))
        self._out_end = self._written + tail.size / self._out_hop

    def _cut(self, cut: int) -> None:
        """Forget the output scheduled after hop ``cut``."""
        if self._out_end <= cut:
            return
        if self._written > cut:
            self._written = cut  # the hops after it no longer count (Rule 2)
            self._set_raw(np.zeros(self._out_window_len))
        else:
            self._set_raw(self._raw[: self._out_window_len + (cut - self._written) * self._out_hop])
        self._out_end = self._written + (self._raw.size - self._out_window_len) / self._out_hop

    def _hop_at(self, now: float) -> float:
        """``now`` on the timeline, in hops (Rule 1)."""
        position = float(self._mic_position)
        if self._mic_now is not None:
            position += max(0.0, now - self._mic_now) * INPUT_SAMPLE_RATE
        return position / _HOP

    def _silence_until(self, hop: int) -> None:
        """Hops up to ``hop`` had no output: the envelope decays, the features are silence."""
        count = hop - self._written
        if count <= 0:
            return
        ring, written = self._ring, self._written
        if count >= ring:
            self._envelope[:] = 0.0
            self._features[:] = 0.0
            self._powers[:] = 0.0
            self._envelope_sums[:] = 0.0
            self._feature_energies[:] = 0.0
        else:
            rows = (written + 1 + np.arange(count)) % ring
            decay = self._decay ** (1.0 + np.arange(count))
            envelope = self._envelope[written % ring] * decay[:, None]
            self._envelope[rows] = envelope
            self._envelope_sums[rows] = envelope.sum(axis=1)
            self._powers[rows] = 0.0
            mean = self._out_mean if self._state[kernel.OUT_MEAN_SET] else _LOG_OUTPUT_FLOOR
            self._features[rows] = _LOG_OUTPUT_FLOOR - mean
            features = self._features[rows]
            self._feature_energies[rows] = (features * features).sum(axis=1)
        self._written = hop

    def _write_hops(self, powers: Floats, frames: Sequence[int]) -> None:
        """Append the band powers of consecutive hops (rows of ``powers``) to the ring;
        ``frames``: how many of them each call of ``played`` gave (one count for ``resume``).

        The output's running mean moves chunk by chunk (a frame's hops, at most
        ``_CHUNK_HOPS`` at a time), as it did when each frame was written on its own."""
        kernel.write_hops(
            powers,
            np.asarray(frames, dtype=np.int64),
            _CHUNK_HOPS,
            self._written,
            self._powers,
            self._envelope,
            self._envelope_sums,
            self._features,
            self._feature_energies,
            self._out_mean,
            self._state,
            self._params,
        )
        self._written += powers.shape[0]

    # ------------------------------------------------------------ microphone

    def judge(self, pcm: PCM, now: float) -> EchoJudgement:
        """Judge one microphone frame (16 kHz, any length) heard at ``now``."""
        self._mic_now = now
        if pcm.size == _STEP and not self._mic_pending.size:
            # The engine's frame, in step with the guard (its samples become floats where
            # they are copied, exactly).
            self._last = self._step(pcm)
            return self._last
        samples = pcm.astype(np.float64)
        pending = (
            np.concatenate((self._mic_pending, samples)) if self._mic_pending.size else samples
        )
        steps = pending.size // _STEP
        if steps == 0:
            self._mic_pending = pending
            return with_samples(self._last, pcm.size)
        judged = [self._step(pending[i * _STEP : (i + 1) * _STEP]) for i in range(steps)]
        self._mic_pending = pending[steps * _STEP :]
        if steps == 1:
            self._last = judged[0]
        else:  # a long frame: near-end when most of its steps are
            near = sum(j.near_end for j in judged) * 2 >= steps
            loudest = max(judged, key=lambda j: j.excess_db)
            self._last = EchoJudgement(
                0,
                any(j.reference for j in judged),
                near,
                judged[-1].delay_ms,
                loudest.echo_dbfs,
                loudest.residual_db,
                loudest.excess_db,
            )
        return with_samples(self._last, pcm.size)

    def _step(self, samples: Samples) -> EchoJudgement:
        self._mic_position += _STEP
        hop = self._mic_position // _HOP
        if self._queued_hops and (
            hop + _NEIGHBOURS > self._written
            or hop - self._lags + 1 - _NEIGHBOURS <= self._written + self._queued_hops - self._ring
        ):
            # The step needs queued hops, or they overwrite hops it needs: all of them, now.
            self._write_queued()
        if not self._audible(hop):
            # The judgement needs no spectrum; the state it would have updated (the noise floor,
            # the microphone's mean) waits for the next audible step, in one batch.
            self._defer(samples)
            return NO_ECHO_STEP
        self._analyse_idle_steps()
        frame = self._mic_frame
        frame[:-_STEP] = frame[_STEP:]
        frame[-_STEP:] = samples
        geometry = self._geometry
        geometry[0], geometry[1] = hop, self._written
        judged = self._judged
        status = kernel.audible_step(
            frame,
            self._mic_window,
            self._fft_order,
            self._twiddles,
            self._mic_bands,
            self._band_bins,
            self._band_state,
            self._envelope,
            self._features,
            self._feature_energies,
            self._averages,
            self._taus,
            self._state,
            self._params,
            geometry,
            judged,
        )
        if status == kernel.NO_LOCK:
            return NO_LOCK_STEP
        bound, residual, excess, near = judged.tolist()
        return EchoJudgement(_STEP, True, near > 0.0, self.delay_ms, dbfs(bound), residual, excess)

    def _audible(self, hop: int) -> bool:
        """Rule 4's first test, on the output alone: is anything audible in the delay range at
        ``hop``? Exact; the ring's envelope sums answer the usual cases without the envelope."""
        written, ring = self._written, self._ring
        if written < 0:
            return False  # nothing was ever played (the ring is silence)
        first = hop - self._lags + 1  # the delay range's oldest hop
        if first - _NEIGHBOURS > written - ring and hop + _NEIGHBOURS <= written:
            # All of _envelope_around's hops hold output: its sums are the ring's.
            return self._loudest(first, hop) >= _AUDIBLE
        # The output ends in the range, or before it: an upper bound, its room tail at its
        # loudest (the first hop after the end) beside what the ring holds in the range.
        loudest = float(self._envelope_sums[written % ring]) * self._decay ** max(
            1, first - written
        )
        oldest, newest = max(first, written - ring + 1), min(hop, written)
        if oldest <= newest:
            loudest = max(loudest, self._loudest(oldest, newest))
        if loudest < _AUDIBLE * _QUIET_MARGIN:
            return False
        around = self._around  # near the threshold: exactly as judged
        kernel.envelope_around(
            self._envelope,
            written,
            hop,
            self._lags,
            _NEIGHBOURS,
            self._decay,
            around,
            self._around_valid,
        )
        in_range = around[_NEIGHBOURS : _NEIGHBOURS + self._lags]
        return float(in_range.sum(axis=1).max()) >= _AUDIBLE

    def _loudest(self, first: int, last: int) -> float:
        """The largest envelope sum over the bands of hops ``first``…``last`` (in the ring)."""
        ring, sums = self._ring, self._envelope_sums
        low, high = first % ring, last % ring
        if low <= high:
            return float(sums[low : high + 1].max())
        return max(float(sums[low:].max()), float(sums[: high + 1].max()))

    def _defer(self, samples: Samples) -> None:
        """Keep an idle step's samples for ``_analyse_idle_steps``."""
        window = self._mic_window.size
        if self._idle_steps == 0:
            self._idle[:window] = self._mic_frame
        start = window + self._idle_steps * _STEP
        self._idle[start : start + _STEP] = samples
        self._idle_steps += 1
        if self._idle_steps == _IDLE_STEPS:
            self._analyse_idle_steps()

    def _analyse_idle_steps(self) -> None:
        """What ``_analyse`` would have done for the deferred idle steps, in order: their
        spectra in one FFT (the costly part), the noise floor and the mean step by step, with
        the same operations on the same values (the state is exactly the eager one)."""
        count = self._idle_steps
        if count == 0:
            return
        self._idle_steps = 0
        window = self._mic_window.size
        samples = self._idle[: window + count * _STEP]
        frames = sliding_window_view(samples[_STEP:], window)[::_STEP]  # step k's frame
        spectra = np.fft.rfft(frames * self._mic_window)
        kernel.idle_steps(
            spectra, self._mic_bands, self._band_bins, self._band_state, self._state, self._params
        )
        self._mic_frame[:] = samples[-window:]


def warm_up() -> None:
    """Compile the guard's kernels (``pipeline/echo_kernel.py``), or load them from numba's
    cache, before sessions need them: the first audible step would otherwise stop the event
    loop for the compilation (≈3 s; 0.15 s from the cache). A guard judges a tone's echo."""
    guard = EchoGuard()
    rate = guard.settings.output_sample_rate
    output = (8000 * np.sin(np.arange(rate) * 0.05)).astype(np.int16)
    out_frame, mic_frame = rate * STEP_MS // 1000, _STEP
    for step in range(35):
        now = step * STEP_MS / 1000
        if step >= 5:  # idle steps first: the first audible one replays them
            guard.played(output[step * out_frame : (step + 1) * out_frame], now)
        guard.judge(output[step * mic_frame : (step + 1) * mic_frame] // 4, now)
    # _audible's exact test, called from here rather than from the step.
    kernel.envelope_around(
        guard._envelope,
        guard._written,
        guard._mic_position // _HOP,
        guard._lags,
        _NEIGHBOURS,
        guard._decay,
        guard._around,
        guard._around_valid,
    )


__all__ = ["EchoGuard", "warm_up"]
