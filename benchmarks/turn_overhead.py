"""Runtime cost of a turn and of a barge-in, ours vs Pipecat, with instant fake plugins.

``python -m benchmarks.turn_overhead --sessions 50 --turns 20`` prints one JSON object.

Scenario (per session, all sessions concurrently, over real WebSockets on loopback, servers in
their own processes): stream 600 ms of speech-like audio in real-time 20 ms frames, then send
``input_audio_buffer.commit`` (ours: and ``response.create``). turn_overhead = commit sent →
first audio byte received. With instant plugins this is pure runtime cost. On every second turn
(ours) the client then talks over the answer (400 ms of voice). With false-interruption
recovery (SPEC TT-1) the answer is first *paused* when the sound has lasted ``min_interrupt``,
and the interruption *confirmed* once the sound stopped and its words were heard, so two figures
from the frame that crosses the threshold (``min_interrupt``): bargein_output_stop = → the answer
stopped (ours: ``openrealtime.output_audio.paused`` received; GA, which has no such event: the
answer's last audio frame received — a GA client still plays what it had buffered, up to the
playout lead); bargein_confirmed = → ``openrealtime.response.interrupted`` received (GA: the
cancelled ``response.done``). frames_after_interrupt = audio frames of that answer received
after the interruption. Otherwise the client waits for ``response.done``.

The client's voice is ``benchmarks.common.voice_frame`` (harmonics over the speech bands); a
pure tone talking over an answer can pass for its echo (``pipeline.echo``), which is how
half the GA turns of earlier runs went unanswered.

Our sessions keep the server's VAD for barge-in and answer the client's commit (``server_vad``
with ``create_response: true`` and a 10 s end-of-turn silence, so the VAD never ends a turn by
itself: the commit does, and the barge-in speech is folded into the next turn). The GA run is the
same over the plain protocol (bearer header, base64 JSON audio at 24 kHz, no extensions; its
barge-in marker is the cancelled ``response.done``, after the client's truncate, as a GA client
does). The Pipecat baseline maps commit onto its VAD's end of speech (see
``benchmarks.pipecat_baseline``) and runs the same client code without barge-in.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.common import (
    FRAME_MS,
    SILENCE,
    SPEECH,
    Arrival,
    BenchClient,
    emit,
    p50_p99,
    server_process,
)
from runtime.loop import install_uvloop

MIN_INTERRUPT_MS = 300
TURN_DETECTION = {
    "type": "server_vad",
    "silence_duration_ms": 10_000,
    "create_response": True,
    "interrupt_response": True,
}
"""Ours (module doc); the baseline has no session handshake."""


@dataclass
class Results:
    overhead_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    """Ours only: commit handled → first frame written, from the server's latency event."""
    bargein_ms: list[float] = field(default_factory=list)
    """The crossing frame sent → the interruption confirmed (``bargein_confirmed_ms``)."""
    output_stop_ms: list[float] = field(default_factory=list)
    """The crossing frame sent → the answer's output stopped (``bargein_output_stop_ms``)."""
    frames_after_interrupt: int = 0
    failures: int = 0


async def run_session(
    url: str,
    token: str | None,
    *,
    ours: bool,
    turns: int,
    results: Results,
    offset: float,
    ga: bool = False,
) -> None:
    await asyncio.sleep(offset)
    client = BenchClient(url, token, handshake=ours and not ga, ga=ga)
    try:
        await client.connect(turn_detection=TURN_DETECTION)
        for turn in range(turns):
            await client.stream(SPEECH, 600)
            mark = len(client.arrivals)
            sent = await client.commit()
            try:
                _, first = await client.wait(lambda a: a.kind == "audio", mark, 30)
            except TimeoutError:
                results.failures += 1
                continue
            results.overhead_ms.append((first.at - sent) * 1000)
            if ours and not ga:
                _, latency = await client.wait(
                    lambda a: a.kind == "openrealtime.turn.latency", mark, 5
                )
                assert latency.event is not None
                marks = latency.event["latency_ms"]
                results.server_ms.append(marks["first_audio_sent"] - marks["committed"])
            if ours and turn % 2 == 1:
                await barge_in(client, mark, first, results, ga=ga)
            else:
                try:
                    await client.wait(lambda a: a.kind == "response.done", mark, 30)
                except TimeoutError:
                    results.failures += 1
            await client.stream(SILENCE, 200)
    finally:
        await client.close()


def _stopped(ga: bool) -> Callable[[Arrival], bool]:
    """The server's word that the answer stopped: our extension event, or (GA, which has no
    such event) the cancelled ``response.done``."""
    if not ga:
        return lambda a: a.kind == "openrealtime.response.interrupted"
    return lambda a: (
        a.kind == "response.done"
        and a.event is not None
        and a.event["response"]["status"] == "cancelled"
    )


def _same_answer(first: Arrival, ga: bool) -> Callable[[Arrival], bool]:
    if not ga:
        return lambda a: a.kind == "audio" and a.generation == first.generation
    response_id = first.event["response_id"] if first.event else None
    return lambda a: (
        a.kind == "audio" and a.event is not None and (a.event["response_id"] == response_id)
    )


async def barge_in(
    client: BenchClient, mark: int, first: Arrival, results: Results, *, ga: bool
) -> None:
    crossing = math.ceil(MIN_INTERRUPT_MS / FRAME_MS) - 1  # 0-based index of the crossing frame
    sent_at: dict[int, float] = {}
    speaking = asyncio.create_task(
        client.stream(SPEECH, MIN_INTERRUPT_MS + 100, lambda i, t: sent_at.setdefault(i, t))
    )
    if ga:  # as a GA client does: on speech_started, stop playing and truncate what it heard
        try:
            await client.wait(lambda a: a.kind == "input_audio_buffer.speech_started", mark, 10)
        except TimeoutError:
            results.failures += 1
            await speaking
            return
        same = _same_answer(first, ga)
        received = sum(len(a.event["delta"]) * 3 // 4 for a in client.arrivals[mark:]
                       if same(a) and a.event is not None)  # fmt: skip
        heard_ms = min(received // 48, int((time.perf_counter() - first.at) * 1000))
        assert first.event is not None
        await client.send(json.dumps({"type": "conversation.item.truncate",
                                      "item_id": first.event["item_id"], "content_index": 0,
                                      "audio_end_ms": heard_ms}))  # fmt: skip
    await speaking
    try:
        index, event = await client.wait(_stopped(ga), mark, 10)
    except TimeoutError:
        results.failures += 1
        return
    crossed = sent_at[crossing]
    results.bargein_ms.append((event.at - crossed) * 1000)
    same = _same_answer(first, ga)
    if not ga:  # the answer is paused at once, confirmed an interruption later (TT-1)
        paused = next((a for a in client.arrivals[mark:index + 1]
                       if a.kind == "openrealtime.output_audio.paused"), event)  # fmt: skip
        stopped_at = paused.at
    else:  # the server stops sending the answer: its last frame (a GA client plays its buffer)
        frames = [a.at for a in client.arrivals[mark:index] if same(a)]
        stopped_at = max(frames[-1] if frames else crossed, crossed)
    results.output_stop_ms.append((stopped_at - crossed) * 1000)
    await client.stream(SILENCE, 300)
    results.frames_after_interrupt += sum(1 for a in client.arrivals[index + 1 :] if same(a))


async def measure(
    module: str, *, ours: bool, sessions: int, turns: int, seed: int, ga: bool = False
) -> Results:
    results = Results()
    rng = random.Random(seed)
    async with server_process(module) as server:
        await asyncio.gather(
            *(
                run_session(
                    server.url,
                    server.token,
                    ours=ours,
                    turns=turns,
                    results=results,
                    offset=rng.uniform(0, 1.0),
                    ga=ga,
                )
                for _ in range(sessions)
            )
        )
    return results


async def main_async(sessions: int, turns: int, skip_pipecat: bool) -> dict[str, object]:
    ours = await measure(
        "benchmarks.fake_server", ours=True, sessions=sessions, turns=turns, seed=1
    )
    result: dict[str, object] = {
        "sessions": sessions,
        "turns": turns,
        "turn_overhead_ms": p50_p99(ours.overhead_ms),
        "server_side_turn_overhead_ms": p50_p99(ours.server_ms),
        "bargein_output_stop_ms": p50_p99(ours.output_stop_ms),
        "bargein_confirmed_ms": p50_p99(ours.bargein_ms),
        "frames_after_interrupt": ours.frames_after_interrupt,
        "failures": ours.failures,
        "samples": {"turns": len(ours.overhead_ms), "barge_ins": len(ours.bargein_ms)},
    }
    # The same scenario over the plain GA protocol (base64 JSON audio, no extensions).
    ga = await measure(
        "benchmarks.fake_server", ours=True, sessions=sessions, turns=turns, seed=1, ga=True
    )
    ga_p50 = p50_p99(ga.overhead_ms)["p50"]
    binary_p50 = p50_p99(ours.overhead_ms)["p50"]
    result["ga"] = {
        "turn_overhead_ms": p50_p99(ga.overhead_ms),
        "bargein_output_stop_ms": p50_p99(ga.output_stop_ms),
        "bargein_confirmed_ms": p50_p99(ga.bargein_ms),
        "frames_after_interrupt": ga.frames_after_interrupt,
        "failures": ga.failures,
        "samples": {"turns": len(ga.overhead_ms), "barge_ins": len(ga.bargein_ms)},
    }
    if ga_p50 is not None and binary_p50:
        result["ratio_ga_vs_binary_p50"] = round(ga_p50 / binary_p50, 3)
    if not skip_pipecat:
        pipecat = await measure(
            "benchmarks.pipecat_baseline", ours=False, sessions=sessions, turns=turns, seed=1
        )
        result["pipecat"] = {
            "turn_overhead_ms": p50_p99(pipecat.overhead_ms),
            "failures": pipecat.failures,
            "samples": len(pipecat.overhead_ms),
        }
        # One session each as well: Pipecat's per-turn cost when it is not saturated.
        ours_one = await measure(
            "benchmarks.fake_server", ours=True, sessions=1, turns=turns, seed=2
        )
        pipecat_one = await measure(
            "benchmarks.pipecat_baseline", ours=False, sessions=1, turns=turns, seed=2
        )
        result["single_session"] = {
            "turn_overhead_ms": p50_p99(ours_one.overhead_ms),
            "pipecat_turn_overhead_ms": p50_p99(pipecat_one.overhead_ms),
        }
        ours_p50 = p50_p99(ours.overhead_ms)["p50"]
        theirs_p50 = p50_p99(pipecat.overhead_ms)["p50"]
        if ours_p50 is not None and theirs_p50:
            result["ratio_vs_pipecat_p50"] = round(ours_p50 / theirs_p50, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--skip-pipecat", action="store_true")
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(main_async(args.sessions, args.turns, args.skip_pipecat)))


if __name__ == "__main__":
    main()
