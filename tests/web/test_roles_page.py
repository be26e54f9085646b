"""The roles page in a real browser over the real HTTP API and voice session: an admin makes a
role, binds a document and talks to it; a member sees it read-only (and the API refuses the
member's edit); a stale edit offers a reload; deleting asks and says what becomes of the role's
conversations; at phone width nothing sticks out sideways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.server import RunningServer
from tests.web.conftest import (
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    start_talking,
    wait_js,
)
from tests.web.screenshots import OVERFLOW_JS, PHONE
from tests.web.test_accounts import member_token, open_as
from tests.web.test_history import api

RETURNS = (
    "Returns are accepted within 7 days of delivery.\n"
    "Items must be unused and in their original packaging.\n"
)


async def open_roles(page: Any, server: RunningServer, role_id: str | None = None) -> None:
    query = f"?role={role_id}" if role_id else ""
    await page.goto(f"{server.http_url}/roles.html{query}")
    await page.wait_for_selector("body[data-ready=true]")
    if role_id:
        await page.wait_for_selector(f"#editor[data-role-id='{role_id}']")


async def new_role(page: Any, name: str) -> dict[str, Any]:
    created = await api(page, "POST", "/api/roles", {"name": name, "instructions": "Help."})
    assert created["status"] == 201, created
    body: dict[str, Any] = created["body"]
    return body


async def test_an_admin_creates_a_role_binds_a_document_and_it_answers_from_it(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/roles.html")
        document = await api(
            page, "POST", "/api/documents", {"name": "Shop returns policy v1", "text": RETURNS}
        )
        await page.reload()
        await page.wait_for_selector("body[data-ready=true]")

        await page.click("#new-role")
        await page.wait_for_selector("#editor-title:has-text('New role')")
        await page.fill("#role-name", "Shop assistant")
        await page.fill("#role-instructions", "You help customers of the shop.")
        await page.select_option("#role-language", "en")
        await page.check("#role-documents li:has-text('Shop returns policy v1') input.doc-bind")
        await page.click("#save-role")
        await page.wait_for_selector("#notice:has-text('created')")
        notice = await page.text_content("#notice")
        role_id = await page.get_attribute("#editor", "data-role-id")
        listed = await page.locator("#roles li").all_text_contents()
        revision = await page.text_content("#editor-revision")
        tools_href = await page.get_attribute("#tools-link", "href")

        # The voice sample comes from the server's TTS (the configured plugin).
        await page.click("#play-sample")
        await page.wait_for_selector("#sample-audio[data-bytes]", state="attached")
        sample_bytes = int(await page.get_attribute("#sample-audio", "data-bytes") or 0)

        role = (await api(page, "GET", f"/api/roles/{role_id}"))["body"]
        bound = (await api(page, "GET", f"/api/roles/{role_id}/documents"))["body"]

        await page.goto(f"{server.http_url}/")
        await page.wait_for_selector("body[data-ready=true]")
        await page.select_option("#role", role_id)
        await start_talking(page)
        session_role = await page.evaluate("window.openrealtime.session.role.id")
        await say(page, "How many days do I have for returns?")
        answer = await last_answer(page, "7 days", timeout=60_000)
    assert "1 document" in (notice or "")
    assert any("Shop assistant" in item for item in listed)
    assert revision == "revision 1"
    assert tools_href == f"tools.html?role={role_id}"
    assert sample_bytes > 1000
    assert (role["name"], role["language"], role["instructions"]) == (
        "Shop assistant", "en", "You help customers of the shop.",
    )  # fmt: skip
    assert [d["id"] for d in bound["documents"]] == [document["body"]["id"]]
    assert session_role == role_id
    assert "7 days" in answer


async def test_a_member_sees_the_roles_read_only_and_the_api_refuses_an_edit(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        secret, _ = await member_token(server)
        browser = await launch(silence_wav)
        owner = await open_page(browser, server, "/roles.html")
        role = await new_role(owner, "Tutor")

        member = await open_as(browser, server, f"/roles.html?role={role['id']}", secret)
        await member.wait_for_selector(f"#editor[data-role-id='{role['id']}']")
        shown_name = await member.input_value("#role-name")
        disabled = {
            selector: await member.is_disabled(selector)
            for selector in ("#role-name", "#role-instructions", "#role-language", "#role-voice",
                             "#role-memory", "#memory-model", "#tm-use")
        }  # fmt: skip
        buttons = {
            s: await member.locator(s).count() for s in ("#new-role", "#save-role", "#delete-role")
        }
        read_only_note = await member.is_visible("#read-only")
        sample_allowed = not await member.is_disabled("#play-sample")

        refused = await api(
            member, "PATCH", f"/api/roles/{role['id']}",
            {"expected_revision": role["revision"], "name": "Mine"},
        )  # fmt: skip
        deleted = await api(
            member, "DELETE", f"/api/roles/{role['id']}?expected_revision={role['revision']}"
        )
        after = (await api(owner, "GET", f"/api/roles/{role['id']}"))["body"]
    assert shown_name == "Tutor"
    assert all(disabled.values()), disabled
    assert buttons == {"#new-role": 0, "#save-role": 0, "#delete-role": 0}
    assert read_only_note and sample_allowed
    assert (refused["status"], refused["body"]["code"]) == (403, "forbidden")
    assert (deleted["status"], deleted["body"]["code"]) == (403, "forbidden")
    assert after == role


async def test_a_stale_edit_shows_the_reload_prompt_and_keeps_the_other_edit(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/roles.html")
        role = await new_role(page, "Tutor")
        await open_roles(page, server, role["id"])

        # Someone else saves the role meanwhile.
        elsewhere = await api(
            page, "PATCH", f"/api/roles/{role['id']}",
            {"expected_revision": 1, "name": "Coach"},
        )  # fmt: skip
        await page.fill("#role-name", "Mentor")
        await page.click("#save-role")
        await page.wait_for_selector("#stale:not(.hidden)")
        kept_edit = await page.input_value("#role-name")
        await page.click("#reload")
        await page.wait_for_selector("#stale.hidden", state="attached")
        await wait_js(page, "document.getElementById('role-name').value === 'Coach'")
        revision = await page.text_content("#editor-revision")

        await page.fill("#role-name", "Mentor")
        await page.click("#save-role")
        await page.wait_for_selector("#notice:has-text('saved')")
        now = (await api(page, "GET", f"/api/roles/{role['id']}"))["body"]
    assert elsewhere["status"] == 200
    assert kept_edit == "Mentor"  # the user's edit stays on screen until they reload
    assert revision == "revision 2"
    assert (now["name"], now["revision"]) == ("Mentor", 3)


async def test_deleting_asks_and_says_the_conversations_can_no_longer_be_resumed(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/roles.html")
        role = await new_role(page, "Short-lived")
        for user, thread in (("local-user", "th_one"), ("someone", "th_two")):
            await server.services.threads.create("local", user, thread, role["id"])
        await open_roles(page, server, role["id"])

        await page.click("#delete-role")
        await page.wait_for_selector("#delete-dialog[open]")
        said = await page.text_content("#delete-dialog")
        await page.click("#delete-cancel")
        await page.wait_for_selector("#delete-dialog:not([open])", state="attached")
        kept = await api(page, "GET", f"/api/roles/{role['id']}")

        await page.click("#delete-role")
        await page.wait_for_selector("#delete-dialog[open]")
        await page.click("#delete-confirm")
        await page.wait_for_selector("#notice:has-text('deleted')")
        gone = await api(page, "GET", f"/api/roles/{role['id']}")
        listed = await page.locator("#roles li").all_text_contents()

        # The default role offers no deletion at all.
        default = next(r for r in (await api(page, "GET", "/api/roles"))["body"]["roles"])
        await open_roles(page, server, default["id"])
        default_deletable = not await page.is_disabled("#delete-role")
    assert "2 conversations" in (said or "") and "no longer be resumable" in (said or "")
    assert kept["status"] == 200
    assert gone["status"] == 404
    assert not any("Short-lived" in item for item in listed)
    assert default["is_default"] and default_deletable is False


async def test_at_phone_width_nothing_sticks_out_sideways(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/roles.html")
        long_name = "Customer_service_returns_and_exchanges_assistant_for_2026"
        role = await new_role(page, long_name[:100])
        await api(
            page, "POST", "/api/documents",
            {"name": "customer_service_returns_and_exchanges_handbook_2026", "text": RETURNS,
             "role_id": role["id"]},
        )  # fmt: skip
        secret, _ = await member_token(server)
        wide: dict[str, list[str]] = {}
        for who, opened in (
            ("admin", page),
            ("member", await open_as(browser, server, "/roles.html", secret)),
        ):
            await opened.set_viewport_size(PHONE)
            await open_roles(opened, server, role["id"])
            wide[who] = await opened.evaluate(OVERFLOW_JS)
    assert wide == {"admin": [], "member": []}
