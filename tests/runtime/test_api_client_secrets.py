"""Client secrets (``runtime/http/client_secrets.py``, issue 14): minted over the HTTP API as
OpenAI's GA endpoint answers, refused by every other HTTP route, accepted by the realtime
WebSocket for sessions of their bound role only, and ended with their user."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from openai.types.realtime import ClientSecretCreateResponse
from websockets.typing import Subprotocol

from runtime.accounts import Principal
from runtime.app import create_app
from runtime.client import SUBPROTOCOL
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode
from runtime.realtime.session import VoiceSession
from runtime.roles import default_role
from runtime.server import running_server
from runtime.services import Services, open_services
from tests.runtime.conftest import fake_plugins

URL = "/v1/realtime/client_secrets"
MAX = Principal("local", "max", role="member")
FIRST_MESSAGE = [Subprotocol(SUBPROTOCOL)]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    services: Services
    http: httpx.AsyncClient
    owner: dict[str, str]
    member: dict[str, str]

    async def mint(self, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        response = await self.http.post(URL, json=body, headers=headers or self.member)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False,
                        write_requests_per_minute=1000)  # fmt: skip
    services = await open_services(settings, plugins=fake_plugins())
    await services.accounts.add_token(MAX, "max-token")
    transport = httpx.ASGITransport(app=create_app(services))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            yield Api(services, http, bearer(services.local_token or ""), bearer("max-token"))
    finally:
        await services.close()


async def test_a_member_mints_a_secret_shaped_as_openais(api: Api) -> None:
    before = time.time()
    minted = await api.mint()  # every field is optional
    after = time.time()
    assert minted["value"].startswith("ek_") and len(minted["value"]) > 40
    assert int(before) + 600 - 1 <= minted["expires_at"] <= after + 600
    parsed = ClientSecretCreateResponse.model_validate(minted)
    assert parsed.session.type == "realtime"
    default = await default_role(api.services.roles, "local")
    assert minted["session"] == {
        "type": "realtime", "object": "realtime.session", "id": minted["session"]["id"],
        "model": default.id, "instructions": default.instructions,
    }  # fmt: skip
    assert minted["session"]["id"].startswith("cs_")
    for seconds in (10, 7200):
        bounded = await api.mint(
            {"expires_after": {"anchor": "created_at", "seconds": seconds},
             "session": {"type": "realtime"}}
        )  # fmt: skip
        assert int(before) + seconds - 1 <= bounded["expires_at"] <= time.time() + seconds


async def test_the_secret_is_bound_to_the_role_model_names(api: Api) -> None:
    made = await api.http.post(
        "/api/roles", json={"name": "Tutor", "voice": "alloy"}, headers=api.owner
    )
    tutor = made.json()
    by_id = await api.mint({"session": {"type": "realtime", "model": tutor["id"]}})
    by_name = await api.mint({"session": {"type": "realtime", "model": "Tutor"}})
    for minted in (by_id, by_name):
        assert minted["session"]["model"] == tutor["id"]
        assert minted["session"]["audio"] == {"output": {"voice": "alloy"}}
        ClientSecretCreateResponse.model_validate(minted)
        who = await api.services.authenticate(minted["value"], realtime=True)
        assert who is not None and who.bound_role_id == tutor["id"]
    unknown = await api.http.post(
        URL, json={"session": {"type": "realtime", "model": "gpt-realtime"}}, headers=api.member
    )
    assert unknown.status_code == 404 and unknown.json()["code"] == "role_not_found"
    await api.http.post("/api/roles", json={"name": "Tutor"}, headers=api.owner)
    twice = await api.http.post(URL, json={"session": {"model": "Tutor"}}, headers=api.member)
    assert twice.status_code == 409 and twice.json()["code"] == "role_ambiguous"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"expires_after": {"anchor": "created_at", "seconds": 9}}, "invalid_expiry"),
        ({"expires_after": {"seconds": 7201}}, "invalid_expiry"),
        ({"expires_after": {"seconds": 0}}, "invalid_expiry"),
        ({"expires_after": {"anchor": "now", "seconds": 60}}, "invalid_request"),
        ({"session": {"type": "transcription"}}, "unsupported_session_type"),
        ({"session": {"type": "realtime", "voice": "ash"}}, "unsupported_session_field"),
        ({"lifetime": 60}, "invalid_request"),
    ],
)
async def test_a_bad_request_is_refused_with_a_stable_code(
    api: Api, body: dict[str, Any], code: str
) -> None:
    refused = await api.http.post(URL, json=body, headers=api.member)
    assert refused.status_code == 422 and refused.json()["code"] == code, refused.text


async def test_a_secret_is_refused_by_the_http_api(api: Api) -> None:
    secret = (await api.mint())["value"]
    for method, path in [("GET", "/api/me"), ("POST", URL), ("GET", "/api/roles"),
                         ("GET", "/metrics")]:  # fmt: skip
        refused = await api.http.request(method, path, headers=bearer(secret))
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["code"] == "client_secret_not_allowed"
    assert (await api.http.get("/health", headers=bearer(secret))).status_code == 200
    anonymous = await api.http.post(URL, json={})
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthorized"


async def test_a_secret_authenticates_a_realtime_caller_with_its_bound_role(api: Api) -> None:
    minted = await api.mint()
    secret, role_id = minted["value"], minted["session"]["model"]
    services = api.services
    who = await services.authenticate_header(f"Bearer {secret}", realtime=True)
    assert who == MAX and who is not None
    assert who.bound_role_id == role_id and who.is_client_secret
    assert await services.authenticate(secret) is None  # not outside a realtime session
    assert await services.authenticate_header(f"Bearer {secret}") is None
    role = await services.role_for(who, None)
    assert role is not None and role.id == role_id
    other = await services.roles.create("local", name="Other", instructions="", voice=None,
                                        language=None, memory_enabled=False)  # fmt: skip
    assert await services.role_for(who, other.id) is None
    token = await services.authenticate("max-token")
    assert token is not None and token.bound_role_id is None
    assert await services.role_for(token, other.id) == other


async def test_a_disabled_users_secrets_stop_working(api: Api) -> None:
    secret = (await api.mint())["value"]
    assert await api.services.authenticate(secret, realtime=True) is not None
    disabled = await api.http.post("/api/users/max/disable", headers=api.owner)
    assert disabled.status_code == 200
    assert await api.services.authenticate(secret, realtime=True) is None


async def test_a_secret_opens_sessions_of_its_role_only_and_they_close_with_the_user(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    async with running_server(settings, plugins=fake_plugins()) as server:
        services = server.services
        await services.accounts.add_token(MAX, "max-token")
        tutor = await services.roles.create("local", name="Tutor", instructions="", voice=None,
                                            language=None, memory_enabled=False)  # fmt: skip
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            minted = await http.post(
                URL, json={"session": {"type": "realtime", "model": "Tutor"}},
                headers=bearer("max-token"),
            )  # fmt: skip
        secret = minted.json()["value"]
        # The GA handshake, as an SDK makes it: its model names no role, the bound one wins.
        url = server.ws_url + "?model=gpt-realtime"
        async with websockets.connect(url, additional_headers=bearer(secret)) as ws:
            created = json.loads(await ws.recv())
            assert created["type"] == "session.created", created
            assert created["session"]["model"] == "Tutor"
            (live,) = services.live_sessions.values()
            assert isinstance(live, VoiceSession) and live.role is not None
            assert live.role.id == tutor.id
            # The user's disabling ends the session the secret opened.
            await services.accounts.disable_user("local", "max")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await ws.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.CREDENTIALS_REVOKED


async def test_a_secret_cannot_start_a_session_of_another_role(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    async with running_server(settings, plugins=fake_plugins()) as server:
        services = server.services
        await services.accounts.add_token(MAX, "max-token")
        default = await default_role(services.roles, "local")
        other = await services.roles.create("local", name="Other", instructions="", voice=None,
                                            language=None, memory_enabled=False)  # fmt: skip
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            minted = await http.post(URL, json={}, headers=bearer("max-token"))
        secret = minted.json()["value"]
        assert minted.json()["session"]["model"] == default.id
        # The token in the first message, which names another role.
        async with websockets.connect(server.ws_url, subprotocols=FIRST_MESSAGE) as ws:
            start = {"type": "openrealtime.session.start", "token": secret, "model": other.id}
            await ws.send(json.dumps(start))
            error = json.loads(await ws.recv())
            assert error["type"] == "error" and error["error"]["code"] == "role_mismatch"
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.FORBIDDEN


async def test_a_secret_continues_and_resumes_only_its_roles_conversations(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    async with running_server(settings, plugins=fake_plugins()) as server:
        services = server.services
        await services.accounts.add_token(MAX, "max-token")
        other = await services.roles.create("local", name="Other", instructions="", voice=None,
                                            language=None, memory_enabled=False)  # fmt: skip
        async with httpx.AsyncClient(base_url=server.http_url) as http:
            minted = await http.post(URL, json={}, headers=bearer("max-token"))
        secret = minted.json()["value"]  # bound to the default role
        # A session of the other role, opened with the long-lived token, then dropped.
        async with websockets.connect(server.ws_url, subprotocols=FIRST_MESSAGE) as ws:
            start = {"type": "openrealtime.session.start", "token": "max-token", "model": other.id}
            await ws.send(json.dumps(start))
            created = json.loads(await ws.recv())
        session = created["session"]["openrealtime"]
        attempts = [
            {"type": "openrealtime.session.start", "token": secret,
             "requested_thread_id": session["thread_id"],
             "previous_voice_session_id": session["id"]},
            {"type": "openrealtime.session.resume", "token": secret, "session_id": session["id"],
             "resume_token": session["resume_token"], "last_seq": created["seq"]},
        ]  # fmt: skip
        for attempt in attempts:
            async with websockets.connect(server.ws_url, subprotocols=FIRST_MESSAGE) as ws:
                await ws.send(json.dumps(attempt))
                error = json.loads(await ws.recv())
                assert error["type"] == "error", error
                assert error["error"]["code"] == "role_mismatch", (attempt["type"], error)
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None
                assert closed.value.rcvd.code == CloseCode.FORBIDDEN
