"""The tools page in a real browser over the real HTTP API: an admin adds a rule and an HTTP
tool, activates a rule the agent proposed, sets a secret and revokes a permission, adds and
deletes an MCP server; a member sees
the lists read-only and only their own permissions, at phone width too, and the server refuses
the member's edits anyway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from tests.web.conftest import Launch, open_page, text_plugins, wait_js
from tests.web.test_accounts import member_token
from tests.web.test_history import api
from tools.capability import Capability
from tools.grants import GrantedBy, NewGrant
from tools.mcp import McpServer
from tools.registry import HttpTool
from tools.rules import Author

TENANT = "local"
OWNER = "local-user"
SECRET_VALUE = "sk-browser-7a6b5c4d"
PARAMETERS = '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'


@asynccontextmanager
async def tools_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", tool_hosts="api.example.com",
        webrtc=False,
    )  # fmt: skip
    async with running_server(settings, plugins=text_plugins(10.0)) as server:
        yield server


async def default_role_id(server: RunningServer) -> str:
    return (await default_role(server.services.roles, TENANT)).id


def lifetime(action: str, by: str) -> NewGrant:
    return NewGrant(capability=Capability(action), effect="allow", scope="lifetime",
                    granted_by=GrantedBy("person", by))  # fmt: skip


async def test_an_admin_adds_a_rule_and_a_tool_activates_a_proposal_and_revokes_a_grant(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    async with tools_server(tmp_path) as server:
        role = await default_role_id(server)
        services = server.services
        proposed = await services.rules.create(
            TENANT, role, "Ask before booking anything.", Author("role", role)
        )
        granted = await services.grants.create(TENANT, role, lifetime("weather", OWNER))
        kept = await services.grants.create(TENANT, role, lifetime("calendar", OWNER))
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/tools.html")
        assert await page.input_value("#role") == role

        await page.fill("#rule-text", "Looking up the weather is always fine.")
        await page.click("#rule-form button[type=submit]")
        await page.wait_for_selector("#rules li:has-text('Looking up the weather is always fine.')")
        await page.click(f"#rules li[data-id='{proposed.id}'] button.activate")
        await page.wait_for_selector(f"#rules li[data-id='{proposed.id}'][data-status=active]")

        await page.fill("#secret-name", "weather_key")
        await page.fill("#secret-value", SECRET_VALUE)
        await page.click("#secret-form button[type=submit]")
        await page.wait_for_selector("#secrets li[data-name=weather_key]")

        await page.click("#tool-box summary")
        await page.fill("#tool-name", "weather")
        await page.fill("#tool-url", "https://evil.example.net/forecast?q={city}")
        await page.fill("#tool-parameters", PARAMETERS)
        await page.click("#tool-form button[type=submit]")
        await page.wait_for_selector("#notice.bad:has-text('host_not_allowed')")
        await page.fill("#tool-name", "weather")
        await page.fill("#tool-url", "https://api.example.com/forecast?q={city}")
        await page.fill("#tool-description", "Forecast for a city")
        await page.fill("#tool-target", "city")
        await page.fill("#tool-header", "Authorization")
        await page.fill("#tool-header-prefix", "Bearer ")
        await page.select_option("#tool-header-secret", "weather_key")
        await page.click("#tool-form button[type=submit]")
        await page.wait_for_selector("#tools li[data-name=weather]")

        await page.click(f"#grants li[data-id='{granted.id}'] button.revoke")
        await page.wait_for_selector("#notice:has-text('1 permission(s) revoked')")
        await page.wait_for_selector(f"#grants li[data-id='{granted.id}']", state="detached")
        await page.select_option("#grant-status", "")
        await page.wait_for_selector(f"#grants li[data-id='{granted.id}'][data-status=revoked]")
        page_text = await page.content()

        rules = await services.rules.list(TENANT, role)
        tool = await services.tool_catalog.get(TENANT, role, "weather")
        grants = {g.id: g.status for g in await services.grants.list(TENANT, role)}
        secret = await services.tool_secrets.get(TENANT, "weather_key")
    assert [(r.text, r.status, r.author) for r in rules] == [
        ("Ask before booking anything.", "active", Author("role", role)),
        ("Looking up the weather is always fine.", "active", Author("person", OWNER)),
    ]
    assert tool.url_template == "https://api.example.com/forecast?q={city}"
    assert (tool.target, tool.description) == ("city", "Forecast for a city")
    assert [(h.header, h.secret, h.prefix) for h in tool.headers] == [
        ("Authorization", "weather_key", "Bearer ")
    ]
    assert grants == {granted.id: "revoked", kept.id: "active"}
    assert secret == SECRET_VALUE
    assert SECRET_VALUE not in page_text


async def test_an_admin_adds_an_mcp_server_with_a_secret_header_and_deletes_it(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    async with tools_server(tmp_path) as server:
        role = await default_role_id(server)
        services = server.services
        await services.tool_secrets.set(TENANT, "shop_key", SECRET_VALUE)
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/tools.html")
        await page.wait_for_selector("#mcp-empty:not(.hidden)")

        await page.click("#mcp-box summary")
        await page.fill("#mcp-label", "shop")
        await page.fill("#mcp-url", "https://evil.example.net/mcp")
        await page.click("#mcp-form button[type=submit]")
        await page.wait_for_selector("#notice.bad:has-text('host_not_allowed')")
        await page.fill("#mcp-label", "shop")
        await page.fill("#mcp-url", "https://api.example.com/mcp")
        await page.fill("#mcp-tools", "stock_level, reorder")
        await page.select_option("#mcp-approval", "read_only")
        await page.fill("#mcp-header", "X-Api-Key")
        await page.select_option("#mcp-header-secret", "shop_key")
        await page.click("#mcp-form button[type=submit]")
        item = page.locator("#mcp-servers li[data-label=shop]")
        await item.wait_for()
        shown = await item.inner_text()
        (saved,) = await services.tool_catalog.list_mcp(TENANT, role)

        page.once("dialog", lambda dialog: dialog.accept())
        await item.locator("button.delete").click()
        await page.wait_for_selector("#mcp-empty:not(.hidden)")
        left = await services.tool_catalog.list_mcp(TENANT, role)
        page_text = await page.content()
    assert "asks unless read-only" in shown and "tools: reorder, stock_level" in shown
    assert "X-Api-Key ← shop_key" in shown
    assert saved.url == "https://api.example.com/mcp"
    assert saved.allowed is not None and saved.allowed.names == {"stock_level", "reorder"}
    assert saved.approval.never is not None and saved.approval.never.read_only is True
    assert [(h.header, h.secret) for h in saved.secret_headers] == [("X-Api-Key", "shop_key")]
    assert left == [] and SECRET_VALUE not in page_text


ADMIN_CONTROLS = (
    "#tool-form", "#tool-box", "#secret-form", "#secrets", "#rule-form", "#hosts",
    "#mcp-form", "#mcp-box", "button.delete", "button.activate", "button.retire",
)  # fmt: skip


async def test_a_member_sees_read_only_lists_and_only_their_grants_even_on_a_phone(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    async with tools_server(tmp_path) as server:
        role = await default_role_id(server)
        services = server.services
        secret, _ = await member_token(server, "bob")
        await services.threads.create(TENANT, "bob", "th_bob", role)
        await services.tool_catalog.put(TENANT, role, HttpTool(
            name="weather", description="Forecast", parameters={"type": "object"},
            method="GET", url_template="https://api.example.com/forecast",
        ))  # fmt: skip
        await services.tool_catalog.put_mcp(
            TENANT, role, McpServer("shop", "https://api.example.com/mcp")
        )
        active = await services.rules.create(
            TENANT, role, "Weather is fine.", Author("person", OWNER)
        )
        hidden_rule = await services.rules.create(TENANT, role, "Draft.", Author("role", role))
        admins = await services.grants.create(TENANT, role, lifetime("weather", OWNER))
        bobs = await services.grants.create(TENANT, role, NewGrant(
            capability=Capability("weather"), effect="deny", scope="thread", thread_id="th_bob",
            granted_by=GrantedBy("person", "bob"),
        ))  # fmt: skip

        browser = await launch(silence_wav)
        context = await browser.new_context(viewport={"width": 390, "height": 844})
        page = await context.new_page()
        await page.goto(f"{server.http_url}/tools.html#token={secret}")
        await page.wait_for_selector("body[data-ready=true]", timeout=10_000)

        controls = {s: await page.locator(s).count() for s in ADMIN_CONTROLS}
        tools = await page.eval_on_selector_all("#tools li", "ns => ns.map(n => n.dataset.name)")
        servers = await page.eval_on_selector_all(
            "#mcp-servers li", "ns => ns.map(n => n.dataset.label)"
        )
        rules = await page.eval_on_selector_all("#rules li", "ns => ns.map(n => n.dataset.id)")
        grants = await page.eval_on_selector_all("#grants li", "ns => ns.map(n => n.dataset.id)")
        overflow = await page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )

        refused = {
            "put_tool": await api(page, "PUT", f"/api/roles/{role}/tools/mine", {
                "parameters": {"type": "object"}, "method": "GET",
                "url_template": "https://api.example.com/x",
            }),
            "add_rule": await api(page, "POST", f"/api/roles/{role}/rules", {"text": "Anything."}),
            "activate": await api(page, "PATCH", f"/api/roles/{role}/rules/{hidden_rule.id}",
                                  {"expected_version": 1, "status": "active"}),
            "secrets": await api(page, "GET", "/api/tool-secrets"),
            "put_mcp": await api(page, "PUT", f"/api/roles/{role}/mcp_servers/mine",
                                 {"server_url": "https://api.example.com/mcp"}),
            "revoke_admins": await api(page, "POST",
                                       f"/api/roles/{role}/grants/{admins.id}/revoke"),
        }  # fmt: skip

        await page.click(f"#grants li[data-id='{bobs.id}'] button.revoke")
        await page.wait_for_selector("#grants-empty:not(.hidden)")
        await wait_js(page, "document.querySelector('#notice').textContent.includes('revoked')")
        statuses = {g.id: g.status for g in await services.grants.list(TENANT, role)}
        rule_statuses = {r.id: r.status for r in await services.rules.list(TENANT, role)}
    assert controls == dict.fromkeys(ADMIN_CONTROLS, 0)
    assert tools == ["knowledge_search", "confide", "end_conversation", "weather"]
    assert servers == ["shop"]  # read-only: no delete button (ADMIN_CONTROLS)
    assert rules == [active.id]
    assert grants == [bobs.id]
    assert overflow <= 0
    assert {k: v["status"] for k, v in refused.items()} == {
        "put_tool": 403, "add_rule": 403, "activate": 403, "secrets": 403, "put_mcp": 403,
        "revoke_admins": 404,
    }  # fmt: skip
    assert refused["revoke_admins"]["body"]["code"] == "grant_not_found"
    assert statuses == {admins.id: "active", bobs.id: "revoked"}
    assert rule_statuses[hidden_rule.id] == "proposed"


async def test_the_tools_page_is_in_every_pages_navigation(
    launch: Launch, silence_wav: Path, tmp_path: Path
) -> None:
    async with tools_server(tmp_path) as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/knowledge.html")
        links: dict[str, Any] = {}
        for path in ("/", "/history.html", "/memory.html", "/knowledge.html", "/tools.html"):
            await page.goto(f"{server.http_url}{path}")
            await page.wait_for_selector("header.top nav a[href='tools.html']")
            links[path] = await page.get_attribute(
                "header.top nav a[href='tools.html']", "aria-current"
            )
    assert links == {
        "/": None, "/history.html": None, "/memory.html": None, "/knowledge.html": None,
        "/tools.html": "page",
    }  # fmt: skip
