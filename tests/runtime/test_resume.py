"""Resuming a session after a dropped connection (SPEC RES-1), over real WebSockets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.typing import Subprotocol

from plugins.fakes import FakeBrain, FakeTTS
from runtime.accounts import Principal
from runtime.client import SUBPROTOCOL, RealtimeClient
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode, decode_audio
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

LONG = "One two three four five six. Seven eight nine ten eleven. Twelve thirteen fourteen."


@pytest.fixture
async def slow_server(tmp_path: Path) -> Any:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory", resume_ttl_s=30)
    plugins = fake_plugins(brain=FakeBrain([LONG]), tts=FakeTTS(ms_per_char=25))
    async with running_server(settings, plugins=plugins) as server:
        yield server


def seq_of(data: str | bytes) -> int:
    return decode_audio(data)[0] if isinstance(data, bytes) else int(json.loads(data)["seq"])


async def resume(server: RunningServer, session_id: str, resume_token: str, last_seq: int,
                 *, token: str | None = None) -> websockets.ClientConnection:  # fmt: skip
    ws = await websockets.connect(
        server.ws_url, max_size=2**22, subprotocols=[Subprotocol(SUBPROTOCOL)]
    )
    await ws.send(
        json.dumps(
            {
                "type": "openrealtime.session.resume",
                "token": token or server.token,
                "session_id": session_id,
                "resume_token": resume_token,
                "last_seq": last_seq,
            }
        )
    )
    return ws


async def test_a_dropped_connection_resumes_without_gap_or_duplicate(
    slow_server: RunningServer,
) -> None:
    server = slow_server
    client = RealtimeClient(server.ws_url, server.token)
    session = await client.connect()
    first_token = session["resume_token"]
    await client.send_text("tell me")
    await client.wait_for(lambda m: m.audio is not None)
    await asyncio.sleep(0.3)
    before = [m.seq for m in client.messages]
    await client.close()  # the network drops mid-answer
    await asyncio.sleep(0.5)  # the answer goes on meanwhile

    ws = await resume(server, session["id"], first_token, before[-1])
    resumed = json.loads(await ws.recv())
    assert resumed["type"] == "openrealtime.session.resumed"
    assert resumed.get("missing") is None and resumed["replayed"] > 0
    after: list[int] = []
    done = False
    while not done:
        data = await asyncio.wait_for(ws.recv(), 10)
        after.append(seq_of(data))
        done = isinstance(data, str) and json.loads(data)["type"] == "response.done"
    await ws.close()
    assert after == list(range(before[-1] + 1, before[-1] + 1 + len(after)))
    assert sorted(set(before) | set(after)) == list(range(1, after[-1] + 1))

    # The token rotated: the new one works …
    ws = await resume(server, session["id"], resumed["resume_token"], after[-1])
    again = json.loads(await ws.recv())
    assert again["type"] == "openrealtime.session.resumed"
    await ws.close()
    # … and once it has been used, the first one is refused.
    ws = await resume(server, session["id"], first_token, after[-1])
    refusal = json.loads(await ws.recv())
    assert refusal["error"]["code"] == "resume_refused"
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CloseCode.FORBIDDEN


async def test_a_second_connection_fences_the_first(server: RunningServer) -> None:
    client = RealtimeClient(server.ws_url, server.token)
    session = await client.connect()
    token = session["resume_token"]
    ws = await resume(server, session["id"], token, 1)
    assert json.loads(await ws.recv())["type"] == "openrealtime.session.resumed"
    assert await client.wait_closed() == CloseCode.SUPERSEDED
    await client.close()
    await ws.send(
        json.dumps(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "hi"}],
                },
            }
        )
    )
    await ws.send(json.dumps({"type": "response.create"}))
    try:
        while True:
            data = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(data, str) and json.loads(data)["type"] == "response.done":
                break
    finally:
        await ws.close()


async def test_resume_is_refused_to_others_in_the_url_and_after_expiry(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory", resume_ttl_s=0.3)
    async with running_server(settings, plugins=fake_plugins()) as server:
        client = RealtimeClient(server.ws_url, server.token)
        session = await client.connect()
        token = session["resume_token"]
        await server.services.accounts.add_token(Principal("local", "mallory"), "mallorys")

        async def refused(ws: websockets.ClientConnection) -> str:
            error = json.loads(await ws.recv())
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            return str(error["error"]["code"])

        # Another user holding the session id and the token.
        stolen = await resume(server, session["id"], token, 0, token="mallorys")
        assert await refused(stolen) == "resume_refused"
        # A token in the URL is refused outright.
        ws = await websockets.connect(server.ws_url + "?resume_token=" + token)
        assert await refused(ws) == "token_in_url"
        await client.close()
        await asyncio.sleep(0.6)  # past the resume window
        assert await refused(await resume(server, session["id"], token, 0)) == "resume_refused"


async def test_the_python_client_resumes_and_dedupes_by_seq(slow_server: RunningServer) -> None:
    server = slow_server
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("tell me")
        await client.wait_for(lambda m: m.audio is not None)
        await client.drop()
        await asyncio.sleep(0.3)
        resumed = await client.reconnect()
        assert resumed.get("missing") is None
        await client.wait_type("response.done", timeout=15)
        seqs = [m.seq for m in client.messages]
        assert seqs == list(range(1, len(seqs) + 1))
        # The rotated token works again after a second drop.
        await client.drop()
        await client.reconnect()
        await client.send_text("again")
        await client.wait_type("response.done", timeout=15)
