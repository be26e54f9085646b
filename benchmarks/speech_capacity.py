"""How many real-time speech sessions one server process sustains.

``python -m benchmarks.speech_capacity`` prints one JSON object
``{"max_sessions_vad", "max_sessions_full", "lag_ms_p99_at_max", …}``.

The server (its own process, Silero VAD) gets N concurrent sessions, each streaming a spoken
sentence (our English TTS) and 7 s of silence, over and over, in real-time 20 ms frames. *Frame
lag* is how late the server's event loop runs: every frame of every session waits at least that
long before it is processed (``GET /metrics.json``, ``loop_lag_ms``, a fresh window per step). A
step passes while the lag p99 stays ≤ ``--limit-ms`` (100) — and, with the full stack, every
committed turn was answered without errors.

- ``vad``: the real Silero VAD with instant fakes behind it (push-to-talk sessions that never
  commit): the cost of listening.
- ``full``: server-side turn detection: every sentence is a turn through Whisper base, the local
  brain and TTS, with barge-in rules active. Each step also counts turns committed, answers
  completed and errors: the loop may stay responsive while CPU Whisper falls behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.request
from typing import Any

import numpy as np

from benchmarks.common import FRAME_SAMPLES, BenchClient, emit, server_process
from benchmarks.voice_latency import synthesize
from runtime.loop import install_uvloop

VAD_STEPS = (10, 20, 40, 60, 80, 100, 150, 200)
FULL_STEPS = (1, 2, 4, 8, 16, 24)


async def converse(url: str, token: str | None, clip: bytes, *, vad_only: bool, until: float,
                   offset: float, tally: dict[str, int]) -> None:  # fmt: skip
    client = BenchClient(url, token, handshake=True)
    detection = None if vad_only else {"type": "server_vad"}  # None: push-to-talk
    try:
        await client.connect(turn_detection=detection)
        await client.stream(b"\x00\x00" * FRAME_SAMPLES, int(offset * 1000))
        loop = asyncio.get_running_loop()
        frames = [clip[i : i + FRAME_SAMPLES * 2] for i in range(0, len(clip), FRAME_SAMPLES * 2)]
        start = loop.time()
        i = 0
        while loop.time() < until:
            await client.send(frames[i % len(frames)])
            i += 1
            delay = start + i * 0.02 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
    finally:
        await client.close()
        kinds = [a.kind for a in client.arrivals]
        tally["turns"] += kinds.count("input_audio_buffer.committed")
        tally["answers"] += sum(
            1 for a in client.arrivals
            if a.kind == "response.done" and a.event is not None
            and a.event["response"]["output_text"]
        )  # fmt: skip
        tally["errors"] += kinds.count("error")


def metrics(http: str, reset: bool, token: str | None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{http}/metrics.json?reset={'true' if reset else 'false'}",
        headers={"Authorization": f"Bearer {token}"},  # the local token has the metrics scope
    )
    with urllib.request.urlopen(request) as r:
        data: dict[str, Any] = json.load(r)
        return data


async def ramp(clip: bytes, *, vad_only: bool, steps: tuple[int, ...], duration: float,
               limit_ms: float) -> dict[str, Any]:  # fmt: skip
    results = []
    best = 0
    lag_at_best: float | None = None
    extra = ("--vad-only",) if vad_only else ()
    async with server_process("benchmarks.speech_server", *extra) as server:
        http = server.url.replace("ws://", "http://").removesuffix("/v1/realtime")
        for n in steps:
            loop = asyncio.get_running_loop()
            await asyncio.to_thread(metrics, http, True, server.token)
            until = loop.time() + duration
            tally = {"turns": 0, "answers": 0, "errors": 0}
            await asyncio.gather(
                *(
                    converse(
                        server.url,
                        server.token,
                        clip,
                        vad_only=vad_only,
                        until=until,
                        offset=(i % 25) * 0.04,
                        tally=tally,
                    )  # fmt: skip
                    for i in range(n)
                )
            )
            lag = (await asyncio.to_thread(metrics, http, False, server.token))["loop_lag_ms"]
            results.append({"sessions": n, "lag_ms": lag, **({} if vad_only else tally)})
            if lag["p99"] is None or lag["p99"] > limit_ms:
                break
            # With the full stack a step must also answer every turn it committed, error-free
            # (each session's last turn may still be in flight when the step ends).
            if not vad_only and (tally["errors"] or tally["answers"] < tally["turns"] - n):
                break
            best, lag_at_best = n, lag["p99"]
    return {"max_sessions": best, "lag_ms_p99_at_max": lag_at_best, "steps": results}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    voice = await synthesize("Could you tell me what the weather is like today?")
    silence = np.zeros(7 * 16_000, dtype=np.int16)  # room for the answer to play out
    clip = np.concatenate((voice, silence)).astype("<i2").tobytes()
    vad = await ramp(clip, vad_only=True, steps=VAD_STEPS, duration=args.duration,
                     limit_ms=args.limit_ms)  # fmt: skip
    full = await ramp(clip, vad_only=False, steps=FULL_STEPS, duration=args.duration,
                      limit_ms=args.limit_ms)  # fmt: skip
    return {
        "max_sessions_vad": vad["max_sessions"],
        "max_sessions_full": full["max_sessions"],
        "lag_ms_p99_at_max": {"vad": vad["lag_ms_p99_at_max"], "full": full["lag_ms_p99_at_max"]},
        "vad_steps": vad["steps"],
        "full_steps": full["steps"],
        "settings": {
            "vad": "silero",
            "asr": "whisper-base",
            "limit_ms": args.limit_ms,
            "seconds_per_step": args.duration,
        },  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--limit-ms", type=float, default=100.0)
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
