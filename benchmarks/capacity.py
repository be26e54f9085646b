"""How many conversing sessions one server process carries, ours vs Pipecat.

``python -m benchmarks.capacity`` prints one JSON object.

Each server runs in its own process with instant fake plugins and an energy VAD; the clients run
in this process. A conversing session streams real-time 20 ms audio frames all the time and takes
a turn every ``--period`` seconds: 600 ms of speech, an explicit commit (ours: push-to-talk, so
``response.create`` follows it), then listening (silence frames) while the answer plays. Turn
latency = commit sent → first audio byte received.

The ramp starts with one session (the baseline median latency) and adds sessions step by step.
At each step, added latency = turn latency − the one-session median; a step passes while its p99
added latency is ≤ ``--limit-ms`` (50) and no turn failed. ``max_sessions`` is the largest step
that passed; ``cpu_ms_per_session_s`` is the server's CPU time per session-second at that step
(``/proc`` of the server process). The client process's own CPU use is reported too, so a
saturated client is visible rather than mistaken for the server's limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import (
    FRAME_MS,
    SILENCE,
    SPEECH,
    BenchClient,
    emit,
    percentile,
    server_process,
)
from runtime.loop import install_uvloop

DEFAULT_STEPS = (1, 2, 5, 10, 15, 25, 50, 75, 100, 125, 150, 175, 200, 250, 300)


@dataclass
class Step:
    sessions: int
    latencies_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    failures: int = 0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    wall_s: float = 0.0


async def converse(
    url: str,
    token: str | None,
    *,
    ours: bool,
    until: float,
    period: float,
    step: Step,
    offset: float,
) -> None:
    client = BenchClient(url, token, handshake=ours)
    try:
        await client.connect(turn_detection=None)  # push-to-talk
        await client.stream(SILENCE, int(offset * 1000))
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            turn_start = loop.time()
            await client.stream(SPEECH, 600)
            mark = len(client.arrivals)
            sent = await client.commit()
            try:
                _, first = await client.wait(lambda a: a.kind == "audio", mark, 10)
                step.latencies_ms.append((first.at - sent) * 1000)
                if ours:
                    _, event = await client.wait(
                        lambda a: a.kind == "openrealtime.turn.latency", mark, 10
                    )
                    assert event.event is not None
                    marks = event.event["latency_ms"]
                    step.server_ms.append(marks["first_audio_sent"] - marks["committed"])
            except TimeoutError:
                step.failures += 1
            rest = period - (loop.time() - turn_start)
            if rest > 0:
                await client.stream(SILENCE, int(rest * 1000 // FRAME_MS * FRAME_MS))
    except (OSError, TimeoutError):
        step.failures += 1
    finally:
        with contextlib.suppress(Exception):
            await client.close()


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def ramp(
    module: str,
    *,
    ours: bool,
    steps: tuple[int, ...],
    duration: float,
    period: float,
    limit_ms: float,
) -> dict[str, Any]:
    results: list[Step] = []
    baseline: float | None = None
    max_sessions = 0
    cpu_at_max: float | None = None
    async with server_process(module) as server:
        for n in steps:
            step = Step(n)
            loop = asyncio.get_running_loop()
            cpu0, client0, wall0 = server.cpu_seconds(), _client_cpu(), time.perf_counter()
            until = loop.time() + duration
            await asyncio.gather(
                *(
                    converse(
                        server.url,
                        server.token,
                        ours=ours,
                        until=until,
                        period=period,
                        step=step,
                        offset=(i % 50) * period / 50,
                    )
                    for i in range(n)
                )
            )
            step.server_cpu_s = server.cpu_seconds() - cpu0
            step.client_cpu_s = _client_cpu() - client0
            step.wall_s = time.perf_counter() - wall0
            results.append(step)
            if baseline is None:
                baseline = percentile(step.latencies_ms, 50) or 0.0
            added_p99 = (percentile(step.latencies_ms, 99) or float("inf")) - baseline
            passed = step.failures == 0 and bool(step.latencies_ms) and added_p99 <= limit_ms
            if not passed:
                break
            max_sessions = n
            cpu_at_max = step.server_cpu_s * 1000 / (n * step.wall_s)
    return {
        "max_sessions": max_sessions,
        "cpu_ms_per_session_s": None if cpu_at_max is None else round(cpu_at_max, 2),
        "baseline_latency_ms_p50": baseline,
        "steps": [
            {
                "sessions": s.sessions,
                "turns": len(s.latencies_ms),
                "failures": s.failures,
                "latency_ms_p50": percentile(s.latencies_ms, 50),
                "latency_ms_p99": percentile(s.latencies_ms, 99),
                "server_side_ms_p99": percentile(s.server_ms, 99),
                "server_cpu_pct": round(100 * s.server_cpu_s / s.wall_s, 1),
                "client_cpu_pct": round(100 * s.client_cpu_s / s.wall_s, 1),
            }
            for s in results
        ],
    }


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    steps = tuple(int(x) for x in args.steps.split(","))
    ours = await ramp(
        "benchmarks.fake_server",
        ours=True,
        steps=steps,
        duration=args.duration,
        period=args.period,
        limit_ms=args.limit_ms,
    )
    result: dict[str, object] = dict(ours)
    if not args.skip_pipecat:
        result["pipecat"] = await ramp(
            "benchmarks.pipecat_baseline",
            ours=False,
            steps=steps,
            duration=args.duration,
            period=args.period,
            limit_ms=args.limit_ms,
        )
        pipecat = result["pipecat"]
        assert isinstance(pipecat, dict)
        theirs = pipecat["max_sessions"]
        if theirs:
            result["ratio_vs_pipecat"] = round(ours["max_sessions"] / theirs, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)))
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per step")
    parser.add_argument("--period", type=float, default=3.0, help="seconds between turns")
    parser.add_argument("--limit-ms", type=float, default=50.0)
    parser.add_argument("--skip-pipecat", action="store_true")
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
