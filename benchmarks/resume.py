"""Conversations through a faulty network: nothing lost, nothing duplicated, fast resumes.

``python -m benchmarks.resume --turns 1000`` prints one JSON object
``{"turns", "drops", "resumes", "lost_events", "duplicated_events", "resume_ms": {"p50","p99"}}``.

The server (in this process, instant fake plugins, in-memory storage) is reached through
``tests.fault_proxy.FaultProxy``, which cuts every connection at random moments (mean gap
``--mean-gap-s``). A client takes typed turns one after another; whenever its connection drops it
``reconnect()``s (resume with the rotating token, replay after its last ``seq``). At the end:

- ``lost_events``: gaps in the client's reassembled ``seq`` stream, plus messages the server
  reported ``missing`` on a resume, plus turns whose answer never arrived;
- ``duplicated_events``: ``seq`` numbers the client kept twice, plus journal events recorded more
  than once (by event id) or turns journaled other than exactly once;
- ``resume_ms``: reconnect start → ``openrealtime.session.resumed`` received.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from websockets import ConnectionClosed

from benchmarks.common import emit, p50_p99
from journal.events import EventKind, ThreadRef
from pipeline.engine import Plugins
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.client import ClientClosed, RealtimeClient, Received
from runtime.config import Settings
from runtime.loop import install_uvloop
from runtime.server import running_server
from tests.fault_proxy import FaultProxy


async def chaos(proxy: FaultProxy, mean_gap_s: float, rng: random.Random) -> None:
    while True:
        await asyncio.sleep(rng.expovariate(1 / mean_gap_s))
        proxy.cut_all()


async def run(
    turns: int, mean_gap_s: float, seed: int, *, drop_every: int | None = None
) -> dict[str, Any]:
    """``drop_every``: instead of random cuts, cut right after sending every n-th turn
    (deterministic: a cut never lands inside a resume handshake)."""
    rng = random.Random(seed)
    resume_ms: list[float] = []
    missing = unanswered = 0
    with tempfile.TemporaryDirectory(prefix="openrealtime-resume-bench-") as data_dir:
        settings = Settings(port=0, data_dir=Path(data_dir), storage="memory", resume_ttl_s=30)
        plugins = Plugins(
            vad=EnergyVAD(),
            asr=FakeASR(),
            brain=FakeBrain(["Sure. Here you go."]),
            tts=FakeTTS(ms_per_char=0.5, chunk_ms=5),
        )
        async with running_server(settings, plugins=plugins) as server:
            proxy = FaultProxy(server.host, server.port)
            port = await proxy.start()
            client = RealtimeClient(f"ws://127.0.0.1:{port}/v1/realtime", server.token)
            await client.connect()
            troublemaker = asyncio.create_task(
                chaos(proxy, mean_gap_s, rng) if drop_every is None else asyncio.sleep(0)
            )
            try:
                for turn in range(turns):
                    received = _user_items(client)
                    answered = False
                    for _attempt in range(20):
                        try:
                            if _user_items(client) == received:
                                await client.send_text(f"turn {turn}")
                                if drop_every and turn % drop_every == 0:
                                    await asyncio.sleep(0.002)
                                    proxy.cut_all()
                            await client.wait_for(_answer, timeout=5)
                            answered = True
                            break
                        except (ClientClosed, TimeoutError, OSError, ConnectionClosed):
                            started = time.perf_counter()
                            resumed = await client.reconnect(attempts=20, backoff=0.02)
                            resume_ms.append((time.perf_counter() - started) * 1000)
                            if resumed.get("missing"):  # absent when nothing is
                                first, last = resumed["missing"]
                                missing += last - first + 1
                    unanswered += 0 if answered else 1
            finally:
                troublemaker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await troublemaker
            await client.close()
            await proxy.stop()
            principal = await server.services.accounts.authenticate(server.token)
            assert principal is not None
            events = await server.services.journal.read(
                ThreadRef(principal.tenant, principal.user, client.session["thread_id"])
            )
    seqs = [m.seq for m in client.messages if m.seq]
    counts = Counter(seqs)
    gaps = (max(seqs) - len(counts)) if seqs else 0
    ids = Counter(e.event_id for e in events)
    user_turns = Counter(str(e.payload["text"]) for e in events if e.kind is EventKind.USER_INPUT)
    journal_dupes = sum(n - 1 for n in ids.values()) + sum(
        n - 1 for n in user_turns.values() if n > 1
    )
    return {
        "turns": turns,
        "drops": proxy.cuts,
        "resumes": len(resume_ms),
        "lost_events": gaps + missing + unanswered + max(0, turns - len(user_turns)),
        "duplicated_events": sum(n - 1 for n in counts.values()) + journal_dupes,
        "resume_ms": p50_p99(resume_ms),
        "journal_events": len(events),
    }


def _user_items(client: RealtimeClient) -> int:
    """User items the server has acknowledged (a turn it got is not sent again)."""
    added = client.events("conversation.item.added")
    return sum(1 for e in added if e["item"].get("role") == "user")


def _answer(m: Received) -> bool:
    """The answer to the turn in flight (turns go one at a time)."""
    return (
        m.type == "response.done"
        and m.event is not None
        and bool(m.event["response"]["output_text"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--mean-gap-s", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(run(args.turns, args.mean_gap_s, args.seed)))


if __name__ == "__main__":
    main()
