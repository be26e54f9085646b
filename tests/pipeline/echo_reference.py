"""The echo guard as it was first written, for ``test_echo.py`` to hold ``pipeline.echo`` to.

``EchoGuard`` in ``pipeline/echo.py`` is optimised: it puts off the spectra of idle microphone
steps and analyses the output frames the pacer sent ahead in one FFT, and must judge every frame
exactly as this straightforward version does — every step analysed when it comes, every output
frame analysed when it is played. Keep the two in step: a change to the rules (Rules 1–4 of
``pipeline/echo.py``) goes into both, this one written the obvious way.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from pipeline.echo import (
    _AUDIBLE,
    _GAIN_MIN_POWER,
    _HOP,
    _NEIGHBOURS,
    _OUTPUT_FLOOR,
    _POWER_FLOOR,
    _STEP,
    _WARM_UP_STEPS,
)
from pipeline.echo_values import (
    HOP_MS,
    NO_ECHO,
    STEP_MS,
    WINDOW_MS,
    EchoJudgement,
    EchoSettings,
    band_matrix,
    dbfs,
    mel,
    with_samples,
)
from plugins.audio import INPUT_SAMPLE_RATE, PCM

Floats = npt.NDArray[np.float64]


class StepByStepEchoGuard:
    """``pipeline.echo.EchoGuard`` before its optimisation (2026-12-02), unchanged but for
    its name."""

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
        self._offsets = np.arange(-self._lags + 1 - _NEIGHBOURS, _NEIGHBOURS + 1)
        self._lag_range = np.arange(self._lags)
        self.reset()

    # ------------------------------------------------------------ state

    def reset(self) -> None:
        """Forget everything: the output, the delay, the gains (a new audio path)."""
        bands, ring = self.settings.bands, self._ring
        self._envelope: Floats = np.zeros((ring, bands))
        self._powers: Floats = np.zeros((ring, bands))
        self._held: tuple[Floats, Floats] | None = None  # hop powers, raw tail (a paused answer)
        self._features: Floats = np.zeros((ring, bands))
        self._out_mean: Floats | None = None
        self._written = -1  # last hop whose band powers are in the ring
        self._out_end = -math.inf  # where the scheduled output ends, in hops
        self._raw: Floats = np.zeros(0)
        self._mic_position = 0
        self._mic_now: float | None = None
        self._mic_frame: Floats = np.zeros(self._mic_window.size)
        self._mic_pending: Floats = np.zeros(0)
        self._mic_mean: Floats | None = None
        self._noise: Floats | None = None
        # Correlation averages, row 0 slow (the lock), row 1 fast (a delay that jumped).
        self._products: Floats = np.zeros((2, self._lags))
        self._mic_energy: Floats = np.zeros((2, 1))
        self._out_energy: Floats = np.zeros((2, self._lags))
        self._candidate: int | None = None
        self._jumped = False
        self._steps_heard = 0  # steps with audible output (warm-up and acquisition)
        self._gains: Floats = np.zeros(bands)  # log10 echo gain per band
        self._gain_updates = np.zeros(bands)
        self.delay_hops: int | None = None
        self._last = NO_ECHO

    @property
    def delay_ms(self) -> float | None:
        return None if self.delay_hops is None else float(self.delay_hops * HOP_MS)

    # ------------------------------------------------------------ output

    def played(self, pcm: PCM, now: float) -> None:
        """Output audio (at ``output_sample_rate``) sent to the client at ``now``."""
        if pcm.size == 0:
            return
        now_hop = self._hop_at(now)
        if self._out_end < now_hop:
            # The client's buffer ran dry (or this is the first output): the frame plays now.
            start = math.ceil(now_hop)
            self._silence_until(start)
            self._raw = np.zeros(self._out_window_len)
        self._raw = np.concatenate((self._raw, pcm.astype(np.float64)))
        hops = (self._raw.size - self._out_window_len) // self._out_hop
        if hops > 0:
            starts = (np.arange(hops) + 1) * self._out_hop
            windows = self._raw[starts[:, None] + self._out_taps]
            spectrum = np.fft.rfft(windows * self._out_window)
            self._write_hops((spectrum.real**2 + spectrum.imag**2) @ self._out_bands)
            self._raw = self._raw[hops * self._out_hop :]
        self._out_end = self._written + (self._raw.size - self._out_window_len) / self._out_hop

    def stop(self, now: float) -> None:
        """The client was told to clear its playback: forget output scheduled after
        ``now + stop_margin_ms`` (what already played still echoes)."""
        self._held = None
        self._cut(math.ceil(self._hop_at(now) + self.settings.stop_margin_ms / HOP_MS))

    def pause(self, now: float) -> None:
        """The client was told to pause its playback and keep its buffer (a held answer):
        output scheduled after ``now`` waits for ``resume``; what plays until the client has
        paused (``stop_margin_ms``) is kept where it is as well (Rule 2)."""
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
        self._silence_until(max(math.ceil(self._hop_at(now)), self._written))
        if powers.size:
            self._write_hops(powers)
        self._raw = np.concatenate((np.zeros(self._out_window_len), tail))
        self._out_end = self._written + tail.size / self._out_hop

    def _cut(self, cut: int) -> None:
        """Forget the output scheduled after hop ``cut``."""
        if self._out_end <= cut:
            return
        if self._written > cut:
            self._written = cut  # the hops after it no longer count (Rule 2)
            self._raw = np.zeros(self._out_window_len)
        else:
            self._raw = self._raw[: self._out_window_len + (cut - self._written) * self._out_hop]
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
        else:
            rows = (written + 1 + np.arange(count)) % ring
            decay = self._decay ** (1.0 + np.arange(count))
            self._envelope[rows] = self._envelope[written % ring] * decay[:, None]
            self._powers[rows] = 0.0
            mean = self._out_mean if self._out_mean is not None else math.log10(_OUTPUT_FLOOR)
            self._features[rows] = math.log10(_OUTPUT_FLOOR) - mean
        self._written = hop

    def _write_hops(self, powers: Floats) -> None:
        """Append the band powers of consecutive hops (rows of ``powers``) to the ring."""
        for first in range(0, powers.shape[0], 64):  # 64 hops: decay**64 stays far from 0
            self._write_some_hops(powers[first : first + 64])

    def _write_some_hops(self, powers: Floats) -> None:
        count = powers.shape[0]
        rows = (self._written + 1 + np.arange(count)) % self._ring
        self._powers[rows] = powers
        # envelope[h] = max(power[h], decay * envelope[h - 1]), as a running maximum.
        scale = self._decay ** np.arange(count + 1, dtype=np.float64)[:, None]
        previous = self._envelope[self._written % self._ring]
        scaled = np.vstack((previous, powers / scale[1:]))
        self._envelope[rows] = (np.maximum.accumulate(scaled, axis=0) * scale)[1:]
        log_powers = np.log10(powers + _OUTPUT_FLOOR)
        if self._out_mean is None:
            self._out_mean = log_powers[0].copy()
        mean = self._out_mean
        self._features[rows] = log_powers - mean
        audible = powers.sum(axis=1) > 100.0 * _OUTPUT_FLOOR
        if audible.any():  # the running mean moves once per call (≤ a few hops)
            weight = 1.0 - (1.0 - self._hop_tau) ** int(audible.sum())
            mean += weight * (log_powers[audible].mean(axis=0) - mean)
        self._written += count

    # ------------------------------------------------------------ microphone

    def judge(self, pcm: PCM, now: float) -> EchoJudgement:
        """Judge one microphone frame (16 kHz, any length) heard at ``now``."""
        self._mic_now = now
        pending = np.concatenate((self._mic_pending, pcm.astype(np.float64)))
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

    def _step(self, samples: Floats) -> EchoJudgement:
        step = _STEP
        frame = self._mic_frame
        frame[:-step] = frame[step:]
        frame[-step:] = samples
        self._mic_position += step
        spectrum = np.fft.rfft(frame * self._mic_window)
        mic = (spectrum.real**2 + spectrum.imag**2) @ self._mic_bands
        noise = self._track_noise(mic)
        log_mic = np.log10(mic + noise)
        if self._mic_mean is None:
            self._mic_mean = log_mic.copy()
        self._mic_mean += self._tau * (log_mic - self._mic_mean)

        hop = self._mic_position // _HOP
        hops = hop + self._offsets  # oldest first: lag max+neighbours … −neighbours
        written = self._written
        envelope = self._envelope.take(hops, axis=0, mode="wrap")
        valid: npt.NDArray[np.bool_] | None = None
        if int(hops[0]) <= written - self._ring or int(hops[-1]) > written:
            valid = (hops <= written) & (hops > written - self._ring)
            envelope[~valid] = 0.0
            future = hops > written
            if written >= 0:
                # Past the end of the output: its room tail (Rule 4).
                tail = self._decay ** (hops[future] - written).astype(np.float64)
                envelope[future] = self._envelope[written % self._ring] * tail[:, None]
        in_range = envelope[_NEIGHBOURS : _NEIGHBOURS + self._lags]
        if float(in_range.sum(axis=1).max()) < _AUDIBLE:
            return NO_ECHO
        self._steps_heard += 1
        self._correlate(log_mic - self._mic_mean, hop, valid)

        locked = self.delay_hops
        if locked is None:
            if self._steps_heard > self._acquire_steps:
                return EchoJudgement(0, True, True, None, -100.0, 0.0, 0.0)
            bound = in_range.max(axis=0)  # anything in range, at full level
        else:
            near = self._output_near(envelope, locked)
            candidate = self._candidate
            if candidate is None:
                self._learn_gains(mic, near)
            else:
                # The delay may have jumped: the echo may come from either lag.
                other = self._output_near(envelope, candidate)
                self._learn_gains(mic, other if self._jumped else near)
                near = np.maximum(near, other)
            bound = near * 10.0**self._gains
            # A speaker's distortion spreads the loudest band's energy to the others.
            bound = np.maximum(bound, self._spread * float(bound.max()))
        threshold = self._margin * bound + 2.0 * noise
        excess = float(np.maximum(np.log10((mic + _POWER_FLOOR) / threshold), 0.0).mean())
        mic_power = float(mic.sum())
        above = float(np.maximum(mic - threshold, 0.0).sum())
        residual = 10.0 * math.log10(above / mic_power) if above > 0 and mic_power > 0 else -100.0
        return EchoJudgement(
            0,
            True,
            excess >= self._near_end,
            self.delay_ms,
            dbfs(float(bound.sum())),
            residual,
            10.0 * excess,
        )

    def _track_noise(self, mic: Floats) -> Floats:
        """Per-band noise floor: follows dips at once, rises by ≈ 2 dB/s."""
        if self._noise is None:
            self._noise = np.maximum(mic, _POWER_FLOOR)
        noise = self._noise
        self._noise = np.maximum(
            np.where(mic < noise, 0.7 * noise + 0.3 * mic, noise * 1.01), _POWER_FLOOR
        )
        return self._noise

    def _correlate(self, mic: Floats, hop: int, valid: npt.NDArray[np.bool_] | None) -> None:
        """Rule 3: update the per-lag correlations and the lock (``valid``: which of the hops
        around ``hop`` hold output, None for all)."""
        lagged = self._features.take(hop - self._lag_range, axis=0, mode="wrap")
        if valid is not None:
            lagged[~valid[_NEIGHBOURS : _NEIGHBOURS + self._lags][::-1]] = 0.0
        taus = self._taus
        self._products += taus * (lagged @ mic - self._products)
        self._mic_energy += taus * (float(mic @ mic) - self._mic_energy)
        self._out_energy += taus * ((lagged * lagged).sum(axis=1) - self._out_energy)
        if self._steps_heard < _WARM_UP_STEPS:
            return
        correlations = self._products / np.sqrt(self._mic_energy * self._out_energy + 1e-12)
        slow, fast = correlations
        self._relock(slow)
        locked = self.delay_hops
        best = int(np.argmax(fast))
        self._candidate = None
        self._jumped = False
        if locked is not None and best != locked and self._lockable(fast, best):
            self._candidate = best
            self._jumped = float(fast[best]) > float(fast[locked])

    def _lockable(self, correlation: Floats, lag: int) -> bool:
        peak = float(correlation[lag])
        settings = self.settings
        return (
            peak >= settings.lock_correlation
            and peak - float(np.partition(correlation, self._middle)[self._middle])
            >= settings.lock_contrast
        )

    def _relock(self, correlation: Floats) -> None:
        """Rule 3 on the slow correlations."""
        locked = self.delay_hops
        if locked is not None and float(correlation[locked]) < self.settings.release_correlation:
            self.delay_hops = locked = None
        best = int(np.argmax(correlation))
        if best == locked:
            return
        if locked is not None and float(correlation[best]) <= float(correlation[locked]) + 0.05:
            return  # another lag takes over only when it is clearly better
        if self._lockable(correlation, best):
            self.delay_hops = best

    def _output_near(self, envelope: Floats, lag: int) -> Floats:
        """The loudest output envelope within ±``_NEIGHBOURS`` hops of ``lag``."""
        centre = self._lags - 1 + _NEIGHBOURS - lag
        return np.asarray(envelope[centre - _NEIGHBOURS : centre + _NEIGHBOURS + 1].max(axis=0))

    def _learn_gains(self, mic: Floats, output: Floats) -> None:
        """Running median of log10(mic / output) per band, with a step that starts large."""
        loud = output > _GAIN_MIN_POWER
        if not loud.any():
            return
        ratio = np.log10(mic[loud] + _POWER_FLOOR) - np.log10(output[loud])
        updates = self._gain_updates[loud] + 1.0
        self._gain_updates[loud] = updates
        step = np.maximum(0.05, 0.5 / np.sqrt(updates))
        gains = self._gains[loud]
        self._gains[loud] = gains + step * np.sign(ratio - gains)
