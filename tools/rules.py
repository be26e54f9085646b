"""Rules (SPEC TOOL-3): natural-language sentences per role that the judge reads.

Theory of operation
-------------------
Rule 1. A rule has a text (1…``MAX_RULE_CHARS`` characters after trimming), an author (a
        person or a role), a status and a version that starts at 1 and goes up by one with
        every change. Only ``active`` rules reach the judge.
Rule 2. A rule a person writes is ``active`` at once; a rule a role (the agent) writes is
        ``proposed``. Only a person may make a rule ``active``; a role's edit of a rule leaves it
        ``proposed`` (an agent cannot widen its own permissions).
Rule 3. ``update`` is a compare-and-set on the version: it changes the rule only when it is
        still at ``expected_version``, atomically, else raises ``RuleVersionConflict``
        carrying the rule as it is now (the API's 409). Of two updates at one version exactly
        one wins.
Rule 4. Bounded: a role holds at most ``MAX_RULES`` rules that are not retired; the judge is
        shown the active ones in creation order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from tools.errors import InvalidRule, RuleNotFound, RuleVersionConflict, ToolLimitExceeded

RuleStatus = Literal["active", "proposed", "retired"]
AuthorKind = Literal["person", "role"]
RULE_STATUSES: tuple[RuleStatus, ...] = ("active", "proposed", "retired")
MAX_RULE_CHARS = 1_000
MAX_RULES = 100


@dataclass(frozen=True, slots=True)
class Author:
    kind: AuthorKind
    id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    id: str
    tenant: str
    role_id: str
    text: str
    author: Author
    status: RuleStatus
    version: int
    created_at: datetime
    updated_at: datetime


def check_text(text: str) -> str:
    text = text.strip()
    if not text or len(text) > MAX_RULE_CHARS:
        raise InvalidRule(f"a rule's text must be 1–{MAX_RULE_CHARS} characters")
    return text


def check_author(author: Author) -> None:
    if author.kind not in ("person", "role") or not author.id:
        raise InvalidRule("an author needs a kind (person or role) and an id")


def initial_status(author: Author) -> RuleStatus:
    """Rule 2."""
    return "active" if author.kind == "person" else "proposed"


def changed(
    rule: Rule, *, by: Author, text: str | None, status: RuleStatus | None, now: datetime
) -> Rule:
    """The rule after ``by``'s change (rules 1–2), version + 1; ``InvalidRule`` if not allowed."""
    check_author(by)
    if status is not None and status not in RULE_STATUSES:
        raise InvalidRule("status must be active, proposed or retired")
    new_text = rule.text if text is None else check_text(text)
    new_status = rule.status if status is None else status
    if by.kind == "role":
        if status == "active":
            raise InvalidRule("only a person can make a rule active")
        if new_status == "active":  # a role's edit of an active rule goes back to review
            new_status = "proposed"
    return replace(rule, text=new_text, status=new_status, version=rule.version + 1,
                   updated_at=now)  # fmt: skip


def new_rule_id() -> str:
    return "rule_" + uuid.uuid4().hex


class RuleStore(Protocol):
    async def create(self, tenant: str, role_id: str, text: str, author: Author) -> Rule: ...

    async def get(self, tenant: str, role_id: str, rule_id: str) -> Rule: ...

    async def list(
        self, tenant: str, role_id: str, *, status: RuleStatus | None = None
    ) -> list[Rule]:
        """The role's rules in creation order."""
        ...

    async def update(
        self,
        tenant: str,
        role_id: str,
        rule_id: str,
        *,
        expected_version: int,
        by: Author,
        text: str | None = None,
        status: RuleStatus | None = None,
    ) -> Rule:
        """Rule 3."""
        ...

    async def forget_role(self, tenant: str, role_id: str) -> int:
        """Remove everything of a deleted role (``DELETE /api/roles/{id}``); how many."""
        ...


class InMemoryRuleStore:
    """``RuleStore`` in dicts (tests, ``OPENREALTIME_STORAGE=memory``); atomic on the loop."""

    def __init__(self, *, max_rules: int = MAX_RULES) -> None:
        self._rules: dict[tuple[str, str], dict[str, Rule]] = {}
        self.max_rules = max_rules

    async def create(self, tenant: str, role_id: str, text: str, author: Author) -> Rule:
        check_author(author)
        body = check_text(text)
        rules = self._rules.setdefault((tenant, role_id), {})
        if sum(1 for r in rules.values() if r.status != "retired") >= self.max_rules:
            raise ToolLimitExceeded(f"a role holds at most {self.max_rules} rules")
        now = datetime.now(UTC)
        rule = Rule(id=new_rule_id(), tenant=tenant, role_id=role_id, text=body, author=author,
                    status=initial_status(author), version=1, created_at=now,
                    updated_at=now)  # fmt: skip
        rules[rule.id] = rule
        return rule

    async def get(self, tenant: str, role_id: str, rule_id: str) -> Rule:
        rule = self._rules.get((tenant, role_id), {}).get(rule_id)
        if rule is None:
            raise RuleNotFound(f"no rule {rule_id}")
        return rule

    async def list(
        self, tenant: str, role_id: str, *, status: RuleStatus | None = None
    ) -> list[Rule]:
        rules = self._rules.get((tenant, role_id), {}).values()
        return [r for r in rules if status is None or r.status == status]

    async def update(
        self,
        tenant: str,
        role_id: str,
        rule_id: str,
        *,
        expected_version: int,
        by: Author,
        text: str | None = None,
        status: RuleStatus | None = None,
    ) -> Rule:
        rule = await self.get(tenant, role_id, rule_id)
        if rule.version != expected_version:
            raise RuleVersionConflict(rule)
        new = changed(rule, by=by, text=text, status=status, now=datetime.now(UTC))
        if rule.status == "retired" and new.status != "retired":
            live = sum(1 for r in self._rules[(tenant, role_id)].values() if r.status != "retired")
            if live >= self.max_rules:
                raise ToolLimitExceeded(f"a role holds at most {self.max_rules} rules")
        self._rules[(tenant, role_id)][rule_id] = new
        return new

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return len(self._rules.pop((tenant, role_id), {}))
