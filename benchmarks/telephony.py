"""Phone calls: latency beside the WebSocket, barge-in, concurrent calls, 8 kHz recognition.

``python -m benchmarks.telephony`` prints one JSON object.

- ``mouth_to_ear_ms``: end of the caller's speech (the chunk holding its last voiced sample
  leaves the client) → the answer's first audio reaches the client, at the server's edge (no
  phone network), with the **embedded stack** (energy VAD, Whisper base, the local model, Piper)
  in this process: the same spoken questions (``benchmarks.voice_latency``'s) over a Twilio
  Media Streams call (8 kHz μ-law, ``runtime/telephony/twilio_client.py``) and over the GA
  WebSocket (16 kHz PCM) and over a SIP call (RTP, 8 kHz μ-law, ``runtime/telephony/sip_client.py``;
  its first answer frame is the talk spurt's, marked), alternating, each transport first in
  turn (one asked right after the others meets the model work their turns left), in one run
  (the goodbye ends a call, as it should: the next turn dials again).
- ``bargein_output_stop_ms``: with instant fake plugins (a server process), a caller speaks over
  the answer; from the chunk where the speech has lasted ``min_interrupt_ms`` (the crossing
  frame) leaving the client → Twilio's ``clear`` arriving; ``sip``: → when the frame after the
  answer's last one was due over RTP (the server stops sending; there is no ``clear``).
- ``max_concurrent_calls`` / ``cpu_pct_per_call``: the same server process, N calls at once, each
  taking a turn every ``--period`` seconds (600 ms of speech, then the line's silence); a step
  passes while no turn fails and the p99 of end of speech → first answer audio stays within
  ``--limit-ms`` of one call's median. CPU is the server process's (``/proc``) at the largest
  step that passed, per call; the client's own is reported beside it. Twilio calls, then SIP
  calls (``sip_capacity``: each SIP call has its own 20 ms RTP clock in the server).
- ``asr_wer_8k`` / ``asr_wer_16k``: ``benchmarks.asr_roundtrip`` through a μ-law line and
  wideband (``--skip-wer`` leaves them out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks import asr_roundtrip, voice_latency
from benchmarks.common import emit, free_udp_and_tcp_port, p50_p99, percentile, server_process
from evals.runner import last_voiced_sample
from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.telephony.sip_client import SipPhone
from runtime.telephony.twilio_client import CHUNK, RATE, TwilioCall

AUTH_TOKEN = "benchmark-twilio-auth-token"
LINE_TOKEN = "benchmark-phone-line-token"
DEFAULT_STEPS = (1, 10, 25, 50, 75, 100, 125, 150)
ROTATION = (
    ("websocket", "twilio", "sip"),
    ("twilio", "sip", "websocket"),
    ("sip", "websocket", "twilio"),
)
"""The order the transports take each spoken question in, turn by turn (``latency``)."""


def _speech(seconds: float) -> np.ndarray:
    """A voiced stand-in for speech at 8 kHz (the fake ASR hears words in any sound), unlike the
    fake voice (a 440 Hz tone), so the echo guard never mistakes one for the other."""
    t = np.arange(int(RATE * seconds)) / RATE
    return (6000 * np.sin(2 * np.pi * 1000 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(
        np.int16
    )


async def _quiet(arrivals: list[float], seconds: float, limit_s: float = 60.0) -> None:
    """Wait until no answer audio has arrived for ``seconds``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:  # noqa: ASYNC110 (polls the client's arrivals)
        last = arrivals[-1] if arrivals else 0.0
        if time.monotonic() - last >= seconds:
            return
        await asyncio.sleep(0.05)


async def phone_turn(call: TwilioCall | SipPhone, voice8k: np.ndarray) -> float | None:
    """One spoken question over a call: end of speech → first answer audio (ms)."""
    arrivals = call.media_at if isinstance(call, TwilioCall) else call.arrivals
    end = last_voiced_sample(resample(voice8k, RATE, INPUT_SAMPLE_RATE)) // 2
    mark = len(arrivals)
    sent = await call.say(voice8k)
    speech_end = sent[min(len(sent) - 1, end // CHUNK)]
    deadline = time.monotonic() + 60
    while len(arrivals) <= mark and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    first = next((at for at in arrivals[mark:] if at >= speech_end), None)
    await _quiet(arrivals, 1.5)
    return None if first is None else (first - speech_end) * 1000


async def _sip_dial(server: RunningServer) -> SipPhone:
    assert server.sip is not None
    phone = SipPhone(("127.0.0.1", server.sip.port))
    await phone.open()
    answer = await phone.call()
    if answer.status != 200:
        raise RuntimeError(f"the SIP call was answered {answer.status}")
    return phone


async def _dial(base_url: str) -> TwilioCall:
    call = TwilioCall(base_url, AUTH_TOKEN)
    await call.webhook()
    await call.connect()
    return call


async def _phone_line(server: RunningServer) -> None:
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    await server.services.accounts.add_token(owner, LINE_TOKEN)


async def latency(turns: int) -> dict[str, Any]:
    """Twilio vs WebSocket, embedded stack, alternating turns in one server (module doc)."""
    voices = [await voice_latency.synthesize(q) for q, _ in voice_latency.QUESTIONS]
    ws_ms: list[float] = []
    phone_ms: list[float] = []
    sip_ms: list[float] = []
    with tempfile.TemporaryDirectory(prefix="openrealtime-telephony-") as data_dir:
        settings = Settings.model_validate(
            {
                "port": 0, "data_dir": Path(data_dir), "storage": "memory",
                "twilio_auth_token": AUTH_TOKEN, "telephony_token": LINE_TOKEN,
                "sip_listen": "127.0.0.1:0",
            }
        )  # fmt: skip
        async with running_server(settings) as server:
            await _phone_line(server)
            async with httpx.AsyncClient(
                base_url=server.http_url, headers={"Authorization": f"Bearer {server.token}"}
            ) as http:
                name, text = voice_latency.DOCUMENT
                response = await http.post("/api/documents", json={"name": name, "text": text})
                response.raise_for_status()
            async with RealtimeClient(server.ws_url, server.token, clock=time.monotonic) as ws:
                await ws.connect()
                call: TwilioCall | None = None
                sip: SipPhone | None = None
                for i in range(turns):
                    voice: PCM = voices[i % len(voices)]
                    padded = np.concatenate((voice, np.zeros(INPUT_SAMPLE_RATE, np.int16)))
                    voice8k = resample(padded, INPUT_SAMPLE_RATE, RATE)
                    # Each transport goes first in turn: the one asked right after the others
                    # meets the model work their turns left (thread memory learning).
                    for transport in ROTATION[i % len(ROTATION)]:
                        if transport == "websocket":
                            row = await voice_latency.one_turn(ws, voice)
                            if row is not None:
                                ws_ms.append(row["e2e"])
                        elif transport == "twilio":
                            if call is None or call.closed.is_set():  # a goodbye ended it
                                if call is not None:
                                    await call.close()
                                call = await _dial(server.http_url)
                            if (took := await phone_turn(call, voice8k)) is not None:
                                phone_ms.append(took)
                        else:
                            if sip is None or sip.hung_up.is_set():
                                if sip is not None:
                                    await sip.close()
                                sip = await _sip_dial(server)
                            if (took := await phone_turn(sip, voice8k)) is not None:
                                sip_ms.append(took)
                if call is not None:
                    await call.hang_up()
                if sip is not None:
                    if not sip.hung_up.is_set():
                        await sip.hang_up()
                    await sip.close()
    return {
        "sip": p50_p99(sip_ms),
        "twilio": p50_p99(phone_ms),
        "websocket": p50_p99(ws_ms),
        "turns": turns,
    }


SIP_PORT = free_udp_and_tcp_port()


def _fake_server_env() -> dict[str, str]:
    return {
        "OPENREALTIME_TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "OPENREALTIME_TELEPHONY_TOKEN": LINE_TOKEN,
        "OPENREALTIME_SIP_LISTEN": f"127.0.0.1:{SIP_PORT}",
    }


@contextlib.asynccontextmanager
async def fake_phone_server() -> Any:
    saved = {k: os.environ.get(k) for k in _fake_server_env()}
    os.environ.update(_fake_server_env())
    try:
        async with server_process("benchmarks.fake_server", "--tone-hz", "440") as server:
            yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _http_url(ws_url: str) -> str:
    return ws_url.replace("ws://", "http://", 1).split("/v1/")[0]


async def bargein(base: str, turns: int, min_interrupt_ms: int = 300) -> list[float]:
    """Crossing frame → ``clear`` (ms), ``turns`` times on one call (module doc)."""
    stops: list[float] = []
    async with TwilioCall(base, AUTH_TOKEN) as call:
        await call.webhook()
        await call.connect()
        for _ in range(turns):
            mark = len(call.media_at)
            await call.say(np.concatenate((_speech(0.6), np.zeros(RATE // 2, np.int16))))
            deadline = time.monotonic() + 10
            while len(call.media_at) < mark + 3 and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the answer is playing
            if len(call.media_at) < mark + 3:
                _progress("twilio barge-in", {"skipped": "no answer within 10 s"})
                await _quiet(call.media_at, 1.5)
                continue
            clears = len(call.clear_at)
            sent = await call.say(_speech(0.8))
            crossing = sent[min_interrupt_ms // 20 - 1]
            deadline = time.monotonic() + 10
            while len(call.clear_at) == clears and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            if len(call.clear_at) > clears:
                stops.append((call.clear_at[clears] - crossing) * 1000)
            await call.say(np.zeros(RATE // 2, np.int16))
            await _quiet(call.media_at, 1.5)
        await call.hang_up()
    return stops


async def bargein_sip(turns: int, min_interrupt_ms: int = 300) -> list[float]:
    """Crossing frame → the answer's last frame arriving over RTP (ms), ``turns`` times."""
    stops: list[float] = []
    async with SipPhone(("127.0.0.1", SIP_PORT)) as phone:
        await phone.call()
        for _ in range(turns):
            mark = len(phone.arrivals)
            await phone.say(np.concatenate((_speech(0.6), np.zeros(RATE // 2, np.int16))))
            deadline = time.monotonic() + 10
            while len(phone.arrivals) < mark + 10 and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # the answer is playing
            if len(phone.arrivals) < mark + 10:
                _progress("sip barge-in", {
                    "skipped": "no answer within 10 s", "frames": len(phone.arrivals) - mark,
                    "hung_up": phone.hung_up.is_set(), "turn": len(stops),
                })  # fmt: skip
                await _quiet(phone.arrivals, 1.5)
                continue
            sent = await phone.say(_speech(0.8))
            crossing = sent[min_interrupt_ms // 20 - 1]
            await asyncio.sleep(0.2)
            # The first answer's frames: the second cannot start before the speech has ended.
            answer = [at for at in phone.arrivals[mark:] if at <= sent[-1] + 0.2]
            last = max(answer)
            if last < crossing - 0.1:
                continue  # the answer ended before the barge-in: nothing to stop
            # The line went quiet when the frame after the last one was due.
            stops.append(max(0.0, last + 0.020 - crossing) * 1000)
            await phone.say(np.zeros(RATE // 2, np.int16))
            await _quiet(phone.arrivals, 1.5)
        await phone.hang_up()
    return stops


async def _take_turns(
    line: TwilioCall | SipPhone, until: float, period: float, offset: float, out: dict[str, Any]
) -> None:
    """A turn every ``period`` seconds until ``until``: 600 ms of speech → first answer audio."""
    arrivals = line.media_at if isinstance(line, TwilioCall) else line.arrivals
    await asyncio.sleep(offset)
    loop = asyncio.get_running_loop()
    while loop.time() < until:
        started = loop.time()
        mark = len(arrivals)
        speech_end = (await line.say(_speech(0.6)))[-1]
        deadline = time.monotonic() + 10
        while len(arrivals) <= mark and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        if len(arrivals) > mark:
            out["latencies"].append((arrivals[mark] - speech_end) * 1000)
        else:
            out["failures"] += 1
        rest = period - (loop.time() - started)
        if rest > 0:
            await asyncio.sleep(rest)


async def converse(
    base: str, until: float, period: float, offset: float, out: dict[str, Any]
) -> None:
    """One Twilio call taking turns (module doc)."""
    try:
        async with TwilioCall(base, AUTH_TOKEN) as call:
            await call.webhook()
            await call.connect()
            await _take_turns(call, until, period, offset, out)
            await call.hang_up()
    except (OSError, httpx.HTTPError, TimeoutError):
        out["failures"] += 1


async def converse_sip(
    base: str, until: float, period: float, offset: float, out: dict[str, Any]
) -> None:
    """One SIP call taking turns (module doc)."""
    try:
        async with SipPhone(("127.0.0.1", SIP_PORT)) as phone:
            if (await phone.call()).status != 200:
                out["failures"] += 1
                return
            await _take_turns(phone, until, period, offset, out)
            await phone.hang_up()
    except (OSError, TimeoutError):
        out["failures"] += 1


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def capacity(
    server: Any,
    steps: tuple[int, ...],
    duration: float,
    period: float,
    limit_ms: float,
    talk: Any = converse,
) -> dict[str, Any]:
    base = _http_url(server.url)
    rows: list[dict[str, Any]] = []
    baseline: float | None = None
    best, cpu_per_call = 0, None
    for n in steps:
        out: dict[str, Any] = {"latencies": [], "failures": 0}
        loop = asyncio.get_running_loop()
        cpu0, client0, wall0 = server.cpu_seconds(), _client_cpu(), time.perf_counter()
        until = loop.time() + duration
        await asyncio.gather(
            *(talk(base, until, period, (i % 50) * period / 50, out) for i in range(n))
        )
        wall = time.perf_counter() - wall0
        server_pct = 100 * (server.cpu_seconds() - cpu0) / wall
        client_pct = 100 * (_client_cpu() - client0) / wall
        if baseline is None:
            baseline = percentile(out["latencies"], 50) or 0.0
        p99 = percentile(out["latencies"], 99)
        rows.append(
            {
                "calls": n, "turns": len(out["latencies"]), "failures": out["failures"],
                "latency_ms_p50": percentile(out["latencies"], 50), "latency_ms_p99": p99,
                "server_cpu_pct": round(server_pct, 1), "client_cpu_pct": round(client_pct, 1),
            }
        )  # fmt: skip
        passed = out["failures"] == 0 and p99 is not None and p99 - baseline <= limit_ms
        if not passed:
            break
        best, cpu_per_call = n, round(server_pct / n, 2)
        await asyncio.sleep(1.0)  # the calls of this step hang up
    return {
        "max_concurrent_calls": best,
        "cpu_pct_per_call": cpu_per_call,
        "baseline_latency_ms_p50": baseline,
        "steps": rows,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    steps = tuple(int(x) for x in args.steps.split(","))
    async with fake_phone_server() as server:
        stops = await bargein(_http_url(server.url), args.bargein_turns)
        sip_stops = await bargein_sip(args.bargein_turns)
        found = await capacity(server, steps, args.duration, args.period, args.limit_ms)
        found_sip = await capacity(
            server, steps, args.duration, args.period, args.limit_ms, talk=converse_sip
        )
    _progress("bargein and capacity", {"stops": stops, "sip": sip_stops, **found})
    _progress("sip capacity", found_sip)
    result["calls"] = found["max_concurrent_calls"]
    result["bargein_output_stop_ms"] = {
        **p50_p99(stops),
        "turns": len(stops),
        "sip": {**p50_p99(sip_stops), "turns": len(sip_stops)},
    }
    result.update(found)
    result["sip_capacity"] = found_sip
    ear = await latency(args.turns)
    _progress("latency", ear)
    result["mouth_to_ear_ms"] = {
        "sip": ear["sip"],
        "twilio": ear["twilio"],
        "websocket": ear["websocket"],
    }
    result["latency_turns"] = ear["turns"]
    if not args.skip_wer:
        narrow = await asr_roundtrip.run(channel="pcmu")
        wide = await asr_roundtrip.run(channel="wideband")
        result["asr_wer_8k"], result["asr_wer_16k"] = narrow["wer"], wide["wer"]
    return result


def _progress(phase: str, figures: dict[str, Any]) -> None:
    """A finished phase's figures on stderr, so a later phase's failure loses nothing."""
    print(f"{phase}: {json.dumps(figures)}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=10, help="spoken turns per transport")
    parser.add_argument("--bargein-turns", type=int, default=10)
    parser.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)))
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per step")
    parser.add_argument("--period", type=float, default=3.0, help="seconds between turns")
    parser.add_argument("--limit-ms", type=float, default=50.0)
    parser.add_argument("--skip-wer", action="store_true")
    emit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
