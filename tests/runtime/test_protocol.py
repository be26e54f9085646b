"""Protocol tests: a real websockets client against the real server, for every bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import websockets
from websockets.typing import Subprotocol

from runtime.client import SUBPROTOCOL, RealtimeClient, Received
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode, ErrorCode
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

FIRST_MESSAGE = Subprotocol(SUBPROTOCOL)


async def expect_error(client: RealtimeClient, code: str) -> dict[str, object]:
    event = await client.wait_type("error", timeout=5)
    assert event["error"]["code"] == code, event
    return event


async def still_works(client: RealtimeClient) -> None:
    await client.send_text("are you still there?")
    done = await client.wait_type("response.done", timeout=10)
    assert done["response"]["status"] == "completed"


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("{not json", ErrorCode.INVALID_JSON),
        ("[1, 2, 3]", ErrorCode.INVALID_MESSAGE),
        ('{"no_type": 1}', ErrorCode.INVALID_MESSAGE),
        ('{"type": "does.not.exist"}', ErrorCode.UNKNOWN_TYPE),
        (
            '{"type": "openrealtime.playback", "generation": -1, "played_ms": 5}',
            ErrorCode.INVALID_VALUE,
        ),
        ('{"type": "input_audio_buffer.commit", "extra": true}', ErrorCode.UNKNOWN_PARAMETER),
        ('{"type": "input_audio_buffer.append", "audio": "***"}', ErrorCode.INVALID_AUDIO),
        ('{"type": "input_audio_buffer.commit"}', ErrorCode.COMMIT_EMPTY),
        ('{"type": "response.cancel"}', ErrorCode.NO_RESPONSE),
        ('{"type": "openrealtime.session.start"}', ErrorCode.SESSION_ALREADY_STARTED),
        (b"\x01\x02\x03", ErrorCode.ODD_LENGTH_AUDIO),
        (b"\x00\x00" * 16_001, ErrorCode.AUDIO_FRAME_TOO_LONG),
        (b"\x00" * 300_000, ErrorCode.MESSAGE_TOO_LARGE),
        ("x" * 300_000, ErrorCode.MESSAGE_TOO_LARGE),
        (
            '{"type":"conversation.item.create","item":{"type":"message","role":"user","content":'
            '[{"type":"input_text","text":"' + "a" * 5000 + '"}]}}',
            ErrorCode.TEXT_TOO_LONG,
        ),
        ('"' + "[" * 10_000, ErrorCode.INVALID_JSON),
    ],
)
async def test_bad_input_gets_a_stable_error_and_the_session_survives(
    server: RunningServer, payload: str | bytes, code: str
) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_raw(payload)
        await expect_error(client, code)
        await still_works(client)


async def test_messages_before_session_start_are_refused(server: RunningServer) -> None:
    async with websockets.connect(server.ws_url, subprotocols=[FIRST_MESSAGE]) as ws:
        await ws.send(b"\x00\x00" * 160)
        event = json.loads(await ws.recv())
        assert event["type"] == "error"
        assert event["error"]["code"] == ErrorCode.SESSION_NOT_STARTED
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        event = json.loads(await ws.recv())
        assert event["error"]["code"] == ErrorCode.SESSION_NOT_STARTED
        await ws.send(json.dumps({"type": "openrealtime.session.start", "token": server.token}))
        event = json.loads(await ws.recv())
        assert event["type"] == "session.created"


async def test_without_credentials_a_ga_connection_is_refused_with_4001(
    server: RunningServer,
) -> None:
    async with websockets.connect(server.ws_url) as ws:
        event = json.loads(await ws.recv())
        assert event["error"]["code"] == ErrorCode.UNAUTHORIZED
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == CloseCode.UNAUTHORIZED


async def test_wrong_token_is_refused_with_4001(server: RunningServer) -> None:
    client = RealtimeClient(server.ws_url, "not-a-token")
    with pytest.raises(Exception, match="unauthorized"):
        await client.connect()
    assert await client.wait_closed() == CloseCode.UNAUTHORIZED
    await client.close()


async def test_bearer_header_authenticates(server: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {server.token}"}
    async with websockets.connect(server.ws_url, additional_headers=headers) as ws:
        created = json.loads(await ws.recv())  # at once: a GA session needs no first message
        assert created["type"] == "session.created"
        assert "seq" not in created and "openrealtime" not in created["session"]


async def test_unknown_role_is_refused(server: RunningServer) -> None:
    client = RealtimeClient(server.ws_url, server.token)
    with pytest.raises(Exception, match="role_not_found"):
        await client.connect(role_id="role_nope")
    assert await client.wait_closed() == CloseCode.FORBIDDEN
    await client.close()


async def test_no_start_in_time_closes_with_4008(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, start_timeout_s=0.3)
    async with running_server(settings, plugins=fake_plugins()) as srv:
        async with websockets.connect(srv.ws_url, subprotocols=[FIRST_MESSAGE]) as ws:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await ws.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.START_TIMEOUT


async def test_too_many_errors_close_the_session_with_4009(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, max_errors_per_session=5)
    async with running_server(settings, plugins=fake_plugins()) as srv:
        async with RealtimeClient(srv.ws_url, srv.token) as client:
            await client.connect()
            for _ in range(6):
                await client.send_raw("{")
            assert await client.wait_closed() == CloseCode.TOO_MANY_ERRORS
            assert len(client.events("error")) == 5


async def test_a_frame_above_the_hard_limit_closes_with_1009(tmp_path: Path) -> None:
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, hard_max_message_bytes=64 * 1024
    )
    async with running_server(settings, plugins=fake_plugins()) as srv:
        async with RealtimeClient(srv.ws_url, srv.token) as client:
            await client.connect()
            await client.send_raw(b"\x00" * (65 * 1024))
            assert await client.wait_closed() == CloseCode.MESSAGE_TOO_BIG


async def test_bad_input_in_one_session_does_not_touch_another(server: RunningServer) -> None:
    async with (
        RealtimeClient(server.ws_url, server.token) as bad,
        RealtimeClient(server.ws_url, server.token) as good,
    ):
        await bad.connect()
        await good.connect()
        assert bad.session["thread_id"] != good.session["thread_id"]
        await asyncio.gather(*(bad.send_raw(p) for p in ["{", b"\x01", "[]"] * 10))
        await still_works(good)
        assert good.events("error") == []


async def test_every_server_message_has_increasing_seq(server: RunningServer) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("hello")
        await client.wait_type("response.done")
        seqs = [m.seq for m in client.messages]
        assert seqs == list(range(1, len(seqs) + 1))
        assert any(isinstance(m, Received) and m.audio for m in client.messages)


async def test_health_and_roles_api(server: RunningServer) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=server.http_url) as http:
        assert (await http.get("/health")).json()["status"] == "ok"
        assert (await http.get("/api/roles")).status_code == 401
        auth = {"Authorization": f"Bearer {server.token}"}
        roles = (await http.get("/api/roles", headers=auth)).json()["roles"]
        assert [r["is_default"] for r in roles] == [True]
        created = await http.post(
            "/api/roles",
            headers=auth,
            json={"name": "Shop", "instructions": "Answer from the documents.", "language": "zh"},
        )
        assert created.status_code == 201
        role = created.json()
        patched = await http.patch(
            f"/api/roles/{role['id']}", headers=auth, json={"memory_enabled": False}
        )
        assert patched.json()["memory_enabled"] is False
        bad = await http.post("/api/roles", headers=auth, json={"name": ""})
        assert bad.status_code == 422
        default_id = roles[0]["id"]
        assert (await http.delete(f"/api/roles/{default_id}", headers=auth)).status_code == 409
        assert (await http.delete(f"/api/roles/{role['id']}", headers=auth)).status_code == 204
        missing = await http.get(f"/api/roles/{role['id']}", headers=auth)
        assert missing.status_code == 404
        assert missing.json()["code"] == "role_not_found"
