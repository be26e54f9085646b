"""Resume tokens of connected sessions are kept alive (runtime/token_keepalive.py)."""

from __future__ import annotations

import asyncio

from runtime.client import RealtimeClient
from runtime.realtime.resume import InMemoryResumeTokenStore
from runtime.server import RunningServer
from runtime.token_keepalive import TokenKeepalive


def expiry(server: RunningServer, session_id: str) -> float:
    store = server.services.resume_tokens
    assert isinstance(store, InMemoryResumeTokenStore)
    return store._sessions[session_id].expires_at


async def test_a_round_extends_the_tokens_of_connected_sessions_only(
    server: RunningServer,
) -> None:
    async with (
        RealtimeClient(server.ws_url, server.token) as connected,
        RealtimeClient(server.ws_url, server.token) as dropped,
    ):
        await connected.connect()
        await dropped.connect()
        await dropped.drop()
        waiting = server.services.live_sessions[dropped.session["id"]]
        async with asyncio.timeout(5):
            while waiting.connection is not None:  # noqa: ASYNC110 (the server sees the drop)
                await asyncio.sleep(0.01)
        before = expiry(server, connected.session["id"])
        waiting_before = expiry(server, dropped.session["id"])
        assert await TokenKeepalive(server.services).extend_all() == 1
        assert expiry(server, connected.session["id"]) > before
        assert expiry(server, dropped.session["id"]) == waiting_before
