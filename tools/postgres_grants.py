"""Grants on PostgreSQL: the contract of ``tools/grants.py`` on ``tool_grants``.

Theory of operation
-------------------
1. ``decide`` reads the role's active grants for the call's action in creation order (``seq``)
   and runs ``grant_policy`` on them. When the deciding grant is ``once`` it is used up with
   ``UPDATE … WHERE status = 'active' RETURNING``: the row lock serialises two racing
   decisions and the loser's re-evaluated ``WHERE`` no longer matches, so it decides again
   without that grant (grants rule 3). At most ``MAX_DECIDE_ROUNDS`` rounds; past them (only
   under a storm of racing once grants) there is no decision and the person is asked.
2. ``create`` locks the parent row (``FOR SHARE``) while it checks the parent is active and
   inserts the child, so a revocation that got there first is seen.
3. ``revoke`` locks the grant (``FOR UPDATE``), then repeats one recursive statement over the
   grant's descendants (``UNION``: a cycle ends) revoking the active ones, until a round revokes
   nothing: a child created by a transaction that committed during a round is caught by the
   next one, and afterwards its parent reads as revoked (rule 2).
4. Connection failures and timeouts become ``ToolsUnavailable``.
"""

from __future__ import annotations

import builtins
import json
from typing import Any, TypeVar

from storage.postgres import PooledCalls
from tools.capability import Capability
from tools.errors import GrantNotFound, InvalidGrant, ToolLimitExceeded, ToolsUnavailable
from tools.grants import (
    MAX_ACTIVE_GRANTS,
    MAX_CASCADE,
    Grant,
    GrantedBy,
    GrantStatus,
    NewGrant,
    check_new_grant,
    grant_policy,
    new_grant_id,
)
from tools.postgres_common import forget_role_rows

T = TypeVar("T")
MAX_DECIDE_ROUNDS = 16

_COLUMNS = (
    "id, tenant, role_id, action, target, arguments, effect, scope, thread_id,"
    " granted_by_kind, granted_by_id, parent, status, created_at"
)
_CASCADE = f"""
WITH RECURSIVE tree(id) AS (
    SELECT $2::text
    UNION
    SELECT g.id FROM tool_grants g JOIN tree t ON g.tenant = $1 AND g.parent = t.id
)
UPDATE tool_grants SET status = 'revoked'
WHERE tenant = $1 AND status = 'active'
  AND id IN (SELECT id FROM tree LIMIT {MAX_CASCADE})
RETURNING id
"""


def grant_of(row: Any) -> Grant:
    arguments = row["arguments"]
    return Grant(
        id=row["id"],
        tenant=row["tenant"],
        role_id=row["role_id"],
        capability=Capability(
            row["action"], row["target"], None if arguments is None else json.loads(arguments)
        ),
        effect=row["effect"],
        scope=row["scope"],
        thread_id=row["thread_id"],
        granted_by=GrantedBy(row["granted_by_kind"], row["granted_by_id"]),
        parent=row["parent"],
        status=row["status"],
        created_at=row["created_at"],
    )


class PostgresGrantStore:
    """``GrantStore`` on an asyncpg pool whose database has the tools migrations."""

    def __init__(
        self,
        pool: Any,
        *,
        max_active: int = MAX_ACTIVE_GRANTS,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        self.pool = pool
        self.max_active = max_active
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool, acquire_timeout=acquire_timeout, unavailable=ToolsUnavailable, what="grants"
        )

    async def create(self, tenant: str, role_id: str, new: NewGrant) -> Grant:
        check_new_grant(new)
        t = self.query_timeout

        async def work(conn: Any) -> Grant:
            if new.parent is not None:
                status = await conn.fetchval(
                    "SELECT status FROM tool_grants WHERE tenant = $1 AND id = $2 FOR SHARE",
                    tenant, new.parent, timeout=t,
                )  # fmt: skip
                if status != "active":
                    raise InvalidGrant("parent must be an active grant of this tenant")
            active = await conn.fetchval(
                "SELECT count(*) FROM tool_grants"
                " WHERE tenant = $1 AND role_id = $2 AND status = 'active'",
                tenant, role_id, timeout=t,
            )  # fmt: skip
            if active >= self.max_active:
                raise ToolLimitExceeded(f"a role holds at most {self.max_active} active grants")
            row = await conn.fetchrow(
                "INSERT INTO tool_grants (tenant, id, role_id, action, target, arguments,"
                " effect, scope, thread_id, granted_by_kind, granted_by_id, parent, status)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'active')"
                f" RETURNING {_COLUMNS}",
                tenant, new_grant_id(), role_id, new.capability.action, new.capability.target,
                new.capability.arguments_key, new.effect, new.scope, new.thread_id,
                new.granted_by.kind, new.granted_by.id, new.parent, timeout=t,
            )  # fmt: skip
            return grant_of(row)

        return await self._call(work, transaction=True)

    async def get(self, tenant: str, role_id: str, grant_id: str) -> Grant:
        row = await self._call(
            lambda conn: conn.fetchrow(
                f"SELECT {_COLUMNS} FROM tool_grants"
                " WHERE tenant = $1 AND role_id = $2 AND id = $3",
                tenant, role_id, grant_id, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        if row is None:
            raise GrantNotFound(f"no grant {grant_id}")
        return grant_of(row)

    async def list(
        self, tenant: str, role_id: str, *, status: GrantStatus | None = None
    ) -> list[Grant]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT {_COLUMNS} FROM tool_grants WHERE tenant = $1 AND role_id = $2"
                " AND ($3::text IS NULL OR status = $3) ORDER BY seq",
                tenant, role_id, status, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return [grant_of(r) for r in rows]

    async def decide(
        self, tenant: str, role_id: str, call: Capability, thread_id: str | None
    ) -> Grant | None:
        t = self.query_timeout

        async def work(conn: Any) -> Grant | None:
            for _ in range(MAX_DECIDE_ROUNDS):
                rows = await conn.fetch(
                    f"SELECT {_COLUMNS} FROM tool_grants WHERE tenant = $1 AND role_id = $2"
                    " AND action = $3 AND status = 'active' ORDER BY seq",
                    tenant, role_id, call.action, timeout=t,
                )  # fmt: skip
                decided = grant_policy([grant_of(r) for r in rows], call, thread_id)
                if decided is None or decided.scope != "once":
                    return decided
                used = await conn.fetchval(
                    "UPDATE tool_grants SET status = 'used'"
                    " WHERE tenant = $1 AND id = $2 AND status = 'active' RETURNING id",
                    tenant, decided.id, timeout=t,
                )  # fmt: skip
                if used is not None:
                    return decided
            return None

        return await self._call(work, transaction=False)

    async def revoke(self, tenant: str, role_id: str, grant_id: str) -> builtins.list[str]:
        t = self.query_timeout

        async def work(conn: Any) -> list[str]:
            found = await conn.fetchval(
                "SELECT id FROM tool_grants WHERE tenant = $1 AND role_id = $2 AND id = $3"
                " FOR UPDATE",
                tenant, role_id, grant_id, timeout=t,
            )  # fmt: skip
            if found is None:
                raise GrantNotFound(f"no grant {grant_id}")
            revoked: list[str] = []
            while len(revoked) < MAX_CASCADE:
                rows = await conn.fetch(_CASCADE, tenant, grant_id, timeout=t)
                if not rows:
                    break
                revoked.extend(r["id"] for r in rows)
            return revoked

        return await self._call(work, transaction=True)

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return await forget_role_rows(
            self._call, "tool_grants", tenant, role_id, self.query_timeout
        )
