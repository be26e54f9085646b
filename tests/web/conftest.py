"""Real-browser tests: Playwright for Python driving Debian's Chromium (never a downloaded
browser) against the real server, with fake media devices fed from WAV files made here.

Skipped, with the reason, when /usr/bin/chromium or the playwright package is missing
(.ci/run installs both).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import wave
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.audio import INPUT_SAMPLE_RATE, resample
from pipeline.engine import Plugins
from plugins.brain.local import LocalBrain
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.server import RunningServer, running_server

CHROMIUM = Path("/usr/bin/chromium")
BASE_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--autoplay-policy=no-user-gesture-required",
]


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is missing (pip install playwright)"
    return None


@pytest.fixture(scope="session", autouse=True)
def _needs_browser() -> None:
    reason = _missing()
    if reason is not None:
        if os.environ.get("OPENREALTIME_REQUIRE_BROWSER"):
            pytest.fail(f"browser tests required (OPENREALTIME_REQUIRE_BROWSER): {reason}")
        pytest.skip(reason)


def write_wav(path: Path, pcm: np.ndarray, rate: int = INPUT_SAMPLE_RATE) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.astype(np.int16).tobytes())
    return path


def spoken(text: str, *, lead_s: float, tail_s: float) -> np.ndarray:
    """``text`` in our Piper voice at 16 kHz, between ``lead_s`` and ``tail_s`` of silence."""
    from plugins.tts import create_tts

    async def synthesise() -> list[np.ndarray]:
        tts = create_tts("piper")
        return [
            resample(c.pcm, c.sample_rate, INPUT_SAMPLE_RATE)
            async for c in tts.stream(text, voice=None, language="en")
        ]

    lead = np.zeros(int(INPUT_SAMPLE_RATE * lead_s), dtype=np.int16)
    tail = np.zeros(int(INPUT_SAMPLE_RATE * tail_s), dtype=np.int16)
    return np.concatenate([lead, *asyncio.run(synthesise()), tail])


def silence_file(folder: Path) -> Path:
    """A quiet microphone (Chromium loops the file)."""
    return write_wav(folder / "silence.wav", np.zeros(INPUT_SAMPLE_RATE * 2, dtype=np.int16))


@pytest.fixture(scope="session")
def silence_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return silence_file(tmp_path_factory.mktemp("wav"))


Launch = Callable[[Path], Awaitable[Any]]


@pytest.fixture
async def launch() -> AsyncIterator[Launch]:
    """``await launch(wav)`` → a headless Chromium whose microphone plays ``wav`` in a loop."""
    from playwright.async_api import async_playwright

    playwright = await async_playwright().start()
    browsers: list[Any] = []

    async def start(wav: Path) -> Any:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*BASE_ARGS, f"--use-file-for-fake-audio-capture={wav}"],
        )
        browsers.append(browser)
        return browser

    try:
        yield start
    finally:
        for browser in browsers:
            with contextlib.suppress(Exception):
                await browser.close()
        await playwright.stop()
        await asyncio.sleep(0)


# An init script that takes WebRTC away from a page, as a browser without it (or with it
# disabled by policy) would be: the talk page then speaks over its WebSocket.
BLOCK_WEBRTC = "delete window.RTCPeerConnection; delete window.webkitRTCPeerConnection;"


async def open_page(
    browser: Any, server: RunningServer, path: str = "/", *, webrtc: bool = True
) -> Any:
    """A new page of ``path`` signed in through the URL fragment (as the server prints it),
    once the page says it is ready. ``webrtc=False``: the page has no RTCPeerConnection, so
    the talk page uses its WebSocket (for tests of what only the WebSocket does: the page's
    own player, playback reports, binary microphone frames)."""
    context = await browser.new_context(viewport={"width": 1100, "height": 800})
    if not webrtc:
        await context.add_init_script(BLOCK_WEBRTC)
    page = await context.new_page()
    page.on("pageerror", lambda error: print("pageerror:", error))
    await page.goto(f"{server.http_url}{path}#token={server.token}")
    await page.wait_for_selector("body[data-ready=true]", timeout=10_000)
    return page


async def wait_js(page: Any, expression: str, timeout: float = 15_000) -> Any:
    """Poll ``expression`` in the page until truthy; returns its value."""
    handle = await page.wait_for_function(expression, timeout=timeout, polling=50)
    return await handle.json_value()


def text_plugins(ms_per_char: float, heard: str = "(no speech expected)") -> Plugins:
    """The offline brain (it can recall earlier turns) with instant fake speech output; the
    fake ASR hears ``heard`` in any speech."""
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR([heard]),
        brain=LocalBrain(),
        tts=FakeTTS(ms_per_char=ms_per_char, chunk_ms=40.0),
    )


ServerFactory = Callable[..., AbstractAsyncContextManager[RunningServer]]


@pytest.fixture
def fake_server(tmp_path: Path) -> ServerFactory:
    def start(
        ms_per_char: float = 10.0, heard: str = "(no speech expected)", *, webrtc: bool = True
    ) -> AbstractAsyncContextManager[RunningServer]:
        settings = Settings(
            port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300,
            min_interrupt_ms=300, webrtc=webrtc, webrtc_host_addresses="127.0.0.1",
        )  # fmt: skip
        return running_server(settings, plugins=text_plugins(ms_per_char, heard))

    return start


async def start_talking(page: Any) -> str:
    await page.click("#start")
    ready = "window.openrealtime.ready && window.openrealtime.conn?.state === 'connected'"
    await wait_js(page, ready)
    return str(await page.evaluate("window.openrealtime.session.id"))


async def say(page: Any, text: str) -> None:
    await page.fill("#type-text", text)
    await page.click("#type-send")


async def last_answer(page: Any, contains: str, timeout: float = 15_000) -> str:
    expression = (
        "(() => { const all = [...document.querySelectorAll('.msg.assistant:not(.partial) .text')];"
        f" const hit = all.reverse().find(n => n.textContent.includes({contains!r}));"
        " return hit ? hit.textContent : null; })()"
    )
    return str(await wait_js(page, expression, timeout))
