"""What the tool stores on PostgreSQL share (their connection handling is
``runtime.database.on_connection``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

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
