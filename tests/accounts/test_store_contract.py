"""The account store contract against the in-memory and the PostgreSQL store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from accounts.postgres_store import PostgresAccountStore
from accounts.store import AccountStore, InMemoryAccountStore
from tests.accounts.contract import AccountStoreContract
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]


class TestInMemoryAccountStore(AccountStoreContract):
    @pytest.fixture
    def store(self) -> AccountStore:
        return InMemoryAccountStore()


class TestPostgresAccountStore(AccountStoreContract):
    @pytest.fixture
    async def store(self, pg_pool: Any, postgres_url: str) -> AsyncIterator[AccountStore]:
        store = PostgresAccountStore(pg_pool, url=postgres_url)
        yield store
        await store.close()
