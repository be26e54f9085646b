"""What recording costs: 50 concurrent sessions recorded beside 50 unrecorded, on the fake
plugins (SPEC REC-2, REC-4).

``python -m benchmarks.recordings`` prints one JSON object.

Two server processes in turn, the same settings but for the recording switch (the tenant may
record, and the role's ``recording_enabled`` is set over HTTP in the recorded one): ``--sessions``
clients converse for ``--duration`` seconds each (real-time 20 ms frames all the time, a turn every
``--period`` seconds: 600 ms of speech, a commit, the answer played to its end), then 2 s of
silence and the end of their sessions for good. A recorded session's client first waits for the
spoken recording notice and streams silence while it plays (input before the notice is not
recorded). The server's CPU comes from ``/proc``.

- ``cpu_pct_per_recorded_session`` / ``cpu_pct_per_unrecorded_session``: the server's CPU per
  session (percent of one core) over the conversing time; ``recording_cpu_overhead`` is their
  ratio minus one (the issue's bound: 0.20).
- ``bytes_per_minute``: the recordings' stored size (sealed FLAC pieces, from the recordings'
  rows) per minute recorded.
- ``lost_audio_ms``: over every recording, opened and decoded through ``GET
  /api/recordings/{id}/audio``: the person's channel against the audio the client sent, and the
  agent's channel (samples above silence) against the answer audio the client received — summed
  absolute differences, in ms (0: nothing lost, nothing invented).
- ``expiry_delete_ms``: the expiry's deletion of one recording (its sealed pieces from the data
  directory, then its row with the receipt), measured in this process on copies of the
  recorded files with the in-memory index (``records.expiry``), p50 and p99.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile

from benchmarks.common import (
    FRAME_MS,
    SILENCE,
    SPEECH,
    BenchClient,
    emit,
    percentile,
    server_process,
)
from records.audio_store import LocalAudioStore
from records.expiry import expire_recordings
from records.recorder import RATE
from records.recordings import InMemoryRecordingIndex, Recording

PLAY_OUT_MS = 2_000
"""Silence a client streams after its last turn, before it ends its session."""
AGENT_LEVEL = 1500
"""Half the fake voice's level: a sample of the agent's channel above it is its audio."""


@dataclass
class Talk:
    sent_ms: int = 0
    received_bytes: int = 0
    recording_id: str | None = None
    thread_id: str | None = None
    failures: int = 0
    lost_ms: float = 0.0
    """|person's channel − audio sent| + |agent's channel − audio received| (``check``)."""
    size: int = 0
    duration_ms: int = 0


@dataclass
class Run:
    talks: list[Talk] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0


def _http(url: str) -> str:
    return url.replace("ws://", "http://", 1).split("/v1/")[0]


async def converse(url: str, token: str | None, talk: Talk, *, until: float, period: float,
                   offset: float) -> None:  # fmt: skip
    client = BenchClient(url, token, handshake=True)
    try:
        await client.connect(turn_detection=None)
        created = next(a.event for a in client.arrivals if a.kind == "session.created")
        assert created is not None
        extension = created["session"].get("openrealtime") or {}
        talk.thread_id = extension.get("thread_id")
        talk.recording_id = (extension.get("recording") or {}).get("id")
        if talk.recording_id is not None:
            # The notice plays first; input before it is not recorded (runtime.recording
            # Rule 5), so the microphone starts once it is heard and streams while it plays.
            await client.wait(lambda a: a.kind == "audio", 0, 15)
            while not any(a.kind == "response.done" for a in client.arrivals):
                await client.stream(SILENCE, 100)
                talk.sent_ms += 100
        await client.stream(SILENCE, int(offset * 1000))
        talk.sent_ms += int(offset * 1000) // FRAME_MS * FRAME_MS
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            started = loop.time()
            await client.stream(SPEECH, 600)
            talk.sent_ms += 600
            mark = len(client.arrivals)
            await client.commit()
            try:
                await client.wait(lambda a: a.kind == "response.done", mark, 15)
            except TimeoutError:
                talk.failures += 1
            rest = int((period - (loop.time() - started)) * 1000) // FRAME_MS * FRAME_MS
            if rest > 0:
                await client.stream(SILENCE, rest)
                talk.sent_ms += rest
        await client.stream(SILENCE, PLAY_OUT_MS)  # the last answer plays out
        talk.sent_ms += PLAY_OUT_MS
        await client.send(json.dumps({"type": "openrealtime.session.close"}))
        with contextlib.suppress(TimeoutError):  # over when the server closes the socket
            await client.wait(lambda a: False, len(client.arrivals), 10)
        talk.received_bytes = client.audio_bytes
    except (OSError, TimeoutError):
        talk.failures += 1
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def run(recorded: bool, args: argparse.Namespace, data_dir: Path) -> Run:
    env = {"OPENREALTIME_RECORDING_TENANTS": "*" if recorded else ""}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    result = Run()
    try:
        async with server_process("benchmarks.fake_server", "--data-dir", str(data_dir)) as server:
            auth = {"Authorization": f"Bearer {server.token}"}
            async with httpx.AsyncClient(base_url=_http(server.url), headers=auth) as http:
                roles = (await http.get("/api/roles")).json()["roles"]
                default = next(r for r in roles if r["is_default"])
                switched = await http.patch(f"/api/roles/{default['id']}",
                                            json={"recording_enabled": True})  # fmt: skip
                switched.raise_for_status()
                loop = asyncio.get_running_loop()
                cpu0, wall0 = server.cpu_seconds(), time.perf_counter()
                until = loop.time() + args.duration
                result.talks = [Talk() for _ in range(args.sessions)]
                await asyncio.gather(*(
                    converse(server.url, server.token, talk, until=until, period=args.period,
                             offset=(i % 50) * args.period / 50)
                    for i, talk in enumerate(result.talks)
                ))  # fmt: skip
                result.cpu_s = server.cpu_seconds() - cpu0
                result.wall_s = time.perf_counter() - wall0
                if recorded:
                    await check(http, result)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return result


async def check(http: httpx.AsyncClient, result: Run) -> None:
    """The recordings against what the clients sent and received (``lost_audio_ms``)."""
    for talk in result.talks:
        if talk.recording_id is None:
            continue
        for _ in range(200):  # the session's end closes its recording
            row = (await http.get(f"/api/recordings/{talk.recording_id}")).json()
            if row.get("ended_at"):
                break
            await asyncio.sleep(0.05)
        response = await http.get(f"/api/recordings/{talk.recording_id}/audio")
        response.raise_for_status()
        audio, rate = soundfile.read(io.BytesIO(response.content), dtype="int16")
        assert rate == RATE
        person_ms = audio.shape[0] * 1000 / RATE
        agent_ms = int(np.count_nonzero(np.abs(audio[:, 1]) > AGENT_LEVEL)) * 1000 / RATE
        received_ms = talk.received_bytes / 48  # 24 kHz PCM16
        talk.lost_ms = abs(person_ms - talk.sent_ms) + abs(agent_ms - received_ms)
        talk.size, talk.duration_ms = row["size_bytes"], row["duration_ms"]


async def expiry_ms(data_dir: Path, result: Run, work: Path) -> list[float]:
    """One recording's deletion by the expiry, on copies of the recorded files."""
    await asyncio.to_thread(shutil.copytree, data_dir / "recordings", work, dirs_exist_ok=True)
    index, store = InMemoryRecordingIndex(), LocalAudioStore(work)
    past = datetime.now(UTC) - timedelta(days=1)
    times: list[float] = []
    for talk in result.talks:
        if talk.recording_id is None:
            continue
        await index.add(Recording("t", talk.recording_id, "u", "vs", "th", "r", "local", "k",
                                  past, past, 0, 0, past))  # fmt: skip
        started = time.perf_counter()
        (receipt,) = await expire_recordings(index, store, now=datetime.now(UTC), batch=1)
        times.append((time.perf_counter() - started) * 1000)
        assert receipt.recording_id == talk.recording_id
    assert not await asyncio.to_thread(lambda: any(work.iterdir()))  # nothing left behind
    return times


def _cpu_pct(run: Run, sessions: int) -> float:
    return round(run.cpu_s / run.wall_s / sessions * 100, 3)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="openrealtime-recordings-") as tmp:
        root = Path(tmp)
        plain = await run(False, args, root / "plain")
        recorded = await run(True, args, root / "recorded")
        deletes = await expiry_ms(root / "recorded", recorded, root / "expiry")
    with_recording = [t for t in recorded.talks if t.recording_id is not None]
    minutes = sum(t.duration_ms for t in with_recording) / 60_000
    size = sum(t.size for t in with_recording)
    cpu_recorded, cpu_plain = _cpu_pct(recorded, args.sessions), _cpu_pct(plain, args.sessions)
    return {
        "sessions": args.sessions,
        "recordings": len(with_recording),
        "cpu_pct_per_recorded_session": cpu_recorded,
        "cpu_pct_per_unrecorded_session": cpu_plain,
        "recording_cpu_overhead": round(cpu_recorded / cpu_plain - 1, 3),
        "bytes_per_minute": round(size / minutes) if minutes else None,
        "expiry_delete_ms": {"p50": percentile(deletes, 50), "p99": percentile(deletes, 99)},
        "lost_audio_ms": round(sum(t.lost_ms for t in with_recording), 1),
        "failures": {
            "recorded": sum(t.failures for t in recorded.talks),
            "unrecorded": sum(t.failures for t in plain.talks),
        },  # fmt: skip
        "duration_s": args.duration,
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of conversation")
    parser.add_argument("--period", type=float, default=4.0, help="seconds between turns")
    emit(asyncio.run(main(parser.parse_args())))


if __name__ == "__main__":
    cli()
