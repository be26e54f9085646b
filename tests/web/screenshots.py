"""Screenshots of every page, drawn by Debian's Chromium against a real server with some
content (a conversation, a view-only record, a memory, two documents, two tool rules), signed
in as the local owner (the header says so), at laptop and phone width;
at phone width nothing may stick out sideways.

    .venv/bin/python -m tests.web.screenshots            # writes docs/screenshots/*.png

``tests/web/test_screenshots.py`` runs the same capture into a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.web.conftest import (
    BASE_ARGS,
    CHROMIUM,
    last_answer,
    say,
    silence_file,
    start_talking,
    text_plugins,
    wait_js,
)

LAPTOP = {"width": 1000, "height": 680}
PHONE = {"width": 390, "height": 844}
SHOP_TEXT = (
    "Returns are accepted within 7 days of delivery.\n"
    "Items must be unused, in their original packaging, with the order number.\n"
    "Customer service hours: weekdays 09:00-18:00.\n"
)
LONG_FILENAME = "customer_service_returns_and_exchanges_handbook_2026.md"
HANDBOOK_TEXT = (
    "Exchanges for another size or colour are free within 30 days.\n"
    "Refunds go back to the original payment method within 5 working days.\n"
)
# Elements reaching past the right edge, or whose content spills out of their own box.
OVERFLOW_JS = """() => {
    const width = document.documentElement.clientWidth;
    const spills = (n) => !['INPUT', 'TEXTAREA', 'SELECT'].includes(n.tagName)
        && getComputedStyle(n).overflowX === 'visible' && n.scrollWidth > n.clientWidth + 1;
    const wide = [...document.querySelectorAll('body *')].filter(n => {
        const box = n.getBoundingClientRect();
        return box.width > 0 && (box.right > width + 0.5 || spills(n));
    });
    return wide.slice(0, 5).map(n => `${n.tagName.toLowerCase()}${n.id ? '#' + n.id : ''}`
        + ` (${Math.round(n.scrollWidth)} px of content in ${Math.round(n.clientWidth)} px)`);
}"""


async def _call(page: Any, method: str, path: str, body: Any = None) -> int:
    status: int = await page.evaluate(
        """async ([method, path, body]) => {
            const headers = {Authorization: 'Bearer ' + localStorage.getItem('openrealtime.token'),
                             'Content-Type': 'application/json'};
            const r = await fetch(path, {method, headers,
                                         body: body ? JSON.stringify(body) : undefined});
            return r.status;
        }""",
        [method, path, body],
    )
    assert status < 300, f"{method} {path} answered {status}"
    return status


async def _seed(page: Any) -> str:
    """A short conversation on the talk page, a view-only record, a memory, two documents and
    two tool rules."""
    await start_talking(page)
    await say(page, "hello")
    await last_answer(page, "Hello")
    await say(page, "what did I just say")
    await last_answer(page, "You said")
    record_id = str(await page.evaluate("window.openrealtime.record.id"))
    await wait_js(
        page, f"window.openrealtime.saver.status({record_id!r})?.state === 'saved'", 10_000
    )
    await _call(
        page, "POST", "/api/conversations",
        {"id": "imported-1", "idempotency_key": "seed-1", "base_version": 0, "start_index": 0,
         "title": "An imported conversation (no runtime ids)",
         "messages": [{"role": "user", "text": "Hi from an older version"}]},
    )  # fmt: skip
    roles = await page.evaluate("window.openrealtime.session.role.id")
    await _call(page, "POST", "/api/memory", {"role_id": roles, "kind": "preference",
                                             "content": "I like short answers"})  # fmt: skip
    await _call(page, "POST", "/api/documents", {"name": "Shop returns policy v1",
                                                "text": SHOP_TEXT, "role_id": roles})  # fmt: skip
    # A long name without a break: at phone width it must wrap, not widen the page.
    imported = {"filename": LONG_FILENAME, "content": HANDBOOK_TEXT, "role_id": roles}
    await _call(page, "POST", "/api/documents/import", imported)
    rules = f"/api/roles/{roles}/rules"
    await _call(page, "POST", rules, {"text": "Order status lookups are always fine."})
    await _call(page, "POST", rules, {"text": "Never cancel an order without asking the person."})
    return record_id


async def capture(
    server: RunningServer, out: Path, wav: Path, problems: list[str] | None = None
) -> list[Path]:
    """Draw every page into ``out`` (an existing folder); returns the files written. Script
    errors and error banners seen on the way are appended to ``problems``."""
    problems = [] if problems is None else problems
    from playwright.async_api import async_playwright

    shots: list[Path] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[*BASE_ARGS, f"--use-file-for-fake-audio-capture={wav}"],
        )
        try:
            context = await browser.new_context(viewport=LAPTOP)
            page = await context.new_page()
            page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
            await page.goto(f"{server.http_url}/#token={server.token}")
            await page.wait_for_selector("body[data-ready=true]")
            record_id = await _seed(page)

            async def check(name: str) -> None:
                for banner in await page.locator(".banner.bad:visible").all_text_contents():
                    problems.append(f"{name}: {banner}")
                if page.viewport_size == PHONE:  # nothing wider than the phone's screen
                    for wide in await page.evaluate(OVERFLOW_JS):
                        problems.append(f"{name}: {wide} (wider than the phone)")

            async def shot(name: str) -> None:
                await check(name)
                path = out / f"{name}.png"
                await page.screenshot(path=str(path), full_page=name.startswith("knowledge"))
                shots.append(path)

            async def visit(path: str, *, search: bool = False) -> None:
                await page.goto(f"{server.http_url}{path}")
                await page.wait_for_selector("body[data-ready=true]")
                if search:
                    await page.fill("#query", "how many days for returns")
                    await page.click("#search-form button")
                    await page.wait_for_selector("#hits li")
                await page.evaluate("window.scrollTo(0, 0)")

            await shot("talk")
            await page.set_viewport_size(PHONE)
            await shot("talk-phone")
            await page.click("#start")  # end the session before leaving
            await page.set_viewport_size(LAPTOP)
            for name, path in [
                ("history", "/history.html"),
                ("history-detail", f"/history.html?id={record_id}"),
                ("history-view-only", "/history.html?id=imported-1"),
                ("memory", "/memory.html"),
                ("knowledge", "/knowledge.html"),
                ("roles", "/roles.html"),
                ("tools", "/tools.html"),
                ("system", "/system.html"),
                ("signin", "/signin.html"),
            ]:
                await visit(path, search=name == "knowledge")
                await shot(name)
            await page.set_viewport_size(PHONE)  # every page again; some are only checked
            for name, path, draw in [
                ("history-phone", "/history.html", True),
                ("history-detail-phone", f"/history.html?id={record_id}", False),
                ("history-view-only-phone", "/history.html?id=imported-1", False),
                ("memory-phone", "/memory.html", True),
                ("knowledge-phone", "/knowledge.html", True),
                ("roles-phone", "/roles.html", True),
                ("tools-phone", "/tools.html", False),
                ("system-phone", "/system.html", True),
                ("signin-phone", "/signin.html", False),
            ]:
                await visit(path, search=name == "knowledge-phone")
                await (shot(name) if draw else check(name))
        finally:
            await browser.close()
    return shots


async def _main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(port=0, data_dir=Path(folder) / "data", storage="memory")
        async with running_server(settings, plugins=text_plugins(10.0)) as server:
            for path in await capture(server, out, silence_file(Path(folder))):
                print(path)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    folder = parser.parse_args().out
    folder.mkdir(parents=True, exist_ok=True)
    asyncio.run(_main(folder))
