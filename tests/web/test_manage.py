"""The memory and knowledge pages in a real browser, over the real HTTP APIs."""

from __future__ import annotations

from pathlib import Path

from tests.web.conftest import Launch, ServerFactory, open_page
from tests.web.test_history import api

RETURNS = (
    "Returns are accepted within 7 days of delivery.\n"
    "Items must be unused and in their original packaging.\n"
)


async def test_memory_page_lists_adds_edits_deletes_clears_and_switches_off(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/memory.html")
        role_id = await page.input_value("#role")

        await page.select_option("#add-kind", "preference")
        await page.fill("#add-content", "I like short answers")
        await page.click("#add-form button")
        await page.wait_for_selector("#entries li:has-text('I like short answers')")
        entry = (await api(page, "GET", f"/api/memory?role_id={role_id}"))["body"]["entries"][0]

        item = f"li[data-id='{entry['id']}']"
        await page.click(f"{item} button.edit")
        await page.fill(f"{item} input.edit-content", "I like very short answers")
        await page.click(f"{item} button[type=submit]")
        await page.wait_for_selector("#entries li:has-text('I like very short answers')")
        edited = (await api(page, "GET", f"/api/memory?role_id={role_id}"))["body"]["entries"][0]

        # Someone else edits the entry; the page's edit (older revision) gets a conflict.
        await page.click(f"{item} button.edit")
        elsewhere = await api(
            page, "PATCH", f"/api/memory/{entry['id']}",
            {"content": "I like answers with examples", "revision": edited["revision"]},
        )  # fmt: skip
        await page.fill(f"{item} input.edit-content", "mine")
        await page.click(f"{item} button[type=submit]")
        await page.wait_for_selector("#notice:has-text('changed elsewhere')")
        await page.wait_for_selector("#entries li:has-text('I like answers with examples')")

        await page.click(f"{item} button.delete")
        await page.wait_for_selector("#empty:not(.hidden)")

        for text in ("My goal is to learn Japanese", "My sister lives in Lyon"):
            await page.fill("#add-content", text)
            await page.click("#add-form button")
            await page.wait_for_selector(f"#entries li:has-text('{text}')")
        page.once("dialog", lambda dialog: dialog.accept())
        await page.click("#clear")
        await page.wait_for_selector("#notice:has-text('2 memories deleted')")
        await page.wait_for_selector("#empty:not(.hidden)")  # the reload after the clear is done

        await page.uncheck("#enabled")
        await page.wait_for_load_state("networkidle")
        role = (await api(page, "GET", f"/api/roles/{role_id}"))["body"]
        left = (await api(page, "GET", f"/api/memory?role_id={role_id}"))["body"]
    assert entry["kind"] == "preference" and entry["content"] == "I like short answers"
    assert edited["content"] == "I like very short answers"
    assert edited["revision"] > entry["revision"]
    assert elsewhere["status"] == 200
    assert role["memory_enabled"] is False
    assert [e for e in left["entries"] if e.get("status", "active") != "deleted"] == []


async def test_knowledge_page_creates_imports_binds_and_tests_retrieval(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory, tmp_path: Path
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/knowledge.html")
        default_role = await page.input_value("#role")

        await page.fill("#doc-name", "Shop returns policy v1")
        await page.fill("#doc-text", RETURNS)
        await page.click("#create-form button[type=submit]")
        await page.wait_for_selector("#documents li:has-text('Shop returns policy v1')")

        hours = tmp_path / "opening-hours.md"
        hours.write_text("# Opening hours\n\nThe shop opens at nine on weekdays.\n")
        await page.set_input_files("#doc-file", str(hours))
        await page.wait_for_selector("#documents li:has-text('opening-hours')")
        bound = await page.eval_on_selector_all("input.bind:checked", "boxes => boxes.length")

        await page.fill("#query", "how many days do I have for returns")
        await page.click("#search-form button")
        await page.wait_for_selector("#hits li.hit")
        hits = await page.locator("#hits li.hit").all_text_contents()
        tool_result = await page.text_content("#tool-result")

        # A second role sees nothing until documents are bound to it on this page.
        created = await api(page, "POST", "/api/roles", {"name": "Shop assistant"})
        other_role = created["body"]["id"]
        await page.reload()
        await page.wait_for_selector("body[data-ready=true]")
        await page.select_option("#role", other_role)
        await page.wait_for_selector(f"#documents[data-role='{other_role}'] li")
        unbound = await page.eval_on_selector_all("input.bind:checked", "boxes => boxes.length")
        await page.fill("#query", "how many days do I have for returns")
        await page.click("#search-form button")
        await page.wait_for_selector("#hits li")
        miss = await page.locator("#hits li.hit").count()
        await page.check("#documents li:has-text('Shop returns policy v1') input.bind")
        await page.click("#save-bindings")
        await page.wait_for_selector("#notice:has-text('1 document')")
        role_docs = (await api(page, "GET", f"/api/roles/{other_role}/documents"))["body"]
    assert bound == 2  # both new documents were bound to the role they were made under
    assert "Shop returns policy v1" in hits[0] and "7 days" in hits[0]
    assert "7 days" in (tool_result or "")
    assert unbound == 0 and miss == 0
    assert [d["name"] for d in role_docs["documents"]] == ["Shop returns policy v1"]
    assert default_role != other_role
