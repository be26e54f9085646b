"""The rules judge (SPEC TOOL-3): when no grant decides, the active rules may.

Theory of operation
-------------------
Rule 1. The judge allows only when a rule clearly allows the call, denies only when a rule
        clearly forbids it, and otherwise gives no decision (the person is asked). Deny beats
        allow: a judge that sees both denies. A wrong allow is the failure that matters, so the
        language-model judge confirms every allow with a second, narrower question about the
        rule it quoted (``CONFIRM_PROMPT``: does this rule explicitly permit exactly this
        call?); anything but "yes" is no decision. A wrong deny or none only asks the person.
Rule 2. Every allow and deny must quote a rule, and the quote is checked here, not trusted:
        compared without white space (so a line break or a space between Chinese characters
        does not matter, and nothing else is forgiven — not case, not punctuation) each quote
        must be a substring of one active rule's text, at least ``MIN_QUOTE_CHARS`` long (or
        the whole rule when it is shorter). One quote that is not real — a paraphrase, a rule
        that is not active — and there is no decision.
Rule 3. The judge never raises: a model error, a timeout (``JudgeLimits.timeout_s``) or an
        answer out of shape is no decision, with ``failure`` saying which (never cached).
        Without rules, or without a rules model, there is no decision either.
Rule 4. Two kinds of rules model:
        (a) ``LanguageModelJudge``: a ``JsonModel`` answers constrained JSON —
            ``{"quotes": [...], "decision": "allow|deny|none", "reason": "..."}`` — rule 2
            checks its quotes, and an allow is confirmed (rule 1).
        (b) ``DecisionModelJudge``: a ``DecisionModel`` answers a label (allow, deny, no_match)
            and one probability per rule; every rule at ``QUOTE_PROBABILITY`` or above is
            quoted in full. An allow or deny with no such rule is no decision.
Rule 5. Bounded: at most ``JudgeLimits.max_rules`` active rules (the first ones) and
        ``max_request_chars`` of the call are shown; the answer has ``max_tokens``.
Rule 6. Logs carry the judge's name, the decision, the failure and the time — never rules,
        arguments or the model's text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memory.thread_consolidation import JsonModel
from tools.capability import Capability
from tools.judgements import MAX_REASON_CHARS, JudgedEffect, Judgement, Quote
from tools.rules import Rule

log = logging.getLogger(__name__)

MIN_QUOTE_CHARS = 6
QUOTE_PROBABILITY = 0.5
DecisionLabel = Literal["allow", "deny", "no_match"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeLimits:
    max_rules: int = 20
    max_request_chars: int = 1_500
    max_tokens: int = 128
    timeout_s: float = 20.0


def normalise(text: str) -> str:
    """Runs of white space as one space, ends trimmed (how quotes and rules are shown)."""
    return " ".join(text.split())


def _bare(text: str) -> str:
    return "".join(text.split())


def checked_quotes(quotes: Sequence[str], rules: Sequence[Rule]) -> tuple[Quote, ...] | None:
    """The quotes when every one is real (rule 2), else None."""
    if not quotes:
        return None
    texts = [(rule.id, _bare(rule.text)) for rule in rules]
    found: list[Quote] = []
    for raw in quotes:
        quote = _bare(raw)
        match = next(
            (rule_id for rule_id, text in texts
             if quote and quote in text and len(quote) >= min(MIN_QUOTE_CHARS, len(text))),
            None,
        )  # fmt: skip
        if match is None:
            return None
        found.append(Quote(match, normalise(raw)))
    return tuple(found)


def render_request(capability: Capability, limit: int) -> str:
    arguments = "none" if capability.arguments_key is None else capability.arguments_key
    text = f"action: {capability.action}\ntarget: {capability.target}\narguments: {arguments}"
    return text[:limit]


class Judge(Protocol):
    name: str
    """Part of the judgement cache's key: another judge's answers are not reused."""

    async def judge(
        self, rules: Sequence[Rule], capability: Capability, *, lane: str
    ) -> Judgement: ...


def _finish(name: str, started: float, judgement: Judgement) -> Judgement:
    log.info("judge %s: %s%s in %.0f ms", name, judgement.effect,
             f" ({judgement.failure})" if judgement.failure else "",
             (time.perf_counter() - started) * 1000)  # fmt: skip
    return judgement


SYSTEM_PROMPT = """\
You decide whether an AI agent may make one tool call. Decide only from the numbered rules \
that the agent's owner wrote; the rules may be in any language.
- "allow": a rule clearly permits this kind of call (this action, on this target, within any \
limit the rule sets).
- "deny": a rule clearly forbids this call. If one rule permits and another forbids, deny.
- "none": in every other case — no rule is about this action, a rule covers only a different \
action or target, the arguments pass a limit, or a rule says to ask first.
For allow or deny, copy the words of the deciding rule exactly into "quotes". For none, \
"quotes" is empty. "reason" is a few words."""

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "quotes": {
            "type": "array",
            "items": {"type": "string", "maxLength": 240},
            "maxItems": 2,
        },
        "decision": {"type": "string", "enum": ["allow", "deny", "none"]},
        "reason": {"type": "string", "maxLength": 30},
    },
    "required": ["quotes", "decision", "reason"],
}


CONFIRM_PROMPT = """\
You check one permission. Answer "yes" only if the rule explicitly permits exactly this tool \
call: the same kind of action, on this target, within any limit the rule sets. Answer "no" if \
the rule is about a different action, permits only something else (for example reading when \
the call deletes or sends), says to ask first, or if you are not sure."""

CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["no", "yes"]}},
    "required": ["answer"],
}


class LanguageModelJudge:
    """Rule 4(a): a language model's judgement, its quotes checked, its allows confirmed."""

    def __init__(
        self,
        model: JsonModel,
        *,
        name: str = "llm",
        limits: JudgeLimits | None = None,
        confirm_allows: bool = True,
    ) -> None:
        self.model = model
        self.name = name
        self.limits = limits or JudgeLimits()
        self.confirm_allows = confirm_allows

    def messages(self, rules: Sequence[Rule], capability: Capability) -> list[dict[str, str]]:
        listed = "\n".join(f"{n}. {normalise(r.text)}" for n, r in enumerate(rules, 1))
        request = render_request(capability, self.limits.max_request_chars)
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Rules:\n{listed}\n\nTool call:\n{request}"},
        ]

    async def judge(self, rules: Sequence[Rule], capability: Capability, *, lane: str) -> Judgement:
        started = time.perf_counter()
        shown = [r for r in rules if r.status == "active"][: self.limits.max_rules]
        if not shown:
            return Judgement(effect="none", failure="no_rules")
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                text = await self.model.complete_json(
                    self.messages(shown, capability), ANSWER_SCHEMA,
                    max_tokens=self.limits.max_tokens, lane=lane,
                )  # fmt: skip
        except TimeoutError:
            return _finish(self.name, started, Judgement(effect="none", failure="model_timeout"))
        except Exception as e:  # rule 3: whatever the model raises is no decision
            log.warning("judge %s: model failed (%s)", self.name, type(e).__name__)
            return _finish(self.name, started, Judgement(effect="none", failure="model_error"))
        judgement = self.read(text, shown)
        if judgement.effect == "allow" and self.confirm_allows:
            judgement = await self._confirm(judgement, shown, capability, lane, started)
        return _finish(self.name, started, judgement)

    async def _confirm(
        self,
        judgement: Judgement,
        rules: Sequence[Rule],
        capability: Capability,
        lane: str,
        started: float,
    ) -> Judgement:
        """Rule 1: each quoted rule, whole, must be confirmed to permit exactly this call."""
        request = render_request(capability, self.limits.max_request_chars)
        texts = {r.id: normalise(r.text) for r in rules}
        left = self.limits.timeout_s - (time.perf_counter() - started)
        try:
            async with asyncio.timeout(max(left, 0.0)):
                for rule_id in dict.fromkeys(q.rule_id for q in judgement.quotes):
                    messages = [
                        {"role": "system", "content": CONFIRM_PROMPT},
                        {"role": "user", "content": f"Rule: {texts[rule_id]}\n\nTool call:\n"
                                                    f"{request}\n\nDoes the rule explicitly "
                                                    f"permit this tool call?"},
                    ]  # fmt: skip
                    text = await self.model.complete_json(
                        messages, CONFIRM_SCHEMA, max_tokens=16, lane=lane
                    )
                    answer = json.loads(text)
                    if not isinstance(answer, dict) or answer.get("answer") != "yes":
                        return Judgement(effect="none", reason="allow_not_confirmed")
        except TimeoutError:
            return Judgement(effect="none", failure="model_timeout")
        except ValueError:
            return Judgement(effect="none", failure="unparsable")
        except Exception as e:  # rule 3
            log.warning("judge %s: model failed confirming (%s)", self.name, type(e).__name__)
            return Judgement(effect="none", failure="model_error")
        return judgement

    @staticmethod
    def read(text: str, rules: Sequence[Rule]) -> Judgement:
        """A model's answer as a judgement (rules 1–3)."""
        try:
            answer = json.loads(text)
        except ValueError:
            return Judgement(effect="none", failure="unparsable")
        if not isinstance(answer, dict):
            return Judgement(effect="none", failure="unparsable")
        decision = answer.get("decision")
        quotes = answer.get("quotes")
        reason = answer.get("reason", "")
        if (
            decision not in ("allow", "deny", "none")
            or not isinstance(quotes, list)
            or not all(isinstance(q, str) for q in quotes)
            or not isinstance(reason, str)
        ):
            return Judgement(effect="none", failure="unparsable")
        reason = reason[:MAX_REASON_CHARS]
        if decision == "none":
            return Judgement(effect="none", reason=reason)
        checked = checked_quotes(quotes, rules)
        if checked is None:
            return Judgement(effect="none", reason="quote_refused")
        return Judgement(effect=decision, quotes=checked, reason=reason)


@dataclass(frozen=True, slots=True)
class DecisionAnswer:
    label: DecisionLabel
    probabilities: tuple[float, ...]
    """One per rule, in the order given: how likely that rule decides the request."""


class DecisionModel(Protocol):
    """A classifier over (rules, request): no text, a label and per-rule probabilities."""

    async def classify(
        self, rules: Sequence[str], request: str, *, lane: str
    ) -> DecisionAnswer: ...


class DecisionModelJudge:
    """Rule 4(b): a decision model's label, backed by the rules it rates ≥ 0.5, quoted whole."""

    def __init__(
        self, model: DecisionModel, *, name: str = "decision", limits: JudgeLimits | None = None
    ) -> None:
        self.model = model
        self.name = name
        self.limits = limits or JudgeLimits()

    async def judge(self, rules: Sequence[Rule], capability: Capability, *, lane: str) -> Judgement:
        started = time.perf_counter()
        shown = [r for r in rules if r.status == "active"][: self.limits.max_rules]
        if not shown:
            return Judgement(effect="none", failure="no_rules")
        request = render_request(capability, self.limits.max_request_chars)
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                answer = await self.model.classify([r.text for r in shown], request, lane=lane)
        except TimeoutError:
            return _finish(self.name, started, Judgement(effect="none", failure="model_timeout"))
        except Exception as e:  # rule 3
            log.warning("judge %s: model failed (%s)", self.name, type(e).__name__)
            return _finish(self.name, started, Judgement(effect="none", failure="model_error"))
        return _finish(self.name, started, self.read(answer, shown))

    @staticmethod
    def read(answer: Any, rules: Sequence[Rule]) -> Judgement:
        if (
            not isinstance(answer, DecisionAnswer)
            or answer.label not in ("allow", "deny", "no_match")
            or len(answer.probabilities) != len(rules)
            or not all(isinstance(p, int | float) and 0.0 <= p <= 1.0 for p in answer.probabilities)
        ):
            return Judgement(effect="none", failure="unparsable")
        if answer.label == "no_match":
            return Judgement(effect="none", reason="no_match")
        effect: JudgedEffect = answer.label
        quotes = tuple(
            Quote(rule.id, normalise(rule.text))
            for rule, p in zip(rules, answer.probabilities, strict=True)
            if p >= QUOTE_PROBABILITY
        )
        if not quotes:
            return Judgement(effect="none", reason="no_rule_quoted")
        return Judgement(effect=effect, quotes=quotes, reason=f"decision model: {effect}")
