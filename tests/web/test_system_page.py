"""The system page (web/system.html, system.js) in real Chromium: it lists the models the
server runs as GET /api/system says, charts a finished turn's latency from the same answer,
refuses without a token, and fits a phone's width."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx

from tests.web.conftest import (
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    start_talking,
    wait_js,
)

ROWS = """[...document.querySelectorAll('#models tbody tr')].map((r) => ({
  stage: r.dataset.stage, plugin: r.dataset.plugin,
  cells: [...r.cells].map((c) => c.textContent),
}))"""


async def test_the_system_page_lists_the_running_models_and_charts_a_turn(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        talk = await open_page(browser, server, webrtc=False)
        await start_talking(talk)
        await say(talk, "hello")
        await last_answer(talk, "")
        await wait_js(talk, "document.querySelector('.msg.assistant .timeline')")
        page = await open_page(browser, server, "/system.html")
        await wait_js(page, "document.querySelectorAll('#models tbody tr').length === 5")
        rows = await page.evaluate(ROWS)
        await wait_js(page, "document.querySelector('.stage-chart[data-stage=first_audio] .point')")
        point = await page.evaluate(
            "(() => { const p = [...document.querySelectorAll("
            "'.stage-chart[data-stage=first_audio] .point')].at(-1);"
            " return {p50: Number(p.dataset.p50Ms), p95: Number(p.dataset.p95Ms),"
            " count: Number(p.dataset.count)}; })()"
        )
        facts = await page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#process dd')]"
            ".map((d) => [d.dataset.fact, d.textContent]))"
        )
        nav = await page.evaluate(
            "[...document.querySelectorAll('header nav a')].map(a => a.textContent)"
        )
        # Usage: the turn's row, and the owner (an admin) sees the budget line.
        await wait_js(page, "document.querySelectorAll('#usage tbody tr').length === 1")
        usage_row = await page.locator("#usage tbody tr").inner_text()
        budget_line = await page.text_content("#usage-budget")
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            system = (
                await http.get("/api/system", headers={"Authorization": f"Bearer {server.token}"})
            ).json()
    assert [(r["stage"], r["plugin"]) for r in rows] == [
        (m["stage"], m["plugin"]) for m in system["models"]
    ]
    assert [r["plugin"] for r in rows] == [
        "EnergyVAD", "SilenceEndpointer", "FakeASR", "LocalBrain", "FakeTTS",
    ]  # fmt: skip
    brain = next(r for r in rows if r["stage"] == "brain")
    assert brain["cells"][1] == "rules" and brain["cells"][5] == "offline, in this process"
    [minute] = system["latency"]["minutes"]
    first = minute["stages"]["first_audio"]
    assert point == {"p50": first["p50_ms"], "p95": first["p95_ms"], "count": first["count"]}
    assert facts["live sessions"] == "1"
    assert facts["database"].startswith("process memory")
    assert facts["version"] == system["version"]
    assert "System" in nav
    assert "local-user" in usage_row and "$0.00" in usage_row  # the embedded stack costs 0
    assert re.search(r"\d+\.\d s\s+\$0\.00", usage_row)  # with the CPU time it used
    assert "Budget: none" in (budget_line or "") and "nothing here is paid" in (budget_line or "")


async def test_without_a_token_the_api_answers_401_and_the_page_asks_to_sign_in(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await (await browser.new_context()).new_page()
        await page.goto(f"{server.http_url}/system.html")
        status = await page.evaluate("fetch('/api/system').then((r) => r.status)")
        await wait_js(page, "document.querySelector('header .who a')?.textContent === 'Sign in'")
        rows = await page.evaluate("document.querySelectorAll('#models tbody tr').length")
    assert status == 401
    assert rows == 0


async def test_the_system_page_fits_a_phone(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        context = await browser.new_context(viewport={"width": 390, "height": 844})
        page: Any = await context.new_page()
        await page.goto(f"{server.http_url}/system.html#token={server.token}")
        await page.wait_for_selector("body[data-ready=true]")
        widths = await page.evaluate(
            "({page: document.documentElement.scrollWidth, view: window.innerWidth})"
        )
    assert widths["page"] <= widths["view"]  # the models table scrolls inside its panel


async def test_failed_turns_are_shown_per_minute_and_stage(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/system.html")
        empty = await page.evaluate(
            "!document.getElementById('failures-empty').classList.contains('hidden')"
            " && document.getElementById('failures').classList.contains('hidden')"
        )
        # Two failed turns this minute, as the session's hook counts them (the path from a
        # failed turn to /api/system is tests/runtime/test_metrics.py's).
        window = server.services.telemetry.latency_window
        window.failed("brain", time.time())
        window.failed("tts", time.time())
        await page.click("#refresh")
        await wait_js(page, "document.querySelectorAll('#failures tbody tr').length === 1")
        row = await page.evaluate(
            "(() => { const r = document.querySelector('#failures tbody tr');"
            " return {count: r.dataset.failures, cells: [...r.cells].map(c => c.textContent)}; })()"
        )
    assert empty
    assert row["count"] == "2"
    assert row["cells"][1:] == ["2", "brain 1, tts 1"]
