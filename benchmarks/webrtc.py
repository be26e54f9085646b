"""WebRTC against WebSocket: mouth-to-ear latency, and the server's CPU per live WebRTC call.

``python -m benchmarks.webrtc`` starts one server process (``benchmarks.fake_server`` with
instant fake plugins whose voice is a 440 Hz tone, energy VAD, 300 ms end-of-turn silence,
host candidates on 127.0.0.1) and measures over loopback:

- ``mouth_to_ear_ms.webrtc``: an aiortc client speaks a 0.6 s tone into its microphone track
  (Opus); from the moment the last sample of the question left its microphone to the first
  frame of the answer's voice out of its Opus decoder. ``--turns`` turns, one after another.
- ``mouth_to_ear_ms.websocket``: the same questions over the WebSocket (16 kHz PCM, binary
  frames at real-time pace), from the last frame sent to the first audio frame received (no
  codec, no jitter buffer: what a WebSocket client can play at once).
  Both include the same 300 ms end-of-turn wait; the difference is the transport.
- ``cpu_pct_per_session``: N calls live at once (10, then 50), each with Opus both ways all the
  time (the microphone sends frames throughout; the server's voice track sends silence between
  answers, which Opus still encodes) and a turn every ~5 s per call. The server process's CPU
  (user + system, /proc) over a ``--window`` seconds steady stretch, divided by N, in percent of
  one core. The clients run in this process (aiortc too), so the two share the machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
from typing import Any

import numpy as np

from benchmarks.common import (
    BenchClient,
    ServerProcess,
    emit,
    p50_p99,
    server_process,
    tone_frame,
)
from runtime.webrtc.client import MIC_RATE, WebRTCClient

QUESTION_S = 0.6
SILENCE_MS = 300


def question() -> np.ndarray:
    t = np.arange(int(MIC_RATE * QUESTION_S)) / MIC_RATE
    return (6000 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def http_url(server: ServerProcess) -> str:
    return server.url.replace("ws://", "http://").removesuffix("/v1/realtime")


async def webrtc_mouth_to_ear(server: ServerProcess, turns: int) -> list[float]:
    assert server.token is not None
    out: list[float] = []
    async with WebRTCClient(http_url(server), server.token) as client:
        await client.call()
        await asyncio.sleep(0.5)  # ICE and DTLS settle; the first frames flow
        for _ in range(turns):
            client.mark()
            client.say(question(), MIC_RATE)
            stopped = await client.wait_type("output_audio_buffer.stopped", 30)
            end = client.microphone.fed_until
            assert end is not None
            first = client.speaker.first_speech_after(end)
            if first is not None and stopped:
                out.append((first - end) * 1000.0)
            await asyncio.sleep(0.4)
    return out


class _LastSent:
    """When the last frame of a question was sent (``BenchClient.stream``'s ``on_frame``)."""

    at = 0.0

    def __call__(self, _index: int, sent: float) -> None:
        self.at = sent


async def websocket_mouth_to_ear(server: ServerProcess, turns: int) -> list[float]:
    out: list[float] = []
    client = BenchClient(server.url, server.token, handshake=True)
    await client.connect(turn_detection={"type": "server_vad", "silence_duration_ms": SILENCE_MS})
    try:
        for _ in range(turns):
            mark = len(client.arrivals)
            frame = tone_frame()
            sent_at = _LastSent()
            await client.stream(frame, int(QUESTION_S * 1000), sent_at)
            # then silence, as a microphone would send
            silence = b"\x00" * len(frame)
            waiter = asyncio.ensure_future(client.wait(lambda a: a.kind == "audio", mark, 30))
            while not waiter.done():
                await client.send(silence)
                await asyncio.sleep(0.02)
            _, first = await waiter
            out.append((first.at - sent_at.at) * 1000.0)
            await client.wait(lambda a: a.kind == "response.done", mark, 30)
            await asyncio.sleep(0.4)
    finally:
        await client.close()
    return out


async def cpu_per_session(server: ServerProcess, sessions: int, window_s: float) -> dict[str, Any]:
    assert server.token is not None
    clients = [
        WebRTCClient(http_url(server), server.token, keep_events=False) for _ in range(sessions)
    ]
    stop = asyncio.Event()

    async def talk(client: WebRTCClient, seed: int) -> None:
        rng = random.Random(seed)
        await asyncio.sleep(rng.uniform(0, 5))
        while not stop.is_set():
            client.say(question(), MIC_RATE)
            await asyncio.sleep(rng.uniform(4.5, 5.5))

    talkers: list[asyncio.Task[None]] = []
    answered_before = 0
    try:
        for index, client in enumerate(clients):
            client.speaker.keep_silence = False
            await client.call(timeout=60)
            talkers.append(asyncio.ensure_future(talk(client, index)))
        await asyncio.sleep(3.0)  # every call is past its start
        answered_before = sum(len(c.of_type("response.done")) for c in clients)
        decoded_before = sum(c.speaker.decoded for c in clients)
        cpu0, wall0 = server.cpu_seconds(), time.perf_counter()
        await asyncio.sleep(window_s)
        cpu1, wall1 = server.cpu_seconds(), time.perf_counter()
        decoded = sum(c.speaker.decoded for c in clients) - decoded_before
        answered = sum(len(c.of_type("response.done")) for c in clients) - answered_before
    finally:
        stop.set()
        for task in talkers:
            task.cancel()
        for task in talkers:
            with contextlib.suppress(BaseException):
                await task
        for client in clients:
            await client.close()
    wall = wall1 - wall0
    total = 100.0 * (cpu1 - cpu0) / wall
    frames_per_s = decoded / wall / sessions
    return {
        "server_cpu_pct": round(total, 1),
        "per_session": round(total / sessions, 2),
        "answers_in_window": answered,
        "voice_frames_decoded_per_s_per_session": round(frames_per_s, 1),
        # A live call decodes 50 frames a second; fewer: the machine (server and clients on
        # the same cores) could not keep every call in real time, so ``per_session`` is only
        # what the CPU there was allowed, not what a call costs.
        "saturated": frames_per_s < 45.0,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    env = os.environ
    env.setdefault("OPENREALTIME_WEBRTC_HOST_ADDRESSES", "127.0.0.1")
    result: dict[str, Any] = {
        "setup": {
            "plugins": "instant fakes, tone voice (25 ms/char), energy VAD",
            "end_of_turn_silence_ms": SILENCE_MS,
            "question_s": QUESTION_S,
            "turns": args.turns,
            "cpu_window_s": args.window,
            "cores": os.cpu_count(),
            "load_at_start": [round(x, 2) for x in os.getloadavg()],
        }
    }
    async with server_process(
        "benchmarks.fake_server", "--silence-ms", str(SILENCE_MS), "--tone-hz", "440"
    ) as server:
        idle0, t0 = server.cpu_seconds(), time.perf_counter()
        await asyncio.sleep(2.0)
        result["setup"]["server_idle_cpu_pct"] = round(
            100.0 * (server.cpu_seconds() - idle0) / (time.perf_counter() - t0), 2
        )
        rtc = await webrtc_mouth_to_ear(server, args.turns)
        ws = await websocket_mouth_to_ear(server, args.turns)
        result["mouth_to_ear_ms"] = {
            "webrtc": {**p50_p99(rtc), "n": len(rtc)},
            "websocket": {**p50_p99(ws), "n": len(ws)},
        }
        cpu: dict[str, Any] = {}
        detail: dict[str, Any] = {}
        for sessions in args.sessions:
            measured = await cpu_per_session(server, sessions, args.window)
            cpu[str(sessions)] = measured["per_session"]
            detail[str(sessions)] = measured
            await asyncio.sleep(2.0)
        result["cpu_pct_per_session"] = cpu
        result["cpu_detail"] = detail
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--sessions", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    emit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
