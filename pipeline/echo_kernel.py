"""The echo guard's audible step, compiled (``pipeline/echo.py`` Rules 3 and 4).

A step with output audible in the delay range did about 60 small numpy calls; their fixed cost,
not the arithmetic, was most of the guard's time, and the guard was a third of a conversing
session's CPU (``benchmarks.capacity``). Here the same operations, in the same order, run as
loops compiled by numba: one call per step after the microphone's FFT (which numpy still does).

The functions are sans-I/O like the guard: arrays in, arrays updated in place, scalars out.
Their values agree with the numpy version they replaced to rounding (sums and products over
the bands are taken in order here, pairwise or by BLAS in numpy);
``tests/pipeline/test_echo.py`` holds them to ``tests/pipeline/echo_reference.py``, the
step-by-step version, as it held that one. Compiled on first use and cached beside the module
(numba's own cache, ``__pycache__``); ``warm_up`` compiles them before a server takes sessions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Complex = npt.NDArray[np.complex128]

F = TypeVar("F", bound=Callable[..., object])


def _compiled(function: F) -> F:
    return cast(F, numba.njit(cache=True, nogil=True)(function))


# Indices of the guard's scalar state (``EchoGuard._state``, int64): kept in one array the
# kernel updates in place, so one argument carries them.
LOCKED = 0
"""The locked lag, in hops (-1: none)."""
CANDIDATE = 1
"""A lag the fast correlation prefers while the lock holds (-1: none)."""
JUMPED = 2
"""The candidate correlates better than the lock on the fast average (0/1)."""
STEPS_HEARD = 3
"""Steps with audible output (warm-up and acquisition)."""
GAINS_SETTLED = 4
"""Every band has had 100 gain updates (the step is 0.05)."""
NOISE_SET = 5
MEAN_SET = 6
OUT_MEAN_SET = 7
"""The output's running mean has a value (its first hop's log-powers, to begin with)."""
STATE_SIZE = 8

# Indices of its constants (``EchoGuard._params``, float64).
TAU, MARGIN, SPREAD, NEAR_END, DECAY = 0, 1, 2, 3, 4
LOCK_CORRELATION, LOCK_CONTRAST, RELEASE_CORRELATION = 5, 6, 7
POWER_FLOOR, GAIN_MIN_POWER = 8, 9
HOP_TAU, OUTPUT_FLOOR = 10, 11
PARAMS_SIZE = 12

# Rows of the per-band state (``EchoGuard._band_state``, (4, bands) float64).
NOISE, MEAN, GAINS, GAIN_UPDATES = 0, 1, 2, 3

NO_LOCK = 1
"""``audible_step``'s status when there is no lock and acquisition is over."""


@functools.cache
def fft_tables(size: int) -> tuple[Ints, Complex]:
    """The bit-reversed order and the twiddle factors of ``spectrum``'s FFT of ``size`` (a
    power of two)."""
    if size < 2 or size & (size - 1):
        raise ValueError(f"the compiled FFT needs a power of two, got {size}")
    bits = size.bit_length() - 1
    order = np.array([int(f"{i:0{bits}b}"[::-1], 2) for i in range(size)], dtype=np.int64)
    twiddles = np.exp(-2j * np.pi * np.arange(size // 2) / size)
    return order, twiddles


@_compiled
def spectrum(frame: Floats, window: Floats, order: Ints, twiddles: Complex, out: Complex) -> None:
    """The first ``size // 2 + 1`` bins of the DFT of ``frame * window`` into ``out``, as
    ``np.fft.rfft`` gives them (to rounding): an iterative radix-2 FFT, which costs a few µs
    where numpy's call costs ten."""
    size = frame.shape[0]
    values = np.empty(size, dtype=np.complex128)
    for i in range(size):
        values[order[i]] = frame[i] * window[i]
    span = 2
    while span <= size:
        half = span // 2
        stride = size // span
        for start in range(0, size, span):
            for j in range(half):
                a = values[start + j]
                b = values[start + j + half] * twiddles[j * stride]
                values[start + j] = a + b
                values[start + j + half] = a - b
        span *= 2
    for k in range(out.shape[0]):
        out[k] = values[k]


@_compiled
def _row_powers(spectrum: Complex, bands_matrix: Floats, band_bins: Ints, out: Floats) -> None:
    """One spectrum's band powers (``|X|²`` summed over the band's bins, scaled) into ``out``."""
    for b in range(bands_matrix.shape[1]):
        total = 0.0
        for k in range(band_bins[0, b], band_bins[1, b]):
            value = spectrum[k]
            total += (value.real * value.real + value.imag * value.imag) * bands_matrix[k, b]
        out[b] = total


@_compiled
def band_powers(spectra: Complex, bands_matrix: Floats, band_bins: Ints, out: Floats) -> None:
    """Each row's band powers into ``out`` (``_row_powers``)."""
    for row in range(spectra.shape[0]):
        _row_powers(spectra[row], bands_matrix, band_bins, out[row])


@_compiled
def write_hops(
    powers: Floats,
    frames: Ints,
    chunk: int,
    written: int,
    power_ring: Floats,
    envelope: Floats,
    envelope_sums: Floats,
    features: Floats,
    feature_energies: Floats,
    out_mean: Floats,
    state: Ints,
    params: Floats,
) -> None:
    """Append the band powers of consecutive hops (rows of ``powers``) to the ring after hop
    ``written`` (Rule 2): the envelope (the power, or the last hop's envelope decayed, whichever
    is larger), the features (log-powers minus the output's running mean) and the rows' sums.
    ``frames``: how many hops each call of ``played`` gave; the running mean moves once per
    chunk of at most ``chunk`` hops of a frame, by its audible hops."""
    ring, bands = envelope.shape[0], envelope.shape[1]
    decay, hop_tau, floor = params[DECAY], params[HOP_TAU], params[OUTPUT_FLOOR]
    if not state[OUT_MEAN_SET]:
        for b in range(bands):
            out_mean[b] = math.log10(powers[0, b] + floor)
        state[OUT_MEAN_SET] = 1
    previous = envelope[written % ring].copy()
    loud_sum = np.empty(bands)
    row_index = 0
    for frame in range(frames.shape[0]):
        remaining = frames[frame]
        while remaining > 0:
            n = min(chunk, remaining)
            remaining -= n
            heard = 0
            for b in range(bands):
                loud_sum[b] = 0.0
            for _ in range(n):
                row = (written + 1 + row_index) % ring
                total = 0.0
                for b in range(bands):
                    total += powers[row_index, b]
                audible = total > 100.0 * floor
                envelope_sum = 0.0
                energy = 0.0
                for b in range(bands):
                    power = powers[row_index, b]
                    level = max(power, decay * previous[b])
                    previous[b] = level
                    log_power = math.log10(power + floor)
                    feature = log_power - out_mean[b]
                    power_ring[row, b] = power
                    envelope[row, b] = level
                    features[row, b] = feature
                    envelope_sum += level
                    energy += feature * feature
                    if audible:
                        loud_sum[b] += log_power
                envelope_sums[row] = envelope_sum
                feature_energies[row] = energy
                if audible:
                    heard += 1
                row_index += 1
            if heard:  # the running mean moves once per chunk (≤ a few hops)
                weight = 1.0 - (1.0 - hop_tau) ** heard
                for b in range(bands):
                    out_mean[b] += weight * (loud_sum[b] / heard - out_mean[b])


@_compiled
def envelope_around(
    envelope: Floats,
    written: int,
    hop: int,
    lags: int,
    neighbours: int,
    decay: float,
    out: Floats,
    valid: Bools,
) -> bool:
    """The output's envelope at the hops around the delay range at ``hop`` into ``out``
    (oldest first: lag max+neighbours … −neighbours), its room tail past the output's end, and
    which of those hops hold output into ``valid``; True when all of them do."""
    ring = envelope.shape[0]
    bands = envelope.shape[1]
    first = hop - lags + 1 - neighbours
    everything = True
    last_row = written % ring
    for i in range(out.shape[0]):
        h = first + i
        if written - ring < h <= written:
            row = h % ring
            for b in range(bands):
                out[i, b] = envelope[row, b]
            valid[i] = True
            continue
        everything = False
        valid[i] = False
        if h > written and written >= 0:
            tail = decay ** float(h - written)  # past the end: its room tail (Rule 4)
            for b in range(bands):
                out[i, b] = envelope[last_row, b] * tail
        else:
            for b in range(bands):
                out[i, b] = 0.0
    return everything


@_compiled
def _lockable(correlation: Floats, lag: int, middle: int, params: Floats) -> bool:
    peak = correlation[lag]
    median = np.sort(correlation)[middle]
    return bool(peak >= params[LOCK_CORRELATION] and peak - median >= params[LOCK_CONTRAST])


@_compiled
def _learn_gains(
    mic_floor: Floats, output: Floats, band_state: Floats, state: Ints, floor: float
) -> None:
    """Running median of log10(mic / output) per band, with a step that starts large."""
    bands = output.shape[0]
    gains = band_state[GAINS]
    updates = band_state[GAIN_UPDATES]
    loud = 0
    for b in range(bands):
        if output[b] > floor:
            loud += 1
    if loud == 0:
        return
    everywhere = loud == bands
    lowest = math.inf
    for b in range(bands):
        if not output[b] > floor:
            continue
        ratio = math.log10(mic_floor[b]) - math.log10(output[b])
        updates[b] += 1.0
        lowest = min(lowest, updates[b])
        if everywhere and state[GAINS_SETTLED]:
            step = 0.05  # what the formula gives from 100 updates on
        else:
            step = max(0.05, 0.5 / math.sqrt(updates[b]))
        difference = ratio - gains[b]
        sign = 1.0 if difference > 0 else (-1.0 if difference < 0 else 0.0)
        gains[b] = gains[b] + step * sign
    if everywhere and not state[GAINS_SETTLED]:
        state[GAINS_SETTLED] = 1 if lowest >= 100.0 else 0


@_compiled
def _output_near(envelope: Floats, lags: int, neighbours: int, lag: int, out: Floats) -> None:
    """The loudest output envelope within ±``neighbours`` hops of ``lag``, into ``out``."""
    centre = lags - 1 + neighbours - lag
    for b in range(out.shape[0]):
        loudest = envelope[centre - neighbours, b]
        for i in range(centre - neighbours + 1, centre + neighbours + 1):
            loudest = max(loudest, envelope[i, b])
        out[b] = loudest


@_compiled
def _listen(
    spectrum: Complex,
    mic_bands: Floats,
    band_bins: Ints,
    band_state: Floats,
    state: Ints,
    params: Floats,
    mic: Floats,
    centred: Floats,
) -> None:
    """One step of the microphone: its band powers (into ``mic``), the noise floor (follows
    dips at once, rises ≈ 2 dB/s), its log-powers' running mean, and the log-powers minus that
    mean (into ``centred``)."""
    floor = params[POWER_FLOOR]
    _row_powers(spectrum, mic_bands, band_bins, mic)
    noise = band_state[NOISE]
    mean = band_state[MEAN]
    tau = params[TAU]
    for b in range(mic.shape[0]):
        if not state[NOISE_SET]:
            noise[b] = max(mic[b], floor)  # then it moves, as every step
        if mic[b] < noise[b]:
            noise[b] = max(0.7 * noise[b] + 0.3 * mic[b], floor)
        else:
            noise[b] = max(noise[b] * 1.01, floor)
        log_mic = math.log10(mic[b] + noise[b])
        if not state[MEAN_SET]:
            mean[b] = log_mic
        mean[b] += tau * (log_mic - mean[b])
        centred[b] = log_mic - mean[b]
    state[NOISE_SET] = 1
    state[MEAN_SET] = 1


@_compiled
def idle_steps(
    spectra: Complex,
    mic_bands: Floats,
    band_bins: Ints,
    band_state: Floats,
    state: Ints,
    params: Floats,
) -> None:
    """The microphone's state through steps put off while nothing audible played (rows of
    ``spectra``, in order): what their audible steps would have done to it."""
    bands = mic_bands.shape[1]
    mic = np.empty(bands)
    centred = np.empty(bands)
    for k in range(spectra.shape[0]):
        _listen(spectra[k], mic_bands, band_bins, band_state, state, params, mic, centred)


@_compiled
def audible_step(
    frame: Floats,
    window: Floats,
    order: Ints,
    twiddles: Complex,
    mic_bands: Floats,
    band_bins: Ints,
    band_state: Floats,
    envelope: Floats,
    features: Floats,
    feature_energies: Floats,
    averages: Floats,
    taus: Floats,
    state: Ints,
    params: Floats,
    geometry: Ints,
    out: Floats,
) -> int:
    """Rules 3 and 4 for one step with output audible: the microphone's band powers from the
    spectrum of its last window (``frame``, windowed by ``window``), the noise floor and mean,
    the correlations and the lock, the echo bound and the excess over it.

    ``geometry``: hop, written, lags, neighbours, warm-up steps, acquire steps, the median
    lag's index. Writes (echo bound over the bands, residual dB, excess dB, near-end 0/1) into
    ``out``; returns 0, or ``NO_LOCK``."""
    hop, written, lags, neighbours = geometry[0], geometry[1], geometry[2], geometry[3]
    warm_up, acquire, middle = geometry[4], geometry[5], geometry[6]
    bands = mic_bands.shape[1]
    ring = envelope.shape[0]
    floor = params[POWER_FLOOR]

    bins = np.empty(frame.shape[0] // 2 + 1, dtype=np.complex128)
    spectrum(frame, window, order, twiddles, bins)
    mic = np.empty(bands)
    centred = np.empty(bands)
    _listen(bins, mic_bands, band_bins, band_state, state, params, mic, centred)
    noise = band_state[NOISE]

    around = np.empty((lags + 2 * neighbours, bands))
    valid = np.empty(lags + 2 * neighbours, dtype=np.bool_)
    everything = envelope_around(
        envelope, written, hop, lags, neighbours, params[DECAY], around, valid
    )
    state[STEPS_HEARD] += 1

    # Rule 3: the per-lag correlations, each average at its own rate.
    latest = np.empty(2 * lags + 1)
    for lag in range(lags):
        if not everything and not valid[neighbours + lags - 1 - lag]:
            latest[lag] = 0.0
            latest[lags + lag] = 0.0
            continue
        row = (hop - lag) % ring
        product = 0.0
        for b in range(bands):
            product += features[row, b] * centred[b]
        latest[lag] = product
        latest[lags + lag] = feature_energies[row]
    energy = 0.0
    for b in range(bands):
        energy += centred[b] * centred[b]
    latest[2 * lags] = energy
    for r in range(2):
        rate = taus[r, 0]
        for i in range(2 * lags + 1):
            averages[r, i] += rate * (latest[i] - averages[r, i])
    if state[STEPS_HEARD] >= warm_up:
        correlations = np.empty((2, lags))  # row 0 slow (the lock), row 1 fast (a jump)
        for r in range(2):
            for lag in range(lags):
                correlations[r, lag] = averages[r, lag] / math.sqrt(
                    averages[r, 2 * lags] * averages[r, lags + lag] + 1e-12
                )
        slow, fast = correlations[0], correlations[1]
        # The lock, on the slow correlations: another lag takes over only when clearly better.
        locked = state[LOCKED]
        if locked >= 0 and slow[locked] < params[RELEASE_CORRELATION]:
            locked = -1
        best = int(np.argmax(slow))
        if best != locked and (locked < 0 or slow[best] > slow[locked] + 0.05):
            if _lockable(slow, best, middle, params):
                locked = best
        state[LOCKED] = locked
        # A delay that jumped, on the fast ones.
        best = int(np.argmax(fast))
        state[CANDIDATE] = -1
        state[JUMPED] = 0
        if locked >= 0 and best != locked and _lockable(fast, best, middle, params):
            state[CANDIDATE] = best
            state[JUMPED] = 1 if fast[best] > fast[locked] else 0

    # Rule 4: the echo bound and the excess over it.
    locked = state[LOCKED]
    mic_floor = np.empty(bands)
    for b in range(bands):
        mic_floor[b] = mic[b] + floor
    bound = np.empty(bands)
    if locked < 0:
        if state[STEPS_HEARD] > acquire:
            return NO_LOCK
        for b in range(bands):  # anything in range, at full level
            loudest = around[neighbours, b]
            for i in range(neighbours + 1, neighbours + lags):
                loudest = max(loudest, around[i, b])
            bound[b] = loudest
    else:
        near = np.empty(bands)
        _output_near(around, lags, neighbours, locked, near)
        candidate = state[CANDIDATE]
        if candidate < 0:
            _learn_gains(mic_floor, near, band_state, state, params[GAIN_MIN_POWER])
        else:
            # The delay may have jumped: the echo may come from either lag.
            other = np.empty(bands)
            _output_near(around, lags, neighbours, candidate, other)
            learned = other if state[JUMPED] else near
            _learn_gains(mic_floor, learned, band_state, state, params[GAIN_MIN_POWER])
            for b in range(bands):
                near[b] = max(near[b], other[b])
        gains = band_state[GAINS]
        loudest = 0.0
        for b in range(bands):
            bound[b] = near[b] * 10.0 ** gains[b]
            loudest = max(loudest, bound[b])
        # A speaker's distortion spreads the loudest band's energy to the others.
        spread = params[SPREAD] * loudest
        for b in range(bands):
            bound[b] = max(bound[b], spread)
    log_sum = 0.0
    above = 0.0
    mic_power = 0.0
    bound_sum = 0.0
    margin = params[MARGIN]
    for b in range(bands):
        threshold = margin * bound[b] + 2.0 * noise[b]
        log_sum += max(math.log10(mic_floor[b] / threshold), 0.0)
        above += max(mic[b] - threshold, 0.0)
        mic_power += mic[b]
        bound_sum += bound[b]
    excess = log_sum / bands
    out[0] = bound_sum
    out[1] = 10.0 * math.log10(above / mic_power) if above > 0 and mic_power > 0 else -100.0
    out[2] = 10.0 * excess
    out[3] = 1.0 if excess >= params[NEAR_END] else 0.0
    return 0
