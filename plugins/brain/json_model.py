"""JSON answers from the brains' models, for the thread's memory (``memory.thread_consolidation``).

Theory of operation
-------------------
``memory.thread_consolidation.JsonModel`` is one call: chat messages and a JSON schema in, the
JSON text out. Two models provide it, each with the same OpenAI chat-completions payload the
brains already send for constrained answers (``response_format`` of type ``json_schema``, as
``LLMBrain._choose_tool`` does), at temperature 0:

1. ``LocalJsonModel`` wraps the process's ``LocalModel``: llama.cpp turns the schema into a
   grammar, so the answer is valid JSON of that shape (when it is not cut by ``max_tokens``).
   The request goes through the model's fair queue under ``lane``, like any other, in the
   background class when ``background`` (SPEC RT-11: it runs in the pauses).
2. ``OpenAIBrain.complete_json`` (``plugins/brain/openai_brain.py``) is the same call over
   HTTP with the brain's client, timeout and error mapping; the brain satisfies ``JsonModel``
   as it is. Servers that ignore ``response_format`` may answer free text: the consolidator
   parses defensively and records ``unparsable``.

Neither changes how a brain answers a turn.
"""

from __future__ import annotations

from typing import Any

from plugins.brain.local_model import LocalModel


def json_payload(
    messages: list[dict[str, str]], schema: dict[str, Any], *, max_tokens: int
) -> dict[str, Any]:
    """The chat-completions payload of a constrained JSON answer."""
    return {
        "messages": messages,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        },
        "temperature": 0,
        "max_tokens": max_tokens,
    }


class LocalJsonModel:
    """``JsonModel`` on the local model (rule 1)."""

    provider_charges = False
    """No provider charges for it: role memory's call log confirms its cost as 0 (RM-8)."""

    def __init__(self, model: LocalModel) -> None:
        self.model = model

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        payload = json_payload(messages, schema, max_tokens=max_tokens)
        pieces = self.model.chat(payload, lane=lane, background=background)
        return "".join([piece async for piece in pieces])
