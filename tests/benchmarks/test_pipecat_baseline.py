"""End-to-end check of the Pipecat baseline server with a plain ``websockets`` client.

Theory of operation: the client below speaks the OpenRealtime wire subset exactly as a benchmark
client does — real-time 20 ms PCM16 16 kHz frames of a 220 Hz tone (amplitude 8000) as binary
messages, then ``{"type": "input_audio_buffer.commit"}`` — and times the first binary (bot audio)
message after the commit.  A background reader timestamps every message the server sends, so
waits never race the network.  Barge-in: as soon as the bot's audio arrives the client speaks
again and times ``openrealtime.response.interrupted``; bot audio messages arriving after it are
counted.

The pytest test runs the server in-process on a free port (a turn, then a barge-in turn whose
interrupting speech is committed and answered: ~4 s) and shuts everything down so no asyncio task
outlives it.  Run this file as a script to measure against the real CLI in a subprocess::

    .venv/bin/python -m tests.benchmarks.test_pipecat_baseline [--turns 10] [--default-worker]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from array import array
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from benchmarks.pipecat_baseline import PipecatBaselineServer

SAMPLE_RATE = 16_000
FRAME_MS = 20
SPEECH_AMPLITUDE = 8000
TONE_HZ = 220.0
COMMIT = json.dumps({"type": "input_audio_buffer.commit"})
INTERRUPTED = "openrealtime.response.interrupted"
RESPONSE_DONE = "response.done"


def tone_frames(ms: int) -> list[bytes]:
    """``ms`` of a continuous 220 Hz tone, cut into 20 ms PCM16 frames (640 bytes each)."""
    n = SAMPLE_RATE * ms // 1000
    pcm = array(
        "h",
        (
            int(SPEECH_AMPLITUDE * math.sin(2 * math.pi * TONE_HZ * i / SAMPLE_RATE))
            for i in range(n)
        ),
    ).tobytes()
    step = SAMPLE_RATE * FRAME_MS // 1000 * 2
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


@dataclass
class Received:
    t: float
    kind: str  # "audio" or the JSON event's type
    size: int = 0


@dataclass
class Client:
    """A connection plus a reader task that timestamps everything the server sends."""

    ws: ClientConnection
    messages: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, url: str) -> Client:
        ws = await connect(url, proxy=None, max_size=None)
        client = cls(ws)
        client.reader = asyncio.create_task(client._read(), name="baseline-test-reader")
        return client

    async def close(self) -> None:
        await self.ws.close()
        if self.reader is not None:
            await self.reader

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                now = time.perf_counter()
                if isinstance(message, bytes):
                    self.messages.append(Received(now, "audio", len(message)))
                else:
                    self.messages.append(Received(now, json.loads(message).get("type", "?")))
                self.arrived.set()
        except ConnectionClosed:
            pass  # e.g. 1012 when the server shuts down
        self.arrived.set()

    async def wait_for(self, kind: str, after: float, timeout: float = 5.0) -> Received:
        """First message of ``kind`` received at or after ``after`` (perf_counter time)."""
        deadline = time.perf_counter() + timeout
        while True:
            for m in self.messages:
                if m.kind == kind and m.t >= after:
                    return m
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"no {kind!r} message within {timeout} s")
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except TimeoutError:
                pass

    async def stream(self, frames: list[bytes]) -> float:
        """Send frames paced in real time; returns the send time of the first one."""
        start = time.perf_counter()
        for i, frame in enumerate(frames):
            await self.ws.send(frame)
            delay = start + (i + 1) * FRAME_MS / 1000 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        return start


async def turn(client: Client, speech_ms: int = 600) -> float:
    """Speak, commit, return commit → first bot audio (s); then wait for the reply to end."""
    await client.stream(tone_frames(speech_ms))
    t_commit = time.perf_counter()
    await client.ws.send(COMMIT)
    first_audio = await client.wait_for("audio", t_commit)
    await client.wait_for(RESPONSE_DONE, first_audio.t)
    return first_audio.t - t_commit


@dataclass
class BargeIn:
    speech_to_interrupted_s: float
    speech_to_last_audio_s: float
    audio_after_interrupted: int


async def barge_in(client: Client, speech_ms: int = 600, barge_ms: int = 400) -> BargeIn:
    """Start a reply, talk over it as soon as it arrives, time the interruption."""
    await client.stream(tone_frames(speech_ms))
    t_commit = time.perf_counter()
    await client.ws.send(COMMIT)
    first_audio = await client.wait_for("audio", t_commit)
    t_speech = await client.stream(tone_frames(barge_ms))  # still speaking: no new turn yet
    interrupted = await client.wait_for(INTERRUPTED, first_audio.t)
    done = await client.wait_for(RESPONSE_DONE, first_audio.t)
    assert interrupted.t <= done.t, "response.done must follow the interruption"
    stale = [m for m in client.messages if m.kind == "audio" and first_audio.t <= m.t]
    stale = [m for m in stale if m.t <= time.perf_counter()]
    after = [m for m in stale if m.t > interrupted.t]
    last_audio = max(m.t for m in stale)
    # End the barge-in turn and let the bot answer it completely.
    t_commit2 = time.perf_counter()
    await client.ws.send(COMMIT)
    reply = await client.wait_for("audio", t_commit2)
    await client.wait_for(RESPONSE_DONE, reply.t)
    return BargeIn(interrupted.t - t_speech, last_audio - t_speech, len(after))


async def test_pipecat_baseline_turns_and_barge_in() -> None:
    async with PipecatBaselineServer(port=0, log_level="WARNING") as server:
        client = await Client.open(server.url)
        try:
            latencies = [await turn(client, speech_ms=300)]
            result = await barge_in(client, speech_ms=300, barge_ms=300)
        finally:
            await client.close()
    assert all(0 < lat < 1.0 for lat in latencies), latencies
    # VAD start needs 0.1 s of speech (+ up to two 32 ms windows), then the interruption.
    assert 0.05 < result.speech_to_interrupted_s < 0.5, result
    assert result.audio_after_interrupted <= 2, result
    # Audio payloads are PCM16 at 24 kHz: 40 ms chunks.
    sizes = {m.size for m in client.messages if m.kind == "audio"}
    assert sizes == {1920}, sizes


# --------------------------------------------------------------------------------------------
# Measurement against the real CLI (not collected by pytest)
# --------------------------------------------------------------------------------------------


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def _measure(turns: int, barge_ins: int, default_worker: bool) -> None:
    cmd = [sys.executable, "-m", "benchmarks.pipecat_baseline", "--port", "0"]
    if default_worker:
        cmd.append("--default-worker")
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        url = json.loads(line)["listening"]
        client = await Client.open(url)
        try:
            await turn(client)  # warm-up
            lat = [await turn(client) * 1000 for _ in range(turns)]
            bis = [await barge_in(client) for _ in range(barge_ins)]
        finally:
            await client.close()
    finally:
        proc.send_signal(2)  # SIGINT: graceful uvicorn shutdown
        await asyncio.wait_for(proc.wait(), 10)
    mode = "default worker" if default_worker else "lean"
    print(f"Pipecat baseline ({mode}), commit -> first audio message, {turns} turns:")
    print(f"  p50 {_pct(lat, 50):.1f} ms  p99 {_pct(lat, 99):.1f} ms  ", end="")
    print(f"mean {statistics.mean(lat):.1f} ms  all {[round(x, 1) for x in lat]}")
    to_int = [b.speech_to_interrupted_s * 1000 for b in bis]
    to_last = [b.speech_to_last_audio_s * 1000 for b in bis]
    print(f"Barge-in x{barge_ins}: speech start -> interrupted event p50 {_pct(to_int, 50):.1f} ms")
    print(f"  speech start -> last bot audio message p50 {_pct(to_last, 50):.1f} ms")
    print(
        f"  audio messages after the interrupted event: {[b.audio_after_interrupted for b in bis]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--barge-ins", type=int, default=5)
    parser.add_argument("--default-worker", action="store_true")
    args = parser.parse_args()
    asyncio.run(_measure(args.turns, args.barge_ins, args.default_worker))


if __name__ == "__main__":
    main()
