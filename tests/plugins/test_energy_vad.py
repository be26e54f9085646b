from __future__ import annotations

import numpy as np

from plugins.contracts import VADEventKind
from plugins.vad.energy import EnergyVAD


def tone(ms: int, amplitude: int = 6000) -> np.ndarray:
    n = 16 * ms
    return (amplitude * np.sin(np.arange(n) * 2 * np.pi * 220 / 16000)).astype(np.int16)


def silence(ms: int) -> np.ndarray:
    return np.zeros(16 * ms, dtype=np.int16)


async def test_speech_start_and_end_are_reported_at_their_positions() -> None:
    stream = EnergyVAD().create_stream()
    events = []
    for chunk in [silence(500), tone(800), silence(600)]:
        for i in range(0, chunk.size, 320):
            events.extend(await stream.process(chunk[i : i + 320]))
    assert [e.kind for e in events] == [VADEventKind.SPEECH_START, VADEventKind.SPEECH_END]
    assert abs(events[0].at_ms - 500) <= 10
    assert abs(events[1].at_ms - 1300) <= 10


async def test_short_click_and_quiet_noise_are_not_speech() -> None:
    stream = EnergyVAD().create_stream()
    rng = np.random.default_rng(1)
    noise = (rng.standard_normal(16000) * 30).astype(np.int16)
    assert await stream.process(noise) == []
    assert await stream.process(tone(30)) == []  # below min_speech_ms
    assert await stream.process(silence(500)) == []
    assert not stream.voiced
