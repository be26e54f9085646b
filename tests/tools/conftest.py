"""Tools test fixtures: PostgreSQL from ``tests/postgres.py``; ``grant_store``, ``rule_store``,
``judgement_cache``, ``tool_catalog`` and ``tool_secrets`` — one backend each (in memory or
PostgreSQL), so the contract suites run against both."""

from __future__ import annotations

import pytest

from memory.crypto import Keyring
from tests.postgres import pg_pool, postgres_url
from tools.catalog import InMemoryToolCatalog, InMemoryToolSecrets, ToolCatalog, ToolSecrets
from tools.grants import GrantStore, InMemoryGrantStore
from tools.judgements import InMemoryJudgementCache, JudgementCache
from tools.postgres_catalog import PostgresToolCatalog, PostgresToolSecrets
from tools.postgres_grants import PostgresGrantStore
from tools.postgres_rules import PostgresJudgementCache, PostgresRuleStore
from tools.rules import InMemoryRuleStore, RuleStore

__all__ = [
    "grant_store",
    "judgement_cache",
    "pg_pool",
    "postgres_url",
    "rule_store",
    "tool_catalog",
    "tool_secrets",
]
CATALOG_HOSTS = ("api.example.com", "tools.example.org")


@pytest.fixture(params=["memory", "postgres"])
def grant_store(request: pytest.FixtureRequest) -> GrantStore:
    if request.param == "memory":
        return InMemoryGrantStore(max_active=20)
    return PostgresGrantStore(request.getfixturevalue("pg_pool"), max_active=20)


@pytest.fixture(params=["memory", "postgres"])
def rule_store(request: pytest.FixtureRequest) -> RuleStore:
    if request.param == "memory":
        return InMemoryRuleStore(max_rules=5)
    return PostgresRuleStore(request.getfixturevalue("pg_pool"), max_rules=5)


@pytest.fixture(params=["memory", "postgres"])
def judgement_cache(request: pytest.FixtureRequest) -> JudgementCache:
    if request.param == "memory":
        return InMemoryJudgementCache(max_per_role=3)
    return PostgresJudgementCache(request.getfixturevalue("pg_pool"), max_per_role=3)


@pytest.fixture(params=["memory", "postgres"])
def tool_catalog(request: pytest.FixtureRequest) -> ToolCatalog:
    if request.param == "memory":
        return InMemoryToolCatalog(CATALOG_HOSTS, max_tools=3)
    return PostgresToolCatalog(request.getfixturevalue("pg_pool"), CATALOG_HOSTS, max_tools=3)


@pytest.fixture(params=["memory", "postgres"])
def tool_secrets(request: pytest.FixtureRequest) -> ToolSecrets:
    if request.param == "memory":
        return InMemoryToolSecrets(max_secrets=3)
    pool = request.getfixturevalue("pg_pool")
    return PostgresToolSecrets(pool, keyring=Keyring.generate(), max_secrets=3)
