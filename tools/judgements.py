"""Judgements (SPEC TOOL-3): what the rules judge answered, and the cache that reuses it.

Theory of operation
-------------------
1. A ``Judgement`` is ``allow``, ``deny`` or ``none``, with the quotes that back it (checked
   against the rules' texts by ``tools.judge``) and a short reason. ``failure`` says why there
   was no judgement at all (the model failed, timed out, answered out of shape, or none is
   configured); a judgement with a failure is never cached, so the next call asks again.
2. The cache key is the SHA-256 of the active rules' ids and versions (sorted), the
   capability's canonical key and the judge's name: the same question to the same rules reuses
   the answer, and any new rule version, a rule retired or added, or another judge misses.
3. Bounded: at most ``max_per_role`` judgements per role; the oldest go first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tools.capability import Capability, canonical_json
from tools.rules import Rule

JudgedEffect = Literal["allow", "deny", "none"]
MAX_JUDGEMENTS_PER_ROLE = 2_000
MAX_REASON_CHARS = 300


@dataclass(frozen=True, slots=True)
class Quote:
    rule_id: str
    text: str
    """The quote as the judge gave it (whitespace normalised)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    effect: JudgedEffect
    quotes: tuple[Quote, ...] = ()
    reason: str = ""
    failure: str | None = None
    """``no_model``, ``no_rules``, ``model_error``, ``model_timeout`` or ``unparsable``."""


def judgement_key(rules: Sequence[Rule], capability: Capability, judge_name: str) -> str:
    """Rule 2."""
    versions = sorted([r.id, r.version] for r in rules)
    raw = canonical_json({"rules": versions, "capability": capability.key(), "judge": judge_name})
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class JudgementCache(Protocol):
    async def get(self, tenant: str, role_id: str, key: str) -> Judgement | None: ...

    async def put(self, tenant: str, role_id: str, key: str, judgement: Judgement) -> None: ...

    async def forget_role(self, tenant: str, role_id: str) -> int:
        """Remove everything of a deleted role (``DELETE /api/roles/{id}``); how many."""
        ...


class InMemoryJudgementCache:
    """``JudgementCache`` in one ordered dict per role (oldest first)."""

    def __init__(self, *, max_per_role: int = MAX_JUDGEMENTS_PER_ROLE) -> None:
        self.max_per_role = max_per_role
        self._roles: dict[tuple[str, str], OrderedDict[str, Judgement]] = {}

    async def get(self, tenant: str, role_id: str, key: str) -> Judgement | None:
        return self._roles.get((tenant, role_id), OrderedDict()).get(key)

    async def put(self, tenant: str, role_id: str, key: str, judgement: Judgement) -> None:
        if judgement.failure is not None:
            return
        role = self._roles.setdefault((tenant, role_id), OrderedDict())
        role[key] = judgement
        while len(role) > self.max_per_role:
            role.popitem(last=False)

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return len(self._roles.pop((tenant, role_id), {}))
