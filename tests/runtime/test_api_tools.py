"""Tool permissions over HTTP (``runtime/http/tools.py``) on both stores: who may read and write
a role's tools, the tenant's secrets, rules and grants; that a secret's value never comes back;
that a rule's PATCH is compare-and-set on its version; that revoking cascades; and that a
member sees and revokes only the grants they answer for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from runtime.config import Settings
from runtime.roles import default_role
from runtime.services import open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_api_conversations import Api, make_api
from tools.rules import Author

__all__ = ["postgres_url"]

TENANT = "local"
ALICE = "local-user"  # the local token's owner (an admin)
BOB = "bob"  # a member of the same tenant
SECRET_VALUE = "sk-live-4f3c2b1a0e9d"
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER = {
    "description": "Forecast for a city",
    "parameters": PARAMETERS,
    "method": "GET",
    "url_template": "https://api.example.com/forecast?q={city}",
    "headers": [{"header": "Authorization", "secret": "weather_key", "prefix": "Bearer "}],
    "timeout_s": 5,
    "target": "city",
}


async def _open(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, **settings: Any
) -> Any:
    extra: dict[str, Any] = {"storage": "memory"}
    if backend == "postgres":
        url = request.getfixturevalue("postgres_url")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            await truncate_all(pool)
        finally:
            await pool.close()
        extra = {"storage": "postgres", "database_url": url}
    return await open_services(
        Settings(port=0, data_dir=tmp_path / "data", knowledge_semantic=False,
                 tool_hosts="api.example.com", **extra, **settings),
        plugins=fake_plugins(),
    )  # fmt: skip


@pytest.fixture(params=["memory", "postgres"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    services = await _open(request.param, request, tmp_path)
    try:
        client = make_api(services)
        yield await anext(client)
        await client.aclose()
    finally:
        await services.close()


async def role_of(api: Api) -> str:
    return (await default_role(api.services.roles, TENANT)).id


def base(role: str) -> str:
    return f"/api/roles/{role}"


# ------------------------------------------------------------------ tools


async def test_members_read_a_roles_tools_and_only_admins_declare_or_delete_them(api: Api) -> None:
    role = await role_of(api)
    put = await api.http.put(f"{base(role)}/tools/weather", json=WEATHER, headers=api.alice)
    assert put.status_code == 200, put.text
    assert put.json()["url_template"] == WEATHER["url_template"]
    assert put.json()["headers"] == [{"header": "Authorization", "secret": "weather_key"}]

    as_member = await api.http.get(f"{base(role)}/tools", headers=api.bob)
    assert as_member.status_code == 200
    body = as_member.json()
    assert [(t["name"], t["kind"]) for t in body["tools"]] == [
        ("knowledge_search", "builtin"), ("confide", "builtin"), ("end_conversation", "builtin"),
        ("weather", "http"),
    ]  # fmt: skip
    assert body["allowed_hosts"] is None
    as_admin = (await api.http.get(f"{base(role)}/tools", headers=api.alice)).json()
    assert as_admin["allowed_hosts"] == ["api.example.com"]

    refused = await api.http.put(f"{base(role)}/tools/other", json=WEATHER, headers=api.bob)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    refused = await api.http.delete(f"{base(role)}/tools/weather", headers=api.bob)
    assert refused.status_code == 403
    elsewhere = await api.http.get(f"{base(role)}/tools", headers=api.eve)
    assert (elsewhere.status_code, elsewhere.json()["code"]) == (404, "role_not_found")
    # (Another tenant's admin gets 404 too: tests/runtime/test_policies.py.)

    assert (
        await api.http.delete(f"{base(role)}/tools/weather", headers=api.alice)
    ).status_code == 204
    gone = await api.http.delete(f"{base(role)}/tools/weather", headers=api.alice)
    assert (gone.status_code, gone.json()["code"]) == (404, "unknown_tool")
    left = (await api.http.get(f"{base(role)}/tools", headers=api.alice)).json()["tools"]
    assert [t["name"] for t in left] == ["knowledge_search", "confide", "end_conversation"]


@pytest.mark.parametrize(
    ("name", "change", "code"),
    [
        ("weather", {"url_template": "https://evil.example.net/f?q={city}"}, "host_not_allowed"),
        ("weather", {"url_template": "file:///etc/passwd"}, "invalid_tool"),
        ("weather", {"method": "TRACE"}, "invalid_tool"),
        ("weather", {"target": "days"}, "invalid_tool"),
        ("knowledge_search", {}, "invalid_tool"),
        ("bad name!", {}, "invalid_tool"),
    ],
)
async def test_a_bad_declaration_is_400_with_a_stable_code(
    api: Api, name: str, change: dict[str, Any], code: str
) -> None:
    role = await role_of(api)
    response = await api.http.put(
        f"{base(role)}/tools/{name}", json=WEATHER | change, headers=api.alice
    )
    assert (response.status_code, response.json()["code"]) == (400, code), response.text
    tools = (await api.http.get(f"{base(role)}/tools", headers=api.alice)).json()["tools"]
    assert [t["kind"] for t in tools] == ["builtin"] * 3


# ------------------------------------------------------------------ secrets


async def test_a_secret_is_write_only_and_admins_only(api: Api) -> None:
    role = await role_of(api)
    answers = [
        await api.http.put("/api/tool-secrets/weather_key", json={"value": SECRET_VALUE},
                           headers=api.alice),
        await api.http.put(f"{base(role)}/tools/weather", json=WEATHER, headers=api.alice),
        await api.http.get("/api/tool-secrets", headers=api.alice),
        await api.http.get(f"{base(role)}/tools", headers=api.alice),
        await api.http.get(f"{base(role)}/tools", headers=api.bob),
    ]  # fmt: skip
    assert [a.status_code for a in answers] == [200] * 5
    assert answers[0].json() == {"name": "weather_key"}
    assert answers[2].json() == {"secrets": [{"name": "weather_key"}]}
    assert all(SECRET_VALUE not in a.text for a in answers)
    assert await api.services.tool_secrets.get(TENANT, "weather_key") == SECRET_VALUE

    for method, path, body in (
        ("GET", "/api/tool-secrets", None),
        ("PUT", "/api/tool-secrets/weather_key", {"value": "mine now"}),
        ("DELETE", "/api/tool-secrets/weather_key", None),
    ):
        refused = await api.http.request(method, path, json=body, headers=api.bob)
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    other = await api.http.get("/api/tool-secrets", headers=api.eve)
    assert other.status_code == 403  # eve is the other tenant's member
    assert await api.services.tool_secrets.names("other-tenant") == []

    bad = await api.http.put("/api/tool-secrets/no spaces", json={"value": "v"}, headers=api.alice)
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_secret")
    bad = await api.http.put("/api/tool-secrets/k", json={"value": "a\nb"}, headers=api.alice)
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_secret")
    assert SECRET_VALUE not in bad.text

    assert (
        await api.http.delete("/api/tool-secrets/weather_key", headers=api.alice)
    ).status_code == 204
    gone = await api.http.delete("/api/tool-secrets/weather_key", headers=api.alice)
    assert (gone.status_code, gone.json()["code"]) == (404, "secret_not_found")
    assert await api.services.tool_secrets.get(TENANT, "weather_key") is None


# ------------------------------------------------------------------ rules


async def test_admins_write_rules_against_the_version_and_members_read_active_ones(
    api: Api,
) -> None:
    role = await role_of(api)
    made = await api.http.post(
        f"{base(role)}/rules", json={"text": "  Weather lookups are always fine. "},
        headers=api.alice,
    )  # fmt: skip
    assert made.status_code == 201, made.text
    rule = made.json()
    assert (rule["text"], rule["status"], rule["version"]) == (
        "Weather lookups are always fine.", "active", 1,
    )  # fmt: skip
    assert rule["author"] == {"kind": "person", "id": ALICE}
    refused = await api.http.post(f"{base(role)}/rules", json={"text": "x"}, headers=api.bob)
    assert refused.status_code == 403

    proposed = await api.services.rules.create(
        TENANT, role, "Never send email.", Author("role", role)
    )
    listed = (await api.http.get(f"{base(role)}/rules", headers=api.alice)).json()["rules"]
    assert [(r["id"], r["status"]) for r in listed] == [
        (rule["id"], "active"), (proposed.id, "proposed"),
    ]  # fmt: skip
    only = await api.http.get(f"{base(role)}/rules?status=proposed", headers=api.alice)
    assert [r["id"] for r in only.json()["rules"]] == [proposed.id]
    as_member = await api.http.get(f"{base(role)}/rules", headers=api.bob)
    assert [r["id"] for r in as_member.json()["rules"]] == [rule["id"]]
    refused = await api.http.get(f"{base(role)}/rules?status=proposed", headers=api.bob)
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    refused = await api.http.patch(
        f"{base(role)}/rules/{proposed.id}", json={"expected_version": 1, "status": "active"},
        headers=api.bob,
    )  # fmt: skip
    assert refused.status_code == 403

    activated = await api.http.patch(
        f"{base(role)}/rules/{proposed.id}", json={"expected_version": 1, "status": "active"},
        headers=api.alice,
    )  # fmt: skip
    assert activated.status_code == 200, activated.text
    assert (activated.json()["status"], activated.json()["version"]) == ("active", 2)
    stale = await api.http.patch(
        f"{base(role)}/rules/{proposed.id}", json={"expected_version": 1, "status": "retired"},
        headers=api.alice,
    )  # fmt: skip
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_revision"
    assert stale.json()["current_version"] == 2
    assert stale.json()["current"]["status"] == "active"
    retired = await api.http.patch(
        f"{base(role)}/rules/{proposed.id}", json={"expected_version": 2, "status": "retired"},
        headers=api.alice,
    )  # fmt: skip
    assert retired.json()["status"] == "retired"
    empty = await api.http.patch(
        f"{base(role)}/rules/{proposed.id}", json={"expected_version": 3}, headers=api.alice
    )
    assert (empty.status_code, empty.json()["code"]) == (422, "invalid_rule")
    unknown = await api.http.patch(
        f"{base(role)}/rules/rule_none", json={"expected_version": 1, "text": "x"},
        headers=api.alice,
    )  # fmt: skip
    assert (unknown.status_code, unknown.json()["code"]) == (404, "rule_not_found")
    elsewhere = await api.http.get(f"{base(role)}/rules", headers=api.eve)
    assert elsewhere.status_code == 404


# ------------------------------------------------------------------ grants


async def grant(api: Api, role: str, headers: dict[str, str], **fields: Any) -> Any:
    body = {"action": "weather", "effect": "allow", "scope": "lifetime"} | fields
    response = await api.http.post(f"{base(role)}/grants", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


async def listed(api: Api, role: str, headers: dict[str, str], query: str = "") -> list[str]:
    response = await api.http.get(f"{base(role)}/grants{query}", headers=headers)
    assert response.status_code == 200, response.text
    return [g["id"] for g in response.json()["grants"]]


async def test_revoking_through_the_api_cascades_and_the_status_filter_shows_it(
    api: Api,
) -> None:
    role = await role_of(api)
    root = await grant(api, role, api.alice, target="Berlin", arguments={"city": "Berlin"})
    assert root["granted_by"] == {"kind": "person", "id": ALICE}
    assert (root["status"], root["arguments"], root["target"]) == (
        "active", {"city": "Berlin"}, "Berlin",
    )  # fmt: skip
    child = await grant(api, role, api.alice, parent=root["id"])
    grandchild = await grant(api, role, api.alice, effect="deny", parent=child["id"])
    other = await grant(api, role, api.alice, scope="once")

    revoked = await api.http.post(f"{base(role)}/grants/{root['id']}/revoke", headers=api.alice)
    assert revoked.status_code == 200, revoked.text
    assert sorted(revoked.json()["revoked"]) == sorted([root["id"], child["id"], grandchild["id"]])
    assert await listed(api, role, api.alice, "?status=active") == [other["id"]]
    assert await listed(api, role, api.alice, "?status=revoked") == [
        root["id"], child["id"], grandchild["id"],
    ]  # fmt: skip
    assert len(await listed(api, role, api.alice)) == 4
    again = await api.http.post(f"{base(role)}/grants/{root['id']}/revoke", headers=api.alice)
    assert again.json() == {"revoked": []}
    # Nothing derives from a revoked decision.
    orphan = await api.http.post(
        f"{base(role)}/grants",
        json={"action": "weather", "effect": "allow", "scope": "lifetime", "parent": root["id"]},
        headers=api.alice,
    )  # fmt: skip
    assert (orphan.status_code, orphan.json()["code"]) == (422, "invalid_grant")
    unknown = await api.http.post(f"{base(role)}/grants/grant_none/revoke", headers=api.alice)
    assert (unknown.status_code, unknown.json()["code"]) == (404, "grant_not_found")


async def test_a_member_sees_creates_and_revokes_only_the_grants_they_answer_for(
    api: Api,
) -> None:
    role = await role_of(api)
    await api.services.threads.create(TENANT, BOB, "th_bob", role)
    await api.services.threads.create(TENANT, ALICE, "th_alice", role)
    admins = await grant(api, role, api.alice)  # lifetime, the admin's
    in_bobs = await grant(api, role, api.alice, scope="thread", thread_id="th_bob")
    in_alices = await grant(api, role, api.alice, scope="thread", thread_id="th_alice")
    bobs = await grant(api, role, api.bob, scope="once", thread_id="th_bob", effect="deny")
    assert bobs["granted_by"] == {"kind": "person", "id": BOB}

    assert await listed(api, role, api.bob) == [in_bobs["id"], bobs["id"]]
    assert await listed(api, role, api.alice) == [
        admins["id"], in_bobs["id"], in_alices["id"], bobs["id"],
    ]  # fmt: skip
    assert (await api.http.get(f"{base(role)}/grants", headers=api.eve)).status_code == 404

    body = {"action": "weather", "effect": "allow"}
    for fields, status, code in (
        ({"scope": "lifetime"}, 403, "forbidden"),
        ({"scope": "once"}, 403, "forbidden"),  # no thread
        ({"scope": "thread", "thread_id": "th_alice"}, 404, "thread_not_found"),
        ({"scope": "thread", "thread_id": "th_bob", "parent": admins["id"]}, 422, "invalid_grant"),
    ):
        refused = await api.http.post(f"{base(role)}/grants", json=body | fields, headers=api.bob)
        assert (refused.status_code, refused.json()["code"]) == (status, code), fields
    for hidden in (admins, in_alices):
        refused = await api.http.post(f"{base(role)}/grants/{hidden['id']}/revoke", headers=api.bob)
        assert (refused.status_code, refused.json()["code"]) == (404, "grant_not_found")

    # The admin derives a lifetime grant from bob's: bob's revocation revokes it too, unnamed.
    derived = await grant(api, role, api.alice, parent=in_bobs["id"])
    revoked = await api.http.post(f"{base(role)}/grants/{in_bobs['id']}/revoke", headers=api.bob)
    assert revoked.json() == {"revoked": [in_bobs["id"]]}
    assert derived["id"] in await listed(api, role, api.alice, "?status=revoked")
    assert await listed(api, role, api.alice, "?status=active") == [
        admins["id"], in_alices["id"], bobs["id"],
    ]  # fmt: skip


async def test_grant_writes_count_against_the_write_rate_limit(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    services = await _open("memory", request, tmp_path, write_requests_per_minute=2)
    try:
        client = make_api(services)
        api = await anext(client)
        role = await role_of(api)
        await grant(api, role, api.alice)
        await grant(api, role, api.alice)
        limited = await api.http.post(
            f"{base(role)}/grants",
            json={"action": "weather", "effect": "allow", "scope": "lifetime"},
            headers=api.alice,
        )  # fmt: skip
        assert (limited.status_code, limited.json()["code"]) == (429, "rate_limited")
        assert "Retry-After" in limited.headers
        assert (await api.http.get(f"{base(role)}/grants", headers=api.alice)).status_code == 200
        await client.aclose()
    finally:
        await services.close()
