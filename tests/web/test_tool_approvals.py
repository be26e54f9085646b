"""The talk page's tool approvals in a real browser (``web/approvals.js``): a call the role may
not make yet shows Yes / Always / No beside the spoken question; a press answers it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pipeline.engine import Plugins
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import running_server
from tests.runtime.test_tool_gate_e2e import OrderBrain, ToolServer, cancel_tool
from tests.web.conftest import Launch, last_answer, open_page, say, start_talking, wait_js


async def test_always_on_the_page_answers_the_question_and_the_call_runs(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    recorder = ToolServer()
    http = await asyncio.start_server(recorder.handle, "127.0.0.1", 0)
    recorder.port = http.sockets[0].getsockname()[1]
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300,
                        webrtc=False, tool_hosts="127.0.0.1")  # fmt: skip
    plugins = Plugins(vad=EnergyVAD(), asr=FakeASR(["(no speech expected)"]), brain=OrderBrain(),
                      tts=FakeTTS(ms_per_char=10.0, chunk_ms=40.0))  # fmt: skip
    async with http, running_server(settings, plugins=plugins) as server:
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        role = await default_role(server.services.roles, principal.tenant)
        tool = cancel_tool(recorder.port)
        await server.services.tool_catalog.put(principal.tenant, role.id, tool)
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/", webrtc=False)
        await start_talking(page)
        await say(page, "cancel order A10086")
        await page.wait_for_selector(".approval button.approve-always", timeout=15_000)
        text = await page.text_content(".approval .approval-text")
        assert text == "May I use cancel_order (order_id: A10086)?"
        assert "May I cancel order A10086?" in await last_answer(page, "May I")
        assert recorder.requests == []
        await page.click(".approval button.approve-always")
        await wait_js(page, "document.querySelectorAll('.approval').length === 0")
        assert "cancelled" in await last_answer(page, "Result:")
        assert recorder.requests == ["POST /orders/A10086/cancel HTTP/1.1"]
        grants = await server.services.grants.list(principal.tenant, role.id)
        assert [(g.scope, g.granted_by.id) for g in grants] == [("lifetime", principal.user)]
