"""Foreground first on the default stack (SPEC RT-11): the conversation eval with every memory
feature on, at 1 and at 4 conversations at once, then an idle period.

``python -m benchmarks.foreground [--split dev] [--concurrency 1,4] [--limit N]`` prints one
JSON object::

    {"turns", "plugin_timeouts", "empty_answers", "failed_turns",
     "foreground_wait_ms": {"p50", "p99"}, "background_jobs": {"started", "completed",
     "preempted", "failed", "abandoned", "unfinished"}, "background_share", "pass_rate",
     "by_concurrency": {"1": {…}, "4": {…}}, "idle": {…}, "memory_reads": {…}}

The server is the real one (uvicorn, the stores, knowledge with semantic recall) with the
default brain — the local language model — and every memory feature that uses it on: thread
memory learning (``generate``, the tenant default), the role's memory model set to the brain's
model (role learning), input enrichment (each role gets a pinned entry, so every turn
has visible entries to enrich with) and the memory fact reader (statements the patterns
missed, ``memory.fact_reader``). Only TTS is an instant fake: answers are checked as text
(``evals.checks``). Typed turns over the real WebSocket protocol
(``runtime.client.RealtimeClient``); each conversation is one worker's, 1 or 4 workers at once;
after each answer the person takes ``--think`` seconds (2: reading it, or hearing it) before
the next turn — the pauses background work runs in.

What each figure is:

- ``plugin_timeouts`` — turns whose ``response.done`` failed with ``plugin_timeout``;
  ``failed_turns`` — turns that did not complete (failed, or no ``response.done`` within 60 s);
  ``empty_answers`` — completed turns with no text.
- ``foreground_wait_ms`` — of each foreground model request (a person's answer, a judgement),
  the time it waited while the model ran *background* work (Rule 7 of
  ``plugins.brain.model_queue``: a token or a prompt batch). ``queue_wait_ms`` is the whole
  wait, which also counts the other sessions' answers (fair sharing of one model).
- ``background_jobs`` — background model requests (per level: those of its conversations; at
  the top: the whole run, idle period included): ``started`` (submitted), ``completed``,
  ``preempted`` (stopped for a person and run again), ``failed``, ``unfinished`` (neither, at
  the end: waiting or running), ``abandoned`` (given up by their owner's own bound, e.g. a
  role learning step's 2 minutes).
- ``background_share`` — the model's background busy time over the conversations' wall time
  (the idle period excluded); ``idle`` — how long the idle period took to see every started
  job finished and every statement handed to the fact reader read (at most ``--idle-max``);
  ``memory_reads`` — the fact reader's counters (offered, dropped, read, saved, failed).
- ``pass_rate`` — the eval's checks over every turn of both concurrency levels.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import emit, p50_p99
from benchmarks.conversation_eval import SPLITS, TURN_TIMEOUT_S, eval_plugins, load_split
from evals.checks import text_checks
from evals.runner import Runner, Target
from evals.scenario import Scenario
from memory.fact_reader import FactReader
from pipeline.engine import Plugins
from plugins.brain.local_model import LocalModel, local_model_of
from runtime.client import ClientClosed, RealtimeClient
from runtime.config import Settings
from runtime.plugin_factory import warm_up
from runtime.server import RunningServer, running_server
from runtime.services import BRAIN_MEMORY_MODEL

ENRICHMENT_ENTRY = "Prefers short, direct answers."


class Tally:
    def __init__(self) -> None:
        self.turns = 0
        self.passed = 0
        self.plugin_timeouts = 0
        self.failed = 0
        self.empty = 0
        self.failures: list[dict[str, Any]] = []

    def add(self, other: Tally) -> None:
        self.turns += other.turns
        self.passed += other.passed
        self.plugin_timeouts += other.plugin_timeouts
        self.failed += other.failed
        self.empty += other.empty
        self.failures += other.failures

    def figures(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "plugin_timeouts": self.plugin_timeouts,
            "empty_answers": self.empty,
            "failed_turns": self.failed,
            "pass_rate": round(self.passed / self.turns, 3) if self.turns else None,
        }


async def converse(
    server: RunningServer,
    http: httpx.AsyncClient,
    runner: Runner,
    conversation: Scenario,
    think_s: float,
) -> Tally:
    """One conversation, every session of it, as ``benchmarks.conversation_eval`` runs it."""
    tally = Tally()
    token = server.token
    assert token is not None
    role_id = await runner.setup(http, conversation)
    url = f"/api/roles/{role_id}/memory/settings"
    current = (await http.get(url)).json()
    settings = await http.patch(
        url, json={"memory_model": BRAIN_MEMORY_MODEL, "expected": current["revision"]}
    )
    settings.raise_for_status()
    remembered = await http.post(
        f"/api/roles/{role_id}/memory/remember", json={"content": ENRICHMENT_ENTRY}
    )
    remembered.raise_for_status()
    for session in conversation.sessions:
        client = RealtimeClient(server.ws_url, token)
        await client.connect(role_id=role_id, timeout=30)
        try:
            for turn in session.turns:
                tally.turns += 1
                try:
                    await client.send_text(turn.text)
                    done = await client.wait_type("response.done", timeout=TURN_TIMEOUT_S)
                except (TimeoutError, ClientClosed) as e:
                    print(f"turn failed: {type(e).__name__}", file=sys.stderr)
                    tally.failed += 1
                    tally.failures.append({"conversation": conversation.id, "user": turn.text,
                                           "outcome": type(e).__name__})  # fmt: skip
                    await client.close()
                    client = RealtimeClient(server.ws_url, token)
                    await client.connect(role_id=role_id, timeout=30)
                    continue
                await asyncio.sleep(think_s)  # the person reads or hears the answer
                response = done["response"]
                answer = str(response.get("output_text") or "")
                if response["status"] != "completed":
                    error = ((response.get("status_details") or {}).get("error") or {}).get("code")
                    tally.failed += 1
                    tally.plugin_timeouts += error == "plugin_timeout"
                    tally.failures.append({"conversation": conversation.id, "user": turn.text,
                                           "outcome": f"{response['status']} {error}"})  # fmt: skip
                    continue
                if not answer.strip():
                    tally.empty += 1
                checks = text_checks(turn.expect, answer, [], None)
                failed = [c.name for c in checks if c.status == "failed"]
                if failed:
                    tally.failures.append({"conversation": conversation.id, "user": turn.text,
                                           "answer": answer, "failed": failed})  # fmt: skip
                else:
                    tally.passed += 1
        finally:
            await client.close()
    return tally


async def run_level(
    server: RunningServer,
    http: httpx.AsyncClient,
    runner: Runner,
    conversations: list[Scenario],
    concurrency: int,
    think_s: float,
) -> Tally:
    pending = list(conversations)
    tally = Tally()

    async def worker() -> None:
        while pending:
            conversation = pending.pop(0)
            done = await converse(server, http, runner, conversation, think_s)
            tally.add(done)
            print(
                f"concurrency {concurrency}: {conversation.id} "
                f"{done.passed}/{done.turns} (all {tally.passed}/{tally.turns})",
                file=sys.stderr,
            )

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally


def jobs(model: LocalModel) -> dict[str, int]:
    stats = model.stats
    ended = stats.background_completed + stats.background_failed + stats.background_abandoned
    return {
        "started": stats.background_started,
        "completed": stats.background_completed,
        "preempted": stats.background_preempted,
        "failed": stats.background_failed,
        "abandoned": stats.background_abandoned,
        "unfinished": stats.background_started - ended,
    }


async def idle_until_done(
    model: LocalModel, idle_max_s: float, reader: FactReader | None
) -> dict[str, Any]:
    """The idle period: no session talks; wait until every started background job finished
    and the memory fact reader has read every statement handed to it."""
    started = time.monotonic()
    while time.monotonic() - started < idle_max_s:
        unread = reader.pending if reader is not None else 0
        if jobs(model)["unfinished"] == 0 and model.queue.background_waiting == 0 and not unread:
            break
        await asyncio.sleep(0.5)
    out = {"seconds": round(time.monotonic() - started, 1), **jobs(model)}
    if reader is not None:
        out["memory_reads_unread"] = reader.pending
    return out


async def main(
    split_name: str, levels: list[int], limit: int | None, idle_max_s: float, think_s: float
) -> dict[str, Any]:
    split = load_split(split_name)
    conversations = split[:limit] if limit else split
    plugins: Plugins = eval_plugins("llm")
    await warm_up(plugins)
    model = local_model_of(plugins.brain)
    assert model is not None, "the default brain runs the local model"
    # Every wait of the run is kept (the queue keeps its latest 1,024 by default).
    model.queue.waits = deque(maxlen=100_000)
    model.queue.waits_behind_background = deque(maxlen=100_000)
    result: dict[str, Any] = {"split": split_name, "think_s": think_s, "by_concurrency": {}}
    total = Tally()
    conversing_s = 0.0
    background_s = 0.0
    try:
        with tempfile.TemporaryDirectory(prefix="foreground-") as data_dir:
            settings = Settings(
                storage="memory",
                port=0,
                data_dir=Path(data_dir),
                max_live_sessions_per_user=10_000,
            )
            async with running_server(settings, plugins=plugins) as server:
                headers = {"Authorization": f"Bearer {server.token}"}
                async with httpx.AsyncClient(
                    base_url=server.http_url, headers=headers, timeout=120
                ) as http:
                    target = Target(server.http_url, server.ws_url, server.token, server)
                    runner = Runner(target, turn_timeout_s=TURN_TIMEOUT_S)
                    for document in split[0].documents:  # once, before the workers start
                        await runner.document(http, document)
                    for concurrency in levels:
                        waits_from = len(model.queue.waits)
                        busy_from = model.stats.background_busy_s
                        jobs_from = jobs(model)
                        began = time.monotonic()
                        tally = await run_level(
                            server, http, runner, conversations, concurrency, think_s
                        )
                        seconds = time.monotonic() - began
                        busy = model.stats.background_busy_s - busy_from
                        conversing_s += seconds
                        background_s += busy
                        behind = list(model.queue.waits_behind_background)[waits_from:]
                        whole = list(model.queue.waits)[waits_from:]
                        result["by_concurrency"][str(concurrency)] = {
                            **tally.figures(),
                            "seconds": round(seconds, 1),
                            "foreground_wait_ms": p50_p99([w * 1000 for w in behind]),
                            "queue_wait_ms": p50_p99([w * 1000 for w in whole]),
                            "background_share": round(busy / seconds, 3) if seconds else None,
                            "background_jobs": {
                                k: v - jobs_from[k] for k, v in jobs(model).items()
                            },
                        }
                        total.add(tally)
                    reader = server.services.fact_reader
                    result["idle"] = await idle_until_done(model, idle_max_s, reader)
                    if reader is not None:
                        result["memory_reads"] = dataclasses.asdict(reader.counters)
    finally:
        await model.aclose()
    behind_all = [w * 1000 for w in model.queue.waits_behind_background]
    result.update(total.figures())
    result["foreground_wait_ms"] = p50_p99(behind_all)
    result["background_jobs"] = jobs(model)
    result["background_share"] = round(background_s / conversing_s, 3) if conversing_s else None
    result["failures"] = total.failures
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=SPLITS, default="dev")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated levels")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    parser.add_argument("--idle-max", type=float, default=600.0, help="idle period bound (s)")
    parser.add_argument(
        "--think", type=float, default=2.0, help="seconds a person takes with each answer"
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.concurrency.split(",")]
    emit(asyncio.run(main(args.split, levels, args.limit, args.idle_max, args.think)))


if __name__ == "__main__":
    cli()
