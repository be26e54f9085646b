"""baresip (Debian's ``baresip-core``) as the far end of a SIP call, for tests: a real SIP phone
that plays a WAV file as its microphone (``aufile``), records what it hears (``sndfile``) and is
driven over its TCP control socket (``ctrl_tcp``: dial, keypad tones, hold, hang up; its events
say when a call is established or closed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from benchmarks.common import free_udp_and_tcp_port
from tests import loudness

BARESIP = shutil.which("baresip")
MODULES = Path("/usr/lib/baresip/modules")
RATE = 8_000


def require_baresip() -> str:
    """baresip's path; CI installs it (``.ci/run``) and sets OPENREALTIME_REQUIRE_SIP=1, so a
    missing one fails there instead of skipping."""
    if BARESIP is None or not MODULES.is_dir():
        if os.environ.get("OPENREALTIME_REQUIRE_SIP") == "1":
            pytest.fail("baresip is not installed (apt-get install baresip-core)")
        pytest.skip("baresip is not installed (apt-get install baresip-core)")
    return BARESIP


def write_wav(path: Path, pcm8k: np.ndarray) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(pcm8k.astype("<i2").tobytes())


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as wav:
        assert wav.getframerate() == RATE and wav.getnchannels() == 1
        return np.frombuffer(wav.readframes(wav.getnframes()), "<i2")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loud_spans(pcm: np.ndarray, *, level: float = 500.0) -> list[tuple[float, float]]:
    """(start, end) seconds of the stretches whose 20 ms frames are louder than ``level``."""
    return [(a / 1000, b / 1000) for a, b in loudness.loud_spans(pcm, RATE, level=level)]


class Baresip:
    def __init__(self, home: Path, microphone: Path, *, account: str = "") -> None:
        self.home = home
        self.dump = home / "dump"
        self.microphone = microphone
        self.account = account
        self.control_port = free_port()
        self.events: list[dict[str, Any]] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._responses: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._changed = asyncio.Event()
        self._read_task: asyncio.Task[None] | None = None
        self._token = 0

    def _configure(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.dump.mkdir(exist_ok=True)
        modules = ["account", "g711", "aufile", "aubridge", "sndfile", "menu", "ctrl_tcp"]
        config = [
            f"module_path {MODULES}",
            f"sip_listen 127.0.0.1:{free_udp_and_tcp_port()}",  # SIP binds both
            "net_interface 127.0.0.1",
            f"audio_source aufile,{self.microphone}",
            "audio_player aubridge,nowhere",
            "audio_alert aubridge,nowhere",
            f"snd_path {self.dump}",
            f"ctrl_tcp_listen 127.0.0.1:{self.control_port}",
            *(f"module {name}.so" for name in modules),
        ]
        (self.home / "config").write_text("\n".join(config) + "\n")
        account = "<sip:phone@127.0.0.1>;regint=0;audio_codecs=PCMU,PCMA" + self.account
        (self.home / "accounts").write_text(account + "\n")

    async def start(self) -> None:
        """Start baresip; its ports are chosen free just before, so another process may take one
        in between (the suite runs in parallel): baresip then exits at once, and it is started
        again on fresh ports — at most three times, then the error quotes its log."""
        binary = require_baresip()
        for _ in range(3):
            self.control_port = free_port()
            self._configure()
            if await self._launch(binary):
                self._read_task = asyncio.ensure_future(self._read())
                return
        log = (self.home / "baresip.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"baresip exited at start three times; its log ends:\n{log}")

    def _log(self) -> BinaryIO:
        return open(self.home / "baresip.log", "wb")  # baresip writes it; we read it on failure

    async def _launch(self, binary: str) -> bool:
        with self._log() as log:
            self._process = await asyncio.create_subprocess_exec(
                binary, "-f", str(self.home),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        async with asyncio.timeout(20):
            while True:
                try:
                    self._reader, self._writer = await asyncio.open_connection(
                        "127.0.0.1", self.control_port
                    )
                    return True
                except OSError:
                    if self._process.returncode is not None:
                        return False
                    await asyncio.sleep(0.05)  # baresip announces its socket nowhere

    async def _read(self) -> None:
        assert self._reader is not None
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                length = int((await self._reader.readuntil(b":"))[:-1])
                message = json.loads(await self._reader.readexactly(length))
                await self._reader.readexactly(1)  # the netstring's ","
                if message.get("event"):
                    self.events.append(message)
                    self._changed.set()
                else:
                    await self._responses.put(message)

    async def command(self, command: str, params: str = "") -> dict[str, Any]:
        assert self._writer is not None
        self._token += 1
        body = json.dumps({"command": command, "params": params, "token": str(self._token)})
        self._writer.write(f"{len(body)}:{body},".encode())
        await self._writer.drain()
        return await asyncio.wait_for(self._responses.get(), 10)

    async def event(self, kind: str, timeout_s: float = 20.0) -> dict[str, Any]:
        """The first event of ``kind`` (e.g. ``CALL_ESTABLISHED``, ``CALL_CLOSED``)."""
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.events:
                    if event.get("type") == kind:
                        return event
                self._changed.clear()
                await self._changed.wait()

    def heard(self) -> np.ndarray:
        """What the phone received and decoded (sndfile's ``-dec.wav``), once the call is over."""
        files = sorted(self.dump.glob("*-dec.wav"))
        assert files, "baresip recorded nothing"
        return read_wav(files[-1])

    async def stop(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self.command("quit")
            self._writer.close()
        if self._process is not None and self._process.returncode is None:
            try:
                await asyncio.wait_for(self._process.wait(), 5)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task


@contextlib.asynccontextmanager
async def baresip(home: Path, microphone: Path, *, account: str = "") -> AsyncIterator[Baresip]:
    phone = Baresip(home, microphone, account=account)
    await phone.start()
    try:
        yield phone
    finally:
        await phone.stop()
