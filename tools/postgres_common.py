"""What the tool stores on PostgreSQL share (their connection handling is
``storage.postgres.PooledCalls``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from storage.postgres import PooledCalls
from tools.errors import ToolsUnavailable

T = TypeVar("T")


class PooledStore:
    """A tool store on an asyncpg pool: ``_call`` runs work on one connection, a database that
    cannot be reached raises ``ToolsUnavailable`` naming ``WHAT``."""

    WHAT: ClassVar[str] = "tool store"

    def __init__(self, pool: Any, *, query_timeout: float, acquire_timeout: float) -> None:
        self.pool = pool
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool, acquire_timeout=acquire_timeout, unavailable=ToolsUnavailable, what=self.WHAT
        )


Call = Callable[..., Awaitable[Any]]
"""A store's ``_call(work, *, transaction)``."""


async def forget_role_rows(
    call: Call, table: str, tenant: str, role_id: str, timeout: float
) -> int:
    """Delete every row of ``table`` for ``(tenant, role_id)``: a deleted role's (the role
    routes' rule 3); how many rows went."""
    status = await call(
        lambda conn: conn.execute(
            f"DELETE FROM {table} WHERE tenant = $1 AND role_id = $2",
            tenant, role_id, timeout=timeout,
        ),
        transaction=False,
    )  # fmt: skip
    return int(str(status).split()[-1])
