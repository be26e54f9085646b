"""The PostgreSQL pool store's metadata cache (``memory/postgres_pool_store.py`` rule 5): writes
and reads after a write of this process decode nothing, a rolled-back write leaves nothing a
later read could take for the truth, and another store's write is seen at once."""

from __future__ import annotations

from typing import Any

import pytest

from memory.crypto import Keyring
from memory.pool import PoolIndex
from memory.pool_store import AddEntry
from memory.postgres_pool_store import PostgresPoolStore
from tests.memory.test_pool_store_contract import ALICE, ROLE, T, fact, ids


class Counting(PostgresPoolStore):
    loads = 0

    async def _load(self, conn: Any, tenant: str, role_id: str) -> Any:
        self.loads += 1
        return await super()._load(conn, tenant, role_id)


async def test_a_write_and_the_reads_after_it_reuse_the_metadata(pg_pool: Any) -> None:
    keyring = Keyring.generate("k1")
    store = Counting(pg_pool, keyring=keyring)
    await store.apply(T, ROLE, [AddEntry(fact("a1"), "memory_model")])
    assert store.loads == 0  # a cold write reads only what it writes and cites
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"a1"}
    assert store.loads == 1
    await store.apply(T, ROLE, [AddEntry(fact("a2"), "memory_model")])
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"a1", "a2"}
    assert store.loads == 1
    # An add is appended to the pool's index, not indexed again.
    assert isinstance(store._cache[T, ROLE][1], PoolIndex)

    other = Counting(pg_pool, keyring=keyring)  # another process
    await other.apply(T, ROLE, [AddEntry(fact("a3"), "memory_model")])
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"a1", "a2", "a3"}
    assert store.loads == 2


async def test_a_rolled_back_write_is_never_read(pg_pool: Any) -> None:
    keyring = Keyring.generate("k1")
    store = PostgresPoolStore(pg_pool, keyring=keyring)
    await store.apply(T, ROLE, [AddEntry(fact("b1"), "memory_model")])

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with store.transaction() as tx:
            await store.apply_in(tx, T, ROLE, [AddEntry(fact("b2"), "memory_model")])
            raise Abort
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"b1"}
    # Another process's write after the rollback is seen whole, and only it.
    other = PostgresPoolStore(pg_pool, keyring=keyring)
    await other.apply(T, ROLE, [AddEntry(fact("b3"), "memory_model")])
    assert ids(await store.read_visible(T, ROLE, ALICE)) == {"b1", "b3"}
    await store.apply(T, ROLE, [AddEntry(fact("b4"), "memory_model")])
    assert ids(await other.read_visible(T, ROLE, ALICE)) == {"b1", "b3", "b4"}
