"""The journal contract run against every store."""

from __future__ import annotations

from typing import Any

import pytest

from journal.postgres_store import PostgresJournalStore
from journal.store import InMemoryJournalStore, JournalStore
from tests.journal.contract import JournalStoreContract


class TestInMemoryJournalStore(JournalStoreContract):
    @pytest.fixture
    def store(self) -> JournalStore:
        return InMemoryJournalStore()


class TestPostgresJournalStore(JournalStoreContract):
    @pytest.fixture
    def store(self, pg_pool: Any) -> JournalStore:
        return PostgresJournalStore(pg_pool)
