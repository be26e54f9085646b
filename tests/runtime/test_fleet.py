"""The fleet (SPEC OPS-1): processes on one PostgreSQL behind real nginx; SIGTERM drains.

Servers are real processes (``tests/fleet.py``: ``benchmarks.fake_server`` on the test database,
instant fake speech plugins); nginx runs the shipped ``deploy/nginx/openrealtime.conf``. The
in-process tests cover the drain's rules on ``running_server`` directly, and what sessions that
ended leave behind in a process (nothing: the soak's RSS bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

import plugins.fakes
from journal.events import JournalEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from pipeline.engine import Engine
from plugins.fakes import FakeBrain, FakeTTS
from runtime.accounts import LOCAL_PRINCIPAL
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.drain import DRAINING_CODE
from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.outbox import Outbox
from runtime.realtime.protocol import CloseCode
from runtime.realtime.session import VoiceSession
from runtime.server import running_server
from tests.fleet import Nginx, ServerProcess, needs_nginx
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]

UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


@pytest.fixture
async def fleet(
    postgres_url: str, pg_pool: Any, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[tuple[list[ServerProcess], Nginx]]]]:
    """``await fleet(n)``: n server processes on the test database (one data directory, one
    local token) and nginx in front; everything stopped at the end."""
    servers: list[ServerProcess] = []
    proxies: list[Nginx] = []

    async def start(n: int, **options: Any) -> tuple[list[ServerProcess], Nginx]:
        outcomes = await asyncio.gather(
            *(
                ServerProcess.start(
                    database_url=postgres_url, data_dir=tmp_path / "data", **options
                )
                for _ in range(n)
            ),
            return_exceptions=True,
        )
        started = [o for o in outcomes if isinstance(o, ServerProcess)]
        servers.extend(started)  # stopped at the end even when another one failed to start
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        nginx = await Nginx.start([s.port for s in started], tmp_path / "nginx")
        proxies.append(nginx)
        return list(started), nginx

    try:
        yield start
    finally:
        for nginx in proxies:
            await nginx.stop()
        for server in servers:
            await server.kill()


async def holder(servers: list[ServerProcess]) -> ServerProcess:
    """The process serving the one open session (its ``/health`` counts it)."""
    async with httpx.AsyncClient(timeout=5) as http:
        for server in servers:
            if server.alive and (await http.get(f"{server.http_url}/health")).json()["sessions"]:
                return server
    raise AssertionError("no process serves the session")


async def journal(pool: Any, client: RealtimeClient) -> list[JournalEvent]:
    thread = ThreadRef(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user, client.session["thread_id"])
    return await PostgresJournalStore(pool).read(thread)


def kinds(events: list[JournalEvent]) -> Counter[str]:
    return Counter(e.kind.value for e in events)


async def turn(client: RealtimeClient, text: str) -> dict[str, Any]:
    await client.send_text(text)
    return dict((await client.wait_type("response.done", timeout=20))["response"])


def assert_one_stream(client: RealtimeClient) -> None:
    """Every message the client kept, numbered 1…n without a gap or a repeat."""
    seqs = [m.seq for m in client.messages]
    assert seqs == list(range(1, len(seqs) + 1))


async def eventually(condition: Callable[[], bool], *, step: float = 0.02) -> None:
    """Until ``condition()`` holds; at most 120 s, a bound for a hung test, not a timing."""
    async with asyncio.timeout(120):
        while not condition():  # noqa: ASYNC110 (polls state of other tasks)
            await asyncio.sleep(step)


@needs_nginx
async def test_through_nginx_a_killed_process_s_session_resumes_on_another(
    fleet: Callable[..., Awaitable[tuple[list[ServerProcess], Nginx]]], pg_pool: Any
) -> None:
    servers, nginx = await fleet(2)
    async with RealtimeClient(nginx.ws_url, servers[0].token) as client:
        session = await client.connect()
        first = await turn(client, "my favourite colour is teal")
        victim = await holder(servers)
        await victim.kill()
        assert await client.wait_closed() is not None

        resumed = await client.reconnect(attempts=8, backoff=0.1)
        assert resumed["session_id"] == session["id"] and resumed["replayed"] is False
        items = [(i["role"], i["text"]) for i in resumed["reconcile"]["items"]]
        assert items == [
            ("user", "my favourite colour is teal"),
            ("assistant", first["output_text"]),
        ]
        survivor = await holder(servers)
        assert survivor is not victim
        await turn(client, "and now?")
        assert_one_stream(client)
        assert kinds(await journal(pg_pool, client)) >= Counter(
            {"user_input": 2, "assistant_output": 2}
        )


@needs_nginx
async def test_sigterm_finishes_the_live_turn_and_the_client_resumes_elsewhere(
    fleet: Callable[..., Awaitable[tuple[list[ServerProcess], Nginx]]], pg_pool: Any
) -> None:
    # ~1.3 s of answer audio played at real time: the turn is live when SIGTERM comes.
    servers, nginx = await fleet(2, tts_ms_per_char=25.0)
    async with RealtimeClient(nginx.ws_url, servers[0].token) as client:
        session = await client.connect()
        draining = await holder(servers)
        await client.send_text("tell me something long")
        await client.wait_type("response.created")
        draining.process.send_signal(15)

        done = await client.wait_type("response.done", timeout=20)
        assert done["response"]["output_text"]  # the turn finished, not cut
        notice = await client.wait_type("openrealtime.server.draining", timeout=20)
        assert notice["close_within_ms"] > 0 and client.draining
        assert await client.wait_closed(timeout=20) == CloseCode.SERVER_SHUTDOWN
        assert await asyncio.wait_for(draining.process.wait(), 30) == 0  # exit 0

        resumed = await client.reconnect(attempts=8, backoff=0.1)
        assert resumed["session_id"] == session["id"] and not client.draining
        assert (await holder(servers)) is not draining
        # Everything was sent before the close: nothing to give up, the stream goes on.
        assert resumed["replayed"] is False and resumed["reconcile"]["to_seq"] is None
        await turn(client, "still there?")
        assert_one_stream(client)
        assert client.duplicates == 0
        events = await journal(pg_pool, client)
        assert kinds(events)["user_input"] == 2 and kinds(events)["assistant_output"] == 2
        assert len({e.event_id for e in events}) == len(events)


@needs_nginx
async def test_a_draining_process_s_new_sessions_go_to_another_through_nginx(
    fleet: Callable[..., Awaitable[tuple[list[ServerProcess], Nginx]]],
) -> None:
    servers, nginx = await fleet(2)
    # One session held open on the first process keeps it draining (its client never acks).
    direct = await websockets.connect(servers[0].ws_url, subprotocols=["openrealtime"])  # type: ignore[list-item]
    await direct.send(
        json.dumps(
            {
                "type": "openrealtime.session.start",
                "token": servers[0].token,
                "extensions": {"events": True, "seq": True},
            }
        )
    )
    await direct.recv()
    servers[0].process.send_signal(15)
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient(timeout=5) as http:
        refused = await http.get(
            f"{servers[0].http_url}/v1/realtime",
            headers=UPGRADE,
        )
        assert refused.status_code == 503 and refused.json()["code"] == DRAINING_CODE
    for _ in range(4):  # whichever process nginx picks first, the session opens on the other
        async with RealtimeClient(nginx.ws_url, servers[0].token) as client:
            await client.connect()
            async with httpx.AsyncClient(timeout=5) as http:
                health = await http.get(f"{servers[1].http_url}/health")
            assert health.json()["sessions"] == 1
    await direct.close()


async def test_drain_waits_for_the_turn_and_the_ack_then_closes_with_1012(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory")
    plugins = fake_plugins()
    async with running_server(settings, plugins=plugins) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            await client.send_text("hello")
            await client.wait_type("response.created")
            report = await server.drain(timeout_s=10)
            types = [m.type for m in client.messages]
            assert types.index("response.done") < types.index("openrealtime.server.draining")
            assert await client.wait_closed() == CloseCode.SERVER_SHUTDOWN
            assert (report.connected, report.cut_at_deadline) == (1, 0)
            assert not server.services.live_sessions
            with pytest.raises(websockets.InvalidStatus) as refused:
                await websockets.connect(server.ws_url)
            assert refused.value.response.status_code == 503


async def test_drain_cuts_at_its_deadline_a_client_that_never_acknowledges(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory")
    async with running_server(settings, plugins=fake_plugins()) as server:
        async with websockets.connect(
            server.ws_url,
            subprotocols=["openrealtime"],  # type: ignore[list-item]
        ) as ws:
            start = {
                "type": "openrealtime.session.start",
                "token": server.token,
                "extensions": {"events": True, "seq": True},
            }
            await ws.send(json.dumps(start))
            await ws.recv()
            report = await server.drain(timeout_s=0.3)
            assert (report.connected, report.cut_at_deadline) == (1, 1)
            received = []
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    received.append(json.loads(await ws.recv())["type"])
            assert "openrealtime.server.draining" in received
            assert ws.close_code == CloseCode.SERVER_SHUTDOWN


async def test_sessions_that_came_and_went_leave_nothing_behind_in_the_process(
    postgres_url: str, pg_pool: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak's RSS bound, as a rule: sessions opened, resumed here, continued on the other
    process (their copy here fenced) and ended leave no session, engine, outbox or connection
    alive in either process, and the fake plugins keep only their last few requests."""
    monkeypatch.setattr(plugins.fakes, "RECORDED_MAX", 3)
    settings = Settings(port=0, data_dir=tmp_path / "data", database_url=postgres_url)
    fakes = [fake_plugins(), fake_plugins()]
    async with (
        running_server(settings, plugins=fakes[0]) as a,
        running_server(settings, plugins=fakes[1]) as b,
    ):
        for n in range(9):
            async with RealtimeClient(a.ws_url, a.token) as client:
                await client.connect()
                await turn(client, f"turn {n}")
                await client.drop()
                client.url = b.ws_url if n % 3 == 0 else a.ws_url
                await client.reconnect()
                await turn(client, "and again")
                await client.end_session()
                assert await client.wait_closed() == CloseCode.NORMAL
        # Wait on the conditions, not on a guess of how long a loaded machine takes (a fenced
        # copy ends when its connection's close is handled, which load can delay).
        for server in (a, b):
            await eventually(lambda server=server: not server.services.live_sessions)

        def kept() -> Counter[str]:
            gc.collect()
            return Counter(
                type(o).__name__
                for o in gc.get_objects()
                if isinstance(o, VoiceSession | Engine | Outbox | RealtimeConnection)
            )

        await eventually(lambda: kept() == Counter(), step=0.2)
        assert kept() == Counter()
        for plugins_of in fakes:
            assert isinstance(plugins_of.brain, FakeBrain) and isinstance(plugins_of.tts, FakeTTS)
            assert len(plugins_of.brain.requests) == 3
            assert len(plugins_of.tts.texts) == 3
