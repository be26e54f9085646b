"""Tools test fixtures: PostgreSQL from ``tests/postgres.py``; ``grant_store``, ``rule_store``
and ``judgement_cache`` — one backend each (in memory or PostgreSQL), so the contract suites
run against both."""

from __future__ import annotations

import pytest

from tests.postgres import pg_pool, postgres_url
from tools.grants import GrantStore, InMemoryGrantStore
from tools.judgements import InMemoryJudgementCache, JudgementCache
from tools.postgres_grants import PostgresGrantStore
from tools.postgres_rules import PostgresJudgementCache, PostgresRuleStore
from tools.rules import InMemoryRuleStore, RuleStore

__all__ = ["grant_store", "judgement_cache", "pg_pool", "postgres_url", "rule_store"]


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
