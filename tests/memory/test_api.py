"""``/api/memory`` over real HTTP (httpx to the running server) on both stores: list, add,
edit, delete, clear, the on/off switch, the change log, export/import, isolation, 409s."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.accounts import Principal, ensure_local_token
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.postgres import truncate_all
from tests.runtime.conftest import fake_plugins

BOB = Principal("local", "bob")


@dataclass
class Api:
    server: RunningServer
    http: httpx.AsyncClient
    me: dict[str, str]
    bob: dict[str, str]

    async def add(self, content: str, kind: str = "preference", **more: Any) -> dict[str, Any]:
        response = await self.http.post(
            "/api/memory", json={"kind": kind, "content": content, **more}, headers=self.me
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    async def entries(self, headers: dict[str, str] | None = None, **params: str) -> Any:
        response = await self.http.get("/api/memory", params=params, headers=headers or self.me)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(params=["memory", "postgres"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    if request.param == "memory":
        settings = Settings(port=0, data_dir=tmp_path, storage="memory")
    else:
        url = request.getfixturevalue("postgres_url")
        settings = Settings(port=0, data_dir=tmp_path, storage="postgres", database_url=url)
    async with running_server(settings, plugins=fake_plugins()) as server:
        if server.services.database is not None:
            await truncate_all(server.services.database.pool)
            server.services.local_token = await ensure_local_token(
                server.services.accounts, tmp_path
            )
        await server.services.accounts.add_token(BOB, "bobs-token")
        async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
            yield Api(
                server,
                http,
                {"Authorization": f"Bearer {server.token}"},
                {"Authorization": "Bearer bobs-token"},
            )


async def test_add_list_edit_delete(api: Api) -> None:
    listed = await api.entries()
    assert listed["enabled"] is True and listed["entries"] == []
    role_id = listed["role_id"]
    first = await api.add("我喜欢简洁回答")
    assert first["role_id"] == role_id
    assert {k: first[k] for k in ("kind", "content", "origin", "status", "revision")} == {
        "kind": "preference", "content": "我喜欢简洁回答", "origin": "person",
        "status": "active", "revision": 1,
    }  # fmt: skip
    assert set(first) >= {"id", "key", "source_thread_id", "created_at", "updated_at"}
    second = await api.add("My goal is to learn Japanese", kind="goal")
    assert [e["id"] for e in (await api.entries(role_id=role_id))["entries"]] == [
        second["id"],
        first["id"],
    ]
    patched = await api.http.patch(
        f"/api/memory/{first['id']}",
        json={"content": "我喜欢非常简洁的回答", "revision": 1},
        headers=api.me,
    )
    assert patched.status_code == 200 and patched.json()["revision"] == 2
    deleted = await api.http.delete(
        f"/api/memory/{second['id']}", params={"revision": 1}, headers=api.me
    )
    assert deleted.status_code == 204
    assert [e["content"] for e in (await api.entries())["entries"]] == ["我喜欢非常简洁的回答"]


async def test_stale_revisions_are_409(api: Api) -> None:
    entry = await api.add("I like tea")
    ok = await api.http.patch(
        f"/api/memory/{entry['id']}", json={"content": "I like chai", "revision": 1}, headers=api.me
    )
    assert ok.status_code == 200
    stale = await api.http.patch(
        f"/api/memory/{entry['id']}", json={"content": "I like milk", "revision": 1}, headers=api.me
    )
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_revision" and stale.json()["current_revision"] == 2
    gone = await api.http.delete(
        f"/api/memory/{entry['id']}", params={"revision": 1}, headers=api.me
    )
    assert gone.status_code == 409 and gone.json()["code"] == "stale_revision"


async def test_bad_input_has_stable_codes(api: Api) -> None:
    def post(body: dict[str, Any]) -> Any:
        return api.http.post("/api/memory", json=body, headers=api.me)

    assert (await post({"kind": "opinion", "content": "x"})).json()["code"] == "invalid_request"
    too_long = await post({"kind": "fact", "content": "x" * 301})
    assert too_long.status_code == 422
    secret = await post({"kind": "fact", "content": "my password is hunter2"})
    assert (secret.status_code, secret.json()["code"]) == (422, "sensitive_content")
    role = await post({"kind": "fact", "content": "x", "role_id": "role_nope"})
    assert (role.status_code, role.json()["code"]) == (404, "role_not_found")
    missing = await api.http.patch(
        "/api/memory/mem_nope", json={"content": "x", "revision": 1}, headers=api.me
    )
    assert (missing.status_code, missing.json()["code"]) == (404, "memory_not_found")
    assert (await api.http.get("/api/memory")).status_code == 401
    no_revision = await api.http.delete("/api/memory/mem_nope", headers=api.me)
    assert no_revision.status_code == 422


async def test_duplicates_merge_and_the_limit_is_409(api: Api) -> None:
    first = await api.add("I like tea")
    again = await api.http.post(
        "/api/memory", json={"kind": "preference", "content": "i like tea."}, headers=api.me
    )
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    for n in range(99):
        await api.add(f"fact number {n}", kind="fact")
    full = await api.http.post(
        "/api/memory", json={"kind": "fact", "content": "one too many"}, headers=api.me
    )
    assert (full.status_code, full.json()["code"]) == (409, "memory_full")


async def test_users_and_roles_are_isolated(api: Api) -> None:
    mine = await api.add("I like tea")
    role = await api.http.post("/api/roles", json={"name": "Coach"}, headers=api.me)
    coach = role.json()["id"]
    await api.add("I run every day", kind="goal", role_id=coach)
    assert [e["content"] for e in (await api.entries())["entries"]] == ["I like tea"]
    assert [e["content"] for e in (await api.entries(role_id=coach))["entries"]] == [
        "I run every day"
    ]
    assert (await api.entries(api.bob))["entries"] == []
    stolen = await api.http.patch(
        f"/api/memory/{mine['id']}", json={"content": "x", "revision": 1}, headers=api.bob
    )
    assert stolen.status_code == 404
    deleted = await api.http.delete(
        f"/api/memory/{mine['id']}", params={"revision": 1}, headers=api.bob
    )
    assert deleted.status_code == 404
    cleared = await api.http.post("/api/memory/clear", json={}, headers=api.bob)
    assert cleared.json() == {"deleted": 0}
    assert len((await api.entries())["entries"]) == 1


async def test_switch_clear_and_change_log(api: Api) -> None:
    entry = await api.add("I like tea")
    role_id = (await api.entries())["role_id"]
    off = await api.http.put(
        "/api/memory/settings", json={"role_id": role_id, "enabled": False}, headers=api.me
    )
    assert off.json()["role_id"] == role_id and off.json()["enabled"] is False
    listed = await api.entries()
    assert listed["enabled"] is False and len(listed["entries"]) == 1  # nothing deleted
    role = await api.http.get(f"/api/roles/{role_id}", headers=api.me)
    assert role.json()["memory_enabled"] is False
    await api.http.patch(
        f"/api/memory/{entry['id']}", json={"content": "I like chai", "revision": 1}, headers=api.me
    )
    cleared = await api.http.post("/api/memory/clear", json={"role_id": role_id}, headers=api.me)
    assert cleared.json() == {"deleted": 1}
    changes = (await api.http.get("/api/memory/changes", headers=api.me)).json()["changes"]
    assert [(c["action"], c["actor"], c["entry_id"]) for c in changes] == [
        ("deleted", "person", entry["id"]),
        ("updated", "person", entry["id"]),
        ("created", "person", entry["id"]),
    ]
    assert all("content" not in c and c["at"] for c in changes)


async def test_export_import_never_restores_deleted_entries(api: Api) -> None:
    keep = await api.add("I like tea")
    drop = await api.add("I like cake")
    old = (await api.http.get("/api/memory/export", headers=api.me)).json()
    assert old["format"] == "openrealtime.memory" and len(old["entries"]) == 2
    await api.http.delete(f"/api/memory/{drop['id']}", params={"revision": 1}, headers=api.me)
    restored = await api.http.post("/api/memory/import", json=old, headers=api.me)
    assert restored.json() == {"imported": 0, "skipped": 2}
    assert [e["id"] for e in (await api.entries())["entries"]] == [keep["id"]]
    # Bob restoring the same document gets his own copy of what it holds.
    bobs = await api.http.post("/api/memory/import", json=old, headers=api.bob)
    assert bobs.json() == {"imported": 2, "skipped": 0}
    bad = await api.http.post("/api/memory/import", json={"format": "x"}, headers=api.me)
    assert (bad.status_code, bad.json()["code"]) == (422, "invalid_memory")
