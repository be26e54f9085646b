"""One contract suite for the resume-token stores (runtime/realtime/resume.py rules 1–5), run
against the in-memory and the PostgreSQL store."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from runtime.accounts import Principal
from runtime.realtime.resume import (
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
    """(The tests that ``watch`` close the store themselves.)"""
    if request.param == "memory":
        return InMemoryResumeTokenStore()
    pool: Any = request.getfixturevalue("pg_pool")
    return PostgresResumeTokenStore(pool, url=request.getfixturevalue("postgres_url"))


async def test_a_token_resumes_once_and_is_replaced(store: ResumeTokenStore) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    assert len(token) >= 43  # 256 bits, URL-safe base64
    redeemed = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    assert redeemed is not None
    record, fresh = redeemed
    assert record == RECORD and fresh != token and len(fresh) >= 43
    following = await store.redeem(ALICE, "vs_1", fresh, ttl_s=TTL)
    assert following is not None and following[1] not in (token, fresh)
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is None  # rotated out


async def test_a_lost_answer_does_not_lock_the_client_out(store: ResumeTokenStore) -> None:
    """The server rotated but ``session.resumed`` never arrived: the client still has only
    the old token. Redeeming it again gives the same new token, until that one is used."""
    token = await store.issue(RECORD, ttl_s=TTL)
    first = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    retried = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    assert first is not None and retried is not None
    assert retried[1] == first[1]
    assert await store.redeem(BOB, "vs_1", token, ttl_s=TTL) is None  # still bound to Alice
    used = await store.redeem(ALICE, "vs_1", first[1], ttl_s=TTL)
    assert used is not None
    assert await store.redeem(ALICE, "vs_1", token, ttl_s=TTL) is None
    # The grace covers one step back only, and again only until the newest token is used.
    assert await store.redeem(ALICE, "vs_1", first[1], ttl_s=TTL) == used
    assert await store.redeem(ALICE, "vs_1", used[1], ttl_s=TTL) is not None
    assert await store.redeem(ALICE, "vs_1", first[1], ttl_s=TTL) is None


async def test_rotated_tokens_differ_per_session(store: ResumeTokenStore) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    other = VoiceSessionRecord("vs_2", "t1", "alice", "th_2", "role_1")
    await store.issue(other, ttl_s=TTL)
    first = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    assert first is not None
    # Knowing one session's rotation tells nothing about another's.
    assert await store.redeem(ALICE, "vs_2", first[1], ttl_s=TTL) is None


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


async def test_concurrent_redeems_of_one_token_get_one_new_token(
    store: ResumeTokenStore,
) -> None:
    token = await store.issue(RECORD, ttl_s=TTL)
    results = await asyncio.gather(
        *(store.redeem(ALICE, "vs_1", token, ttl_s=TTL) for _ in range(8))
    )
    assert all(r is not None for r in results)
    assert len({r[1] for r in results if r is not None}) == 1


async def test_options_round_trip_and_claim_moves_the_epoch_once(
    store: ResumeTokenStore,
) -> None:
    options = {"output_sample_rate": 16000, "turn_detection": {"type": "none"}}
    record = VoiceSessionRecord("vs_1", "t1", "alice", "th_1", "role_1", options=options)
    token = await store.issue(record, ttl_s=TTL)
    seen: list[tuple[str, int]] = []
    await store.watch(lambda session_id, epoch: seen.append((session_id, epoch)))
    try:
        await _claim_once(store, record, token, options, seen)
    finally:
        await store.close()


async def _claim_once(
    store: ResumeTokenStore,
    record: VoiceSessionRecord,
    token: str,
    options: dict[str, Any],
    seen: list[tuple[str, int]],
) -> None:
    redeemed = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
    assert redeemed is not None and redeemed[0] == record and redeemed[0].epoch == 0
    claims = await asyncio.gather(store.claim(redeemed[0]), store.claim(redeemed[0]))
    winners = [c for c in claims if c is not None]
    assert len(winners) == 1 and winners[0].epoch == 1 and winners[0].options == options
    again = await store.redeem(ALICE, "vs_1", redeemed[1], ttl_s=TTL)
    assert again is not None and again[0].epoch == 1
    assert await store.claim(redeemed[0]) is None  # epoch 0 is gone
    for _ in range(500):  # PostgreSQL: the NOTIFY arrives on the listening connection
        if ("vs_1", 1) in seen:
            break
        await asyncio.sleep(0.01)
    assert seen == [("vs_1", 1)]


async def test_a_lost_listening_connection_rechecks_what_it_missed(
    pg_pool: Any, postgres_url: str
) -> None:
    """PostgreSQL only: a claim made while the LISTEN connection was down is not lost — after
    reconnecting, the watcher re-reads the epochs and reports it."""
    store = PostgresResumeTokenStore(pg_pool, url=postgres_url)
    store.watch_retry_s = 0.3
    # Its own name: tests on the other worker listen on the same database.
    store.listen_application_name = f"fence-test-{os.getpid()}"
    seen: list[tuple[str, int]] = []
    await store.watch(lambda session_id, epoch: seen.append((session_id, epoch)))
    try:
        token = await store.issue(RECORD, ttl_s=TTL)
        redeemed = await store.redeem(ALICE, "vs_1", token, ttl_s=TTL)
        assert redeemed is not None
        killed = await pg_pool.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name = $1""",
            store.listen_application_name,
        )
        assert killed == 1
        assert await store.claim(redeemed[0]) is not None  # nobody is listening right now
        for _ in range(500):
            if ("vs_1", 1) in seen:
                break
            await asyncio.sleep(0.01)
        assert ("vs_1", 1) in seen
    finally:
        await store.close()
