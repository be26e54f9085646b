"""One contract suite for the resume-token stores (runtime/resume.py rules 1–4), run against the
in-memory and the PostgreSQL store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.accounts import Principal
from runtime.resume import (
    InMemoryResumeTokenStore,
    PostgresResumeTokenStore,
    ResumeTokenStore,
    VoiceSessionRecord,
)
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]

ALICE = Principal("t1", "alice")
BOB = Principal("t1", "bob")
RECORD = VoiceSessionRecord("vs_1", "t1", "alice", "th_1", "role_1")
TTL = 60.0


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> ResumeTokenStore:
    if request.param == "memory":
        return InMemoryResumeTokenStore()
    pool: Any = request.getfixturevalue("pg_pool")
    return PostgresResumeTokenStore(pool)


async def test_a_token_resumes_once_and_is_replaced(store: ResumeTokenStore) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    assert len(token) >= 43  # 256 bits, URL-safe base64
    redeemed = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    assert redeemed is not None
    record, fresh = redeemed
    assert record == RECORD and fresh != token
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is None  # rotated out
    assert await store.redeem(ALICE, "vs_1", fresh, ttl_s=TTL) is not None


async def test_tokens_are_bound_to_user_and_session(store: ResumeTokenStore) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    await store.issue(VoiceSessionRecord("vs_2", "t1", "alice", "th_2", "role_1"), ttl_s=TTL)
    assert await store.redeem(BOB, "vs_1", token, ttl_s=TTL) is None
    assert await store.redeem(Principal("t2", "alice"), "vs_1", token, ttl_s=TTL) is None
    assert await store.redeem(ALICE, "vs_2", token, ttl_s=TTL) is None
    assert await store.redeem(ALICE, "vs_nope", token, ttl_s=TTL) is None
    assert await store.redeem(ALICE, "vs_1", "not-the-token", ttl_s=TTL) is None
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is not None  # still valid


async def test_tokens_expire_and_extend_pushes_the_expiry(store: ResumeTokenStore) -> None:
    token = await store.issue(RECORD, ttl_s=0.2)
    await asyncio.sleep(0.3)
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is None
    token = await store.issue(RECORD, ttl_s=0.2)
    await store.extend("vs_1", ttl_s=TTL)
    await asyncio.sleep(0.3)
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is not None


async def test_concurrent_redeems_of_one_token_succeed_at_most_once(
    store: ResumeTokenStore,
) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    results = await asyncio.gather(
        *(store.redeem(ALICE, "vs_1", token, ttl_s=TTL) for _ in range(8))
    )
    assert sum(r is not None for r in results) == 1
