"""Accounts over the HTTP API and the protocol (SPEC ACC-1 … ACC-5), with the regression tests
of the four findings: (a) a second user and token can be made, (b) a member cannot edit or
delete a role, (c) a member's memory switch is a personal override, (d) ``/metrics`` needs a
token."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websockets

from journal.events import ThreadRef
from runtime.accounts import LOCAL_PRINCIPAL, Principal
from runtime.app import create_app
from runtime.config import Settings
from runtime.memory_hook import session_memory
from runtime.realtime.protocol import CloseCode
from runtime.roles import default_role
from runtime.server import running_server
from runtime.services import Services, open_services
from tests.runtime.conftest import fake_plugins

ADA = Principal("local", "ada", role="admin")
MAX = Principal("local", "max", role="member")


@dataclass
class Api:
    services: Services
    http: httpx.AsyncClient
    owner: dict[str, str]
    admin: dict[str, str]
    member: dict[str, str]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False,
                        write_requests_per_minute=1000)  # fmt: skip
    services = await open_services(settings, plugins=fake_plugins())
    await services.accounts.add_token(ADA, "ada-token")
    await services.accounts.add_token(MAX, "max-token")
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            yield Api(
                services, http, bearer(services.local_token or ""), bearer("ada-token"),
                bearer("max-token"),
            )  # fmt: skip
    finally:
        await services.close()


async def test_a_second_user_and_token_can_be_made_over_the_api(api: Api) -> None:
    added = await api.http.post("/api/users", json={"user": "bob"}, headers=api.admin)
    assert added.status_code == 201 and added.json()["role"] == "member"
    again = await api.http.post("/api/users", json={"user": "bob"}, headers=api.admin)
    assert again.status_code == 409 and again.json()["code"] == "user_exists"
    owner = await api.http.post(
        "/api/users", json={"user": "root", "role": "owner"}, headers=api.admin
    )
    assert owner.status_code == 403 and owner.json()["code"] == "forbidden"
    tokens = []
    for name in ("laptop", "phone"):
        issued = await api.http.post(
            "/api/tokens", json={"user": "bob", "name": name, "expires_days": 30},
            headers=api.admin,
        )  # fmt: skip
        assert issued.status_code == 201, issued.text
        tokens.append(issued.json())
    assert tokens[0]["token"] != tokens[1]["token"]
    me = await api.http.get("/api/me", headers=bearer(tokens[1]["token"]))
    assert me.json() == {
        "tenant": "local", "user": "bob", "role": "member", "token_id": tokens[1]["id"],
        "scopes": ["api"],
    }  # fmt: skip
    listed = (await api.http.get("/api/tokens", headers=bearer(tokens[0]["token"]))).json()
    assert [t["name"] for t in listed["tokens"]] == ["laptop", "phone"]
    assert "token" not in listed["tokens"][0] and tokens[0]["token"] not in str(listed)
    users = (await api.http.get("/api/users", headers=api.owner)).json()["users"]
    assert [(u["user"], u["role"]) for u in users] == [
        ("local-user", "owner"), ("ada", "admin"), ("max", "member"), ("bob", "member"),
    ]  # fmt: skip


async def test_members_list_and_revoke_only_their_own_tokens(api: Api) -> None:
    ada_tokens = (await api.http.get("/api/tokens", headers=api.admin)).json()["tokens"]
    mine = (await api.http.get("/api/tokens", headers=api.member)).json()["tokens"]
    assert [t["user"] for t in mine] == ["max"]
    others = await api.http.get("/api/tokens?user=ada", headers=api.member)
    assert others.status_code == 403
    theirs = await api.http.delete(f"/api/tokens/{ada_tokens[0]['id']}", headers=api.member)
    assert theirs.status_code == 404 and theirs.json()["code"] == "token_not_found"
    assert (await api.http.get("/api/me", headers=api.admin)).status_code == 200
    revoked = await api.http.delete(f"/api/tokens/{mine[0]['id']}", headers=api.member)
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    refused = await api.http.get("/api/me", headers=api.member)  # refused at once
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"


async def test_a_disabled_user_is_refused_at_once(api: Api) -> None:
    assert (await api.http.get("/api/me", headers=api.member)).status_code == 200
    disabled = await api.http.post("/api/users/max/disable", headers=api.admin)
    assert disabled.status_code == 200 and disabled.json()["disabled"] is True
    assert (await api.http.get("/api/me", headers=api.member)).status_code == 401
    owner = await api.http.post("/api/users/local-user/disable", headers=api.admin)
    assert owner.status_code == 403  # only owners disable owners
    last = await api.http.post("/api/users/local-user/disable", headers=api.owner)
    assert last.status_code == 409 and last.json()["code"] == "last_owner"


async def test_a_member_cannot_edit_or_delete_a_role(api: Api) -> None:
    role = (await api.http.post("/api/roles", json={"name": "Tutor"}, headers=api.admin)).json()
    url = f"/api/roles/{role['id']}"
    patch = await api.http.patch(url, json={"memory_enabled": False}, headers=api.member)
    assert patch.status_code == 403
    assert patch.json() == {
        "code": "forbidden", "message": "only the tenant's admins and owners may do this",
    }  # fmt: skip
    delete = await api.http.delete(url, headers=api.member)
    assert delete.status_code == 403 and delete.json()["code"] == "forbidden"
    create = await api.http.post("/api/roles", json={"name": "Mine"}, headers=api.member)
    assert create.status_code == 403
    bind = await api.http.put(f"{url}/documents", json={"document_ids": []}, headers=api.member)
    assert bind.status_code == 403
    kept = (await api.http.get(url, headers=api.member)).json()
    assert kept["name"] == "Tutor" and kept["memory_enabled"] is True
    assert (await api.http.delete(url, headers=api.admin)).status_code == 204


async def test_a_members_memory_switch_is_only_their_own(api: Api) -> None:
    role = await default_role(api.services.roles, "local")
    off = await api.http.put("/api/memory/settings", json={"enabled": False}, headers=api.member)
    assert off.status_code == 200
    assert off.json() == {
        "role_id": role.id, "enabled": False, "settings": {"memory_enabled": False},
        "overrides": {"memory_enabled": False}, "defaults": {"memory_enabled": True},
    }  # fmt: skip
    owners = (await api.http.get("/api/memory/settings", headers=api.owner)).json()
    assert owners["settings"] == {"memory_enabled": True}
    assert owners["overrides"] == {"memory_enabled": None}
    stored = await api.services.roles.get("local", role.id)
    assert stored is not None and stored.memory_enabled is True  # the role's default stays

    def enabled(user: str) -> object:
        thread = ThreadRef("local", user, "th_1")
        return session_memory(api.services, thread, role, lambda _e: None).is_enabled()

    assert await enabled("max") is False  # type: ignore[misc]
    assert await enabled("local-user") is True  # type: ignore[misc]
    as_role = await api.http.put(
        "/api/memory/settings", json={"enabled": False, "scope": "role"}, headers=api.member
    )
    assert as_role.status_code == 403
    # An admin's switch is the role's default, for everyone; a member's override cannot
    # turn back on what the admin turned off.
    await api.http.put("/api/memory/settings", json={"enabled": False}, headers=api.admin)
    await api.http.put("/api/memory/settings", json={"enabled": True}, headers=api.member)
    members = (await api.http.get("/api/memory/settings", headers=api.member)).json()
    assert members["settings"] == {"memory_enabled": False}
    assert members["overrides"] == {"memory_enabled": True}


async def test_metrics_need_a_token_with_the_metrics_scope(api: Api) -> None:
    anonymous = await api.http.get("/metrics")
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthorized"
    assert (await api.http.get("/metrics", headers=api.admin)).status_code == 403
    scraper = await api.services.accounts.issue_token(
        "local", "ada", name="prometheus", scopes=("metrics",)
    )
    scraped = await api.http.get("/metrics", headers=bearer(scraper.secret))
    assert scraped.status_code == 200 and "openrealtime_live_sessions" in scraped.text
    summary = await api.http.get("/metrics.json", headers=bearer(scraper.secret))
    assert summary.status_code == 200 and "sessions" in summary.json()
    api_only = await api.http.get("/api/me", headers=bearer(scraper.secret))
    assert api_only.status_code == 403  # a scraper's token is for /metrics only
    assert (await api.http.get("/metrics", headers=api.owner)).status_code == 200


async def test_too_many_write_requests_get_429_with_retry_after(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False,
                        write_requests_per_minute=3)  # fmt: skip
    services = await open_services(settings, plugins=fake_plugins())
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            auth = bearer(services.local_token or "")
            for _ in range(3):
                ok = await http.post("/api/memory/clear", json={}, headers=auth)
                assert ok.status_code == 200
            refused = await http.post("/api/memory/clear", json={}, headers=auth)
            assert refused.status_code == 429 and refused.json()["code"] == "rate_limited"
            assert int(refused.headers["retry-after"]) >= 1
            assert (await http.get("/api/memory", headers=auth)).status_code == 200  # reads
    finally:
        await services.close()


async def test_live_sessions_per_user_are_limited_and_revocation_closes_them(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False,
                        max_live_sessions_per_user=1)  # fmt: skip
    async with running_server(settings, plugins=fake_plugins()) as server:
        issued = await server.services.accounts.issue_token(*_local(), name="talk")
        auth = bearer(issued.secret)
        # The GA handshake: the bearer header opens the session, no first message.
        async with websockets.connect(server.ws_url, additional_headers=auth) as first:
            assert json.loads(await first.recv())["type"] == "session.created"
            async with websockets.connect(server.ws_url, additional_headers=auth) as second:
                error = json.loads(await second.recv())
                assert error["error"]["code"] == "too_many_sessions"
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await second.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == CloseCode.TOO_MANY_SESSIONS
            await server.services.accounts.revoke_token("local", issued.info.id)
            with pytest.raises(websockets.ConnectionClosed) as revoked:
                while True:
                    await first.recv()
            assert revoked.value.rcvd is not None
            assert revoked.value.rcvd.code == CloseCode.CREDENTIALS_REVOKED
        assert server.services.live_sessions == {}


def _local() -> tuple[str, str]:
    return LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user
