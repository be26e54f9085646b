"""The talk page's input level meter and turn indicator (web/level_meter.js) in real Chromium
with a fake microphone: the meter follows the microphone — it moves while the file plays
speech and stays at the floor in silence — and the indicator follows the server's VAD."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import (
    Launch,
    ServerFactory,
    open_page,
    say,
    spoken,
    start_talking,
    wait_js,
    write_wav,
)

FLOOR_DB = -60.0


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Speech with short gaps (Chromium loops the file)."""
    pcm = spoken("Hello there, can you hear me? I am talking to you.", lead_s=0.3, tail_s=0.5)
    return write_wav(tmp_path_factory.mktemp("speech") / "meter-speech.wav", pcm)


async def meter_levels(page: Any, seconds: float) -> list[float]:
    """The meter's RMS (dBFS, from the DOM) every 50 ms for ``seconds``."""
    levels: list[float] = []
    for _ in range(int(seconds / 0.05)):
        value = await page.get_attribute("#level-meter", "data-rms-db")
        levels.append(float(value or FLOOR_DB))
        await asyncio.sleep(0.05)
    return levels


async def test_the_meter_moves_with_speech_and_stays_low_in_silence(
    launch: Launch, speech_wav: Path, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(heard="hello there") as server:
        quiet_page = await open_page(await launch(silence_wav), server, webrtc=False)
        await start_talking(quiet_page)
        quiet = await meter_levels(quiet_page, 2.0)
        talking_page = await open_page(await launch(speech_wav), server, webrtc=False)
        await start_talking(talking_page)
        talking = await meter_levels(talking_page, 3.0)
        await wait_js(talking_page, "document.querySelector('.msg.assistant:not(.partial)')")
        await wait_js(talking_page, "window.openrealtime.indicator.history.includes('speaking')")
        states = await talking_page.evaluate("window.openrealtime.indicator.history")
        sent = await talking_page.evaluate("window.openrealtime.conn.sent.map(m => m.type)")
    assert max(quiet) <= FLOOR_DB + 1  # silence: the bar stays empty
    assert max(talking) > -40  # speech fills it …
    assert max(talking) - min(talking) > 15  # … and it moves (gaps between words)
    assert len({round(v) for v in talking}) > 10
    # The indicator followed the server's VAD: heard the speech, then the answer.
    assert states[:2] == ["listening", "hearing"]
    assert "thinking" in states and "speaking" in states
    assert not [t for t in sent if "level" in t]  # the meter sends nothing


async def test_a_paused_microphone_empties_the_meter_and_says_so(
    launch: Launch, speech_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(heard="hello there") as server:
        page = await open_page(await launch(speech_wav), server, webrtc=False)
        await start_talking(page)
        await page.click("#mic")
        await asyncio.sleep(0.3)
        paused = await meter_levels(page, 1.0)
        label = await page.text_content("#turn-state")
        state = await page.get_attribute("#turn-state", "data-state")
    assert set(paused) == {FLOOR_DB}
    assert state == "paused" and label == "microphone paused"


async def test_a_typed_turn_goes_thinking_speaking_and_back_to_listening(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        page = await open_page(await launch(silence_wav), server, webrtc=False)
        await start_talking(page)
        await say(page, "hello")
        await wait_js(page, "window.openrealtime.indicator.history.includes('speaking')")
        await wait_js(page, "window.openrealtime.indicator.state === 'listening'")
        states = await page.evaluate("window.openrealtime.indicator.history")
    assert states == ["listening", "thinking", "speaking", "listening"]
