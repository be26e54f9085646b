"""Scripted conversations through the real server, checked by machine (SPEC BRAIN-1 … BRAIN-5).

``python -m benchmarks.conversation_eval [--brains llm,rules] [--split main|holdout|all]``
prints one JSON object::

    {"conversations", "turns", "pass_rate": {"main": {"llm", "rules"}, "holdout": {…}},
     "ttft_ms": {"cold": {"p50", "p99"}, "warm": {"p50", "p99"}},
     "first_sentence_ms": {"warm": {"p50", "p99"}}, "queue_wait_ms": {"p50", "p99"},
     "tokens_per_s", "rss_mb", "prefix_cache", "failures"}

The sets (``benchmarks/data/conversations/``) were written before the brain was tuned:
``main.json`` (tuned on) and ``holdout.json`` (never tuned on; it binds two documents of its own
besides the six shared ones). A conversation has one or more *sessions*: each is a new voice
session on a new thread of the same user and role, so long-term memory carries over and history
does not. Every conversation gets its own role (memory is per user×role), with all documents
bound and memory on; manual memory entries are added through the HTTP API first.

Each turn is typed text over the real WebSocket protocol (``runtime.client.RealtimeClient``)
against the real server (uvicorn, the real stores, knowledge with semantic recall, memory
extraction), with the brain under test; only TTS is an instant fake (answers are checked as
text). Checks: ``mention_any`` / ``mention_all`` / ``must_not`` (case-insensitive, spaces
ignored), ``dont_know`` (the answer says it does not know: ``grounding.says_dont_know``),
``acknowledge`` (not a don't-know answer), ``max_chars``.

Timing (``llm`` only; the model's own figures, from ``LocalModel``): ``ttft_ms.cold`` — the
first model call of each session (its prompt's prefix not yet cached), ``ttft_ms.warm`` — the
later ones; ``first_sentence_ms.warm`` — from the turn's commit to the first sentence handed to
TTS (``tts_first_audio`` of ``openrealtime.turn.latency``, TTS being instant) on warm model
turns; ``queue_wait_ms`` — waits in the model's queue; ``tokens_per_s`` — generation rate;
``prefix_cache`` — the share of prompt tokens taken from llama.cpp's cache on warm turns;
``rss_mb`` — this process's peak resident memory (the model loaded, server and client in it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import emit, p50_p99, percentile
from pipeline.engine import Plugins
from plugins.brain.grounding import says_dont_know
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.client import ClientClosed, RealtimeClient
from runtime.config import Settings
from runtime.plugin_factory import build_plugins, warm_up
from runtime.server import running_server

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "benchmarks" / "data" / "conversations"
SHARED_DOCUMENTS = json.loads((ROOT / "benchmarks/data/knowledge/tasks.json").read_text())[
    "documents"
]
TURN_TIMEOUT_S = 60.0


def load_split(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SETS / f"{name}.json").read_text(encoding="utf-8"))
    data.setdefault("documents", [])
    return data


def check(expect: dict[str, Any], answer: str) -> list[str]:
    """The failed checks of one turn (empty: it passed)."""
    norm = "".join(answer.lower().split())

    def has(s: str) -> bool:
        return "".join(s.lower().split()) in norm

    failed = []
    if "mention_any" in expect and not any(has(s) for s in expect["mention_any"]):
        failed.append("mention_any")
    if "mention_all" in expect and not all(has(s) for s in expect["mention_all"]):
        failed.append("mention_all")
    if "must_not" in expect and any(has(s) for s in expect["must_not"]):
        failed.append("must_not")
    if expect.get("dont_know") and not says_dont_know(answer):
        failed.append("dont_know")
    if expect.get("acknowledge") and (not answer.strip() or says_dont_know(answer)):
        failed.append("acknowledge")
    if "max_chars" in expect and len(answer) > int(expect["max_chars"]):
        failed.append("max_chars")
    return failed


class Timing:
    def __init__(self) -> None:
        self.cold: list[float] = []
        self.warm: list[float] = []
        self.first_sentence_warm: list[float] = []
        self.prompt_tokens = 0
        self.cached_tokens = 0


async def run_split(
    brain_name: str, split: dict[str, Any], plugins: Plugins, timing: Timing
) -> dict[str, Any]:
    brain = plugins.brain
    with tempfile.TemporaryDirectory(prefix="conversation-eval-") as data_dir:
        # One local user drives every conversation: lift the per-user live-session limit.
        settings = Settings(
            storage="memory", port=0, data_dir=Path(data_dir), max_live_sessions_per_user=10_000
        )
        async with running_server(settings, plugins=plugins) as server:
            token = server.token
            assert token is not None
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(
                base_url=server.http_url, headers=headers, timeout=120
            ) as http:
                doc_ids = await _documents(http, [*SHARED_DOCUMENTS, *split["documents"]])
                turns = passed = 0
                failures: list[dict[str, Any]] = []
                for conversation in split["conversations"]:
                    role_id = await _role(http, conversation, doc_ids)
                    for content in conversation.get("memory", ()):
                        response = await http.post(
                            "/api/memory",
                            json={"role_id": role_id, "kind": "preference", "content": content},
                        )
                        response.raise_for_status()
                    for number, session in enumerate(conversation["sessions"], 1):
                        client = RealtimeClient(server.ws_url, token)
                        await client.connect(role_id=role_id, timeout=30)
                        model_turns = 0
                        try:
                            for turn in session["turns"]:
                                try:
                                    answer, generation, latency = await _turn(client, brain, turn)
                                except (TimeoutError, ClientClosed) as e:
                                    # Counted as a failed turn; the session goes on anew.
                                    print(f"turn failed: {type(e).__name__}", file=sys.stderr)
                                    answer, generation, latency = f"<{type(e).__name__}>", None, {}
                                    await client.close()
                                    client = RealtimeClient(server.ws_url, token)
                                    await client.connect(role_id=role_id, timeout=30)
                                if generation is not None and generation.first_token_s:
                                    ms = generation.first_token_s * 1000
                                    if model_turns == 0:
                                        timing.cold.append(ms)
                                    else:
                                        timing.warm.append(ms)
                                        if latency.get("tts_first_audio") is not None:
                                            timing.first_sentence_warm.append(
                                                latency["tts_first_audio"]
                                            )
                                        if generation.timings is not None:
                                            t = generation.timings
                                            timing.prompt_tokens += (
                                                t.prompt_tokens + t.cached_tokens
                                            )
                                            timing.cached_tokens += t.cached_tokens
                                    model_turns += 1
                                failed = check(turn["expect"], answer)
                                turns += 1
                                if failed:
                                    failures.append(
                                        {
                                            "brain": brain_name,
                                            "split": split["split"],
                                            "conversation": conversation["id"],
                                            "session": number,
                                            "user": turn["user"],
                                            "answer": answer,
                                            "failed": failed,
                                        }
                                    )
                                else:
                                    passed += 1
                        finally:
                            await client.close()
                        print(
                            f"{brain_name} {split['split']} {conversation['id']} session {number}: "
                            f"{passed}/{turns}",
                            file=sys.stderr,
                        )
                        # Memory extraction runs after the turn: let it land before the next
                        # session reads memory.
                        await asyncio.sleep(0.3)
    return {"turns": turns, "passed": passed, "failures": failures}


async def _documents(http: httpx.AsyncClient, paths: list[str]) -> list[str]:
    """Create each document under its name, its first ``# `` heading (as knowledge_eval)."""
    ids = []
    for path in paths:
        text = (ROOT / path).read_text(encoding="utf-8")
        first = text.splitlines()[0] if text else ""
        name = first.lstrip("#").strip() if first.startswith("# ") else Path(path).stem
        response = await http.post("/api/documents", json={"name": name, "text": text})
        response.raise_for_status()
        ids.append(response.json()["id"])
    return ids


async def _role(http: httpx.AsyncClient, conversation: dict[str, Any], doc_ids: list[str]) -> str:
    lang = conversation["language"]
    instructions = (
        "你是售后和帮助助手，请依据资料回答。"
        if lang == "zh"
        else "You are a helpful after-sales assistant. Answer from the documents."
    )
    response = await http.post(
        "/api/roles",
        json={
            "name": f"eval {conversation['id']}"[:100],
            "instructions": instructions,
            "language": lang,
            "memory_enabled": True,
        },
    )
    response.raise_for_status()
    role_id = str(response.json()["id"])
    bound = await http.put(f"/api/roles/{role_id}/documents", json={"document_ids": doc_ids})
    bound.raise_for_status()
    return role_id


async def _turn(
    client: RealtimeClient, brain: Any, turn: dict[str, Any]
) -> tuple[str, Any, dict[str, float]]:
    if hasattr(brain, "last_generation"):
        brain.last_generation = None
    seen = len(client.events("openrealtime.turn.latency"))
    await client.send_text(turn["user"])
    done = await client.wait_type("response.done", timeout=TURN_TIMEOUT_S)
    answer = str(done["response"].get("output_text") or "")
    latency: dict[str, float] = {}
    for _ in range(50):
        events = client.events("openrealtime.turn.latency")
        if len(events) > seen:
            latency = dict(events[-1].get("latency_ms") or {})
            break
        await asyncio.sleep(0.01)
    return answer, getattr(brain, "last_generation", None), latency


def eval_plugins(brain_name: str, options: dict[str, Any] | None = None) -> Plugins:
    """The brain under test as the server would build it; instant fakes for the rest.
    ``options`` set attributes of the brain (``--brain-option name=value``: variants)."""
    settings = Settings.model_validate({"brain": brain_name})
    brain = build_plugins(settings).brain
    for name, value in (options or {}).items():
        if hasattr(brain, name):
            setattr(brain, name, value)
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(),
        brain=brain,
        tts=FakeTTS(ms_per_char=1.0),
        endpointer=None,
    )


async def main(
    brains: list[str],
    splits: list[str],
    limit: int | None,
    only: set[str] | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data = {name: load_split(name) for name in splits}
    for split in data.values():
        if only:
            split["conversations"] = [c for c in split["conversations"] if c["id"] in only]
        if limit is not None:
            split["conversations"] = split["conversations"][:limit]
    result: dict[str, Any] = {
        "conversations": sum(len(s["conversations"]) for s in data.values()),
        "turns": sum(
            len(t["turns"])
            for s in data.values()
            for c in s["conversations"]
            for t in c["sessions"]
        ),  # fmt: skip
        "pass_rate": {name: {} for name in splits},
        "failures": [],
    }
    timing = Timing()
    stats = None
    for brain_name in brains:
        plugins = eval_plugins(brain_name, options)
        await warm_up(plugins)
        model = getattr(plugins.brain, "model", None)
        try:
            for name, split in data.items():
                outcome = await run_split(brain_name, split, plugins, timing)
                rate = outcome["passed"] / outcome["turns"] if outcome["turns"] else None
                result["pass_rate"][name][brain_name] = None if rate is None else round(rate, 3)
                result["failures"] += outcome["failures"]
        finally:
            if model is not None:
                stats = model.stats
                await model.aclose()
    result["ttft_ms"] = {"cold": p50_p99(timing.cold), "warm": p50_p99(timing.warm)}
    result["first_sentence_ms"] = {"warm": p50_p99(timing.first_sentence_warm)}
    waits = list(stats.queue_waits_ms) if stats else []
    result["queue_wait_ms"] = p50_p99(waits)
    result["tokens_per_s"] = percentile(list(stats.tokens_per_s), 50) if stats else None
    result["prefix_cache"] = (
        round(timing.cached_tokens / timing.prompt_tokens, 3) if timing.prompt_tokens else None
    )
    result["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["model_turns"] = {"cold": len(timing.cold), "warm": len(timing.warm)}
    return result


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brains", default="llm,rules")
    parser.add_argument("--split", choices=["main", "holdout", "all"], default="all")
    parser.add_argument("--limit", type=int, default=None, help="first N conversations only")
    parser.add_argument("--only", default="", help="comma-separated conversation ids")
    parser.add_argument(
        "--brain-option", action="append", default=[], help="NAME=JSON, e.g. source_prefill=false"
    )
    args = parser.parse_args()
    splits = ["main", "holdout"] if args.split == "all" else [args.split]
    only = set(filter(None, args.only.split(","))) or None
    options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.brain_option)}
    result = asyncio.run(main(args.brains.split(","), splits, args.limit, only, options))
    if options:
        result["brain_options"] = options
    emit(result)


if __name__ == "__main__":
    cli()
