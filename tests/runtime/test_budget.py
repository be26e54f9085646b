"""Budgets (SPEC OPS-6; runtime/budget.py) against the real server with a paid brain — a local
OpenAI-compatible server standing in for the provider: once the tenant has spent its budget the
provider is not called again; the embedded rules brain answers when it is the fallback, else
the agent says calmly that it cannot answer now, in the person's language."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.budget import BUDGET_SPENT
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.plugin_factory import build_brain
from runtime.server import RunningServer, running_server
from tests.plugins.openai_server import API_KEY, OpenAIServer, running_openai_server
from tests.runtime.conftest import fake_plugins

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
            second = await answer(client, "What do you sell?")
            third = await answer(client, "你们几点开门？")
        budget = (await http.get("/api/usage/budget")).json()
    memory_work = [r for r in provider.requests if "response_format" in (r.json or {})]
    return {"first": first, "second": second, "third": third, "calls_then": calls_then,
            "calls": len(server_requests(provider)), "budget": budget,
            "memory_calls": len(memory_work)}  # fmt: skip


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
    # The thread memory's background work stops too: only the first turn's may have run.
    assert got["memory_calls"] <= 1


async def test_a_spent_budget_falls_back_to_the_embedded_brain(
    provider: OpenAIServer, tmp_path: Path
) -> None:
    settings = paid(provider, tmp_path, "rules")
    async with running_server(settings, plugins=fake_plugins(brain=build_brain(settings))) as s:
        got = await converse(s, provider)
    assert got["calls"] == got["calls_then"] == 1
    assert got["second"] and got["second"] not in BUDGET_SPENT.values()  # the rules brain's


async def test_an_embedded_brain_is_never_stopped(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory", brain="rules")
    async with running_server(settings, plugins=fake_plugins()) as server:
        assert server.services.budget_guard is None
