"""Every HTTP route has a policy (SPEC ACC-3), and each caller gets exactly what it says.

``test_every_route_declares_a_policy`` walks the real application's route table. The table test
runs every route once per caller — owner, admin and member of the tenant ``local``, the owner of
another tenant, a client secret of the member, and anonymous — each on fresh services, and
checks the status class:

- anonymous: 2xx for ``anonymous`` routes, else 401;
- a client secret (``ek_…``): 2xx for ``anonymous`` routes, else 403
  ``client_secret_not_allowed`` (it only opens realtime sessions);
- a caller of ``local`` without the route's right: 403 (``metrics``: tokens without that scope);
- another tenant's owner: 2xx on collections (its own, empty), 404 on ``local``'s objects;
- otherwise 2xx. Per-user objects (documents, memories, records, tokens) are the caller's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from fastapi.routing import APIRoute

from memory.backup import to_document
from records.audio_store import seal_piece
from records.recordings import Recording
from runtime.accounts import LOCAL_PRINCIPAL, Principal
from runtime.app import create_app
from runtime.config import Settings
from runtime.http.policy import (
    FRAMEWORK_ROUTES,
    MESSAGE_POLICIES,
    Policy,
    application_routes,
    policy_of,
)
from runtime.realtime.protocol import KNOWN_TYPES
from runtime.services import Services, open_services
from runtime.telephony.call_records import CallRecord, record_id
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_api_conversations import segment_body

Caller = Literal["owner", "admin", "member", "other", "secret", "anonymous"]
CALLERS: tuple[Caller, ...] = ("owner", "admin", "member", "other", "secret", "anonymous")
PRINCIPALS: dict[str, Principal] = {
    "owner": LOCAL_PRINCIPAL,
    "admin": Principal("local", "ada", role="admin"),
    "member": Principal("local", "max", role="member"),
    "other": Principal("globex", "eve", role="owner"),
}
Kind = Literal["collection", "tenant_object", "user_object"]


@dataclass
class World:
    """What one case runs against: objects of ``local`` (and the caller's own)."""

    services: Services
    http: httpx.AsyncClient
    headers: dict[str, str]
    role: str
    user_target: str
    document: str
    memory: str
    record: str
    token: str
    export: dict[str, Any]


Body = Callable[[World], Any]


@dataclass(frozen=True)
class Case:
    method: str
    path: str
    kind: Kind
    body: Body | None = None
    allowed: int = 200
    """What a caller the policy lets through gets (a route whose body the case cannot make
    valid answers its own 4xx past the policy)."""

    def url(self, w: World) -> str:
        return self.path.format(
            role_id=w.role, user=w.user_target, document_id=w.document, entry_id=w.memory,
            record_id=w.record, token_id=w.token, call_id=CALL_ID, thread_id="th_policy",
            recording_id=RECORDING_ID,
            name="policy_tool", label="policy_mcp", rule_id="rule_none", grant_id="grant_none",
        )  # fmt: skip


RECORDING_ID = "rec_" + "0123456789abcdef" * 2
CALL_ID = record_id("sip:policy")
"""A phone call's record id; WebRTC's hangup takes it too and finds no such call (404)."""


def _json(value: Any) -> Body:
    return lambda _w: value


CASES: list[Case] = [
    Case("GET", "/health", "collection"),
    Case("GET", "/metrics", "collection"),
    Case("GET", "/metrics.json", "collection"),
    Case("GET", "/healthz/live", "collection"),
    Case("GET", "/healthz/ready", "collection"),
    Case("GET", "/api/me", "collection"),
    Case("GET", "/api/system", "collection"),
    Case("GET", "/api/users", "collection"),
    Case("POST", "/api/users", "collection", _json({"user": "newbie"})),
    Case("POST", "/api/users/{user}/disable", "tenant_object"),
    Case("PUT", "/api/users/{user}/role", "tenant_object", _json({"role": "admin"})),
    Case("GET", "/api/tokens", "collection"),
    Case("POST", "/api/tokens", "collection", _json({"name": "ci"})),
    Case("DELETE", "/api/tokens/{token_id}", "user_object"),
    Case("GET", "/api/roles", "collection"),
    Case("POST", "/api/roles", "collection", _json({"name": "Tutor"})),
    Case("GET", "/api/roles/{role_id}", "tenant_object"),
    Case("PATCH", "/api/roles/{role_id}", "tenant_object", _json({"name": "Coach"})),
    Case("DELETE", "/api/roles/{role_id}", "tenant_object"),
    Case("GET", "/api/roles/{role_id}/impact", "tenant_object"),
    Case("GET", "/api/voices", "collection"),
    Case("POST", "/api/voices/sample", "collection", _json({"text": "hi"})),
    Case("GET", "/api/roles/{role_id}/documents", "tenant_object"),
    Case("PUT", "/api/roles/{role_id}/documents", "tenant_object", _json({"document_ids": []})),
    Case("GET", "/api/documents", "collection"),
    Case("POST", "/api/documents", "collection", _json({"name": "n", "text": "hello world"})),
    Case(
        "POST",
        "/api/documents/import",
        "collection",
        _json({"filename": "a.md", "content": "hello"}),
    ),  # fmt: skip
    Case("GET", "/api/documents/{document_id}", "user_object"),
    Case("PATCH", "/api/documents/{document_id}", "user_object", _json({"name": "m"})),
    Case("DELETE", "/api/documents/{document_id}", "user_object"),
    Case("POST", "/api/knowledge/search", "collection", _json({"query": "hello"})),
    Case("GET", "/api/memory", "collection"),
    Case("POST", "/api/memory", "collection", _json({"kind": "preference", "content": "I like"})),
    Case(
        "PATCH",
        "/api/memory/{entry_id}",
        "user_object",
        _json({"content": "I like chai", "revision": 1}),
    ),  # fmt: skip
    Case("DELETE", "/api/memory/{entry_id}?revision=1", "user_object"),
    Case("POST", "/api/memory/clear", "collection", _json({})),
    Case("GET", "/api/memory/settings", "collection"),
    Case("PUT", "/api/memory/settings", "collection", _json({"enabled": False})),
    Case("GET", "/api/memory/changes", "collection"),
    Case("GET", "/api/memory/export", "collection"),
    Case("POST", "/api/memory/import", "collection", lambda w: w.export),
    Case("GET", "/api/conversations", "collection"),
    Case("POST", "/api/conversations", "collection", _json(segment_body("new", 0, 0, "hi"))),
    Case("GET", "/api/conversations/{record_id}", "user_object"),
    Case("DELETE", "/api/conversations/{record_id}", "user_object"),
    Case("POST", "/api/threads/{thread_id}/fork", "user_object", _json({})),
    Case("POST", "/v1/realtime/client_secrets", "collection", _json({})),
    Case("GET", "/api/threads/{thread_id}/memory", "user_object"),
    Case("GET", "/api/thread-memory/defaults", "collection"),
    Case(
        "PUT", "/api/thread-memory/defaults", "collection", _json({"use": True, "generate": False})
    ),
    Case(
        "POST",
        "/api/threads/{thread_id}/memory",
        "user_object",
        _json({"expected": None, "revision": 0, "command": {"type": "configure", "use": False}}),
    ),  # fmt: skip
    Case("GET", "/api/roles/{role_id}/memory", "tenant_object"),
    Case(
        "POST", "/api/roles/{role_id}/memory/remember", "tenant_object", _json({"content": "tea"})
    ),
    # No such entry: past the policy, 409 foreign_entry.
    Case(
        "POST",
        "/api/roles/{role_id}/memory/forget",
        "tenant_object",
        _json({"entry_id": "mem_none"}),
        allowed=409,
    ),  # fmt: skip
    Case("GET", "/api/roles/{role_id}/memory/log", "tenant_object"),
    Case(
        "POST",
        "/api/roles/{role_id}/memory/purge",
        "tenant_object",
        _json({"tag": "thread:th_policy"}),
    ),
    Case("GET", "/api/roles/{role_id}/memory/settings", "tenant_object"),
    Case(
        "PATCH",
        "/api/roles/{role_id}/memory/settings",
        "tenant_object",
        _json({"expected": 0, "concurrency": 2}),
    ),  # fmt: skip
    Case("GET", "/api/threads/{thread_id}/confessions", "user_object"),
    Case("GET", "/api/threads/{thread_id}/enrichments", "user_object"),
    Case("GET", "/api/roles/{role_id}/tools", "tenant_object"),
    # No host is allowed here: past the policy, 400 host_not_allowed.
    Case(
        "PUT",
        "/api/roles/{role_id}/tools/{name}",
        "tenant_object",
        _json({"parameters": {"type": "object"}, "method": "GET", "url_template": "https://x/"}),
        allowed=400,
    ),  # fmt: skip
    Case("DELETE", "/api/roles/{role_id}/tools/{name}", "tenant_object", allowed=404),
    Case("GET", "/api/roles/{role_id}/mcp_servers", "tenant_object"),
    # No host is allowed here either: past the policy, 400 host_not_allowed.
    Case(
        "PUT",
        "/api/roles/{role_id}/mcp_servers/{label}",
        "tenant_object",
        _json({"server_url": "https://x/mcp"}),
        allowed=400,
    ),
    Case("DELETE", "/api/roles/{role_id}/mcp_servers/{label}", "tenant_object", allowed=404),
    Case("GET", "/api/tool-secrets", "collection"),
    Case("PUT", "/api/tool-secrets/{name}", "collection", _json({"value": "v"})),
    Case("DELETE", "/api/tool-secrets/{name}", "tenant_object", allowed=404),
    Case("GET", "/api/roles/{role_id}/rules", "tenant_object"),
    Case("POST", "/api/roles/{role_id}/rules", "tenant_object", _json({"text": "Be kind."})),
    Case(
        "PATCH",
        "/api/roles/{role_id}/rules/{rule_id}",
        "tenant_object",
        _json({"expected_version": 1, "status": "retired"}),
        allowed=404,
    ),  # fmt: skip
    Case("GET", "/api/roles/{role_id}/grants", "tenant_object"),
    Case(
        "POST",
        "/api/roles/{role_id}/grants",
        "tenant_object",
        _json({"action": "x", "effect": "allow", "scope": "thread", "thread_id": "th_policy"}),
    ),  # fmt: skip
    Case("POST", "/api/roles/{role_id}/grants/{grant_id}/revoke", "tenant_object", allowed=404),
    # A JSON body is no offer: past the policy, 415 (tests/runtime/test_webrtc.py makes calls).
    Case("POST", "/v1/realtime/calls", "collection", _json({}), allowed=415),
    Case("POST", "/v1/realtime/calls/{call_id}/hangup", "collection", allowed=404),
    Case("GET", "/api/calls", "collection"),
    Case("GET", "/api/usage", "collection"),
    Case("GET", "/api/usage/budget", "collection"),
    Case(
        "PUT",
        "/api/usage/budget",
        "collection",
        _json({"daily_micro_usd": 1000, "monthly_micro_usd": None}),
    ),
    Case("GET", "/api/calls/{call_id}", "user_object"),
    Case("GET", "/api/recordings?thread_id=th_policy", "collection"),
    Case("GET", "/api/recordings/{recording_id}", "user_object"),
    Case("GET", "/api/recordings/{recording_id}/audio", "user_object"),
    Case("GET", "/api/recordings/{recording_id}/timeline", "user_object"),
    Case("GET", "/api/recordings/policy", "collection"),
    Case("PUT", "/api/recordings/policy", "collection", _json({"retention_days": 30})),
    Case(
        "PUT",
        "/api/recordings/{recording_id}/protection",
        "tenant_object",
        _json({"protected": True}),
    ),  # fmt: skip
    # A phone provider's webhook: its signature decides, not a token (telephony is off here).
    Case("POST", "/v1/telephony/twilio/voice", "collection", allowed=404),
]


DECLARED: dict[tuple[str, str], Policy] = {
    ("GET", "/health"): Policy.ANONYMOUS,
    ("GET", "/metrics"): Policy.METRICS,
    ("GET", "/metrics.json"): Policy.METRICS,
    ("GET", "/healthz/live"): Policy.ANONYMOUS,
    ("GET", "/healthz/ready"): Policy.ANONYMOUS,
    ("GET", "/api/users"): Policy.ADMIN,
    ("POST", "/api/users"): Policy.ADMIN,
    ("POST", "/api/users/{user}/disable"): Policy.ADMIN,
    ("PUT", "/api/users/{user}/role"): Policy.OWNER,
    ("POST", "/api/tokens"): Policy.ADMIN,
    ("POST", "/api/roles"): Policy.ADMIN,
    ("PATCH", "/api/roles/{role_id}"): Policy.ADMIN,
    ("DELETE", "/api/roles/{role_id}"): Policy.ADMIN,
    ("GET", "/api/roles/{role_id}/impact"): Policy.ADMIN,
    ("PUT", "/api/roles/{role_id}/documents"): Policy.ADMIN,
    ("PUT", "/api/thread-memory/defaults"): Policy.ADMIN,
    ("PATCH", "/api/roles/{role_id}/memory/settings"): Policy.ADMIN,
    ("PUT", "/api/roles/{role_id}/tools/{name}"): Policy.ADMIN,
    ("DELETE", "/api/roles/{role_id}/tools/{name}"): Policy.ADMIN,
    ("PUT", "/api/roles/{role_id}/mcp_servers/{label}"): Policy.ADMIN,
    ("DELETE", "/api/roles/{role_id}/mcp_servers/{label}"): Policy.ADMIN,
    ("GET", "/api/tool-secrets"): Policy.ADMIN,
    ("PUT", "/api/tool-secrets/{name}"): Policy.ADMIN,
    ("DELETE", "/api/tool-secrets/{name}"): Policy.ADMIN,
    ("POST", "/api/roles/{role_id}/rules"): Policy.ADMIN,
    ("PATCH", "/api/roles/{role_id}/rules/{rule_id}"): Policy.ADMIN,
    ("POST", "/v1/realtime/calls"): Policy.REALTIME,
    ("POST", "/v1/realtime/calls/{call_id}/hangup"): Policy.REALTIME,
    ("POST", "/v1/telephony/twilio/voice"): Policy.TELEPHONY,
    ("PUT", "/api/recordings/{recording_id}/protection"): Policy.ADMIN,
    ("GET", "/api/recordings/policy"): Policy.ADMIN,
    ("GET", "/api/usage/budget"): Policy.ADMIN,
    ("PUT", "/api/usage/budget"): Policy.ADMIN,
    ("PUT", "/api/recordings/policy"): Policy.ADMIN,
}
"""The policy each route must declare (every other route: ``member``), so a weakened
declaration fails here and not only in review."""


def expected(policy: Policy, kind: Kind, caller: Caller, allowed: int = 200) -> int:
    """The status class (200, 401, 403, 404) the policy gives ``caller`` (``allowed``: what
    the route answers a caller the policy lets through)."""
    if policy is Policy.ANONYMOUS:
        return 200
    if policy is Policy.TELEPHONY:
        return allowed  # the provider's signature decides; no token opens it
    if caller == "anonymous":
        return 401
    if policy is Policy.REALTIME:
        return allowed  # a token or a client secret, as the realtime WebSocket takes
    if caller == "secret":
        return 403
    if policy is Policy.METRICS:
        return 200 if caller == "owner" else 403  # only the local token has the metrics scope
    if caller == "other":
        return 200 if kind == "collection" else 404
    needed = {Policy.MEMBER: "member", Policy.ADMIN: "admin", Policy.OWNER: "owner"}[policy]
    return allowed if PRINCIPALS[caller].can(needed) else 403  # type: ignore[arg-type]


def _routes() -> dict[tuple[str, str], APIRoute]:
    app = create_app(None)  # type: ignore[arg-type]  # the route table needs no services
    found: dict[tuple[str, str], APIRoute] = {}
    for route in application_routes(app.routes):
        if isinstance(route, APIRoute):
            for method in route.methods:
                found[(method, route.path)] = route
    return found


def test_every_route_declares_a_policy() -> None:
    routes = application_routes(create_app(None).routes)  # type: ignore[arg-type]
    missing = [
        f"{sorted(r.methods)} {r.path}"
        for r in routes
        if isinstance(r, APIRoute) and policy_of(r) is None
    ]
    assert missing == [], f"routes without a policy: {missing}"
    others = {getattr(r, "path", None) for r in routes if not isinstance(r, APIRoute)}
    assert others <= set(FRAMEWORK_ROUTES), f"routes without a policy: {others}"
    assert set(MESSAGE_POLICIES) == set(KNOWN_TYPES), "every protocol message needs a policy"


def test_the_table_covers_every_route() -> None:
    table = {(c.method, c.path.split("?")[0]) for c in CASES}
    assert table == set(_routes())


@pytest.fixture
def make_world(tmp_path: Path) -> Callable[[Caller], Any]:
    @_asynccontext
    async def world(caller: Caller) -> AsyncIterator[World]:
        settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False)
        services = await open_services(settings, plugins=fake_plugins())
        try:
            tokens: dict[str, str] = {"owner": services.local_token or ""}
            for name in ("admin", "member", "other"):
                tokens[name] = f"{name}-token"
                await services.accounts.add_token(PRINCIPALS[name], tokens[name])
            member = await services.accounts.authenticate(tokens["member"])
            assert member is not None
            secret = await services.accounts.issue_client_secret(
                member, role_id="role_any", ttl=timedelta(minutes=10)
            )
            tokens["secret"] = secret.secret
            await services.accounts.add_user("local", "zed", role="member")
            transport = httpx.ASGITransport(app=create_app(services))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                own = caller if caller in ("owner", "admin", "member") else "owner"
                mine = {"Authorization": f"Bearer {tokens[own]}"}
                role = await http.post("/api/roles", json={"name": "R"}, headers=_h(tokens))
                document = await http.post(
                    "/api/documents", json={"name": "d", "text": "hello there"}, headers=mine
                )
                memory = await http.post(
                    "/api/memory", json={"kind": "fact", "content": "I live in Oslo"}, headers=mine
                )
                record = await http.post(
                    "/api/conversations", json=segment_body("r1", 0, 0, "hi"), headers=mine
                )
                who = PRINCIPALS.get(own, LOCAL_PRINCIPAL)
                await services.threads.create(who.tenant, who.user, "th_policy", role.json()["id"])
                victim = await services.accounts.issue_token(who.tenant, who.user, name="victim")
                await services.call_records.save(
                    CallRecord(who.tenant, who.user, "sip:policy", "sip", "+15550001111",
                               "+15550002222", role.json()["id"], None, datetime.now(UTC))
                )  # fmt: skip
                await services.recording_index.add(
                    Recording(who.tenant, RECORDING_ID, who.user, "vs_policy", "th_policy",
                              role.json()["id"], "local", "k", datetime.now(UTC))
                )  # fmt: skip
                assert services.audio_store is not None and services.keyring is not None
                piece = seal_piece(services.keyring, who.tenant, RECORDING_ID, 0, b"fLaC")
                await services.audio_store.put(RECORDING_ID, 0, piece)
                me = PRINCIPALS.get(caller, LOCAL_PRINCIPAL)
                export = to_document(await services.memory.backup(me.tenant, me.user))
                for response in (role, document, memory, record):
                    assert response.status_code in (200, 201), response.text
                headers = (
                    {} if caller == "anonymous" else {"Authorization": f"Bearer {tokens[caller]}"}
                )
                yield World(
                    services, http, headers, role.json()["id"], "zed", document.json()["id"],
                    memory.json()["id"], "r1", victim.info.id, export,
                )  # fmt: skip
        finally:
            await services.close()

    return world


def _h(tokens: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens['owner']}"}


def _asynccontext(f: Any) -> Any:
    import contextlib

    return contextlib.asynccontextmanager(f)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method} {c.path}")
async def test_each_caller_gets_what_the_policy_says(
    case: Case, make_world: Callable[[Caller], Any]
) -> None:
    key = (case.method, case.path.split("?")[0])
    policy = policy_of(_routes()[key])
    assert policy is DECLARED.get(key, Policy.MEMBER)
    got: dict[str, int] = {}
    want: dict[str, int] = {}
    for caller in CALLERS:
        async with make_world(caller) as w:
            kwargs: dict[str, Any] = {"headers": w.headers}
            if case.body is not None:
                kwargs["json"] = case.body(w)
            response = await w.http.request(case.method, case.url(w), **kwargs)
            got[caller] = (
                response.status_code // 100 * 100
                if response.status_code < 400
                else (response.status_code)
            )
            want[caller] = expected(policy, case.kind, caller, case.allowed)
            if response.status_code >= 400:
                assert response.json()["code"], response.text
            if caller == "secret" and policy not in (
                Policy.ANONYMOUS,
                Policy.REALTIME,
                Policy.TELEPHONY,
            ):
                assert response.json()["code"] == "client_secret_not_allowed"
    assert got == want, f"{case.method} {case.path} ({policy}): {got} != {want}"


def test_the_http_api_doc_lists_every_route_with_its_policy() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "http_api.md").read_text()
    listed = set()
    other_process = False  # the model server's section: `serve-models` routes, not these
    for line in doc.splitlines():
        if line.startswith("## "):
            other_process = line.strip() == "## Model server"
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if other_process:
            continue
        if len(cells) >= 3 and cells[0] in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
            listed.add((cells[0], cells[1], cells[2]))
    routes = {(m, p, str(policy_of(r))) for (m, p), r in _routes().items()}
    assert listed == routes
