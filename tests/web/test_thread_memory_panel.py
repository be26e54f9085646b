"""The talk page's thread-memory panel in a real browser against the real server: it follows
the thread's memory live (a command from another tab), and its Forget, Edit (Remember under
the same key) and switches change it; a command on a stale view reloads and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.web.conftest import (
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    start_talking,
    wait_js,
)

# GET the thread's memory, then (with a command) POST it with the head and revision just read:
# what another tab or a script does. Runs in a signed-in page of the same account.
MEMORY_JS = """async ([thread, command]) => {
    const headers = {Authorization: 'Bearer ' + localStorage.getItem('openrealtime.token'),
                     'Content-Type': 'application/json'};
    const path = `/api/threads/${encodeURIComponent(thread)}/memory`;
    const view = await (await fetch(path, {headers, cache: 'no-store'})).json();
    if (!command) return view;
    const body = JSON.stringify({expected: view.head, revision: view.revision, command});
    const answer = await fetch(path, {method: 'POST', headers, body});
    return {status: answer.status, view: await answer.json()};
}"""


async def memory(tab: Any, thread: str, command: dict[str, Any] | None = None) -> Any:
    return await tab.evaluate(MEMORY_JS, [thread, command])


async def remember(tab: Any, thread: str, key: str, content: str, kind: str = "fact") -> Any:
    answer = await memory(
        tab, thread, {"type": "remember", "key": key, "content": content, "kind": kind}
    )
    assert answer["status"] == 200, answer
    return answer["view"]


def fact(view: dict[str, Any], key: str) -> dict[str, Any]:
    return next(f for f in view["entries"] if f["key"] == key)


async def panel_shown(page: Any) -> None:
    await wait_js(page, "document.querySelector('#thread-memory').dataset.revision !== ''")


async def test_the_panel_follows_memory_live_and_forgets_edits_and_switches(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        hint_before = await page.locator("#tm-hint").text_content()
        body_before = await page.locator("#tm-body").is_visible()
        await start_talking(page)
        thread = str(await page.evaluate("window.openrealtime.session.thread_id"))
        await panel_shown(page)
        loads: list[str] = []  # the page's own reads of the memory

        def on_request(request: Any) -> None:
            if "/memory" in request.url and request.method == "GET":
                loads.append(request.url)

        page.on("request", on_request)

        # Another tab remembers a fact: the live event brings it, no reload.
        other = await open_page(browser, server, "/history.html")
        await remember(other, thread, "colour", "The favourite colour is green", "preference")
        row = page.locator(".tm-fact[data-key=colour]")
        await row.wait_for(timeout=5_000)
        shown = [await row.locator(s).text_content() for s in (".tm-content", ".tm-kind")]
        live_loads = list(loads)

        # A turn moves the thread's head but not its memory: the Edit after it is no conflict.
        await say(page, "hello")
        await last_answer(page, "Hello")
        # Edit: content and kind, saved as Remember under the same key.
        await row.locator(".tm-edit").click()
        await row.locator(".tm-edit-content").fill("The favourite colour is blue")
        await row.locator(".tm-edit-kind").select_option("fact")
        await row.locator(".tm-save").click()
        await row.locator(".tm-content", has_text="blue").wait_for(timeout=5_000)
        edited = fact(await memory(other, thread), "colour")

        # Forget: it leaves the list for the (collapsed) forgotten ones.
        await remember(other, thread, "city", "The person lives in Oslo")
        await page.locator(".tm-fact[data-key=city]").wait_for(timeout=5_000)
        await page.locator(".tm-fact[data-key=city] .tm-forget").click()
        await page.locator("#tm-retracted-list .tm-fact[data-key=city]").wait_for(
            state="attached", timeout=5_000
        )
        active_keys = await page.locator("#tm-facts .tm-fact").evaluate_all(
            "nodes => nodes.map(n => n.dataset.key)"
        )
        forgotten = fact(await memory(other, thread), "city")

        # The "use" switch: off is the thread's override; "Use default" clears it.
        await page.locator("#tm-use").click()
        await page.locator("#tm-use-source[data-source=override]").wait_for(timeout=5_000)
        switched = [
            await page.locator("#tm-use").is_checked(),
            await page.text_content("#tm-use-source"),
        ]
        overridden = (await memory(other, thread))["overrides"]
        await page.locator("#tm-use-default").click()
        await page.locator("#tm-use-source[data-source=default]").wait_for(timeout=5_000)
        cleared = [
            await page.locator("#tm-use").is_checked(),
            await page.locator("#tm-use-default").is_visible(),
        ]
        after = await memory(other, thread)
        status = await page.locator("#tm-status").text_content()

    assert hint_before and "conversation" in hint_before
    assert body_before is False
    assert shown == ["The favourite colour is green", "preference"]
    assert live_loads == []  # the fact came by the live event
    assert (edited["content"], edited["kind"], edited["status"]) == (
        "The favourite colour is blue",
        "fact",
        "active",
    )
    assert active_keys == ["colour"]
    assert forgotten["status"] == "retracted"
    assert switched == [False, "this thread"]
    assert overridden["use"] is False
    assert cleared == [True, False]
    assert after["overrides"]["use"] is None and after["settings"]["use"] is True
    assert "changed elsewhere" not in (status or "")


async def test_a_command_on_a_stale_view_reloads_and_says_so(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        await start_talking(page)
        thread = str(await page.evaluate("window.openrealtime.session.thread_id"))
        await panel_shown(page)
        await page.fill("#tm-add-key", "plan")
        await page.select_option("#tm-add-kind", "decision")
        await page.fill("#tm-add-content", "Ship the release on Friday")
        await page.click("#tm-add-submit")
        await page.locator(".tm-fact[data-key=plan]").wait_for(timeout=5_000)
        # The session ends, so no live event comes: a change elsewhere leaves the view stale.
        await page.click("#start")
        await wait_js(page, "window.openrealtime.conn === null")
        other = await open_page(browser, server, "/history.html")
        await remember(other, thread, "plan", "Ship the release on Monday", "decision")
        stale = await page.locator(".tm-fact[data-key=plan] .tm-content").text_content()
        await page.locator(".tm-fact[data-key=plan] .tm-forget").click()
        await page.locator("#tm-status", has_text="changed elsewhere").wait_for(timeout=5_000)
        await page.locator(".tm-fact[data-key=plan] .tm-content", has_text="Monday").wait_for(
            timeout=5_000
        )
        kind = await page.locator("#tm-status").get_attribute("data-kind")
        view = await memory(other, thread)

    assert stale == "Ship the release on Friday"
    assert kind == "warn"
    assert fact(view, "plan")["status"] == "active"  # the stale Forget changed nothing
    assert fact(view, "plan")["content"] == "Ship the release on Monday"
