"""Wire audio formats of the OpenAI Realtime GA protocol, converted at the session's edge.

Theory of operation
-------------------
Rule 1 — formats. The GA protocol names three formats: ``audio/pcm`` (PCM16 little-endian mono,
24 kHz, the only rate GA allows), ``audio/pcmu`` (G.711 µ-law) and ``audio/pcma`` (G.711 A-law),
both 8 kHz. ``audio_format`` turns the client's ``{type, rate}`` into an ``AudioFormat`` or raises
``UnsupportedAudioFormat`` naming the bad value; nothing else is accepted.

Rule 2 — one internal shape. The pipeline hears PCM16 mono at ``INPUT_SAMPLE_RATE`` (16 kHz) and
speaks PCM16 mono at the session's output rate. ``InboundAudio`` and ``OutboundAudio`` are the
only places wire audio is converted, one of each per session and direction; a format change
(``session.update``) means a new converter.

Rule 3 — streaming. Audio arrives and leaves in arbitrary chunks, so each converter keeps one
streaming resampler for its lifetime: chunk boundaries leave no trace in the signal. To and from
8 kHz it is ``_FirStream`` (every 20 ms packet comes out at once, 4.5 ms of filter delay); between
the wideband rates soxr's ``ResampleStream``, which holds back its filter delay (a few ms to
~25 ms). What is held back comes out with more audio or ``flush()``; ``flush()`` belongs at the
end of a stretch of audio (a commit, the end of a response), ``OutboundAudio.reset()`` at an
interruption (the held tail is dropped).
Rule 4 — G.711 is the ITU-T segment algorithm, as in the Sun reference implementation (and
bit-exact with the deprecated ``audioop``): decoding is a 256-entry table, encoding is vectorised.

Rule 5 — errors. PCM16 input with an odd byte count raises ``MalformedAudio``; the caller maps it
to a protocol error. Both exceptions derive from ``AudioFormatError`` (a ``ValueError``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, pcm_from_bytes

AudioKind = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]

PCM_RATE = 24_000
"""The only rate GA allows for ``audio/pcm``."""
G711_RATE = 8_000

# soxr "MQ" has 16-bit precision, enough for PCM16 and G.711, and holds back less audio than "HQ"
# (24→16 kHz: 15 ms instead of 21 ms; 8→16 kHz: 26 ms instead of 66 ms).
_RESAMPLE_QUALITY = "MQ"


class AudioFormatError(ValueError):
    """Base of the errors this module raises for bad client audio or format requests."""


class UnsupportedAudioFormat(AudioFormatError):
    """The requested ``{type, rate}`` is not one of the GA formats."""


class MalformedAudio(AudioFormatError):
    """Audio bytes that cannot be in the session's format (PCM16 with an odd byte count)."""


@dataclass(frozen=True, slots=True)
class AudioFormat:
    """A wire format: the GA ``type`` and its sample rate in Hz (always mono)."""

    kind: AudioKind
    rate: int


PCM24K = AudioFormat("audio/pcm", PCM_RATE)
PCMU = AudioFormat("audio/pcmu", G711_RATE)
PCMA = AudioFormat("audio/pcma", G711_RATE)

_BY_KIND: dict[str, AudioFormat] = {f.kind: f for f in (PCM24K, PCMU, PCMA)}


def audio_format(type: str, rate: int | None = None) -> AudioFormat:
    """The format a client asked for. An omitted rate means the format's only rate."""
    fmt = _BY_KIND.get(type)
    if fmt is None:
        raise UnsupportedAudioFormat(f"unsupported audio format type {type!r}")
    if rate is not None and (isinstance(rate, bool) or rate != fmt.rate):
        raise UnsupportedAudioFormat(f"{type} supports rate {fmt.rate} only, not {rate!r}")
    return fmt


# --- G.711 (Rule 4) ------------------------------------------------------------------------------

_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # magnitude limit in the 14-bit domain
_ULAW_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], np.int32)
_ALAW_SEGMENT_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], np.int32)


def _ulaw_table() -> PCM:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def _alaw_table() -> PCM:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(segment == 0, t + 8, (t + 0x108) << np.maximum(segment - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ULAW_DECODE = _ulaw_table()
_ALAW_DECODE = _alaw_table()


def ulaw_decode(data: bytes) -> PCM:
    """G.711 µ-law bytes to PCM16 (one sample per byte)."""
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_decode(data: bytes) -> PCM:
    """G.711 A-law bytes to PCM16 (one sample per byte)."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def ulaw_encode(pcm: PCM) -> bytes:
    """PCM16 to G.711 µ-law bytes (one byte per sample)."""
    value = pcm.astype(np.int32) >> 2
    mask = np.where(value < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(value), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    # The reference codes magnitudes past segment 7 (only 8192) as segment 7's top: 0x7F ^ mask.
    magnitude = np.minimum(magnitude, 0x1FFF)
    segment = np.searchsorted(_ULAW_SEGMENT_ENDS, magnitude)
    code = (segment << 4) | ((magnitude >> (segment + 1)) & 0x0F)
    coded: npt.NDArray[np.uint8] = (code ^ mask).astype(np.uint8)
    return coded.tobytes()


def alaw_encode(pcm: PCM) -> bytes:
    """PCM16 to G.711 A-law bytes (one byte per sample)."""
    value = pcm.astype(np.int32) >> 3
    mask = np.where(value < 0, 0x55, 0xD5)
    magnitude = np.where(value < 0, -value - 1, value)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude)  # 13-bit magnitude: always < 8
    code = (segment << 4) | ((magnitude >> np.maximum(segment, 1)) & 0x0F)
    coded: npt.NDArray[np.uint8] = (code ^ mask).astype(np.uint8)
    return coded.tobytes()


# --- streaming conversion (Rules 2, 3) -----------------------------------------------------------


def compand(fmt: AudioFormat, pcm16: bytes) -> bytes:
    """PCM16 bytes (already at 8 kHz) as ``fmt``'s G.711 bytes; PCM passes through."""
    if fmt.kind == "audio/pcm":
        return pcm16
    samples = np.frombuffer(pcm16[: len(pcm16) - len(pcm16) % 2], dtype=np.int16)
    return ulaw_encode(samples) if fmt.kind == "audio/pcmu" else alaw_encode(samples)


class _ResampleStream:
    """One continuous resampler, or the identity when the rates match (Rule 3): a telephone
    rate (8 kHz) on either side goes through ``_FirStream``, the rest through soxr."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        self._soxr: Any = None
        self._fir: _FirStream | None = None
        if from_rate == to_rate:
            return
        if G711_RATE in (from_rate, to_rate):
            self._fir = _FirStream(from_rate, to_rate)
            return
        import soxr  # imported lazily like pipeline.audio.resample

        self._soxr = soxr.ResampleStream(
            from_rate, to_rate, 1, dtype="int16", quality=_RESAMPLE_QUALITY
        )

    def push(self, pcm: PCM) -> PCM:
        if pcm.size == 0:
            return pcm
        if self._fir is not None:
            return self._fir.push(pcm)
        if self._soxr is None:
            return pcm
        return np.asarray(self._soxr.resample_chunk(pcm), dtype=np.int16)

    def flush(self) -> PCM:
        if self._fir is not None:
            return self._fir.flush()
        if self._soxr is None:
            return np.zeros(0, dtype=np.int16)
        tail = np.asarray(self._soxr.resample_chunk(np.zeros(0, np.int16), last=True), np.int16)
        self._soxr.clear()
        return tail

    def clear(self) -> None:
        if self._fir is not None:
            self._fir.clear()
        if self._soxr is not None:
            self._soxr.clear()


class _FirStream:
    """A streaming rational resampler for telephone audio: zero-stuff by ``up``, one Kaiser
    windowed-sinc low-pass (passband to 0.45 × the lower rate, ~65 dB down by its half), keep
    every ``down``-th sample. Each chunk comes out at once — soxr's streams hold 8 kHz audio
    back in blocks of ~100 ms, which a telephone line's 20 ms packets would wait for. The
    filter's delay (8→16 kHz: 4.5 ms; 24→8 kHz: 4.5 ms) is dropped at the start and played
    out by ``flush``, so N ms in is N ms out and nothing is shifted. Computed polyphase: each
    output reads only the inputs under its phase's taps, never the stuffed zeros (22.05 →
    8 kHz, a 35,000-tap filter, took 15 s of CPU per second of audio as a full convolution;
    the same samples now take milliseconds)."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        g = math.gcd(from_rate, to_rate)
        self.up, self.down = to_rate // g, from_rate // g
        rate = from_rate * self.up
        lower = min(from_rate, to_rate)
        cutoff, transition = 0.45 * lower, 0.05 * lower
        width = 2 * math.pi * transition / rate
        taps = int(math.ceil((65 - 8) / (2.285 * width))) | 1
        n = np.arange(taps) - (taps - 1) / 2
        h = 2 * cutoff / rate * np.sinc(2 * cutoff / rate * n) * np.kaiser(taps, 0.1102 * 56.3)
        h = h / h.sum() * self.up  # unity gain (the zero-stuffed signal lost 1/up)
        # Polyphase: an output at upsampled time T needs only the inputs n with T - n*up a tap,
        # weighted by h[T - n*up]: phase T % up, ``per`` taps of it — never the zeros.
        self._per = -(-taps // self.up)
        padded = np.zeros(self._per * self.up)
        padded[:taps] = h
        self._phases = padded.reshape(self._per, self.up).T  # [p, j] = h[p + j*up]
        self._delay = (taps - 1) // 2
        self._history: npt.NDArray[np.float64] = np.zeros(self._per)
        """The last ``per`` inputs (silence before the start)."""
        self._consumed = 0
        """Inputs pushed since the start."""
        self._next = 0
        """The index k of the next output (at upsampled time ``delay + k*down``)."""

    def push(self, pcm: PCM) -> PCM:
        out = self._outputs(pcm.astype(np.float64), self.up * (self._consumed + pcm.size))
        self._consumed += pcm.size
        return out

    def _outputs(self, new: npt.NDArray[np.float64], limit: int) -> PCM:
        """The outputs at upsampled times ``delay + k*down`` below ``limit``, from the kept
        inputs and ``new`` (inputs past them are silence: ``flush``)."""
        base = self._consumed - self._per  # the absolute index of buffer[0]
        first = self._next
        last = (limit - 1 - self._delay) // self.down  # the last k whose time is below limit
        if last < first:
            self._history = np.concatenate((self._history, new))[-self._per :]
            return np.zeros(0, dtype=np.int16)
        times = self._delay + self.down * np.arange(first, last + 1)
        newest = times // self.up  # the newest input each output reads
        buffer = np.concatenate((self._history, new))
        short = int(newest[-1]) - base + 1 - buffer.size
        if short > 0:
            buffer = np.concatenate((buffer, np.zeros(short)))
        windows = buffer[(newest - base)[:, None] - np.arange(self._per)[None, :]]
        out: npt.NDArray[np.float64] = np.einsum("kj,kj->k", windows, self._phases[times % self.up])
        self._next = last + 1
        self._history = np.concatenate((self._history, new))[-self._per :]
        return np.asarray(np.clip(np.rint(out), -32768, 32767), dtype=np.int16)

    def flush(self) -> PCM:
        """The filter's delay played out (silence pushed through), then a fresh start."""
        produced = self.up * self._consumed
        tail = self._outputs(np.zeros(0), produced + min(self._delay, produced))
        self.clear()
        return tail

    def clear(self) -> None:
        self._history = np.zeros(self._per)
        self._consumed = 0
        self._next = 0


class InboundAudio:
    """Client audio in the session's input format → pipeline PCM16 mono at 16 kHz."""

    def __init__(self, format: AudioFormat) -> None:
        self.format = format
        self._stream = _ResampleStream(format.rate, INPUT_SAMPLE_RATE)

    def decode(self, data: bytes) -> PCM:
        """Convert one chunk; may return fewer samples than it represents (Rule 3).

        Raises ``MalformedAudio`` for PCM16 bytes of odd length (and then keeps no state).
        """
        if self.format.kind == "audio/pcm":
            if len(data) % 2:
                raise MalformedAudio(f"audio/pcm chunk of {len(data)} bytes is not whole samples")
            pcm = pcm_from_bytes(data)
        elif self.format.kind == "audio/pcmu":
            pcm = ulaw_decode(data)
        else:
            pcm = alaw_decode(data)
        return self._stream.push(pcm)

    def flush(self) -> PCM:
        """The audio the resampler still holds (at a commit); the stream then starts afresh."""
        return self._stream.flush()


class OutboundAudio:
    """Pipeline PCM16 at ``source_rate`` → bytes in the session's output format."""

    def __init__(self, format: AudioFormat, *, source_rate: int) -> None:
        self.format = format
        self.source_rate = source_rate
        self._stream = _ResampleStream(source_rate, format.rate)

    def encode(self, pcm: PCM) -> bytes:
        """Convert one chunk; the resampler may hold back its filter delay until ``flush``."""
        return self._to_wire(self._stream.push(pcm))

    def flush(self) -> bytes:
        """The held-back tail, at the end of a response; the stream then starts afresh."""
        return self._to_wire(self._stream.flush())

    def reset(self) -> None:
        """Drop the held-back audio: the response was interrupted."""
        self._stream.clear()

    def _to_wire(self, pcm: PCM) -> bytes:
        if self.format.kind == "audio/pcmu":
            return ulaw_encode(pcm)
        if self.format.kind == "audio/pcma":
            return alaw_encode(pcm)
        return pcm.astype("<i2", copy=False).tobytes()
