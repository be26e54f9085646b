"""Budgets (SPEC OPS-6; runtime/budget.py) against the real server with a paid brain — a local
OpenAI-compatible server standing in for the provider: once the tenant has spent its budget the
provider is not called again; the embedded rules brain answers when it is the fallback, else
the agent says calmly that it cannot answer now, in the person's language."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from plugins.fakes import FakeASR
from runtime.budget import BUDGET_SPENT, BudgetedASR, BudgetGuard, unpriced_stages
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.plugin_factory import build_brain, build_plugins
from runtime.server import RunningServer, running_server
from runtime.usage import Budget, Counts, InMemoryUsageLedger, Prices, UsageKey
from tests.plugins.openai_server import API_KEY, OpenAIServer, running_openai_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

MODEL = "paid-model"


@pytest.fixture
async def provider() -> AsyncIterator[OpenAIServer]:
    async with running_openai_server() as running:
        yield running


def paid(provider: OpenAIServer, tmp_path: Path, fallback: str) -> Settings:
    return Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", brain="openai",
        brain_base_url=provider.base_url, brain_api_key=API_KEY, brain_model=MODEL,
        prices=json.dumps({f"brain:openai:{MODEL}": {"input_per_mtok": 10_000.0,
                                                      "output_per_mtok": 10_000.0}}),
        budget_fallback=fallback, budget_check_interval_s=0,
    )  # fmt: skip


async def answer(client: RealtimeClient, text: str) -> str:
    done = asyncio.ensure_future(client.wait_type("response.done", timeout=20))
    await client.send_text(text)
    return str((await done)["response"]["output_text"])


async def converse(server: RunningServer, provider: OpenAIServer) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        set_ = await http.put("/api/usage/budget",
                              json={"daily_micro_usd": 100, "monthly_micro_usd": None})  # fmt: skip
        assert set_.status_code == 200 and set_.json()["paid_brain"] is True
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            first = await answer(client, "Hello there, how are you?")
            calls_then = len([r for r in server_requests(provider)])
            async with asyncio.timeout(10):  # the first answer's cost is in the ledger
                while not (await http.get("/api/usage/budget")).json()["spent"]:  # noqa: ASYNC110 (polls the API)
                    await asyncio.sleep(0.02)
            spent_then = (await http.get("/api/usage/budget")).json()["today_micro_usd"]
            second = await answer(client, "What do you sell?")
            third = await answer(client, "你们几点开门？")
            thread = client.session["thread_id"]
        async with asyncio.timeout(10):  # the last answer's usage is in the ledger
            while (usage := (await http.get("/api/usage")).json())["totals"]["responses"] < 3:  # noqa: ASYNC110 (polls the API)
                await asyncio.sleep(0.02)
        budget = (await http.get("/api/usage/budget")).json()
        # A person's "refresh" of the thread's memory would use the paid model too.
        view = (await http.get(f"/api/threads/{thread}/memory")).json()
        refresh = await http.post(f"/api/threads/{thread}/memory", json={
            "expected": view["head"], "revision": view["revision"], "command": {"type": "refresh"},
        })  # fmt: skip
    memory_work = [r for r in provider.requests if "response_format" in (r.json or {})]
    return {"first": first, "second": second, "third": third, "calls_then": calls_then,
            "calls": len(server_requests(provider)), "budget": budget,
            "memory_calls": len(memory_work), "refresh": refresh, "spent_then": spent_then,
            "usage": usage["totals"]}  # fmt: skip


def server_requests(provider: OpenAIServer) -> list[Any]:
    """The provider's answers to the person (the thread's memory work asks it for JSON)."""
    return [
        r for r in provider.requests
        if r.path.endswith("/chat/completions") and "response_format" not in (r.json or {})
    ]  # fmt: skip


async def test_a_spent_budget_stops_the_paid_brain_and_the_agent_says_so(
    provider: OpenAIServer, tmp_path: Path
) -> None:
    settings = paid(provider, tmp_path, "none")
    async with running_server(settings, plugins=fake_plugins(brain=build_brain(settings))) as s:
        got = await converse(s, provider)
    assert got["first"] and got["calls_then"] == 1  # the provider answered the first turn
    assert got["calls"] == 1  # and was never called again
    assert got["second"] == BUDGET_SPENT["en"] and got["third"] == BUDGET_SPENT["zh"]
    assert got["budget"]["today_micro_usd"] >= 100 and got["budget"]["spent"] is True
    assert got["budget"]["today_micro_usd"] == got["spent_then"]  # the calm words cost nothing
    # The thread memory's background work stops too: only the first turn's may have run.
    assert got["memory_calls"] <= 1
    assert got["refresh"].status_code == 402 and got["refresh"].json()["code"] == "budget_spent"


async def test_a_spent_budget_falls_back_to_the_embedded_brain(
    provider: OpenAIServer, tmp_path: Path
) -> None:
    settings = paid(provider, tmp_path, "rules")
    async with running_server(settings, plugins=fake_plugins(brain=build_brain(settings))) as s:
        got = await converse(s, provider)
    assert got["calls"] == got["calls_then"] == 1
    assert got["second"] and got["second"] not in BUDGET_SPENT.values()  # the rules brain's
    # The fallback's answers are usage, not spend: the budget stays where the provider left it.
    assert got["budget"]["today_micro_usd"] == got["spent_then"]
    assert 0 < got["usage"]["unpriced_output_tokens"] < got["usage"]["output_tokens"]


# ------------------------------------------------------------------ paid ASR and TTS

ASR_MODEL, TTS_MODEL = "paid-whisper", "paid-voice"


def paid_speech(provider: OpenAIServer, tmp_path: Path, fallback: str) -> Settings:
    """The brain is embedded (free); hearing and speaking are a provider's, priced."""
    return Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", brain="rules", silence_ms=300,
        asr="openai", asr_base_url=provider.base_url, asr_api_key=API_KEY,
        asr_model_name=ASR_MODEL, tts="openai", tts_base_url=provider.base_url,
        tts_api_key=API_KEY, tts_model=TTS_MODEL,
        prices=json.dumps({f"asr:openai:{ASR_MODEL}": {"per_minute": 1_000.0},
                           f"tts:openai:{TTS_MODEL}": {"per_mchar": 1_000_000.0}}),
        budget_fallback=fallback, budget_check_interval_s=0,
    )  # fmt: skip


def provider_calls(provider: OpenAIServer) -> dict[str, int]:
    return {
        kind: len([r for r in provider.requests if r.path.endswith(kind)])
        for kind in ("/transcriptions", "/speech")
    }


async def spend_budget(http: httpx.AsyncClient) -> None:
    assert (
        await http.put(
            "/api/usage/budget", json={"daily_micro_usd": 100, "monthly_micro_usd": None}
        )
    ).status_code == 200
    async with asyncio.timeout(10):
        while not (await http.get("/api/usage/budget")).json()["spent"]:  # noqa: ASYNC110 (polls the API)
            await asyncio.sleep(0.02)


async def test_a_spent_budget_stops_a_paid_asr_and_tts_and_the_turn_says_why(
    provider: OpenAIServer, tmp_path: Path
) -> None:
    settings = paid_speech(provider, tmp_path, "none")
    built = build_plugins(settings)
    plugins = fake_plugins(asr=built.asr, tts=built.tts)
    async with running_server(settings, plugins=plugins) as server:
        auth = {"Authorization": f"Bearer {server.token}"}
        async with (
            httpx.AsyncClient(base_url=server.http_url, headers=auth) as http,
            RealtimeClient(server.ws_url, server.token) as client,
        ):
            await client.connect()
            heard = asyncio.ensure_future(client.wait_type("response.done", timeout=20))
            await stream(client, tone_frame(), 600)
            while not heard.done():
                await stream(client, SILENCE, 100)
            first = await heard
            budget = (await http.get("/api/usage/budget")).json()
            await spend_budget(http)
            then = provider_calls(provider)
            refused = asyncio.ensure_future(
                client.wait_for(lambda m: m.type == "error", timeout=20)
            )
            await stream(client, tone_frame(), 600)
            while not refused.done():
                await stream(client, SILENCE, 100)
            error = (await refused).event
    assert first["response"]["status"] == "completed"
    assert then["/transcriptions"] >= 1 and then["/speech"] >= 1  # a sentence each
    assert budget["paid"] == {"brain": False, "asr": True, "tts": True}
    assert error is not None and error["error"]["code"] == "budget_spent"
    assert provider_calls(provider) == then  # neither provider was called again


async def test_a_spent_budget_hands_a_paid_tts_to_the_embedded_one(
    provider: OpenAIServer, tmp_path: Path
) -> None:
    settings = paid_speech(provider, tmp_path, "rules")
    built = build_plugins(settings)
    async with running_server(settings, plugins=fake_plugins(tts=built.tts)) as server:
        assert server.services.budget_fallback_asr is not None  # Whisper, were ASR paid here
        auth = {"Authorization": f"Bearer {server.token}"}
        async with (
            httpx.AsyncClient(base_url=server.http_url, headers=auth) as http,
            RealtimeClient(server.ws_url, server.token) as client,
        ):
            await client.connect()
            await client.send_text("Hello there")
            await client.wait_type("response.done", timeout=20)
            await spend_budget(http)
            then = provider_calls(provider)
            before = len(client.audio())
            await client.send_text("Are you still there?")
            second = await client.wait_type("response.done", timeout=60)
            spoken = len(client.audio()) - before
    assert then["/speech"] >= 1 and provider_calls(provider)["/speech"] == then["/speech"]
    assert second["response"]["status"] == "completed" and spoken > 0  # the embedded voice


async def test_an_embedded_brain_is_never_stopped(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory", brain="rules")
    async with running_server(settings, plugins=fake_plugins()) as server:
        assert server.services.budget_guard is None


async def test_a_spent_budget_hands_a_paid_asr_to_the_fallback_and_never_calls_it() -> None:
    ledger, prices = InMemoryUsageLedger(), Prices(asr_per_minute=1.0)
    guard = BudgetGuard(ledger, prices, cache_s=0)
    paid, embedded = FakeASR(["from the provider"]), FakeASR(["from whisper"])
    asr = BudgetedASR(paid, guard=guard, tenant="acme", fallback=embedded)
    silence = np.zeros(1600, dtype=np.int16)
    before = await asr.transcribe(silence)
    await ledger.set_budget("acme", Budget(daily_micro_usd=1), datetime.now(UTC))
    await ledger.add(UsageKey("acme", datetime.now(UTC).date(), "r", "u"), Counts(asr_ms=60_000))
    after = await asr.transcribe(silence)
    assert (before.text, after.text) == ("from the provider", "from whisper")
    assert (paid.calls, embedded.calls) == (1, 1)


async def test_what_no_provider_did_is_unpriced() -> None:
    ledger, prices = InMemoryUsageLedger(), Prices(asr_per_minute=1.0, input_per_mtok=1.0)
    guard = BudgetGuard(ledger, prices, cache_s=60)
    paid = prices.paid
    session = unpriced_stages(guard, paid, "acme")
    own_agent = unpriced_stages(guard, paid, "acme", own_agent=True)
    assert session is not None and own_agent is not None
    assert not session("brain") and not session("asr") and own_agent("brain")
    await ledger.set_budget("acme", Budget(daily_micro_usd=1), datetime.now(UTC))
    await ledger.add(UsageKey("acme", datetime.now(UTC).date(), "r", "u"), Counts(asr_ms=60_000))
    assert await guard.spent("acme")
    assert session("brain") and session("asr") and not session("tts")  # the TTS is not paid
    assert unpriced_stages(None, paid, "acme") is None  # nothing paid: nothing to tell apart
    counts = Counts(input_tokens=1_000_000, unpriced_input_tokens=400_000, asr_ms=60_000)
    assert prices.cost_micro_usd(counts) == 600_000 + 1_000_000
