"""History and conversation records in a real browser: continue a conversation from history
with its earlier context, view-only records, delete with journal erasure, and unsent
transcripts surviving a reload with the network cut (IndexedDB)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from journal.events import ThreadRef
from runtime.records import RecordsUnavailable
from runtime.telephony.call_records import CallRecord
from tests.web.conftest import (
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    start_talking,
    wait_js,
)


async def api(page: Any, method: str, path: str, body: Any = None) -> Any:
    """Call the HTTP API from inside the page (its stored bearer token)."""
    return await page.evaluate(
        """async ([method, path, body]) => {
            const headers = {
                Authorization: 'Bearer ' + localStorage.getItem('openrealtime.token'),
                'Content-Type': 'application/json'};
            const payload = body ? JSON.stringify(body) : undefined;
            const r = await fetch(path, {method, headers, body: payload});
            return {status: r.status, body: r.status === 204 ? null : await r.json()};
        }""",
        [method, path, body],
    )


async def saved(page: Any, count: int) -> dict[str, Any]:
    record_id = await page.evaluate("window.openrealtime.record.id")
    expression = (
        f"(() => {{ const s = window.openrealtime.saver.status({record_id!r});"
        f" return s && s.state === 'saved' && s.confirmed === {count} ? s : null; }})()"
    )
    status: dict[str, Any] = await wait_js(page, expression)
    return status


async def test_continue_from_history_answers_from_earlier_context(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        first_session = await start_talking(page)
        await say(page, "my favourite colour is green")
        await last_answer(page, "I understand")
        status = await saved(page, 2)
        record_id = status["id"]
        await page.click("#start")  # End
        # An old record without runtime ids is view-only, with the reason shown.
        old = await api(
            page, "POST", "/api/conversations",
            {"id": "old-record", "idempotency_key": "k1", "base_version": 0, "start_index": 0,
             "messages": [{"role": "user", "text": "an old chat"}], "title": "old chat"},
        )  # fmt: skip
        assert old["status"] == 200

        await page.goto(f"{server.http_url}/history.html")
        await page.wait_for_selector("body[data-ready=true]")
        items = await page.locator("#conversations li").all_text_contents()
        await page.click(f"li[data-id='{record_id}'] a")
        await page.wait_for_selector("#continue:not(.hidden)")
        detail = await page.locator("#messages .msg").all_text_contents()
        await page.click("#continue")
        await page.wait_for_selector("body[data-ready=true]")
        continued_title = await page.text_content("#conversation-title")
        second_session = await start_talking(page)
        await say(page, "what did I just say")
        answer = await last_answer(page, "You said")
        keys = await page.evaluate("[...document.querySelectorAll('.msg')].map(n => n.dataset.key)")
        await saved(page, 4)
        record = (await api(page, "GET", f"/api/conversations/{record_id}"))["body"]

        # "New conversation" resets the runtime identity: a new record and a new thread.
        await page.click("#new-conversation")
        await start_talking(page)
        fresh = await page.evaluate(
            "(t => ({record: t.record.id, thread: t.session.thread_id, url: location.href,"
            " shown: document.querySelectorAll('.msg').length}))(window.openrealtime)"
        )

        await page.goto(f"{server.http_url}/history.html?id=old-record")
        await page.wait_for_selector("body[data-ready=true]")
        view_only = await page.text_content("#view-only")
        continue_hidden = await page.locator("#continue").is_hidden()
    assert any("my favourite colour is green" in item and "can continue" in item for item in items)
    assert any("old chat" in item and "view only" in item for item in items)
    assert detail[0] == "my favourite colour is green"
    assert len(detail) == 2 and "Okay, I understand." in detail[1]
    assert "my favourite colour is green" in (continued_title or "")
    assert second_session != first_session
    assert answer == 'You said: "my favourite colour is green"'
    # RES-5: the earlier messages keep their record slots; the new session's generation numbers
    # name new entries (an old "g1" is never overwritten by the new session's "g1").
    assert keys[:2] == ["rec:0", "rec:1"]
    assert len(set(keys)) == len(keys) == 4
    assert all(k.startswith(second_session) for k in keys[2:])
    assert record["id"] == record_id and record["message_count"] == 4
    assert record["voice_session_id"] == second_session
    assert record["role_id"] is not None and record["thread_id"] is not None
    assert [m["text"] for m in record["messages"]][3] == answer
    assert fresh["record"] != record_id and fresh["thread"] != record["thread_id"]
    assert fresh["shown"] == 0 and "continue=" not in fresh["url"]
    assert "View only" in (view_only or "") and "runtime ids" in (view_only or "")
    assert continue_hidden


async def test_delete_offers_to_erase_the_journal_and_reports_what_was_kept(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        await start_talking(page)
        await say(page, "hello there")
        await last_answer(page, "Hello")
        status = await saved(page, 2)
        thread_id = await page.evaluate("window.openrealtime.session.thread_id")
        await page.click("#start")  # End: the session closes, its thread is free
        await page.goto(f"{server.http_url}/history.html?id={status['id']}")
        await page.wait_for_selector("body[data-ready=true]")
        await page.click("#delete")
        await page.check("#erase-journal")
        await page.click("#confirm-delete")
        await page.wait_for_selector("#delete-report:not(.hidden)")
        report = await page.text_content("#delete-report-text")
        gone = await api(page, "GET", f"/api/conversations/{status['id']}")
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        events = await server.services.journal.read(
            ThreadRef(principal.tenant, principal.user, thread_id)
        )
    assert "Conversation record: removed" in (report or "")
    assert "2 events erased" in (report or "")
    assert gone["status"] == 404
    assert events == []


async def test_unsent_transcript_survives_a_reload_with_the_network_cut(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory, monkeypatch: Any
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        context = page.context
        await start_talking(page)
        # The network to the records API is cut. Chromium sends the keep-alive flush of a
        # closing page from the browser process, past both request interception and offline
        # emulation, so the cut is also made where those requests land.
        records = server.services.records
        write = records.write
        cut = True

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            if cut:
                raise RecordsUnavailable("network cut (test)")
            return await write(*args, **kwargs)

        monkeypatch.setattr(records, "write", unreachable)
        await context.route("**/api/conversations", lambda route: route.abort())
        await say(page, "hello there")
        await last_answer(page, "Hello")
        record_id = await page.evaluate("window.openrealtime.record.id")
        await wait_js(
            page,
            f"window.openrealtime.saver.status({record_id!r}).state === 'retrying'",
        )
        await context.set_offline(True)  # the network goes; the tab is closed
        await page.close()
        await context.set_offline(False)
        before = await records.get(*(await _principal(server)), record_id)
        page = await context.new_page()  # reopened, saves still cut
        await page.goto(f"{server.http_url}/")
        await page.wait_for_selector("body[data-ready=true]")
        resumed = await page.evaluate("window.openrealtime.resumed")
        cut = False
        await context.unroute("**/api/conversations")
        await context.set_offline(True)
        await context.set_offline(False)  # back online: the page flushes at once
        await wait_js(
            page,
            f"window.openrealtime.saver.status({record_id!r})?.state === 'saved'",
        )
        record = await api(page, "GET", f"/api/conversations/{record_id}")
        left = await page.evaluate(
            """() => new Promise((resolve) => {
                const open = indexedDB.open('openrealtime');
                open.onsuccess = () => {
                    const tx = open.result.transaction('record_snapshots');
                    const req = tx.objectStore('record_snapshots').count();
                    req.onsuccess = () => resolve(req.result);
                };
            })"""
        )
    assert before is None  # nothing reached the server before the reopen
    assert resumed == [record_id]
    assert record["status"] == 200
    assert [m["text"] for m in record["body"]["messages"]] == [
        "hello there",
        "Hello! How can I help you?",
    ]
    assert record["body"]["thread_id"] is not None
    assert left == 0  # nothing unsent is left on the device


async def _principal(server: Any) -> tuple[str, str]:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    return principal.tenant, principal.user


async def test_a_version_conflict_stops_saving_and_offers_an_export(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        await start_talking(page)
        await say(page, "hello there")
        await last_answer(page, "Hello")
        status = await saved(page, 2)
        # Another writer (another tab, another device) moves the record on.
        other = await api(
            page, "POST", "/api/conversations",
            {"id": status["id"], "idempotency_key": "elsewhere", "base_version": status["version"],
             "start_index": 2, "messages": [{"role": "user", "text": "written elsewhere"}]},
        )  # fmt: skip
        await say(page, "thanks")
        await last_answer(page, "welcome")
        await page.wait_for_selector("#save-problem:not(.hidden)")
        problem = await page.text_content("#save-problem-text")
        async with page.expect_download() as download_info:
            await page.click("#export-record")
        download = await download_info.value
        exported = await asyncio.to_thread(Path(await download.path()).read_text)
        record = (await api(page, "GET", f"/api/conversations/{status['id']}"))["body"]
    assert other["status"] == 200
    assert "changed elsewhere" in (problem or "")
    # Nothing was overwritten: the server keeps the other writer's message ...
    assert [m["text"] for m in record["messages"]][2:] == ["written elsewhere"]
    # ... and the export holds this page's whole transcript.
    assert '"thanks"' in exported and "You're welcome." in exported


async def test_the_history_page_lists_phone_calls_and_opens_a_transcript(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        owner = await server.services.accounts.authenticate(server.token)
        assert owner is not None
        started = datetime.now(UTC) - timedelta(minutes=3)
        await server.services.call_records.save(
            CallRecord(owner.tenant, owner.user, "sip:history-call", "sip", "+15550001111",
                       "+15550002222", "role_any", None, started,
                       started + timedelta(seconds=42), "agent", "+15550150")
        )  # fmt: skip
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        await page.goto(f"{server.http_url}/history.html")
        await page.wait_for_selector("body[data-ready=true]")
        item = page.locator("#calls li")
        assert await item.count() == 1
        text = await item.inner_text()
        assert "+15550001111 → +15550002222" in text
        assert "42 s" in text and "put through to +15550150" in text and "SIP" in text
        await item.locator("button").click()
        await page.wait_for_selector("#calls li .transcript[data-loaded=true]:not(.hidden)")
        assert "Nothing was said." in await item.locator(".transcript").inner_text()
