"""Wire audio formats: G.711 codecs, format selection, streaming conversion at the edge."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from pipeline.audio_formats import (
    PCM24K,
    PCMA,
    PCMU,
    AudioFormat,
    AudioFormatError,
    InboundAudio,
    MalformedAudio,
    OutboundAudio,
    UnsupportedAudioFormat,
    alaw_decode,
    alaw_encode,
    audio_format,
    ulaw_decode,
    ulaw_encode,
)


def _audioop() -> ModuleType | None:
    """The deprecated stdlib codec, as a cross-check only where it still imports."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import audioop
    except ImportError:
        return None
    return audioop


AUDIOOP = _audioop()
ALL_PCM16 = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


def sine(rate: int, ms: int, *, hz: float = 440.0, amplitude: float = 32000.0) -> PCM:
    t = np.arange(rate * ms // 1000) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def snr_db(reference: PCM, other: PCM) -> float:
    ref = reference.astype(np.float64)
    noise = ref - other.astype(np.float64)
    return 10.0 * float(np.log10(np.sum(ref**2) / max(np.sum(noise**2), 1e-9)))


# --- formats -------------------------------------------------------------------------------------


def test_the_ga_formats_are_accepted_with_their_only_rate_or_none() -> None:
    assert audio_format("audio/pcm", 24000) == PCM24K == AudioFormat("audio/pcm", 24000)
    assert audio_format("audio/pcm", None) == PCM24K
    assert audio_format("audio/pcmu", None) == PCMU
    assert audio_format("audio/pcma", 8000) == PCMA


@pytest.mark.parametrize(
    ("kind", "rate", "named"),
    [
        ("audio/pcm", 16000, "16000"),
        ("audio/pcm", 48000, "48000"),
        ("audio/pcmu", 16000, "16000"),
        ("audio/pcma", 24000, "24000"),
        ("pcm16", None, "'pcm16'"),
        ("audio/opus", 48000, "'audio/opus'"),
        ("audio/pcm", True, "True"),
    ],
)
def test_other_formats_raise_naming_the_bad_value(kind: str, rate: int | None, named: str) -> None:
    with pytest.raises(UnsupportedAudioFormat, match=named) as caught:
        audio_format(kind, rate)
    assert isinstance(caught.value, AudioFormatError)
    assert isinstance(caught.value, ValueError)


# --- G.711 ---------------------------------------------------------------------------------------


def test_ulaw_known_codes() -> None:
    # 0xFF is +0 and 0x7F is -0; 0x80 and 0x00 are the positive and negative extremes.
    assert ulaw_decode(b"\xff\x7f\x80\x00").tolist() == [0, 0, 32124, -32124]
    assert ulaw_encode(np.array([0, 32767, -32768], dtype=np.int16)) == b"\xff\x80\x00"


def test_alaw_known_codes() -> None:
    # A-law has no zero: 0xD5/0x55 are the smallest steps either side of it.
    assert alaw_decode(b"\xd5\x55\xaa\x2a").tolist() == [8, -8, 32256, -32256]
    assert alaw_encode(np.array([0, -1, 32767, -32768], dtype=np.int16)) == b"\xd5\x55\xaa\x2a"


Encode = Callable[[PCM], bytes]
Decode = Callable[[bytes], PCM]
CODECS = pytest.mark.parametrize(
    ("encode", "decode"),
    [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)],
    ids=["ulaw", "alaw"],
)


@CODECS
def test_every_code_survives_decode_then_encode(encode: Encode, decode: Decode) -> None:
    expected = bytearray(ALL_CODES)
    if encode is ulaw_encode:
        expected[0x7F] = 0xFF  # µ-law's negative zero decodes to 0, which is coded as +0
    assert encode(decode(ALL_CODES)) == bytes(expected)


@CODECS
def test_a_full_scale_sine_round_trips_with_high_snr(encode: Encode, decode: Decode) -> None:
    signal = sine(8000, 1000, amplitude=32000.0)
    assert snr_db(signal, decode(encode(signal))) > 30.0
    quiet = sine(8000, 1000, amplitude=1000.0)  # companding keeps quiet speech clean too
    assert snr_db(quiet, decode(encode(quiet))) > 30.0


@pytest.mark.skipif(AUDIOOP is None, reason="audioop is gone from this Python")
def test_codecs_are_bit_exact_with_audioop_for_every_input() -> None:
    assert AUDIOOP is not None
    linear = ALL_PCM16.astype("<i2").tobytes()
    assert ulaw_encode(ALL_PCM16) == AUDIOOP.lin2ulaw(linear, 2)
    assert alaw_encode(ALL_PCM16) == AUDIOOP.lin2alaw(linear, 2)
    assert ulaw_decode(ALL_CODES).astype("<i2").tobytes() == AUDIOOP.ulaw2lin(ALL_CODES, 2)
    assert alaw_decode(ALL_CODES).astype("<i2").tobytes() == AUDIOOP.alaw2lin(ALL_CODES, 2)


# --- inbound -------------------------------------------------------------------------------------


def wire(fmt: AudioFormat, pcm: PCM) -> bytes:
    if fmt.kind == "audio/pcmu":
        return ulaw_encode(pcm)
    if fmt.kind == "audio/pcma":
        return alaw_encode(pcm)
    return pcm.astype("<i2").tobytes()


def unwire(fmt: AudioFormat, data: bytes) -> PCM:
    if fmt.kind == "audio/pcmu":
        return ulaw_decode(data)
    if fmt.kind == "audio/pcma":
        return alaw_decode(data)
    return np.frombuffer(data, dtype="<i2").astype(np.int16)


def decode_in_chunks(fmt: AudioFormat, data: bytes, chunk: int) -> PCM:
    inbound = InboundAudio(fmt)
    parts = [inbound.decode(data[i : i + chunk]) for i in range(0, len(data), chunk)]
    return np.concatenate([*parts, inbound.flush()])


@pytest.mark.parametrize("fmt", [PCM24K, PCMU, PCMA])
def test_inbound_n_ms_in_is_n_ms_at_16khz_out(fmt: AudioFormat) -> None:
    data = wire(fmt, sine(fmt.rate, 1000))
    out = decode_in_chunks(fmt, data, chunk=len(data) // 50)  # 20 ms packets
    assert out.dtype == np.int16
    assert abs(out.size - INPUT_SAMPLE_RATE) <= 2
    assert snr_db(sine(INPUT_SAMPLE_RATE, 1000)[100:-100], out[100:-100]) > 25.0


@pytest.mark.parametrize("fmt", [PCM24K, PCMU, PCMA])
def test_inbound_chunking_leaves_no_clicks(fmt: AudioFormat) -> None:
    data = wire(fmt, sine(fmt.rate, 1000, hz=1234.0))
    one_shot = decode_in_chunks(fmt, data, chunk=len(data))
    for chunk in (2 * 37, 480, 2 * 1111):  # odd-sized packets as well as 10 ms ones
        chunked = decode_in_chunks(fmt, data, chunk=chunk)
        assert chunked.size == one_shot.size
        assert snr_db(one_shot, chunked) > 60.0


def test_resampling_each_chunk_alone_would_click() -> None:
    """The no-click test above is sensitive: independent chunks differ audibly from one stream."""
    signal = sine(24000, 1000, hz=1234.0)
    one_shot = resample(signal, 24000, INPUT_SAMPLE_RATE)
    chunks = [resample(signal[i : i + 480], 24000, INPUT_SAMPLE_RATE) for i in range(0, 24000, 480)]
    assert snr_db(one_shot, np.concatenate(chunks)) < 40.0


def test_inbound_odd_length_pcm_is_malformed_and_leaves_the_stream_usable() -> None:
    inbound = InboundAudio(PCM24K)
    with pytest.raises(MalformedAudio, match="481 bytes"):
        inbound.decode(b"\x00" * 481)
    inbound.decode(b"\x00" * 480)
    assert issubclass(MalformedAudio, ValueError)


def test_inbound_g711_takes_any_byte_count() -> None:
    inbound = InboundAudio(PCMU)
    total = sum(inbound.decode(b"\xff" * n).size for n in (1, 7, 161)) + inbound.flush().size
    assert total == 2 * (1 + 7 + 161)


# --- outbound ------------------------------------------------------------------------------------


def encode_in_chunks(out: OutboundAudio, pcm: PCM, chunk: int) -> bytes:
    parts = [out.encode(pcm[i : i + chunk]) for i in range(0, pcm.size, chunk)]
    return b"".join([*parts, out.flush()])


@pytest.mark.parametrize("source_rate", [16000, 22050, 24000, 48000])
@pytest.mark.parametrize("fmt", [PCM24K, PCMU, PCMA])
def test_outbound_n_ms_in_is_n_ms_on_the_wire(fmt: AudioFormat, source_rate: int) -> None:
    data = encode_in_chunks(
        OutboundAudio(fmt, source_rate=source_rate), sine(source_rate, 500), 441
    )
    bytes_per_sample = 2 if fmt.kind == "audio/pcm" else 1
    assert abs(len(data) // bytes_per_sample - fmt.rate // 2) <= 2


def test_outbound_pcm_at_24khz_is_passed_through() -> None:
    pcm = sine(24000, 100)
    out = OutboundAudio(PCM24K, source_rate=24000)
    assert out.encode(pcm) == pcm.astype("<i2").tobytes()
    assert out.flush() == b""


@pytest.mark.parametrize("fmt", [PCM24K, PCMU, PCMA])
def test_outbound_chunking_leaves_no_clicks(fmt: AudioFormat) -> None:
    pcm = sine(22050, 1000, hz=700.0, amplitude=20000.0)
    one_shot = encode_in_chunks(OutboundAudio(fmt, source_rate=22050), pcm, pcm.size)
    chunked = encode_in_chunks(OutboundAudio(fmt, source_rate=22050), pcm, 317)
    a, b = unwire(fmt, one_shot), unwire(fmt, chunked)
    assert a.size == b.size
    # A 1-LSB resampler difference can flip a G.711 code at a step boundary; PCM stays exact-ish.
    assert snr_db(a, b) > (60.0 if fmt.kind == "audio/pcm" else 30.0)


def test_outbound_reset_drops_the_interrupted_tail() -> None:
    out = OutboundAudio(PCMU, source_rate=24000)
    out.encode(sine(24000, 200))
    out.reset()
    assert out.flush() == b""
    silence = np.zeros(24000 // 10, dtype=np.int16)
    after = ulaw_decode(out.encode(silence) + out.flush())
    assert after.size == 800
    assert np.abs(after.astype(np.int32)).max() <= 8  # nothing of the old response leaks


@pytest.mark.parametrize("fmt", [PCMU, PCMA])
def test_a_telephone_packet_comes_out_at_once_both_ways(fmt: AudioFormat) -> None:
    """A phone line's 20 ms packets are not held back in blocks (soxr's 8 kHz streams held
    ~100 ms and let it out in bursts, which delayed turn-taking and looked faster than real
    time to the echo path)."""
    t = np.arange(8_000) / 8_000
    wire = OutboundAudio(fmt, source_rate=8_000).encode(
        (6000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    )
    inbound = InboundAudio(fmt)
    sizes = [inbound.decode(wire[i : i + 160]).size for i in range(0, 8_000, 160)]
    assert sizes[1:] == [320] * 49 and sizes[0] >= 240  # the first is short by the filter delay
    outbound = OutboundAudio(fmt, source_rate=24_000)
    tone = (6000 * np.sin(2 * np.pi * 1000 * np.arange(24_000) / 24_000)).astype(np.int16)
    sizes = [len(outbound.encode(tone[i : i + 480])) for i in range(0, 24_000, 480)]
    assert sizes[1:] == [160] * 49 and sizes[0] >= 120
