"""The account store contract against the in-memory and the PostgreSQL store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from accounts.model import Principal
from accounts.postgres_store import PostgresAccountStore
from accounts.store import AccountStore, InMemoryAccountStore
from tests.accounts.contract import AccountStoreContract
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]


class TestInMemoryAccountStore(AccountStoreContract):
    @pytest.fixture
    def store(self) -> AccountStore:
        return InMemoryAccountStore()


async def test_a_client_secret_expires_by_the_stores_clock() -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = InMemoryAccountStore(clock=lambda: now[0])
    await store.add_token(Principal("acme", "max"), "ort_backend")
    who = await store.authenticate("ort_backend")
    assert who is not None
    issued = await store.issue_client_secret(who, role_id="role_a", ttl=timedelta(seconds=10))
    assert issued.info.expires_at == now[0] + timedelta(seconds=10)
    now[0] += timedelta(seconds=9.999)
    assert await store.authenticate_client_secret(issued.secret) is not None
    now[0] += timedelta(milliseconds=1)
    assert await store.authenticate_client_secret(issued.secret) is None


class TestPostgresAccountStore(AccountStoreContract):
    @pytest.fixture
    async def store(self, pg_pool: Any, postgres_url: str) -> AsyncIterator[AccountStore]:
        store = PostgresAccountStore(pg_pool, url=postgres_url)
        yield store
        await store.close()
