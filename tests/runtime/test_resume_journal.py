"""Resumes the outbox cannot satisfy (SPEC RES-1, RES-4), over real WebSockets.

Two servers in this test process share one PostgreSQL database, as two processes would: each has
its own live sessions and outboxes, the token store and the journal are shared. (The same with
real processes, SIGKILL included: ``test_restart.py``.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import websockets
from websockets.typing import Subprotocol

from journal.events import EventKind
from plugins.fakes import FakeBrain
from runtime.client import SUBPROTOCOL, ClientClosed, RealtimeClient
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode
from runtime.realtime.session import VoiceSession
from runtime.server import RunningServer, running_server
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]

ANSWER = "Nice to meet you, Ada."


@pytest.fixture
async def two_servers(
    postgres_url: str, pg_pool: Any, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, RunningServer, FakeBrain]]:
    """A and B on one database (``pg_pool`` empties its tables first). B's brain is kept to
    see what history it was given."""
    settings = Settings(port=0, data_dir=tmp_path, database_url=postgres_url, resume_ttl_s=30)
    brain_b = FakeBrain([ANSWER])
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            running_server(settings, plugins=fake_plugins(brain=FakeBrain([ANSWER])))
        )
        b = await stack.enter_async_context(
            running_server(settings, plugins=fake_plugins(brain=brain_b))
        )
        yield a, b, brain_b


async def raw_resume(url: str, token: str, session_id: str, resume_token: str, last_seq: int
                     ) -> websockets.ClientConnection:  # fmt: skip
    ws = await websockets.connect(url, max_size=2**22, subprotocols=[Subprotocol(SUBPROTOCOL)])
    await ws.send(
        json.dumps(
            {
                "type": "openrealtime.session.resume",
                "token": token,
                "session_id": session_id,
                "resume_token": resume_token,
                "last_seq": last_seq,
            }
        )
    )
    return ws


async def gone(server: RunningServer, session_id: str) -> None:
    for _ in range(500):
        if session_id not in server.services.live_sessions:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{session_id} is still live")


async def test_a_resume_on_another_process_continues_from_the_journal(
    two_servers: tuple[RunningServer, RunningServer, FakeBrain],
) -> None:
    a, b, brain_b = two_servers
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect(output_sample_rate=16000)
        await client.send_text("my name is Ada")
        await client.wait_type("response.done")
        last_seq = client.messages[-1].seq
        await client.drop()
        client.url = b.ws_url  # the load balancer sends it to B this time

        resumed = await client.reconnect()
        assert resumed["replayed"] is False and resumed["session_id"] == session["id"]
        assert resumed["last_seq"] == last_seq
        continued = resumed["session"]  # served as it was started
        assert continued["openrealtime"]["output_sample_rate"] == 16000
        assert continued["audio"]["output"]["format"]["rate"] == 16000
        reconcile = client.reconcile
        assert reconcile is not None and reconcile["from_seq"] == last_seq + 1
        assert reconcile["to_seq"] is None and reconcile["complete"] is True
        assert [(i["role"], i["text"]) for i in reconcile["items"]] == [
            ("user", "my name is Ada"),
            ("assistant", ANSWER),
        ]
        await gone(a, session["id"])  # A's detached copy was fenced

        await client.send_text("what is my name")
        done = await client.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        # B's brain saw the turns taken on A.
        assert "my name is Ada" in brain_b.requests[-1].model_text
        assert ANSWER in brain_b.requests[-1].model_text
        seqs = [m.seq for m in client.messages]
        assert seqs == list(range(1, len(seqs) + 1))  # numbering went on from last_seq
        assert all(m.seq > last_seq for m in client.messages[len(seqs) - 1 :])

        # It lands back on A: A's copy is gone, so A continues it from the journal in turn.
        await client.drop()
        client.url = a.ws_url
        again = await client.reconnect()
        assert again["replayed"] is False and client.reconcile is not None
        assert [i["text"] for i in client.reconcile["items"]][-2:] == ["what is my name", ANSWER]
        await gone(b, session["id"])
        await client.send_text("still there?")
        await client.wait_type("response.done")


async def test_a_connection_still_open_on_the_old_process_is_fenced(
    two_servers: tuple[RunningServer, RunningServer, FakeBrain],
) -> None:
    a, b, _ = two_servers
    async with RealtimeClient(a.ws_url, a.token) as old:
        session = await old.connect()
        await old.send_text("hello")
        await old.wait_type("response.done")
        ws = await raw_resume(
            b.ws_url, b.token, session["id"], old.resume_token, old.messages[-1].seq
        )
        resumed = json.loads(await ws.recv())
        assert resumed["type"] == "openrealtime.session.resumed" and resumed["replayed"] is False
        # A closes the connection it still had (4012) instead of serving the thread on.
        assert await old.wait_closed() == CloseCode.SUPERSEDED
        await gone(a, session["id"])
        copy = b.services.live_sessions[session["id"]]
        assert isinstance(copy, VoiceSession) and copy.epoch == 1
        await ws.close()


async def test_a_lost_resumed_answer_does_not_lock_the_client_out(
    two_servers: tuple[RunningServer, RunningServer, FakeBrain],
) -> None:
    a, b, _ = two_servers
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        old_token = client.resume_token
        await client.drop()
        # The server rotates and answers, but the answer never reaches the client.
        lost = await raw_resume(b.ws_url, b.token, session["id"], old_token, client._last_seq)
        await lost.close()
        # The client retries with the only token it has, on either process.
        for server in (b, a):
            client.url = server.ws_url
            client.resume_token = old_token
            resumed = await client.reconnect()
            assert resumed["type"] == "openrealtime.session.resumed"
        new_token = client.resume_token
        await client.drop()
        await client.reconnect()  # the new token has been used now …
        client.resume_token = old_token
        await client.drop()
        with pytest.raises(ClientClosed, match="resume_refused"):
            await client.reconnect()  # … so the old one is refused
        assert new_token != old_token


async def test_a_closed_session_cannot_be_revived(
    two_servers: tuple[RunningServer, RunningServer, FakeBrain],
) -> None:
    a, b, _ = two_servers
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await client.end_session()
        assert await client.wait_closed() == 1000
        ws = await raw_resume(b.ws_url, b.token, session["id"], client.resume_token, 1)
        assert json.loads(await ws.recv())["error"]["code"] == "resume_refused"
        await ws.close()


async def test_a_resume_past_the_replay_window_gets_the_same_reconcile(
    server: RunningServer,
) -> None:
    """Within one process, when the outbox no longer holds what the client missed, the answer
    names the range and carries the journal's items, like a journal continuation does."""
    async with RealtimeClient(server.ws_url, server.token) as client:
        session = await client.connect()
        await client.send_text("tell me")
        await client.wait_type("conversation.item.added")
        live = server.services.live_sessions[session["id"]]
        assert isinstance(live, VoiceSession)
        live.outbox.max_replay_bytes = 0  # nothing is kept for a replay from now on
        await client.drop()
        last_seq = client.messages[-1].seq
        assert live.thread is not None
        for _ in range(200):  # the answer goes on, unseen, until it is journaled
            events = await server.services.journal.read_tail(live.thread, 5)
            if any(e.kind is EventKind.ASSISTANT_OUTPUT for e in events):
                break
            await asyncio.sleep(0.05)
        resumed = await client.reconnect()
        assert resumed["replayed"] == 0
        missing = resumed["missing"]
        assert missing is not None and missing[0] == last_seq + 1
        reconcile = client.reconcile
        assert reconcile is not None
        assert [reconcile["from_seq"], reconcile["to_seq"]] == missing
        assert [(i["role"], i["text"]) for i in reconcile["items"]] == [
            ("user", "tell me"),
            ("assistant", "Sure. Here is the answer. Anything else?"),
        ]
        await client.send_text("again")
        await client.wait_type("response.done")
        assert client.messages[-1].seq > missing[1]


async def test_a_journal_continuation_is_checked_like_a_continuation(
    two_servers: tuple[RunningServer, RunningServer, FakeBrain],
) -> None:
    """The token alone is not enough when the session must be rebuilt: its role must still
    exist (and the thread be the caller's — the token store already binds the user)."""
    a, b, _ = two_servers
    principal = await a.services.accounts.authenticate(a.token)
    assert principal is not None
    role = await a.services.roles.create(
        principal.tenant, name="Doomed", instructions="", voice=None, language=None,
        memory_enabled=False,
    )  # fmt: skip
    async with RealtimeClient(a.ws_url, a.token) as client:
        await client.connect(role_id=role.id)
        await client.drop()
        assert await b.services.roles.delete(principal.tenant, role.id)
        client.url = b.ws_url
        with pytest.raises(ClientClosed, match="role_not_found"):
            await client.reconnect()
