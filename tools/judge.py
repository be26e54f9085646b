"""The rules judge (SPEC TOOL-3): when no grant decides, the active rules may.

Theory of operation
-------------------
Rule 1. The judge allows only when a rule clearly allows the call, denies only when a rule
        clearly forbids it, and otherwise gives no decision (the person is asked). Deny beats
        allow. A wrong allow is the failure that matters, so what ties a rule to a call is
        decided in code (``tools.judge_match``): a model that answers "yes" to anything cannot
        let a tool run. A wrong deny or none only asks the person.
Rule 2. Every allow and deny quotes the rules that back it, and the quotes are checked here,
        not trusted: compared without white space (so a line break or a space between Chinese
        characters does not matter, and nothing else is forgiven — not case, not punctuation)
        each quote must be a substring of one active rule's text, at least ``MIN_QUOTE_CHARS``
        long (or the whole rule when it is shorter). One quote that is not real — a paraphrase,
        a rule that is not active — and there is no decision. The language-model judge quotes
        each deciding rule whole; a rule that does not name the call never backs a decision.
Rule 3. The judge never raises: a model error, a timeout (``JudgeLimits.timeout_s``) or an
        answer out of shape is no decision, with ``failure`` saying which (never cached).
        Without rules, or without a rules model, there is no decision either.
Rule 4. Two kinds of rules model:
        (a) ``LanguageModelJudge``: a ``JsonModel`` reads each active rule on its own,
            without the call (``tools.judge_prompts``), answering constrained JSON — its kind
            (permits, forbids, ask_first, other) and, for a rule not in plain ASCII, an English
            translation. Readings are kept per (tenant, rule text), at most ``max_readings``.
            Code then gives each rule a verdict and combines them (``tools.judge_match`` rules
            4–7): any forbidding rule that names the call denies; a rule that says to ask
            first, bears on the call without deciding it, or permits it only outside its
            target, limit or condition leaves no decision; otherwise a permitting rule that
            names every word of the action allows.
        (b) ``DecisionModelJudge``: a ``DecisionModel`` answers a label (allow, deny, no_match)
            and one probability per rule; every rule at ``QUOTE_PROBABILITY`` or above is
            quoted in full. An allow or deny with no such rule is no decision.
Rule 5. Bounded: at most ``JudgeLimits.max_rules`` active rules (the first ones), each cut to
        ``MAX_RULE_CHARS``, ``max_request_chars`` of the call (decision model); each answer
        has ``max_tokens``, and one judgement's readings together ``timeout_s``.
Rule 6. Logs carry the judge's name, the decision, the failure and the time — never rules,
        arguments or the model's text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memory.thread_consolidation import JsonModel
from tools.capability import Capability
from tools.judge_match import RuleKind, RuleText, RuleVerdict, combine, effective_kind, verdict
from tools.judge_prompts import (
    KINDS,
    READ_AND_TRANSLATE_PROMPT,
    READ_AND_TRANSLATE_SCHEMA,
    READ_PROMPT,
    READ_SCHEMA,
)
from tools.judgements import JudgedEffect, Judgement, Quote
from tools.rules import Rule

log = logging.getLogger(__name__)

MIN_QUOTE_CHARS = 6
MAX_RULE_CHARS = 600
"""Of one rule as shown to the model (and of its translation kept)."""
MAX_READINGS = 1_024
"""Readings kept per judge (by tenant and rule text; the oldest go first)."""
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


@dataclass(frozen=True, slots=True)
class Reading:
    """The model's reading of one rule (rule 4a), before the cues of ``tools.judge_match``."""

    kind: RuleKind
    english: str = ""


class LanguageModelJudge:
    """Rule 4(a): the model reads each rule on its own; code ties the rules to the call."""

    def __init__(
        self,
        model: JsonModel,
        *,
        name: str = "llm",
        limits: JudgeLimits | None = None,
        max_readings: int = MAX_READINGS,
    ) -> None:
        self.model = model
        self.name = name
        self.limits = limits or JudgeLimits()
        self.max_readings = max_readings
        self._readings: OrderedDict[tuple[str, str], Reading] = OrderedDict()

    @staticmethod
    def messages(rule: Rule) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The question about one rule — the call is not in it — and its answer's schema."""
        text = normalise(rule.text)[:MAX_RULE_CHARS]
        ascii_only = text.isascii()
        system = READ_PROMPT if ascii_only else READ_AND_TRANSLATE_PROMPT
        schema = READ_SCHEMA if ascii_only else READ_AND_TRANSLATE_SCHEMA
        return [{"role": "system", "content": system},
                {"role": "user", "content": f"Rule: {text}"}], schema  # fmt: skip

    async def judge(self, rules: Sequence[Rule], capability: Capability, *, lane: str) -> Judgement:
        started = time.perf_counter()
        shown = [r for r in rules if r.status == "active"][: self.limits.max_rules]
        if not shown:
            return Judgement(effect="none", failure="no_rules")
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                readings = [await self._read(rule, lane) for rule in shown]
        except TimeoutError:
            return _finish(self.name, started, Judgement(effect="none", failure="model_timeout"))
        except ValueError:
            return _finish(self.name, started, Judgement(effect="none", failure="unparsable"))
        except Exception as e:  # rule 3: whatever the model raises is no decision
            log.warning("judge %s: model failed (%s)", self.name, type(e).__name__)
            return _finish(self.name, started, Judgement(effect="none", failure="model_error"))
        return _finish(self.name, started, decide(shown, readings, capability))

    async def _read(self, rule: Rule, lane: str) -> Reading:
        key = (rule.tenant, rule.text)
        cached = self._readings.get(key)
        if cached is not None:
            self._readings.move_to_end(key)
            return cached
        messages, schema = self.messages(rule)
        text = await self.model.complete_json(
            messages, schema, max_tokens=self.limits.max_tokens, lane=lane
        )
        reading = parse_reading(text, translated=schema is READ_AND_TRANSLATE_SCHEMA)
        self._readings[key] = reading
        while len(self._readings) > self.max_readings:
            self._readings.popitem(last=False)
        return reading


def parse_reading(text: str, *, translated: bool) -> Reading:
    """One reading, or ``ValueError`` when the answer is out of shape (rule 3)."""
    answer = json.loads(text)
    if not isinstance(answer, dict) or answer.get("kind") not in KINDS:
        raise ValueError("reading out of shape")
    english = answer.get("english", "") if translated else ""
    if not isinstance(english, str):
        raise ValueError("reading out of shape")
    return Reading(kind=answer["kind"], english=english[:MAX_RULE_CHARS])


def decide(rules: Sequence[Rule], readings: Sequence[Reading], capability: Capability) -> Judgement:
    """Rules 1 and 2: each rule's verdict (``tools.judge_match``), combined; the deciding
    rules quoted whole and the quotes checked."""
    verdicts = []
    for rule, reading in zip(rules, readings, strict=True):
        matched = RuleText(normalise(rule.text), normalise(reading.english))
        verdicts.append(verdict(effective_kind(reading.kind, matched), matched, capability))
    effect, backing = combine(verdicts)
    if effect == "none":
        return Judgement(effect="none", reason=_no_decision_reason(verdicts))
    checked = checked_quotes([rules[i].text for i in backing], rules)
    if checked is None:
        return Judgement(effect="none", reason="quote_refused")
    reason = "a rule forbids this call" if effect == "deny" else "a rule permits this call"
    return Judgement(effect=effect, quotes=checked, reason=reason)


def _no_decision_reason(verdicts: Sequence[RuleVerdict]) -> str:
    for found, reason in (("asks", "a rule says to ask first"),
                          ("out_of_scope", "the call is outside a permitting rule"),
                          ("blocks", "a rule bears on the call without deciding it")):  # fmt: skip
        if found in verdicts:
            return reason
    return "no rule decides this call"


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
