"""Accounts in a real browser: who is signed in (and their membership role) in every page's
header, admin-only controls absent for a member — and refused by the server when the member
calls the admin API anyway — and the sign-in page where a second person pastes a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.server import RunningServer
from tests.web.conftest import Launch, ServerFactory, open_page, start_talking, wait_js
from tests.web.test_history import api

PAGES = ("/", "/history.html", "/memory.html", "/knowledge.html")
# Everything on the knowledge and memory pages that edits a role, its bindings or its default.
ADMIN_CONTROLS = (
    "#roles-panel",
    "#role-create-form",
    "#role-edit-form",
    "#role-delete",
    "#save-bindings",
    "input.bind",
    "#enabled",
)


async def member_token(server: RunningServer, user: str = "bob") -> tuple[str, str]:
    """A member of the tenant ``local`` and a token for them, issued through the accounts
    store (what ``openrealtime users add`` / ``tokens issue`` do); returns (secret, id)."""
    await server.services.accounts.add_user("local", user, role="member")
    issued = await server.services.accounts.issue_token("local", user, name="laptop")
    return issued.secret, issued.info.id


async def open_as(browser: Any, server: RunningServer, path: str, token: str) -> Any:
    """Like ``open_page``, signed in with ``token`` through the URL fragment."""
    context = await browser.new_context(viewport={"width": 1100, "height": 800})
    page = await context.new_page()
    page.on("pageerror", lambda error: print("pageerror:", error))
    await page.goto(f"{server.http_url}{path}#token={token}")
    await page.wait_for_selector("body[data-ready=true]", timeout=10_000)
    return page


async def header(page: Any) -> tuple[str, str]:
    await page.wait_for_selector("#who-user")
    return (
        await page.text_content("#who-user strong") or "",
        await page.text_content("#who-role") or "",
    )


async def count(page: Any, selector: str) -> int:
    return int(await page.locator(selector).count())


async def test_a_member_sees_no_role_controls_and_the_server_refuses_them_anyway(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        secret, _ = await member_token(server)
        browser = await launch(silence_wav)
        owner = await open_page(browser, server, "/knowledge.html")
        role_id = await owner.input_value("#role")
        owner_header = await header(owner)
        owner_controls = {s: await count(owner, s) for s in ADMIN_CONTROLS[:5]}
        await owner.goto(f"{server.http_url}/memory.html")
        await owner.wait_for_selector("body[data-ready=true]")
        owner_switches = (await count(owner, "#enabled"), await count(owner, "#my-enabled"))

        member = await open_as(browser, server, "/knowledge.html", secret)
        created = await api(
            member, "POST", "/api/documents",
            {"name": "Bob's notes", "text": "The lab opens at eight.", "role_id": role_id},
        )  # fmt: skip
        await member.reload()
        await member.wait_for_selector('#documents li:has-text("Bob\'s notes") .bound')
        headers = {}
        for path in PAGES:
            await member.goto(f"{server.http_url}{path}")
            await member.wait_for_selector("body[data-ready=true]")
            headers[path] = await header(member)
        await member.goto(f"{server.http_url}/knowledge.html")
        await member.wait_for_selector("body[data-ready=true]")
        on_knowledge = {s: await count(member, s) for s in ADMIN_CONTROLS}
        await member.goto(f"{server.http_url}/memory.html")
        await member.wait_for_selector("body[data-ready=true]")
        on_memory = {s: await count(member, s) for s in ADMIN_CONTROLS}

        # The member's own switch: a personal override; the role's default stays on.
        await member.uncheck("#my-enabled")
        await wait_js(
            member,
            "fetch('/api/memory/settings', {headers: {Authorization: 'Bearer ' +"
            " localStorage.getItem('openrealtime.token')}}).then(r => r.json())"
            ".then(v => v.overrides.memory_enabled === false)",
        )
        await member.reload()
        await member.wait_for_selector("body[data-ready=true]")
        switch_after_reload = await member.is_checked("#my-enabled")

        # Calling the admin API anyway, from the member's page with the member's token.
        refused = {
            "create role": await api(member, "POST", "/api/roles", {"name": "Bob's role"}),
            "edit role": await api(member, "PATCH", f"/api/roles/{role_id}", {"name": "Mine"}),
            "delete role": await api(member, "DELETE", f"/api/roles/{role_id}"),
            "bind": await api(
                member, "PUT", f"/api/roles/{role_id}/documents", {"document_ids": []}
            ),
            "role memory": await api(
                member,
                "PUT",
                "/api/memory/settings",
                {"role_id": role_id, "enabled": False, "scope": "role"},
            ),  # fmt: skip
        }
        role = (await api(owner, "GET", f"/api/roles/{role_id}"))["body"]
        roles = (await api(owner, "GET", "/api/roles"))["body"]["roles"]
        bound = (await api(member, "GET", f"/api/roles/{role_id}/documents"))["body"]
    assert owner_header == ("local-user", "owner")
    assert owner_controls == dict.fromkeys(ADMIN_CONTROLS[:5], 1)
    assert owner_switches == (1, 0)  # the owner switches the role's default
    assert set(headers.values()) == {("bob", "member")}
    assert all(n == 0 for n in on_knowledge.values()), on_knowledge
    assert all(n == 0 for n in on_memory.values()), on_memory
    assert switch_after_reload is False
    assert {what: r["status"] for what, r in refused.items()} == dict.fromkeys(refused, 403)
    assert all(r["body"]["code"] == "forbidden" for r in refused.values())
    assert role["name"] != "Mine" and role["memory_enabled"] is True
    assert [r["name"] for r in roles] == [role["name"]]
    assert [d["id"] for d in bound["documents"]] == [created["body"]["id"]]


async def test_a_second_person_signs_in_with_a_pasted_token_and_signs_out(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        secret, token_id = await member_token(server)
        browser = await launch(silence_wav)
        context = await browser.new_context(viewport={"width": 1100, "height": 800})
        page = await context.new_page()
        urls: list[str] = []
        page.on("request", lambda request: urls.append(request.url))
        page.on("websocket", lambda ws: urls.append(ws.url))
        sent_frames: list[str] = []
        page.on(
            "websocket",
            lambda ws: ws.on("framesent", lambda frame: sent_frames.append(str(frame)[:400])),
        )
        offers: list[tuple[bool, bool]] = []  # WebRTC: (in the Authorization header, in the body)

        def offered(request: Any) -> None:
            if request.url.endswith("/v1/realtime/calls"):
                header = request.headers.get("authorization") or ""
                offers.append((secret in header, secret in (request.post_data or "")))

        page.on("request", offered)

        # Nobody signed in: the page points to the sign-in page and comes back afterwards.
        await page.goto(f"{server.http_url}/memory.html")
        await page.wait_for_selector("#signed-out")
        await page.click("#go-sign-in")
        await page.wait_for_selector("body[data-ready=true]")
        sign_in_url = page.url

        await page.fill("#token-input", "ort_not_a_real_token")
        await page.click("#sign-in")
        await page.wait_for_selector("#notice:has-text('not accepted')")
        kept_after_bad = await page.evaluate("localStorage.getItem('openrealtime.token')")

        await page.fill("#token-input", secret)
        await page.click("#sign-in")
        await page.wait_for_url("**/memory.html")
        await page.wait_for_selector("body[data-ready=true]")
        on_memory = await header(page)
        stored = await page.evaluate("localStorage.getItem('openrealtime.token')")

        # The sign-in page says who is signed in; the talk page's voice session is theirs.
        await page.goto(f"{server.http_url}/signin.html")
        await page.wait_for_selector("#current:not(.hidden)")
        current = await page.text_content("#current-text")
        await page.goto(f"{server.http_url}/")
        await page.wait_for_selector("body[data-ready=true]")
        on_talk = await header(page)
        await start_talking(page)
        session_user = [
            s.principal.user for s in server.services.live_sessions.values() if s.principal
        ]
        await page.click("#start")  # End

        await page.click("#sign-out")
        await page.wait_for_url("**/signin.html")
        await page.wait_for_selector("body[data-ready=true]")
        after_sign_out = await page.evaluate("localStorage.getItem('openrealtime.token')")
        who_after = await count(page, "#who-user")
        await page.goto(f"{server.http_url}/knowledge.html")
        await page.wait_for_selector("#signed-out")

        # A token revoked while kept in the browser is forgotten and the page asks again.
        await page.goto(f"{server.http_url}/signin.html")
        await page.wait_for_selector("body[data-ready=true]")
        await page.fill("#token-input", secret)
        await page.click("#sign-in")
        await page.wait_for_url("**/index.html")
        await page.wait_for_selector("body[data-ready=true]")
        await server.services.accounts.revoke_token("local", token_id)
        await page.goto(f"{server.http_url}/history.html")
        await page.wait_for_selector("#signed-out:has-text('not accepted')")
        after_revoke = await page.evaluate("localStorage.getItem('openrealtime.token')")
    assert sign_in_url.endswith("/signin.html?next=memory.html")
    assert kept_after_bad is None
    assert on_memory == on_talk == ("bob", "member") and stored == secret
    assert "bob" in (current or "") and "member" in (current or "")
    assert session_user == ["bob"]
    assert after_sign_out is None and who_after == 0
    assert after_revoke is None
    # The token never travels in an address. The talk page spoke WebRTC: the token went only
    # in the offer's Authorization header (over a WebSocket it goes in the first message only:
    # tests/web/test_talk_webrtc.py).
    assert not [u for u in urls if secret in u]
    assert offers == [(True, False)]
    assert sent_frames == []
