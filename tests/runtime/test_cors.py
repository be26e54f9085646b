"""Pages on other origins (SPEC WEB-4) against the real server: OPENREALTIME_CORS_ORIGINS lets
exact origins use the HTTP API, the WebRTC offers and the WebSocket; a browser's connection from
any other origin is refused, clients that are no browser (no Origin) are not affected, and
credentials are never allowed. The browser side: tests/web/test_cross_origin.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import websockets
from pydantic import ValidationError

from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

PAGES = "https://voice.example.com"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory",
        cors_origins=f"{PAGES}, http://localhost:5173",
    )  # fmt: skip
    async with running_server(settings, plugins=fake_plugins()) as running:
        yield running


async def test_a_listed_origin_gets_cors_and_no_credentials_another_gets_none(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        preflight = await http.options(
            "/api/me",
            headers={"Origin": PAGES, "Access-Control-Request-Method": "GET",
                     "Access-Control-Request-Headers": "authorization"},
        )  # fmt: skip
        me = await http.get(
            "/api/me", headers={"Origin": PAGES, "Authorization": f"Bearer {server.token}"}
        )
        offer = await http.options(
            "/v1/realtime/calls",
            headers={"Origin": PAGES, "Access-Control-Request-Method": "POST"},
        )
        stranger = await http.get(
            "/api/me",
            headers={"Origin": "https://evil.example", "Authorization": f"Bearer {server.token}"},
        )
        stranger_preflight = await http.options(
            "/api/me",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
        )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == PAGES
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in preflight.headers
    assert me.status_code == 200 and me.headers["access-control-allow-origin"] == PAGES
    assert "location" in me.headers["access-control-expose-headers"].lower()
    assert offer.headers["access-control-allow-origin"] == PAGES
    assert "access-control-allow-origin" not in stranger.headers  # the browser drops it
    assert stranger_preflight.status_code == 400


async def test_a_browsers_websocket_from_an_unlisted_origin_is_refused(
    server: RunningServer,
) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(server.ws_url, origin="https://evil.example"):  # type: ignore[arg-type]
            pass
    response = refused.value.response
    assert response.status_code == 403
    assert json.loads(response.body or b"{}")["code"] == "origin_not_allowed"
    host = server.http_url.split("://", 1)[1]
    for origin in (PAGES, f"http://{host}", None):  # listed, the runtime's own, no browser
        auth = {"Authorization": f"Bearer {server.token}"}
        async with websockets.connect(
            server.ws_url,
            origin=origin,
            additional_headers=auth,  # type: ignore[arg-type]
        ) as ws:
            first = json.loads(await ws.recv())
            assert first["type"] == "session.created", (origin, first)


def test_an_origin_is_exact() -> None:
    for bad in ("voice.example.com", "https://voice.example.com/app", "ftp://x.example"):
        with pytest.raises(ValidationError, match="is not an origin"):
            Settings(cors_origins=bad)
    assert Settings(cors_origins=" HTTPS://Voice.Example.com ,*").cors_origin_set() == {
        "https://voice.example.com", "*",
    }  # fmt: skip


def test_the_runtimes_own_host_is_its_origin_even_through_a_proxy_that_drops_the_port() -> None:
    settings = Settings(cors_origins=PAGES)
    assert settings.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert settings.origin_allowed("http://127.0.0.1:8080", "127.0.0.1")  # nginx's $host
    assert not settings.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:9000")
    assert not settings.origin_allowed("https://evil.example", "voice-api.example.com")
    assert settings.origin_allowed(None, None) and settings.origin_allowed(PAGES, None)
