"""The ground floor every PostgreSQL store stands on (journal, knowledge, memory, tools,
accounts, records): which failures mean the database cannot be reached, running work on one
pooled connection with the store's own "unavailable" error, and batched rewrites (re-sealing).

Nothing here knows a store's tables or the runtime; the runtime's ``runtime/database.py``
opens the pool (an external server or the embedded one) and hands it to the stores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, and a connection that went away
    asyncpg.exceptions.OperatorInterventionError,  # 57: admin shutdown, cannot connect now
    asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections
    asyncpg.InterfaceError,
    # A backend that went away (a restart) while its connection sat in the pool can leave
    # asyncpg's protocol stuck ("another operation is in progress") until the socket closes.
    asyncpg.InternalClientError,
)
"""Failures that mean "the database cannot be reached", as opposed to a bad query."""

T = TypeVar("T")


async def on_connection(
    pool: Any,
    work: Callable[[Any], Awaitable[T]],
    *,
    transaction: bool,
    acquire_timeout: float,
    unavailable: Callable[[str], Exception],
    what: str,
) -> T:
    """Run ``work(conn)`` on one of ``pool``'s connections, in a transaction when asked. A
    database that cannot be reached (``CONNECTION_ERRORS``) raises ``unavailable("<what>
    unavailable: <error type>")`` — the store's own error, never the driver's; the message
    names the error's type only (its text may quote a query's values)."""
    try:
        async with pool.acquire(timeout=acquire_timeout) as conn:
            try:
                if not transaction:
                    return await work(conn)
                async with conn.transaction():
                    return await work(conn)
            except CONNECTION_ERRORS:
                # Such a failure may leave the connection stuck for good: the pool must not
                # hand it out again (it opens a new one).
                with contextlib.suppress(asyncpg.InterfaceError):  # already gone
                    conn.terminate()
                raise
    except CONNECTION_ERRORS as e:
        raise unavailable(f"{what} unavailable: {type(e).__name__}") from e


async def in_batches(step: Callable[[], Awaitable[int]], batch: int) -> int:
    """Call ``step`` (one batch of at most ``batch`` rows, one transaction) until a batch comes
    back short; how many rows all the batches did (re-sealing, key rotation)."""
    total = 0
    while True:
        done = await step()
        total += done
        if done < batch:
            return total


class PooledCalls:
    """``await calls(work, transaction=…)``: ``work(conn)`` on one of ``pool``'s connections
    (``on_connection``), a database that cannot be reached raising ``unavailable`` naming
    ``what`` — what each store's ``_call`` was, written once."""

    def __init__(
        self,
        pool: Any,
        *,
        acquire_timeout: float,
        unavailable: Callable[[str], Exception],
        what: str,
    ) -> None:
        self.pool = pool
        self.acquire_timeout = acquire_timeout
        self.unavailable = unavailable
        self.what = what

    async def __call__(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        return await on_connection(
            self.pool,
            work,
            transaction=transaction,
            acquire_timeout=self.acquire_timeout,
            unavailable=self.unavailable,
            what=self.what,
        )


__all__ = ["CONNECTION_ERRORS", "PooledCalls", "in_batches", "on_connection"]
