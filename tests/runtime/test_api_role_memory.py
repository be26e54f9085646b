"""Role memory over HTTP (``runtime/http/role_memory.py``) on both stores: who sees which pool
entries, Remember and Forget, the change log, purge and who may, the settings and their
revision, a thread's confessions and enrichments — and that deleting a conversation keeps what
was learned from it unless its ``thread:`` tag is purged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memory.errors import MemoryUnavailable
from memory.pool import (
    EntryMeta,
    EntrySource,
    PoolEntry,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from memory.role_records import Confession, Enrichment, new_record_id
from runtime.config import Settings
from runtime.roles import default_role
from runtime.services import open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_api_conversations import Api, make_api, segment_body

__all__ = ["postgres_url"]

TENANT = "local"
ALICE = "local-user"  # the local token's owner
BOB = "bob"  # a member of the same tenant
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "postgres"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    extra: dict[str, Any] = {"storage": "memory"}
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            await truncate_all(pool)
        finally:
            await pool.close()
        extra = {"storage": "postgres", "database_url": url}
    services = await open_services(
        Settings(port=0, data_dir=tmp_path / "data", knowledge_semantic=False, **extra),
        plugins=fake_plugins(),
    )
    services.memory_models["scripted"] = object()  # type: ignore[assignment]  # a name to pick
    try:
        client = make_api(services)
        yield await anext(client)
        await client.aclose()
    finally:
        await services.close()


async def role_of(api: Api) -> str:
    return (await default_role(api.services.roles, TENANT)).id


def learned_fact(entry_id: str, role: str, thread: str, *users: str) -> PoolEntry:
    """A fact learned in ``thread`` with ``users`` present."""
    source = ThreadSource(thread, f"item-{entry_id}")
    tags = {tenant_tag(TENANT), thread_tag(thread), from_tag(users[0]), "travel"}
    meta = EntryMeta(
        id=entry_id, role_id=role, layer="fact",
        tags=frozenset(tags | {for_person_tag(u) for u in users}), sources=(source,),
        created_at=NOW, access=(ThreadAccess(thread, source.item_id, frozenset(users)),),
    )  # fmt: skip
    return PoolEntry(meta, f"content of {entry_id}")


def concluded(entry_id: str, role: str, sources: tuple[str, ...], *users: str) -> PoolEntry:
    meta = EntryMeta(
        id=entry_id, role_id=role, layer="observation",
        tags=frozenset({tenant_tag(TENANT), *(for_person_tag(u) for u in users)}),
        sources=tuple(EntrySource(s) for s in sources), created_at=NOW + timedelta(minutes=1),
        confidence=0.8,
    )  # fmt: skip
    return PoolEntry(meta, f"concluded {entry_id}")


async def entries(api: Api, role: str, headers: dict[str, str], tags: str | None = None) -> Any:
    params = {} if tags is None else {"tags": tags}
    response = await api.http.get(f"/api/roles/{role}/memory", headers=headers, params=params)
    assert response.status_code == 200, response.text
    return response.json()["entries"]


async def remember(api: Api, role: str, headers: dict[str, str], content: str, **extra: Any) -> Any:
    return await api.http.post(
        f"/api/roles/{role}/memory/remember", json={"content": content, **extra}, headers=headers
    )


# ---------------------------------------------------------------------------- the pool


async def test_two_users_of_one_tenant_see_only_their_own_entries(api: Api) -> None:
    role = await role_of(api)
    mine = await remember(api, role, api.alice, "I prefer tea", tags=["Drinks", "a:b", "x y"])
    assert mine.status_code == 201, mine.text
    entry = mine.json()
    assert entry["layer"] == "pinned" and entry["content"] == "I prefer tea"
    # A proposed system tag ("a:b") is dropped, never kept.
    assert set(entry["tags"]) == {
        from_tag(ALICE), for_person_tag(ALICE), tenant_tag(TENANT), "drinks", "x-y",
    }  # fmt: skip
    assert (entry["version"], entry["sources"], entry["invalidated_at"]) == (1, [], None)
    assert (await remember(api, role, api.bob, "I prefer coffee")).status_code == 201
    await api.services.pool.add(learned_fact("f_alice", role, "th_a", ALICE), "memory_model")
    await api.services.pool.add(learned_fact("f_both", role, "th_ab", ALICE, BOB), "memory_model")

    alice = await entries(api, role, api.alice)
    bob = await entries(api, role, api.bob)
    assert [e["content"] for e in alice] == [
        "content of f_alice",
        "content of f_both",
        "I prefer tea",
    ]
    assert [e["content"] for e in bob] == ["content of f_both", "I prefer coffee"]
    assert set(alice[0]) == {
        "id", "layer", "tags", "content", "confidence", "created_at", "invalidated_at",
        "version", "sources",
    }  # fmt: skip
    assert alice[0]["sources"] == [{"thread": "th_a", "item": "item-f_alice"}]
    assert [e["id"] for e in await entries(api, role, api.alice, tags="travel,thread:th_a")] == [
        "f_alice"
    ]
    assert await entries(api, role, api.bob, tags="drinks") == []
    # Another tenant's owner does not even find the role.
    other = await api.http.get(f"/api/roles/{role}/memory", headers=api.eve)
    assert (other.status_code, other.json()["code"]) == (404, "role_not_found")


async def test_remember_refuses_secrets_and_empty_content(api: Api) -> None:
    role = await role_of(api)
    secret = await remember(api, role, api.alice, "my password is hunter2hunter2")
    assert (secret.status_code, secret.json()["code"]) == (422, "sensitive_content")
    blank = await remember(api, role, api.alice, "   ")
    assert (blank.status_code, blank.json()["code"]) == (422, "invalid_memory")
    too_many = await api.http.get(
        f"/api/roles/{role}/memory", params={"tags": ",".join(f"t{i}" for i in range(17))},
        headers=api.alice,
    )  # fmt: skip
    assert (too_many.status_code, too_many.json()["code"]) == (422, "invalid_tags")


async def test_forget_takes_back_my_part_and_refuses_a_foreign_entry(api: Api) -> None:
    role = await role_of(api)
    await api.services.pool.add(learned_fact("f_alice", role, "th_a", ALICE), "memory_model")
    await api.services.pool.add(learned_fact("f_both", role, "th_ab", ALICE, BOB), "memory_model")
    url = f"/api/roles/{role}/memory/forget"
    for entry_id in ("f_alice", "no-such-entry"):
        foreign = await api.http.post(url, json={"entry_id": entry_id}, headers=api.bob)
        assert (foreign.status_code, foreign.json()["code"]) == (409, "foreign_entry")
    shared = await api.http.post(url, json={"entry_id": "f_both"}, headers=api.bob)
    assert shared.json() == {"entry_id": "f_both", "version": 2}
    assert await entries(api, role, api.bob) == []
    assert {e["id"] for e in await entries(api, role, api.alice)} == {"f_alice", "f_both"}

    changes = (await api.http.get(f"/api/roles/{role}/memory/log", headers=api.alice)).json()
    assert [(c["entry_id"], c["version"], c["action"], c["by"]) for c in changes["changes"]] == [
        ("f_alice", 1, "add", "memory_model"),
        ("f_both", 1, "add", "memory_model"),
        ("f_both", 2, "forget", "person"),
    ]
    assert set(changes["changes"][0]) == {"version", "at", "by", "entry_id", "action"}
    bob_log = (await api.http.get(f"/api/roles/{role}/memory/log", headers=api.bob)).json()
    assert bob_log["changes"] == []  # he no longer sees f_both, and never saw f_alice


async def test_purge_answers_only_the_count_and_takes_derived_observations(api: Api) -> None:
    role = await role_of(api)
    pool = api.services.pool
    await pool.add(learned_fact("f1", role, "th_a", ALICE), "memory_model")
    await pool.add(learned_fact("f2", role, "th_a", ALICE), "memory_model")
    await pool.add(learned_fact("f3", role, "th_b", ALICE), "memory_model")
    await pool.add(concluded("o1", role, ("f1", "f3"), ALICE), "memory_model")
    await api.services.threads.create(TENANT, ALICE, "th_a", role)
    url = f"/api/roles/{role}/memory/purge"
    response = await api.http.post(url, json={"tag": "thread:th_a"}, headers=api.alice)
    assert response.status_code == 200, response.text
    assert response.json() == {"purged": 3}
    assert [e["id"] for e in await entries(api, role, api.alice)] == ["f3"]
    log = (await api.http.get(f"/api/roles/{role}/memory/log", headers=api.alice)).json()
    assert {c["entry_id"] for c in log["changes"]} == {"f3"}


async def test_who_may_purge_which_tag(api: Api) -> None:
    role = await role_of(api)
    await api.services.threads.create(TENANT, ALICE, "th_alice", role)
    await api.services.threads.create(TENANT, BOB, "th_bob", role)
    url = f"/api/roles/{role}/memory/purge"

    async def status(headers: dict[str, str], tag: str) -> tuple[int, str | None]:
        response = await api.http.post(url, json={"tag": tag}, headers=headers)
        return response.status_code, response.json().get("code")

    for tag in ("from:local-user", "thread:th_alice", "thread:th_unknown", "tenant:local",
                "tenant:other-tenant"):  # fmt: skip
        assert await status(api.bob, tag) == (403, "forbidden"), tag
    assert await status(api.bob, "from:bob") == (200, None)
    assert await status(api.bob, "thread:th_bob") == (200, None)
    # An admin purges any thread of the tenant and the tenant itself, never another tenant.
    assert await status(api.alice, "thread:th_bob") == (200, None)
    assert await status(api.alice, "tenant:local") == (200, None)
    assert await status(api.alice, "tenant:other-tenant") == (403, "forbidden")
    assert await status(api.alice, "from:bob") == (403, "forbidden")
    for tag in ("travel", "for:person:bob", "tool:search", "thread:", "from:"):
        assert await status(api.alice, tag) == (422, "invalid_purge_tag"), tag


# ---------------------------------------------------------------------------- settings


async def test_settings_are_admin_written_against_their_revision(api: Api) -> None:
    role = await role_of(api)
    url = f"/api/roles/{role}/memory/settings"
    fresh = (await api.http.get(url, headers=api.bob)).json()
    assert fresh == {
        "role_id": role, "revision": 0, "memory_model": None, "instructions": None,
        "concurrency": None, "budget": None, "memory_models": ["scripted"],
    }  # fmt: skip
    body = {
        "expected": 0, "memory_model": "scripted", "instructions": "Health stays private.",
        "concurrency": 2, "budget": {"period": "month", "limit_micros": 5_000_000},
    }  # fmt: skip
    member = await api.http.patch(url, json=body, headers=api.bob)
    assert (member.status_code, member.json()["code"]) == (403, "forbidden")
    unknown = await api.http.patch(url, json={**body, "memory_model": "gpt-9"}, headers=api.alice)
    assert (unknown.status_code, unknown.json()["code"]) == (400, "unknown_memory_model")
    saved = await api.http.patch(url, json=body, headers=api.alice)
    assert saved.status_code == 200, saved.text
    assert saved.json() | {"memory_models": []} == {
        "role_id": role, "revision": 1, "memory_model": "scripted",
        "instructions": "Health stays private.", "concurrency": 2,
        "budget": {"period": "month", "limit_micros": 5_000_000}, "memory_models": [],
    }  # fmt: skip
    stale = await api.http.patch(url, json={"expected": 0, "concurrency": 3}, headers=api.alice)
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_revision" and stale.json()["current_revision"] == 1
    # A field left out keeps its value; null clears it.
    cleared = await api.http.patch(
        url, json={"expected": 1, "budget": None, "memory_model": None}, headers=api.alice
    )
    assert cleared.json()["revision"] == 2
    assert (cleared.json()["budget"], cleared.json()["memory_model"]) == (None, None)
    assert cleared.json()["concurrency"] == 2
    assert cleared.json()["instructions"] == "Health stays private."
    seen_by_member = (await api.http.get(url, headers=api.bob)).json()
    assert seen_by_member["instructions"] is None and seen_by_member["concurrency"] == 2
    stored = await api.services.role_records.settings(TENANT, role)
    assert stored.revision == 2 and stored.instructions == "Health stays private."
    bad = await api.http.patch(url, json={"expected": 2, "concurrency": 0}, headers=api.alice)
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_request")


# ---------------------------------------------------------------------- a thread's records


async def test_confessions_and_enrichments_are_the_thread_owners_only(api: Api) -> None:
    role = await role_of(api)
    await api.services.threads.create(TENANT, ALICE, "th_a", role)
    records = api.services.role_records
    for n in (1, 2):
        await records.add_confession(
            Confession(
                id=new_record_id("conf"),
                tenant=TENANT,
                role_id=role,
                thread_id="th_a",
                user=ALICE,
                seq=n,
                text=f"I am unsure {n}",
                answer="That is fine.",
                answered_by="calm",
                at=NOW + timedelta(seconds=n),
            )  # fmt: skip
        )
    await records.add_enrichment(
        Enrichment(
            id=new_record_id("enr"),
            tenant=TENANT,
            role_id=role,
            thread_id="th_a",
            seq=3,
            text="book a table (she prefers tea)",
            original="book a table",
            entry_ids=("mem_1",),
            at=NOW,
        )  # fmt: skip
    )
    confessions = await api.http.get("/api/threads/th_a/confessions", headers=api.alice)
    assert [c["text"] for c in confessions.json()["confessions"]] == [
        "I am unsure 1", "I am unsure 2",
    ]  # fmt: skip
    assert set(confessions.json()["confessions"][0]) == {
        "id", "role_id", "seq", "text", "answer", "answered_by", "at",
    }  # fmt: skip
    enrichments = (await api.http.get("/api/threads/th_a/enrichments", headers=api.alice)).json()
    [e] = enrichments["enrichments"]
    assert (e["text"], e["original"], e["entry_ids"]) == (
        "book a table (she prefers tea)", "book a table", ["mem_1"],
    )  # fmt: skip
    for path in ("confessions", "enrichments"):
        for headers in (api.bob, api.eve):
            other = await api.http.get(f"/api/threads/th_a/{path}", headers=headers)
            assert (other.status_code, other.json()["code"]) == (404, "thread_not_found")
        unknown = await api.http.get(f"/api/threads/th_none/{path}", headers=api.alice)
        assert unknown.status_code == 404


# ---------------------------------------------------------------- deleting a conversation


async def test_deleting_a_conversation_keeps_what_was_learned_unless_purged(api: Api) -> None:
    role = await role_of(api)
    pool = api.services.pool
    for thread in ("th_keep", "th_forget"):
        await api.services.threads.create(TENANT, ALICE, thread, role)
        await pool.add(learned_fact(f"f_{thread}", role, thread, ALICE), "memory_model")
        body = segment_body(f"rec_{thread}", 0, 0, "hello", thread_id=thread, role_id=role)
        assert (await api.post(**body)).status_code == 200
    for thread in ("th_keep", "th_forget"):
        deleted = await api.http.delete(f"/api/conversations/rec_{thread}", headers=api.alice)
        assert deleted.status_code == 200, deleted.text
    assert {e["id"] for e in await entries(api, role, api.alice)} == {
        "f_th_keep", "f_th_forget",
    }  # fmt: skip
    # What the history page does when "also forget what the agent learned" is ticked.
    purged = await api.http.post(
        f"/api/roles/{role}/memory/purge", json={"tag": "thread:th_forget"}, headers=api.alice
    )
    assert purged.json() == {"purged": 1}
    assert [e["id"] for e in await entries(api, role, api.alice)] == ["f_th_keep"]


async def test_settings_and_records_outlive_the_process_on_postgres(
    postgres_url: str, tmp_path: Path
) -> None:
    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=1)
    try:
        await truncate_all(pool)
    finally:
        await pool.close()
    settings = Settings(
        port=0, data_dir=tmp_path / "data", knowledge_semantic=False, storage="postgres",
        database_url=postgres_url,
    )  # fmt: skip
    first = await open_services(settings, plugins=fake_plugins())
    try:
        first.memory_models["scripted"] = object()  # type: ignore[assignment]
        client = make_api(first)
        api = await anext(client)
        role = await role_of(api)
        url = f"/api/roles/{role}/memory/settings"
        body = {"expected": 0, "memory_model": "scripted", "instructions": "Keep it private."}
        assert (await api.http.patch(url, json=body, headers=api.alice)).status_code == 200
        await client.aclose()
    finally:
        await first.close()
    second = await open_services(settings, plugins=fake_plugins())
    try:
        kept = await second.role_records.settings(TENANT, role)
    finally:
        await second.close()
    assert (kept.revision, kept.memory_model, kept.instructions) == (
        1, "scripted", "Keep it private.",
    )  # fmt: skip


async def test_a_store_outage_is_503_memory_unavailable(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    role = await role_of(api)

    async def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise MemoryUnavailable("memory pool store unavailable: OSError")

    monkeypatch.setattr(api.services.role_records, "settings", unreachable)
    monkeypatch.setattr(api.services.pool, "read_visible", unreachable)
    for path in (f"/api/roles/{role}/memory/settings", f"/api/roles/{role}/memory"):
        response = await api.http.get(path, headers=api.alice)
        assert (response.status_code, response.json()["code"]) == (503, "memory_unavailable")
