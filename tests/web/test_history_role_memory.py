"""The history page's delete dialog and role memory in a real browser (SPEC RM-7): "also forget
what the agent learned from this conversation" purges the thread's entries from the role's
pool after the delete; deleting without it keeps them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory.pool import (
    EntryMeta,
    PoolEntry,
    Reader,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from runtime.roles import default_role
from tests.web.conftest import Launch, ServerFactory, open_page
from tests.web.test_history import api


def learned(entry_id: str, role: str, tenant: str, user: str, thread: str) -> PoolEntry:
    source = ThreadSource(thread, f"item-{entry_id}")
    tags = {tenant_tag(tenant), thread_tag(thread), from_tag(user), for_person_tag(user)}
    meta = EntryMeta(
        id=entry_id, role_id=role, layer="fact", tags=frozenset(tags), sources=(source,),
        created_at=datetime.now(UTC),
        access=(ThreadAccess(thread, source.item_id, frozenset({user})),),
    )  # fmt: skip
    return PoolEntry(meta, f"learned in {thread}")


async def delete_from_history(page: Any, url: str, *, forget: bool) -> str:
    await page.goto(url)
    await page.wait_for_selector("body[data-ready=true]")
    await page.click("#delete")
    assert not await page.is_checked("#forget-learned")  # off unless asked
    if forget:
        await page.check("#forget-learned")
    await page.click("#confirm-delete")
    await page.wait_for_selector("#delete-report:not(.hidden)")
    return str(await page.text_content("#delete-report-text"))


async def test_delete_can_also_forget_what_the_agent_learned(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        services = server.services
        principal = await services.accounts.authenticate(server.token)
        assert principal is not None
        tenant, user = principal.tenant, principal.user
        role = (await default_role(services.roles, tenant)).id
        for thread in ("th_forget", "th_keep"):
            await services.threads.create(tenant, user, thread, role)
            for n in (1, 2):
                await services.pool.add(
                    learned(f"{thread}_{n}", role, tenant, user, thread), "memory_model"
                )
        browser = await launch(silence_wav)
        page = await open_page(browser, server, "/history.html")
        for thread in ("th_forget", "th_keep"):
            saved = await api(
                page, "POST", "/api/conversations",
                {"id": f"rec_{thread}", "idempotency_key": f"k_{thread}", "base_version": 0,
                 "start_index": 0, "messages": [{"role": "user", "text": "hello"}],
                 "thread_id": thread, "role_id": role, "title": thread},
            )  # fmt: skip
            assert saved["status"] == 200, saved

        forgot = await delete_from_history(
            page, f"{server.http_url}/history.html?id=rec_th_forget", forget=True
        )
        kept = await delete_from_history(
            page, f"{server.http_url}/history.html?id=rec_th_keep", forget=False
        )
        reader = Reader(user, tenant, frozenset({role}))
        left = {e.meta.id for e in await services.pool.read_visible(tenant, role, reader)}
        gone = [
            (await api(page, "GET", f"/api/conversations/rec_{t}"))["status"]
            for t in ("th_forget", "th_keep")
        ]
    assert "Conversation record: removed" in forgot
    assert "Role memory learned from it: 2 entries forgotten" in forgot
    assert "Role memory learned from it: kept" in kept
    assert left == {"th_keep_1", "th_keep_2"}
    assert gone == [404, 404]
