"""The pages hosted apart from the runtime (SPEC WEB-4): real nginx serves web/ with
deploy/nginx/pages.conf on one port, the runtime listens on another, and Chromium talks, lists
its history and keeps a document from the pages' origin — which the runtime's
OPENREALTIME_CORS_ORIGINS lets in. The same pages from an origin it does not list get nothing:
their API calls fail CORS and their WebSocket is refused."""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from typing import Any

from runtime.config import Settings
from runtime.server import running_server
from tests.fleet import NGINX, free_port, needs_nginx, nginx_main
from tests.web.conftest import Launch, last_answer, say, start_talking, text_plugins, wait_js

ROOT = Path(__file__).parents[2]
PAGES_CONF = ROOT / "deploy" / "nginx" / "pages.conf"

pytestmark = needs_nginx


def pages_config(listen: int, api_base: str, prefix: Path) -> str:
    """A whole nginx.conf: the shipped pages config, its marked lines pointed here."""
    body = PAGES_CONF.read_text()
    body, n1 = re.subn(r"listen [^;]*;  # listen", f"listen 127.0.0.1:{listen};", body)
    body, n2 = re.subn(r"root [^;]*;  # root", f"root {ROOT / 'web'};", body)
    body, n3 = re.subn(r'apiBase: "[^"]*"', f'apiBase: "{api_base}"', body)
    assert (n1, n2, n3) == (1, 1, 1), "deploy/nginx/pages.conf lost a marked line"
    return nginx_main(body, prefix, name=str(listen), connections=64)


async def serve_pages(port: int, api_base: str, prefix: Path) -> subprocess.Popen[bytes]:
    """nginx serving the pages on ``port``, telling them the runtime is at ``api_base``."""
    (prefix / "temp").mkdir(parents=True, exist_ok=True)
    conf = prefix / f"pages-{port}.conf"
    conf.write_text(pages_config(port, api_base, prefix))
    process = await asyncio.to_thread(
        subprocess.Popen,
        [str(NGINX), "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
        stdin=subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(10):
            while True:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    await writer.wait_closed()
                    return process
                except OSError:
                    if process.poll() is not None:
                        log = prefix / f"error-{port}.log"  # nginx_main's name
                        raise RuntimeError(f"nginx exited: {log.read_text()}") from None
                    await asyncio.sleep(0.05)
    except BaseException:
        process.kill()
        raise


async def open_at(browser: Any, site: str, path: str, token: str, *, ready: bool = True) -> Any:
    page = await (await browser.new_context(viewport={"width": 1100, "height": 800})).new_page()
    page.on("pageerror", lambda error: print("pageerror:", error))
    await page.goto(f"{site}{path}#token={token}")
    if ready:
        await page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    return page


async def test_the_pages_from_another_origin_talk_list_history_and_keep_documents(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    pages_port = free_port()
    pages_origin = f"http://127.0.0.1:{pages_port}"
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300,
        webrtc_host_addresses="127.0.0.1", cors_origins=pages_origin,
    )  # fmt: skip
    async with running_server(settings, plugins=text_plugins(10.0)) as server:
        prefix = tmp_path / "nginx"
        allowed = await serve_pages(pages_port, server.http_url, prefix)
        refused_site = f"http://127.0.0.1:{free_port()}"
        refused = await serve_pages(int(refused_site.rsplit(":", 1)[1]), server.http_url, prefix)
        try:
            browser = await launch(silence_wav)
            page = await open_at(browser, pages_origin, "/index.html", server.token)
            session_id = await start_talking(page)
            await say(page, "hello there")
            answer = await last_answer(page, "Hello")
            record_id = await page.evaluate("window.openrealtime.record.id")
            await wait_js(
                page, f"window.openrealtime.saver.status({record_id!r})?.state === 'saved'"
            )
            credential = await page.evaluate("window.openrealtime.conn.token")
            await page.click("#start")  # End

            history = await open_at(browser, pages_origin, "/history.html", server.token)
            listed = await history.locator("#conversations li").all_text_contents()

            knowledge = await open_at(browser, pages_origin, "/knowledge.html", server.token)
            await knowledge.fill("#doc-name", "Opening hours")
            await knowledge.fill("#doc-text", "The shop opens at nine and closes at six.")
            await knowledge.click("#create-form button[type=submit]")
            await knowledge.wait_for_selector("#documents li", timeout=15_000)
            documents = await knowledge.locator("#documents li").all_text_contents()

            # The same pages from an origin the runtime does not list.
            outsider = await open_at(browser, refused_site, "/history.html", server.token,
                                     ready=False)  # fmt: skip
            await outsider.wait_for_selector("#notice:not(.hidden)", timeout=15_000)
            refusal = await outsider.text_content("#notice")
            ws = await outsider.evaluate(
                """url => new Promise(resolve => {
                    const ws = new WebSocket(url, ['openrealtime.v1']);
                    ws.onopen = () => { ws.close(); resolve('open'); };
                    ws.onerror = () => resolve('refused');
                })""",
                server.ws_url,
            )
            started = await outsider.evaluate("document.body.dataset.ready || null")
        finally:
            for process in (allowed, refused):
                process.terminate()
                await asyncio.to_thread(process.wait, 10)
    assert session_id.startswith("vs_") and "Hello" in answer
    assert credential.startswith("ek_")  # the page opened its session with a client secret
    assert any("hello there" in item for item in listed)
    assert any("Opening hours" in item for item in documents)
    assert "failed" in (refusal or "").lower() and started is None
    assert ws == "refused"
