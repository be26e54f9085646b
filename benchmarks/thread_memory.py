"""Thread memory (SPEC TM-3, TM-4): consolidation time per turn and the injected block's cost.

``python -m benchmarks.thread_memory`` prints one JSON object::

    {"consolidation_ms": {"scripted": {"p50", "p99"}, "llm": {"p50", "p99"} | null},
     "inject_ms": {"p50", "p99"}, "details": {…}}

- ``consolidation_ms.scripted``: one turn's consolidation with a scripted ``JsonModel`` that
  answers at once (two good changes and one refused): building the prompt, parsing, the TM-4
  checks and applying the result — the runtime's own cost per turn, without a model.
- ``consolidation_ms.llm``: the same turn with the local model (``LocalJsonModel`` on
  Qwen2.5-Coder-0.5B-Instruct, loaded and warmed up first, not timed), ``--llm-turns`` turns of
  a trip-planning conversation each reading its two new items; null with the reason in
  ``details`` when the model's packages are not installed, or with ``--no-llm``.
- ``inject_ms``: ``render_block`` over 100 active facts within the default 8,000 characters.

No database: the stores are measured by their contract suite. The runtime adds
``recall_after_compaction`` (does an injected fact survive a compacted history?) by extending
``measure_recall_after_compaction``; ``run`` puts whatever it returns under that name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.common import emit, p50_p99
from journal.events import EventKind, JournalEvent, ThreadRef
from memory.thread_consolidation import Consolidator, JsonModel
from memory.thread_memory import ThreadFact, ThreadMemory, render_block

REF = ThreadRef("bench", "user", "thread")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
CONVERSATION = [
    ("Hi, I want to plan a weekend trip to Lisbon.", "Happy to help. What is your budget?"),
    ("My budget is 1500 euros.", "Got it, 1500 euros. When do you leave?"),
    ("We leave on the 14th of March and come back on the 17th.", "Noted: 14 to 17 March."),
    ("I prefer window seats on the plane.", "Window seats, noted."),
    ("We are two adults and one child.", "Two adults and a child, got it."),
    ("Book a hotel near the river, under 150 euros a night.", "I will look near the river."),
]


def turn_events(turn: int) -> list[JournalEvent]:
    user, assistant = CONVERSATION[turn % len(CONVERSATION)]
    base = 2 * turn
    return [
        JournalEvent(REF, base + 1, f"i-{base + 1:03}", EventKind.USER_INPUT,
                     {"text": user}, None, T0),
        JournalEvent(REF, base + 2, f"i-{base + 2:03}", EventKind.ASSISTANT_OUTPUT,
                     {"text": assistant}, None, T0),
    ]  # fmt: skip


class InstantJsonModel:
    """Answers every turn at once: two changes citing the turn's user item, one citing
    nothing (refused)."""

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        ids = schema["properties"]["changes"]["items"]["properties"]["sources"]["items"]["enum"]
        user = next(i for i in ids if int(i[2:]) % 2 == 1)
        said = messages[-1]["content"].splitlines()[-2].split(": ", 1)[1].rsplit(" (id", 1)[0]
        return json.dumps({"changes": [
            {"op": "upsert", "key": f"fact_{user}", "content": said, "kind": "fact",
             "sources": [user]},
            {"op": "upsert", "key": f"note_{user}", "content": said, "kind": "decision",
             "sources": [user]},
            {"op": "upsert", "key": "orphan", "content": "No source.", "kind": "fact",
             "sources": []},
        ]})  # fmt: skip


async def measure_consolidation(model: JsonModel, turns: int) -> tuple[list[float], ThreadMemory]:
    consolidator = Consolidator(model)
    memory = ThreadMemory()
    times: list[float] = []
    for turn in range(turns):
        started = time.perf_counter()
        result = await consolidator.consolidate(turn_events(turn), memory, lane="bench")
        memory = result.apply(memory, T0 + timedelta(minutes=turn))
        times.append((time.perf_counter() - started) * 1000)
    return times, memory


def measure_inject(samples: int) -> tuple[list[float], int]:
    facts = [
        ThreadFact(f"fact_{n}", f"Fact number {n}: the trip detail the person gave, in words.",
                   "fact", (f"i-{n}",), "active", T0 + timedelta(seconds=n))
        for n in range(100)
    ]  # fmt: skip
    times: list[float] = []
    size = 0
    for _ in range(samples):
        started = time.perf_counter()
        block = render_block(facts)
        times.append((time.perf_counter() - started) * 1000)
        size = len(block)
    return times, size


async def measure_llm(turns: int) -> tuple[list[float] | None, dict[str, Any]]:
    from plugins.brain.json_model import LocalJsonModel
    from plugins.brain.local_model import LocalModel, LocalModelSettings

    reason = LocalModel.unavailable_reason()
    if reason is not None:
        return None, {"llm_skipped": reason}
    model = LocalModel(LocalModelSettings(start_deadline_s=60.0))
    try:
        await model.warm_up()
        times, memory = await measure_consolidation(LocalJsonModel(model), turns)
    finally:
        await model.aclose()
    return times, {
        "llm_turns": turns,
        "llm_facts_learned": len(memory.active()),
        "llm_failures": memory.last_failure,
    }


EARLY_FACTS = [
    # (what the person says in an early turn, the words the model input must still hold)
    ("My budget is 1500 euros for the whole trip.", "1500"),
    ("We leave on the 14th of March.", "14th of March"),
    ("We are two adults and one child.", "two adults and one child"),
    ("The hotel must cost under 150 euros a night.", "150 euros a night"),
    ("My daughter is allergic to peanuts.", "allergic to peanuts"),
]
LATER_TURN = (
    "Turn {n}: tell me about another neighbourhood, museum or restaurant worth a visit, "
    "what it costs and how long it takes to get there from the centre."
)


class RecallModel:
    """A scripted consolidation model for the recall check: it keeps each early statement
    (cited), as a good model would; what is measured is whether the runtime carries it."""

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        import re

        changes = []
        for match in re.finditer(r"^user: (.*) \(id ([^)]+)\)$", messages[-1]["content"], re.M):
            for index, (said, _) in enumerate(EARLY_FACTS):
                if match[1] == said:
                    changes.append(
                        {"op": "upsert", "key": f"early_{index}", "content": said,
                         "kind": "fact", "sources": [match[2]]}
                    )  # fmt: skip
        return json.dumps({"changes": changes[:4]})


async def measure_recall_after_compaction(turns: int = 60) -> dict[str, Any] | None:
    """Through the real server (in process, memory storage, fake speech, a 1k-token history
    window so compaction starts after a few turns): the person states ``EARLY_FACTS`` in the
    first turns, then talks on to ``turns``; the fraction of those facts whose words are in the
    model's input at the last turn, with thread memory on and (the baseline) off."""
    import tempfile
    from pathlib import Path

    from pipeline.engine import Plugins
    from plugins.fakes import FakeASR, FakeBrain, FakeTTS
    from plugins.vad.energy import EnergyVAD
    from runtime.client import RealtimeClient
    from runtime.config import Settings
    from runtime.server import running_server

    class Brain(FakeBrain):
        context_tokens = 1024
        reserved_output_tokens = 128
        complete_json = RecallModel.complete_json

    out: dict[str, Any] = {"turns": turns, "facts": len(EARLY_FACTS)}
    for use in (True, False):
        brain = Brain(["Noted, I will keep that in mind."])
        plugins = Plugins(vad=EnergyVAD(), asr=FakeASR(["hi"]), brain=brain, tts=FakeTTS())
        with tempfile.TemporaryDirectory() as data:
            settings = Settings(port=0, data_dir=Path(data), storage="memory",
                                knowledge_semantic=False)  # fmt: skip
            async with (
                running_server(settings, plugins=plugins) as server,
                RealtimeClient(server.ws_url, server.token) as client,
            ):
                await client.connect()
                thread = client.session["thread_id"]
                if not use:
                    principal = await server.services.accounts.authenticate(server.token)
                    assert principal is not None
                    ref = ThreadRef(principal.tenant, principal.user, thread)
                    await server.services.thread_memory_service.run_command(
                        ref, expected=None, revision=0, command=_configure_off()
                    )
                said = [f for f, _ in EARLY_FACTS]
                for n in range(1, turns + 1):
                    text = said[n - 1] if n <= len(said) else LATER_TURN.format(n=n)
                    await client.send_text(text)
                    await client.wait_type("response.done", 30)
                last = brain.requests[-1]
                seen = f"{last.system}\n{last.model_text}"
                recalled = sum(1 for _, words in EARLY_FACTS if words in seen)
                summarised = "Summary" in last.conversation_context
        key = "recall_after_compaction" if use else "recall_without_thread_memory"
        out[key] = recalled / len(EARLY_FACTS)
        out["compacted" if use else "compacted_baseline"] = summarised
    return out


def _configure_off() -> Any:
    from runtime.thread_memory import Command

    return Command("configure", use=False, generate=False)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    scripted, memory = await measure_consolidation(InstantJsonModel(), args.turns)
    inject, size = measure_inject(args.samples)
    details: dict[str, Any] = {
        "scripted_turns": args.turns,
        "scripted_facts": len(memory.active()),
        "inject_facts": 100,
        "inject_block_chars": size,
    }
    llm: list[float] | None = None
    if args.no_llm:
        details["llm_skipped"] = "--no-llm"
    else:
        llm, llm_details = await measure_llm(args.llm_turns)
        details.update(llm_details)
    result: dict[str, Any] = {
        "consolidation_ms": {
            "scripted": p50_p99(scripted),
            "llm": None if llm is None else p50_p99(llm),
        },
        "inject_ms": p50_p99(inject),
        "details": details,
    }
    recall = await measure_recall_after_compaction(args.recall_turns)
    if recall is not None:
        result["recall_after_compaction"] = recall.pop("recall_after_compaction")
        details["recall"] = recall
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="scripted turns")
    parser.add_argument("--llm-turns", type=int, default=6, help="turns with the local model")
    parser.add_argument("--samples", type=int, default=1_000, help="render_block calls")
    parser.add_argument("--no-llm", action="store_true", help="skip the local model")
    parser.add_argument("--recall-turns", type=int, default=60, help="turns of the recall check")
    emit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
