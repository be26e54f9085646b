"""The rule-based brain (``OPENREALTIME_BRAIN=rules``): deterministic, honest, no model.

It is the fallback when the local model's packages are not installed, and a baseline. It makes
the same decisions as the model brain (``plugins.brain.grounding``) and answers them with fixed
sentences and quotes instead of generated text:

- social turns and "what did I just say": a fixed reply, or the person's previous message;
- questions: ``knowledge_search`` with the context-aware query (a follow-up is searched with
  the previous message); then the one sentence of the returned passages that shares most words
  with the question, naming its source — or "my documents don't say" when nothing came back;
- questions about the person: the ``<memory_data>`` entries that match the question best
  ("I don't remember" without any);
- statements: a short acknowledgement.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from plugins.brain.grounding import (
    KNOWLEDGE_TOOL,
    NOT_IN_DOCUMENTS,
    NOT_REMEMBERED,
    NOTHING_EARLIER,
    Intent,
    best_sentences,
    earlier_user_inputs,
    in_focus,
    knowledge_results,
    memory_entries,
    passages,
    read_turn,
)
from plugins.brain.memory_match import (
    relevant_memories,
)
from plugins.brain.memory_match import (
    second_person as _second_person,
)
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from plugins.language import detect_language

__all__ = [
    "KNOWLEDGE_TOOL",
    "LocalBrain",
    "detect_language",
    "earlier_user_inputs",
    "memory_entries",
]

_FROM_SOURCE = {"en": 'According to "{}": {}', "zh": "根据《{}》:{}"}
_RECALL_ANSWER = {"en": 'You said: "{}"', "zh": "你刚才说:“{}”"}
_MEMORY_ANSWER = {"en": "You told me: {}", "zh": "你跟我说过:{}"}
_ACKNOWLEDGE = {"en": "Okay, I understand.", "zh": "好的,明白了。"}


class LocalBrain:
    """Deterministic answers; streams word by word like a model would."""

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        call = self.tool_call(request)
        if call is not None:
            yield BrainDelta(tool_call=call)
            return
        for piece in _pieces(self.answer(request)):
            yield BrainDelta(text=piece)

    def tool_call(self, request: BrainInput) -> ToolCall | None:
        """The knowledge search to make before answering, if any."""
        if request.tool_results or not any(t.name == KNOWLEDGE_TOOL for t in request.tools):
            return None
        reading = read_turn(request)
        if reading.intent is not Intent.QUESTION:
            return None
        return ToolCall(
            call_id=f"local_{KNOWLEDGE_TOOL}_{len(request.tool_calls) + 1}",
            name=KNOWLEDGE_TOOL,
            arguments={"query": reading.query or reading.text},
        )

    def answer(self, request: BrainInput) -> str:
        """The whole text answer (what ``stream`` speaks when it makes no tool call)."""
        reading = read_turn(request)
        lang = reading.language
        if reading.intent is Intent.SOCIAL and reading.reply is not None:
            return reading.reply
        if reading.intent is Intent.RECALL:
            earlier = earlier_user_inputs(request.history)
            return _RECALL_ANSWER[lang].format(earlier[-1]) if earlier else NOTHING_EARLIER[lang]
        if reading.intent is Intent.MEMORY:
            entries = memory_entries(request.system)
            if not entries:
                return NOT_REMEMBERED[lang]
            chosen = relevant_memories(reading.text, entries, limit=2)
            if not chosen:
                return NOT_REMEMBERED[lang]
            separator = "; " if lang == "en" else "；"
            return _MEMORY_ANSWER[lang].format(separator.join(_second_person(e) for e in chosen))
        if reading.intent is Intent.STATEMENT:
            return _ACKNOWLEDGE[lang]
        found = passages(knowledge_results(request))
        found = in_focus(
            reading.text, reading.language, request.history, found, request.instructions
        )
        best = best_sentences(reading.text, found, limit=1)
        if not best:
            return NOT_IN_DOCUMENTS[lang]
        quote = best[0]
        return _FROM_SOURCE[lang].format(quote.source, quote.text) if quote.source else quote.text


def _pieces(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)
