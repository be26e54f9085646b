"""PostgreSQL implementations of the runtime's stores (roles, threads; accounts live in
``accounts/postgres_store.py``).

Same contracts and rules as the in-memory stores beside each contract; the schema is
``runtime/migrations/0001_core.sql``. Every query is scoped by tenant (and user where the row has
one) and bounded by ``command_timeout``.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from runtime.roles import EDITABLE_FIELDS, Role, RoleOverrides, StaleRoleRevision
from runtime.threads import Thread

_TIMEOUT = 10.0


_ROLE_COLUMNS = (
    "id, tenant, name, instructions, voice, language, memory_enabled, is_default, "
    "created_at, updated_at, revision, failure_message, recording_enabled, "
    "agent_url, agent_secret"
)


def _role(row: asyncpg.Record) -> Role:
    return Role(**dict(row))


class PostgresRoleStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def list(self, tenant: str) -> list[Role]:
        rows = await self.pool.fetch(
            f"SELECT {_ROLE_COLUMNS} FROM roles WHERE tenant = $1 "
            "ORDER BY is_default DESC, created_at, id",
            tenant,
            timeout=_TIMEOUT,
        )
        return [_role(r) for r in rows]

    async def get(self, tenant: str, role_id: str) -> Role | None:
        row = await self.pool.fetchrow(
            f"SELECT {_ROLE_COLUMNS} FROM roles WHERE tenant = $1 AND id = $2",
            tenant,
            role_id,
            timeout=_TIMEOUT,
        )
        return None if row is None else _role(row)

    async def create(
        self,
        tenant: str,
        *,
        name: str,
        instructions: str,
        voice: str | None,
        language: str | None,
        memory_enabled: bool,
        is_default: bool = False,
        failure_message: str | None = None,
    ) -> Role:
        role_id = f"role_{uuid.uuid4().hex[:16]}"
        if is_default:
            # Two processes may create the default at once: the partial unique index lets
            # one win, and both return the winner.
            row = await self.pool.fetchrow(
                f"""INSERT INTO roles (tenant, id, name, instructions, voice, language,
                                       memory_enabled, is_default, failure_message)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, true, $8)
                    ON CONFLICT (tenant) WHERE is_default DO NOTHING
                    RETURNING {_ROLE_COLUMNS}""",
                tenant, role_id, name, instructions, voice, language, memory_enabled,
                failure_message, timeout=_TIMEOUT,
            )  # fmt: skip
            if row is None:
                row = await self.pool.fetchrow(
                    f"SELECT {_ROLE_COLUMNS} FROM roles WHERE tenant = $1 AND is_default",
                    tenant,
                    timeout=_TIMEOUT,
                )
            assert row is not None
            return _role(row)
        row = await self.pool.fetchrow(
            f"""INSERT INTO roles (tenant, id, name, instructions, voice, language,
                                   memory_enabled, is_default, failure_message)
                VALUES ($1, $2, $3, $4, $5, $6, $7, false, $8)
                RETURNING {_ROLE_COLUMNS}""",
            tenant, role_id, name, instructions, voice, language, memory_enabled,
            failure_message, timeout=_TIMEOUT,
        )  # fmt: skip
        assert row is not None
        return _role(row)

    async def update(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None, **changes: object
    ) -> Role | None:
        unknown = set(changes) - EDITABLE_FIELDS
        if unknown:
            raise ValueError(f"cannot change {sorted(unknown)}")
        if not changes:
            return await self._unchanged(tenant, role_id, expected_revision)
        names = sorted(changes)
        assignments = ", ".join(f"{name} = ${i + 4}" for i, name in enumerate(names))
        values: list[Any] = [changes[name] for name in names]
        # Rule 2: the revision check and the write are one statement.
        row = await self.pool.fetchrow(
            f"UPDATE roles SET {assignments}, updated_at = now(), revision = revision + 1 "
            "WHERE tenant = $1 AND id = $2 AND ($3::integer IS NULL OR revision = $3) "
            f"RETURNING {_ROLE_COLUMNS}",
            tenant,
            role_id,
            expected_revision,
            *values,
            timeout=_TIMEOUT,
        )
        if row is None:
            return await self._unchanged(tenant, role_id, expected_revision)
        return _role(row)

    async def delete(
        self, tenant: str, role_id: str, *, expected_revision: int | None = None
    ) -> bool:
        status = await self.pool.execute(
            "DELETE FROM roles WHERE tenant = $1 AND id = $2 "
            "AND ($3::integer IS NULL OR revision = $3)",
            tenant, role_id, expected_revision,
            timeout=_TIMEOUT,
        )  # fmt: skip
        if status.endswith(" 1"):
            return True
        await self._unchanged(tenant, role_id, expected_revision)
        return False

    async def _unchanged(
        self, tenant: str, role_id: str, expected_revision: int | None
    ) -> Role | None:
        """Nothing was written: the role as it is (None: unknown), or ``StaleRoleRevision``."""
        role = await self.get(tenant, role_id)
        if role is not None and expected_revision not in (None, role.revision):
            raise StaleRoleRevision(role)
        return role

    async def overrides(self, tenant: str, user: str, role_id: str) -> RoleOverrides:
        row = await self.pool.fetchrow(
            """SELECT memory_enabled FROM role_user_settings
               WHERE tenant = $1 AND user_id = $2 AND role_id = $3""",
            tenant, user, role_id,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return RoleOverrides() if row is None else RoleOverrides(row["memory_enabled"])

    async def set_overrides(
        self, tenant: str, user: str, role_id: str, overrides: RoleOverrides
    ) -> RoleOverrides:
        # A role deleted meanwhile: the foreign key refuses the row, and nothing is kept.
        await self.pool.execute(
            """INSERT INTO role_user_settings (tenant, user_id, role_id, memory_enabled)
               SELECT $1, $2, $3, $4 WHERE EXISTS
                   (SELECT 1 FROM roles WHERE tenant = $1 AND id = $3)
               ON CONFLICT (tenant, user_id, role_id)
               DO UPDATE SET memory_enabled = EXCLUDED.memory_enabled, updated_at = now()""",
            tenant, user, role_id, overrides.memory_enabled,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return overrides


class PostgresThreadStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def create(self, tenant: str, user: str, thread_id: str, role_id: str) -> Thread:
        await self.pool.execute(
            """INSERT INTO threads (tenant, user_id, thread_id, role_id) VALUES ($1, $2, $3, $4)
               ON CONFLICT (tenant, user_id, thread_id) DO NOTHING""",
            tenant,
            user,
            thread_id,
            role_id,
            timeout=_TIMEOUT,
        )
        thread = await self.get(tenant, user, thread_id)
        assert thread is not None
        return thread

    async def get(self, tenant: str, user: str, thread_id: str) -> Thread | None:
        row = await self.pool.fetchrow(
            """SELECT tenant, user_id, thread_id, role_id, created_at FROM threads
               WHERE tenant = $1 AND user_id = $2 AND thread_id = $3""",
            tenant,
            user,
            thread_id,
            timeout=_TIMEOUT,
        )
        if row is None:
            return None
        return Thread(row["tenant"], row["user_id"], row["thread_id"], row["role_id"],
                      row["created_at"])  # fmt: skip

    async def count_for_role(self, tenant: str, role_id: str) -> int:
        count = await self.pool.fetchval(
            "SELECT count(*) FROM threads WHERE tenant = $1 AND role_id = $2",
            tenant,
            role_id,
            timeout=_TIMEOUT,
        )
        return int(count)
