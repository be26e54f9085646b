"""Shared pieces of the benchmarks: server subprocesses, a light protocol client, statistics.

Servers run in their own process (ours with instant fake plugins, or the Pipecat baseline) so
client-side work never shares an event loop with the server being measured.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.typing import Subprotocol

from runtime.client import SUBPROTOCOL

FRAME_MS = 20
SAMPLE_RATE = 16_000
"""Of the PCM16 the benchmarks stream (``session_start`` declares it)."""
FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000


def tone_frame(amplitude: int = 8000, freq: float = 220.0) -> bytes:
    t = np.arange(FRAME_SAMPLES)
    return (amplitude * np.sin(2 * np.pi * freq * t / SAMPLE_RATE)).astype("<i2").tobytes()


def voice_frame(amplitude: int = 8000, f0: float = 150.0, harmonics: int = 30) -> bytes:
    """20 ms of a steady voiced sound: a 150 Hz fundamental with its harmonics falling off as
    1/k up to 4.5 kHz, as a voice's energy spreads over the speech bands. Three whole periods,
    so frames join without a click. A pure tone would not do: it fills one band of the echo
    guard's 24 (``pipeline.echo``), and talking over an answer it can pass for that answer's
    echo, which a person's voice does not."""
    t = np.arange(FRAME_SAMPLES) / SAMPLE_RATE
    wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, harmonics + 1))
    samples: np.ndarray = (amplitude * wave / np.abs(wave).max()).astype("<i2")
    return samples.tobytes()


SPEECH = voice_frame()
SILENCE = b"\x00\x00" * FRAME_SAMPLES
GA_RATE = 24_000
"""A GA client's audio: PCM16 at 24 kHz, base64 in ``input_audio_buffer.append``."""


def ga_frame(frame: bytes) -> bytes:
    """A 16 kHz benchmark frame as the 24 kHz frame a GA client sends."""
    pcm = np.frombuffer(frame, dtype="<i2").astype(np.float64)
    positions = np.arange(len(pcm) * 3 // 2) * (2 / 3)
    return bytes(np.interp(positions, np.arange(len(pcm)), pcm).astype("<i2").tobytes())


def percentile(values: Sequence[float], p: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values, dtype=float), p)), 3)


def p50_p99(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99)}


@dataclass
class ServerProcess:
    url: str
    token: str | None
    process: asyncio.subprocess.Process

    def cpu_seconds(self) -> float:
        """User+system CPU time of the server process so far (Linux /proc)."""
        with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks


@contextlib.asynccontextmanager
async def server_process(module: str, *args: str) -> AsyncIterator[ServerProcess]:
    """Run ``python -m module --port 0 …`` until exit; it prints one JSON line when ready."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"{module} exited before it was ready")
        info = json.loads(line)
        yield ServerProcess(info["listening"], info.get("token"), process)
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


def free_udp_and_tcp_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (a SIP endpoint binds both)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port = int(udp.getsockname()[1])
            with socket.socket() as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port


@dataclass
class Arrival:
    at: float
    kind: str  # "audio" or the event type
    generation: int = -1
    event: dict[str, Any] | None = None


@dataclass
class BenchClient:
    """The same client code for our server and the Pipecat baseline.

    ``handshake`` (ours): offer the ``openrealtime`` subprotocol, send
    ``openrealtime.session.start`` (extensions with binary audio, 16 kHz PCM input) and wait
    for ``session.created``; the baseline has no session handshake. Audio from our server
    carries a 12-byte header."""

    url: str
    token: str | None
    handshake: bool
    ga: bool = False
    ask_response: bool = True
    """Follow a commit with ``response.create`` (push-to-talk, ``create_response: false``)."""
    """Ours over the plain GA protocol: bearer header, ``session.created`` at once, then
    ``session.update``; audio as base64 JSON both ways; no extensions."""
    arrivals: list[Arrival] = field(default_factory=list)
    audio_bytes: int = 0
    """Answer audio received, in bytes of PCM (binary frames without their header)."""
    ws: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self, *, turn_detection: dict[str, Any] | None = None) -> None:
        """``turn_detection``: the GA shape, None for push-to-talk (the client commits and
        asks for the answer, see ``commit``)."""
        self.ask_response = turn_detection is None or not turn_detection.get(
            "create_response", True
        )
        if self.ga:
            headers = {"Authorization": f"Bearer {self.token}"}
            self.ws = await websockets.connect(
                self.url, max_size=2**22, open_timeout=30, additional_headers=headers
            )
            self._reader = asyncio.create_task(self._read())
            await self.wait(lambda a: a.kind == "session.created", 0, 30)
            update = {"audio": {"input": {"turn_detection": turn_detection}}}
            await self.ws.send(json.dumps({"type": "session.update", "session": update}))
            await self.wait(lambda a: a.kind == "session.updated", 0, 30)
            return
        subprotocols = [Subprotocol(SUBPROTOCOL)] if self.handshake else None
        self.ws = await websockets.connect(
            self.url, max_size=2**22, open_timeout=30, subprotocols=subprotocols
        )
        self._reader = asyncio.create_task(self._read())
        if self.handshake:
            await self.ws.send(json.dumps(session_start(self.token, turn_detection)))
            await self.wait(lambda a: a.kind == "session.created", 0, 30)

    async def _read(self) -> None:
        assert self.ws is not None
        with contextlib.suppress(websockets.ConnectionClosed):
            async for data in self.ws:
                now = time.perf_counter()
                if isinstance(data, bytes):
                    generation = -1
                    if self.handshake:
                        generation = int.from_bytes(data[8:12], "little")
                    self.audio_bytes += len(data) - (12 if self.handshake else 0)
                    self.arrivals.append(Arrival(now, "audio", generation))
                else:
                    event = json.loads(data)
                    kind = str(event.get("type"))
                    if kind == "response.output_audio.delta":
                        kind = "audio"  # GA: audio in JSON (its response_id stands in)
                    self.arrivals.append(Arrival(now, kind, event=event))
                self._changed.set()
        self._changed.set()

    async def wait(
        self, predicate: Callable[[Arrival], bool], after: int, timeout: float
    ) -> tuple[int, Arrival]:
        """First arrival with index ≥ ``after`` matching ``predicate``."""
        deadline = time.perf_counter() + timeout
        index = after
        while True:
            while index < len(self.arrivals):
                if predicate(self.arrivals[index]):
                    return index, self.arrivals[index]
                index += 1
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or (self._reader is not None and self._reader.done()):
                raise TimeoutError("expected message did not arrive")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def send(self, data: bytes | str) -> float:
        assert self.ws is not None
        await self.ws.send(data)
        return time.perf_counter()

    async def commit(self) -> float:
        """End the user's turn now; returns when the commit was sent. Ours is then asked for
        the answer (``response.create``: a push-to-talk turn is answered on request, as in
        GA); the baseline answers a commit by itself."""
        sent = await self.send(json.dumps({"type": "input_audio_buffer.commit"}))
        if (self.handshake or self.ga) and self.ask_response:
            await self.send(json.dumps({"type": "response.create"}))
        return sent

    async def stream(
        self, frame: bytes, ms: int, on_frame: Callable[[int, float], object] | None = None
    ) -> None:
        """Send ``ms`` of audio as 20 ms frames at real-time pace."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        if self.ga:
            audio = base64.b64encode(ga_frame(frame)).decode()
            message: bytes | str = json.dumps({"type": "input_audio_buffer.append", "audio": audio})
        else:
            message = frame
        for i in range(math.ceil(ms / FRAME_MS)):
            sent = await self.send(message)
            if on_frame is not None:
                on_frame(i, sent)
            delay = start + (i + 1) * FRAME_MS / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            with contextlib.suppress(BaseException):
                await self._reader


def session_start(token: str | None, turn_detection: dict[str, Any] | None) -> dict[str, Any]:
    """Our first message: every extension on, 16 kHz PCM16 in (what the benchmarks stream),
    24 kHz out."""
    return {
        "type": "openrealtime.session.start",
        "token": token,
        "extensions": {"events": True, "seq": True, "binary_audio": True},
        "session": {
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": SAMPLE_RATE},
                    "turn_detection": turn_detection,
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24_000}},
            }
        },
    }


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, ensure_ascii=False), flush=True)
