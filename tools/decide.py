"""One tool call's decision (SPEC TOOL-2, TOOL-3): grants first, then the rules.

Theory of operation
-------------------
1. The role's grants decide first (``GrantStore.decide``: deny beats allow, the first allow
   decides, a ``once`` grant is used up by its decision).
2. When no grant decides and the role has active rules and a judge is configured, a cached
   judgement for the same rules (ids and versions), capability and judge answers; else the
   judge is asked and its judgement cached (never one with a ``failure``).
3. Otherwise there is no decision (``effect="none"``): the runtime asks the person (TOOL-4).
4. The judgement cache is a shortcut, not a source of truth: a cache that cannot be reached
   is a miss, and a failed write is logged and dropped. The grant and rule stores failing
   raise ``ToolsUnavailable`` — without them nothing can be decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from journal.events import ThreadRef
from tools.capability import Capability
from tools.errors import ToolsUnavailable
from tools.grants import GrantStore
from tools.judge import Judge
from tools.judgements import JudgedEffect, Judgement, JudgementCache, Quote, judgement_key
from tools.rules import RuleStore

log = logging.getLogger(__name__)

DecidedBy = Literal["grant", "judgement", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    effect: JudgedEffect
    decided_by: DecidedBy
    grant_id: str | None = None
    quotes: tuple[Quote, ...] = ()
    cached: bool = False
    """The judgement came from the cache."""
    failure: str | None = None
    """Why the judge gave nothing (``tools.judgements.Judgement.failure``)."""

    def refusal(self) -> str:
        """What the brain is told of a deny: the rules quoted, or that the person said no."""
        if self.decided_by == "judgement" and self.quotes:
            return "Not permitted: " + " ".join(f'"{q.text}"' for q in self.quotes)
        return "Not permitted: the person said no."

    def as_json(self) -> dict[str, Any]:
        """The decision as the journal keeps it on the call's event."""
        return {
            "effect": self.effect,
            "decided_by": self.decided_by,
            "grant_id": self.grant_id,
            "quotes": [q.text for q in self.quotes],
            "cached": self.cached,
            "failure": self.failure,
        }


class ToolDecider:
    def __init__(
        self,
        grants: GrantStore,
        rules: RuleStore,
        judgements: JudgementCache,
        judge: Judge | None,
    ) -> None:
        self.grants = grants
        self.rules = rules
        self.judgements = judgements
        self.judge = judge

    async def decide(self, role_id: str, capability: Capability, thread: ThreadRef) -> Decision:
        tenant = thread.tenant
        grant = await self.grants.decide(tenant, role_id, capability, thread.thread_id)
        if grant is not None:
            return Decision(effect=grant.effect, decided_by="grant", grant_id=grant.id)
        if self.judge is None:
            return Decision(effect="none", decided_by="none", failure="no_model")
        rules = await self.rules.list(tenant, role_id, status="active")
        if not rules:
            return Decision(effect="none", decided_by="none", failure="no_rules")
        key = judgement_key(rules, capability, self.judge.name)
        cached: Judgement | None = None
        try:
            cached = await self.judgements.get(tenant, role_id, key)
        except ToolsUnavailable:
            log.warning("judgement cache unreachable: judging again")
        if cached is not None:
            return self._decision(cached, cached=True)
        judgement = await self.judge.judge(rules, capability, lane=thread.thread_id)
        if judgement.failure is None:
            try:
                await self.judgements.put(tenant, role_id, key, judgement)
            except ToolsUnavailable:
                log.warning("judgement cache unreachable: judgement not kept")
        return self._decision(judgement, cached=False)

    @staticmethod
    def _decision(judgement: Judgement, *, cached: bool) -> Decision:
        if judgement.effect == "none":
            return Decision(effect="none", decided_by="none", cached=cached,
                            failure=judgement.failure)  # fmt: skip
        return Decision(effect=judgement.effect, decided_by="judgement",
                        quotes=judgement.quotes, cached=cached)  # fmt: skip
