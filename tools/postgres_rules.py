"""Rules and cached judgements on PostgreSQL: ``tools/rules.py`` and ``tools/judgements.py``.

Theory of operation
-------------------
1. ``tool_rules`` holds one row per rule; ``update`` reads the row ``FOR UPDATE`` in a
   transaction, checks the version and writes the change (``tools.rules.changed``), so of two
   updates at one version the second waits, then sees the new version and gets
   ``RuleVersionConflict`` (rules rule 3).
2. ``create`` counts the role's rules that are not retired under a per-role advisory
   transaction lock, so racing creates cannot pass ``MAX_RULES``.
3. ``tool_judgements`` holds one row per key; ``put`` upserts it and prunes the role's oldest
   rows past ``max_per_role`` in the same transaction.
4. Connection failures and timeouts become ``ToolsUnavailable``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TypeVar

from tools.errors import RuleNotFound, RuleVersionConflict, ToolLimitExceeded
from tools.judgements import MAX_JUDGEMENTS_PER_ROLE, Judgement, Quote
from tools.postgres_common import PooledStore, forget_role_rows
from tools.rules import (
    MAX_RULES,
    Author,
    Rule,
    RuleStatus,
    changed,
    check_author,
    check_text,
    initial_status,
    new_rule_id,
)

T = TypeVar("T")
_COLUMNS = (
    "id, tenant, role_id, body, author_kind, author_id, status, version, created_at, updated_at"
)


def rule_of(row: Any) -> Rule:
    return Rule(
        id=row["id"], tenant=row["tenant"], role_id=row["role_id"], text=row["body"],
        author=Author(row["author_kind"], row["author_id"]), status=row["status"],
        version=row["version"], created_at=row["created_at"], updated_at=row["updated_at"],
    )  # fmt: skip


class _Pooled(PooledStore):
    WHAT = "tool rules"


class PostgresRuleStore(_Pooled):
    """``RuleStore`` on an asyncpg pool whose database has the tools migrations."""

    def __init__(
        self,
        pool: Any,
        *,
        max_rules: int = MAX_RULES,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        super().__init__(pool, query_timeout=query_timeout, acquire_timeout=acquire_timeout)
        self.max_rules = max_rules

    async def _live_count(self, conn: Any, tenant: str, role_id: str) -> int:
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('tool_rules:' || $1 || ':' || $2, 0))",
            tenant, role_id, timeout=self.query_timeout,
        )  # fmt: skip
        count: int = await conn.fetchval(
            "SELECT count(*) FROM tool_rules"
            " WHERE tenant = $1 AND role_id = $2 AND status <> 'retired'",
            tenant, role_id, timeout=self.query_timeout,
        )  # fmt: skip
        return count

    async def create(self, tenant: str, role_id: str, text: str, author: Author) -> Rule:
        check_author(author)
        body = check_text(text)

        async def work(conn: Any) -> Rule:
            if await self._live_count(conn, tenant, role_id) >= self.max_rules:
                raise ToolLimitExceeded(f"a role holds at most {self.max_rules} rules")
            row = await conn.fetchrow(
                "INSERT INTO tool_rules (tenant, role_id, id, body, author_kind, author_id,"
                f" status, version) VALUES ($1, $2, $3, $4, $5, $6, $7, 1) RETURNING {_COLUMNS}",
                tenant, role_id, new_rule_id(), body, author.kind, author.id,
                initial_status(author), timeout=self.query_timeout,
            )  # fmt: skip
            return rule_of(row)

        return await self._call(work, transaction=True)

    async def get(self, tenant: str, role_id: str, rule_id: str) -> Rule:
        row = await self._call(
            lambda conn: conn.fetchrow(
                f"SELECT {_COLUMNS} FROM tool_rules WHERE tenant = $1 AND role_id = $2 AND id = $3",
                tenant, role_id, rule_id, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        if row is None:
            raise RuleNotFound(f"no rule {rule_id}")
        return rule_of(row)

    async def list(
        self, tenant: str, role_id: str, *, status: RuleStatus | None = None
    ) -> list[Rule]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT {_COLUMNS} FROM tool_rules WHERE tenant = $1 AND role_id = $2"
                " AND ($3::text IS NULL OR status = $3) ORDER BY seq",
                tenant, role_id, status, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return [rule_of(r) for r in rows]

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
        t = self.query_timeout

        async def work(conn: Any) -> Rule:
            row = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM tool_rules WHERE tenant = $1 AND role_id = $2"
                " AND id = $3 FOR UPDATE",
                tenant, role_id, rule_id, timeout=t,
            )  # fmt: skip
            if row is None:
                raise RuleNotFound(f"no rule {rule_id}")
            rule = rule_of(row)
            if rule.version != expected_version:
                raise RuleVersionConflict(rule)
            new = changed(rule, by=by, text=text, status=status, now=datetime.now(UTC))
            if rule.status == "retired" and new.status != "retired":
                if await self._live_count(conn, tenant, role_id) >= self.max_rules:
                    raise ToolLimitExceeded(f"a role holds at most {self.max_rules} rules")
            row = await conn.fetchrow(
                "UPDATE tool_rules SET body = $4, status = $5, version = $6,"
                " updated_at = clock_timestamp() WHERE tenant = $1 AND role_id = $2 AND id = $3"
                f" RETURNING {_COLUMNS}",
                tenant, role_id, rule_id, new.text, new.status, new.version, timeout=t,
            )  # fmt: skip
            return rule_of(row)

        return await self._call(work, transaction=True)

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return await forget_role_rows(self._call, "tool_rules", tenant, role_id, self.query_timeout)


class PostgresJudgementCache(_Pooled):
    """``JudgementCache`` on ``tool_judgements``."""

    def __init__(
        self,
        pool: Any,
        *,
        max_per_role: int = MAX_JUDGEMENTS_PER_ROLE,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        super().__init__(pool, query_timeout=query_timeout, acquire_timeout=acquire_timeout)
        self.max_per_role = max_per_role

    async def get(self, tenant: str, role_id: str, key: str) -> Judgement | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                "SELECT effect, quotes, reason FROM tool_judgements"
                " WHERE tenant = $1 AND role_id = $2 AND key = $3",
                tenant, role_id, key, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        if row is None:
            return None
        quotes = tuple(Quote(q["rule_id"], q["text"]) for q in json.loads(row["quotes"]))
        return Judgement(effect=row["effect"], quotes=quotes, reason=row["reason"])

    async def put(self, tenant: str, role_id: str, key: str, judgement: Judgement) -> None:
        if judgement.failure is not None:
            return
        quotes = json.dumps(
            [{"rule_id": q.rule_id, "text": q.text} for q in judgement.quotes], ensure_ascii=False
        )
        t = self.query_timeout

        async def work(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO tool_judgements (tenant, role_id, key, effect, quotes, reason)"
                " VALUES ($1, $2, $3, $4, $5::jsonb, $6) ON CONFLICT (tenant, role_id, key)"
                " DO UPDATE SET effect = EXCLUDED.effect, quotes = EXCLUDED.quotes,"
                " reason = EXCLUDED.reason, created_at = clock_timestamp()",
                tenant, role_id, key, judgement.effect, quotes, judgement.reason, timeout=t,
            )  # fmt: skip
            await conn.execute(
                "DELETE FROM tool_judgements WHERE tenant = $1 AND role_id = $2 AND key IN ("
                " SELECT key FROM tool_judgements WHERE tenant = $1 AND role_id = $2"
                " ORDER BY created_at DESC OFFSET $3)",
                tenant, role_id, self.max_per_role, timeout=t,
            )  # fmt: skip

        await self._call(work, transaction=True)

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return await forget_role_rows(
            self._call, "tool_judgements", tenant, role_id, self.query_timeout
        )
