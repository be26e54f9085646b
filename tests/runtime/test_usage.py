"""Usage and cost (SPEC OPS-6; runtime/usage.py, GET /api/usage) against the real server, in
memory and in PostgreSQL: a scripted conversation's figures equal the sum of what its responses
and transcriptions reported, priced from the table; reads are scoped to the caller."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import date
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from plugins.fakes import FakeBrain
from runtime.accounts import Principal
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.metered import timed
from runtime.server import RunningServer, running_server
from runtime.usage import (
    Counts,
    CpuShare,
    InMemoryUsageLedger,
    PostgresUsageLedger,
    UsageKey,
    UsageLedger,
    UsageMeter,
    prices_for,
)
from tests.postgres import pg_pool, postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

__all__ = ["pg_pool", "postgres_url"]

PRICES = {
    "brain:llm:embedded": {"input_per_mtok": 3000.0, "output_per_mtok": 15000.0},
    "asr:whisper:base": {"per_minute": 0.5},
    "tts:auto:embedded": {"per_mchar": 1000.0},
}  # what a paid stack might cost, so the arithmetic shows


@pytest.fixture(params=["memory", "postgres"])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    common: dict[str, Any] = {
        "port": 0, "data_dir": tmp_path / "data", "silence_ms": 300,
        "prices": json.dumps(PRICES),
    }  # fmt: skip
    if request.param == "memory":
        return Settings(storage="memory", **common)
    url = request.getfixturevalue("postgres_url")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        await truncate_all(pool)
    finally:
        await pool.close()
    return Settings(storage="postgres", database_url=url, **common)


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    brain = FakeBrain(
        ["Sure, here it is.", "Twelve o'clock.", "You are welcome."], token_delay=0.005
    )
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as running:
        yield running


async def test_usage_equals_what_the_conversations_responses_reported(
    server: RunningServer,
) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        for text in ("Hello there", "What time is it?"):
            done = asyncio.ensure_future(client.wait_type("response.done", timeout=20))
            await client.send_text(text)
            await done
        done = asyncio.ensure_future(client.wait_type("response.done", timeout=20))
        await stream(client, tone_frame(), 600)  # and one spoken turn
        while not done.done():
            await stream(client, SILENCE, 100)
        await done
        await client.end_session()
        await client.wait_closed()
    responses = [e["response"] for e in client.events("response.done")]
    heard = client.events("conversation.item.input_audio_transcription.completed")
    spoken = client.events("response.output_audio_transcript.done")
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        async with asyncio.timeout(10):  # the session's last write lands after its end
            while (usage := (await http.get("/api/usage")).json())["totals"]["responses"] < 3:  # noqa: ASYNC110 (polls the API)
                await asyncio.sleep(0.05)
    totals = usage["totals"]
    assert totals["responses"] == len(responses) == 3
    assert totals["input_tokens"] == sum(r["usage"]["input_tokens"] for r in responses)
    assert totals["output_tokens"] == sum(r["usage"]["output_tokens"] for r in responses)
    assert all(
        r["usage"]["input_token_details"]["text_tokens"] == r["usage"]["input_tokens"]
        for r in responses
    )
    assert totals["asr_ms"] == sum(round(e["usage"]["seconds"] * 1000) for e in heard)
    assert totals["tts_chars"] == sum(len(e["transcript"]) for e in spoken) > 0
    assert totals["audio_in_ms"] >= 600 and totals["audio_out_ms"] > 0
    # The scripted models' time (the fake TTS speaks in real time) and the process's CPU time
    # shared out: both kept with the rest, not priced.
    assert totals["model_ms"] > 0 and totals["cpu_ms"] > 0
    cost = (
        totals["input_tokens"] * 3000 + totals["output_tokens"] * 15000
        + totals["asr_ms"] / 60_000 * 0.5 * 1e6 + totals["tts_chars"] * 1000
    )  # fmt: skip
    assert abs(totals["cost_micro_usd"] - cost) <= 1
    (row,) = usage["rows"]
    assert row["day"] == date.today().isoformat() and row["user_id"] == "local-user"
    assert usage["prices"]["stack"]["brain"] == "llm:embedded"


async def test_members_see_their_own_usage_and_admins_their_tenants(
    server: RunningServer,
) -> None:
    services = server.services
    owner = await services.accounts.authenticate(server.token)
    assert owner is not None
    await services.accounts.add_token(Principal(owner.tenant, "max", role="member"), "max-token")
    today = date.today()
    for user, tokens in ((owner.user, 10), ("max", 7)):
        await services.usage.add(UsageKey(owner.tenant, today, "role_1", user),
                                 Counts(responses=1, input_tokens=tokens))  # fmt: skip
    await services.usage.add(UsageKey("elsewhere", today, "role_1", "max"), Counts(responses=5))
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        mine = await http.get("/api/usage", headers={"Authorization": "Bearer max-token"})
        nosy = await http.get(
            "/api/usage?scope=tenant", headers={"Authorization": "Bearer max-token"}
        )
        tenant = await http.get(
            "/api/usage?scope=tenant", headers={"Authorization": f"Bearer {server.token}"}
        )
    assert [r["input_tokens"] for r in mine.json()["rows"]] == [7]
    assert nosy.status_code == 403
    assert tenant.json()["totals"]["input_tokens"] == 17
    assert tenant.json()["totals"]["responses"] == 2  # never another tenant's


@pytest.fixture(params=["memory", "postgres"])
def ledger(request: pytest.FixtureRequest) -> UsageLedger:
    if request.param == "memory":
        return InMemoryUsageLedger()
    return PostgresUsageLedger(request.getfixturevalue("pg_pool"))


async def test_the_ledger_adds_up_per_day_role_and_user(ledger: UsageLedger) -> None:
    day, other = date(2026, 12, 5), date(2026, 12, 6)
    await ledger.add(UsageKey("t1", day, "r1", "ann"), Counts(responses=1, audio_in_ms=500))
    await ledger.add(UsageKey("t1", day, "r1", "ann"), Counts(responses=2, tool_calls=1))
    await ledger.add(UsageKey("t1", other, "r1", "ann"), Counts(responses=1))
    await ledger.add(UsageKey("t1", day, "r2", "bo"), Counts(tts_chars=40))
    rows = await ledger.rows("t1", "ann", day, day)
    assert [(r.key.role_id, r.counts.responses, r.counts.audio_in_ms, r.counts.tool_calls)
            for r in rows] == [("r1", 3, 500, 1)]  # fmt: skip
    assert len(await ledger.rows("t1", None, day, other)) == 3
    assert await ledger.rows("t2", None, day, other) == []


def test_prices_apply_to_the_running_stack_only() -> None:
    prices = prices_for(json.dumps(PRICES), {"brain": "openai:gpt-4o-mini", "asr": "whisper:base"})
    assert prices.input_per_mtok == 0 and prices.asr_per_minute == 0.5
    assert prices.cost_micro_usd(Counts(asr_ms=60_000, input_tokens=10**6)) == 500_000
    with pytest.raises(ValueError, match="OPENREALTIME_PRICES"):
        Settings(prices='{"brain:x": 3}')


# ------------------------------------------------------------------ model and CPU time


def meter(cpu: CpuShare) -> UsageMeter:
    return UsageMeter(
        InMemoryUsageLedger(), tenant="t", user="u", role_id="r", session_id="vs",
        output_rate=24_000, cpu=cpu,
    )  # fmt: skip


def test_the_process_cpu_is_shared_by_model_time_else_evenly() -> None:
    now = [0.0]
    share = CpuShare(clock=lambda: now[0])
    busy, quiet = meter(share), meter(share)
    busy.used_model(300.0)
    quiet.used_model(100.0)
    now[0] = 2.0  # two CPU seconds while they used their models 3:1
    share.share()
    now[0] = 3.0  # one more while neither did: the audio path, shared evenly
    share.share()
    assert (busy.total.cpu_ms, quiet.total.cpu_ms) == (1_500 + 500, 500 + 500)
    assert (busy.total.model_ms, quiet.total.model_ms) == (300, 100)
    share.leave(quiet)
    now[0] = 4.0
    share.leave(busy)  # its last share first
    assert (busy.total.cpu_ms, quiet.total.cpu_ms) == (3_000, 1_000)
    now[0] = 9.0  # nobody live: no one's
    late = meter(share)
    now[0] = 9.5
    share.share()
    assert late.total.cpu_ms == 500


async def test_model_time_is_the_wait_for_each_piece_not_what_the_consumer_does() -> None:
    now = [0.0]
    waits: list[float] = []

    async def model() -> AsyncIterator[str]:
        for piece in ("a", "b", "c"):
            now[0] += 0.040  # the model works 40 ms for each piece
            yield piece

    got = []
    async for piece in timed(model(), waits.append, clock=lambda: now[0]):
        got.append(piece)
        now[0] += 1.0  # the session plays it for a second
    assert got == ["a", "b", "c"]
    assert [round(w) for w in waits] == [40, 40, 40, 0]  # the last: the end of the stream
