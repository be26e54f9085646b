"""What per-user memory keeps beside the role pool (``memory/pool_memory.py`` rule 3): the
``MemoryLedger`` contract and its in-memory implementation (PostgreSQL:
``memory/postgres_pool_memory.py``).

Per ``(tenant, owner)`` — ``owner_key(user)``, never the user id — a ledger holds the source
blocks, the deletion receipts and MEM's change log, which also says which role each entry id is
in. Its ``transaction`` is the owner's lock around a pool transaction: the ledger's rows
(``record``) and the pool's ``apply_in`` writes made with it commit or roll back together.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from memory.entries import DeletionReceipt, MemoryChange, SourceBlock
from memory.pool_store import PoolStore
from memory.store import MAX_CHANGES_LISTED


class LedgerTransaction(Protocol):
    pool_tx: Any
    """What the pool's ``apply_in`` takes."""
    now: datetime
    """The transaction's time (PostgreSQL: the database clock, as journal event times)."""


class MemoryLedger(Protocol):
    """What MEM keeps beside the pool, per ``(tenant, owner)``: source blocks, deletion
    receipts and the change log (which also says which role each entry id is in)."""

    def transaction(
        self, pool: PoolStore, tenant: str, owner: str
    ) -> Any:  # an async context manager giving a LedgerTransaction
        """Rule 3: the owner's lock and a pool transaction; everything written with the
        transaction's ``pool_tx`` and ``record`` commits or rolls back together."""
        ...

    async def blocks(self, tx: Any, tenant: str, owner: str) -> list[SourceBlock]: ...

    async def receipts(self, tx: Any, tenant: str, owner: str) -> list[DeletionReceipt]: ...

    async def roles(self, tx: Any, tenant: str, owner: str) -> list[str]:
        """Every role the owner's change log names, sorted (``tx`` None: outside one)."""
        ...

    async def role_of(self, tenant: str, owner: str, entry_id: str) -> str | None: ...

    async def record(
        self,
        tx: Any,
        tenant: str,
        owner: str,
        *,
        changes: Sequence[MemoryChange] = (),
        receipts: Sequence[DeletionReceipt] = (),
        blocks: Sequence[SourceBlock] = (),
    ) -> None:
        """Write rows in ``tx`` (a change's ``seq`` is given by the ledger)."""
        ...

    async def changes(
        self, tenant: str, owner: str, role_id: str, limit: int
    ) -> list[MemoryChange]:
        """The role's change log, newest first."""
        ...


@dataclass
class _OwnerLedger:
    changes: list[MemoryChange] = field(default_factory=list)
    receipts: list[DeletionReceipt] = field(default_factory=list)
    blocks: list[SourceBlock] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)
    """Entry id → role id."""


@dataclass
class InMemoryLedgerTransaction:
    pool_tx: Any
    now: datetime
    staged: list[tuple[str, str, Sequence[MemoryChange], Sequence[DeletionReceipt],
                       Sequence[SourceBlock]]] = field(default_factory=list)  # fmt: skip


class InMemoryMemoryLedger:
    """``MemoryLedger`` in process memory; rows of a transaction are kept once the pool's
    transaction committed. The owner's lock is an ``asyncio.Lock`` dropped when nobody holds
    or awaits it."""

    def __init__(self) -> None:
        self._owners: dict[tuple[str, str], _OwnerLedger] = {}
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}
        self._seq = itertools.count(1)
        self._last = datetime.now(UTC)

    def _now(self) -> datetime:
        # Strictly increasing, so "most recently updated" is never a tie.
        now = datetime.now(UTC)
        self._last = now if now > self._last else self._last + timedelta(microseconds=1)
        return self._last

    def _owner(self, tenant: str, owner: str) -> _OwnerLedger:
        return self._owners.get((tenant, owner)) or _OwnerLedger()

    @asynccontextmanager
    async def transaction(
        self, pool: PoolStore, tenant: str, owner: str
    ) -> AsyncIterator[InMemoryLedgerTransaction]:
        key = (tenant, owner)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                async with pool.transaction() as pool_tx:
                    tx = InMemoryLedgerTransaction(pool_tx, self._now())
                    yield tx
                for tenant_, owner_, changes, receipts, blocks in tx.staged:
                    held = self._owners.setdefault((tenant_, owner_), _OwnerLedger())
                    for change in changes:
                        held.changes.append(replace(change, seq=next(self._seq)))
                        held.roles.setdefault(change.entry_id, change.role_id)
                    held.receipts.extend(receipts)
                    held.blocks.extend(blocks)
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    async def blocks(self, tx: Any, tenant: str, owner: str) -> list[SourceBlock]:
        return list(self._owner(tenant, owner).blocks)

    async def receipts(self, tx: Any, tenant: str, owner: str) -> list[DeletionReceipt]:
        return list(self._owner(tenant, owner).receipts)

    async def roles(self, tx: Any, tenant: str, owner: str) -> list[str]:
        return sorted(set(self._owner(tenant, owner).roles.values()))

    async def role_of(self, tenant: str, owner: str, entry_id: str) -> str | None:
        return self._owner(tenant, owner).roles.get(entry_id)

    async def record(
        self,
        tx: Any,
        tenant: str,
        owner: str,
        *,
        changes: Sequence[MemoryChange] = (),
        receipts: Sequence[DeletionReceipt] = (),
        blocks: Sequence[SourceBlock] = (),
    ) -> None:
        assert isinstance(tx, InMemoryLedgerTransaction)
        tx.staged.append((tenant, owner, list(changes), list(receipts), list(blocks)))

    async def changes(
        self, tenant: str, owner: str, role_id: str, limit: int
    ) -> list[MemoryChange]:
        mine = [c for c in self._owner(tenant, owner).changes if c.role_id == role_id]
        return mine[::-1][: min(limit, MAX_CHANGES_LISTED)]
