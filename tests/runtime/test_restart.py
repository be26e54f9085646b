"""Restart and other processes (SPEC RES-4), with real server processes on one PostgreSQL.

Each server is ``python -m benchmarks.fake_server --storage postgres`` in a subprocess: the same
``running_server``/``open_services`` path as ``openrealtime serve``, with instant fake ASR/TTS and
the offline rule brain, which answers "what did I just say" from the history it was given — so
an answer shows which earlier turns reached the brain. Killing is SIGKILL: nothing is flushed,
closed or said goodbye to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from journal.events import EventKind, JournalEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from runtime.accounts import LOCAL_PRINCIPAL
from runtime.client import RealtimeClient
from runtime.realtime.protocol import CloseCode
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]

ROOT = Path(__file__).resolve().parents[2]
FIRST = "my favourite colour is teal"
RECALL = "what did I just say"


@dataclass
class ServerProcess:
    process: asyncio.subprocess.Process
    ws_url: str
    token: str

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


Start = Callable[[], Awaitable[ServerProcess]]


@pytest.fixture
async def start_server(postgres_url: str, pg_pool: Any, tmp_path: Path) -> AsyncIterator[Start]:
    """Start a server process on the test database (``pg_pool`` emptied it); all share one
    data directory, hence one local token. Every process is killed at the end."""
    started: list[ServerProcess] = []
    env = {
        **os.environ,
        "OPENREALTIME_DATABASE_URL": postgres_url,
        "OPENREALTIME_RESUME_TTL_S": "60",
    }

    async def start() -> ServerProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.fake_server", "--port", "0",
            "--storage", "postgres", "--data-dir", str(tmp_path / "data"),
            "--brain", "local", "--tts-ms-per-char", "2",
            cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            ready = json.loads(line)
        except BaseException:
            process.kill()
            await process.wait()
            raise
        server = ServerProcess(process, ready["listening"], ready["token"])
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            await server.kill()


def thread_ref(client: RealtimeClient) -> ThreadRef:
    return ThreadRef(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user, client.session["thread_id"])


async def journal(pool: Any, thread: ThreadRef) -> list[JournalEvent]:
    return await PostgresJournalStore(pool).read(thread)


async def turn(client: RealtimeClient, text: str) -> dict[str, Any]:
    await client.send_text(text)
    done = await client.wait_type("response.done", timeout=20)
    return dict(done["response"])


async def test_a_thread_continues_after_sigkill_with_its_history(
    start_server: Start, pg_pool: Any
) -> None:
    a = await start_server()
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await turn(client, FIRST)
        await client.send_text("tell me a story")  # killed mid-turn
        await a.kill()
        thread = thread_ref(client)

    again = await start_server()
    assert again.token == a.token  # same data directory, same local token
    async with RealtimeClient(again.ws_url, again.token) as client:
        continued = await client.connect(
            requested_thread_id=thread.thread_id, previous_voice_session_id=session["id"]
        )
        assert continued["thread_id"] == thread.thread_id and continued["id"] != session["id"]
        earlier = [e.payload["text"] for e in await journal(pg_pool, thread)
                   if e.kind is EventKind.USER_INPUT]  # fmt: skip
        assert earlier[0] == FIRST and set(earlier) <= {FIRST, "tell me a story"}
        answer = await turn(client, RECALL)
        # The brain was given the turns taken before the kill.
        assert answer["output_text"] == f'You said: "{earlier[-1]}"'


async def test_a_resume_after_sigkill_continues_from_the_journal(
    start_server: Start, pg_pool: Any
) -> None:
    a = await start_server()
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        first = await turn(client, FIRST)
        last_seq = client.messages[-1].seq
        await a.kill()
        assert await client.wait_closed() is not None

        b = await start_server()
        client.url = b.ws_url
        resumed = await client.reconnect()
        assert resumed["replayed"] is False and resumed["session_id"] == session["id"]
        reconcile = resumed["reconcile"]
        assert reconcile["from_seq"] == last_seq + 1 and reconcile["to_seq"] is None
        assert [(i["role"], i["text"]) for i in reconcile["items"]] == [
            ("user", FIRST),
            ("assistant", first["output_text"]),
        ]
        answer = await turn(client, RECALL)
        assert answer["output_text"] == f'You said: "{FIRST}"'
        seqs = [m.seq for m in client.messages]
        assert seqs == list(range(1, len(seqs) + 1))

        # The token rotated on the new process: it resumes there in-process from now on.
        await client.drop()
        assert (await client.reconnect())["reconcile"] is None


async def test_two_processes_hand_a_conversation_over(start_server: Start, pg_pool: Any) -> None:
    a = await start_server()
    b = await start_server()
    async with contextlib.AsyncExitStack() as stack:
        on_a = await stack.enter_async_context(RealtimeClient(a.ws_url, a.token))
        session = await on_a.connect()
        await turn(on_a, FIRST)
        thread = thread_ref(on_a)

        # The same client shows up on B (its connection to A still open, e.g. a half-dead
        # network path): B redeems the token from the database and continues the session.
        on_b = await stack.enter_async_context(RealtimeClient(b.ws_url, b.token))
        on_b.session = dict(on_a.session)
        on_b.resume_token = on_a.resume_token
        on_b._last_seq = on_a.messages[-1].seq
        resumed = await on_b.reconnect()
        assert resumed["replayed"] is False
        # A does not keep talking on the thread: its connection is closed as superseded.
        assert await on_a.wait_closed(timeout=10) == CloseCode.SUPERSEDED
        handed_over = len(await journal(pg_pool, thread))

        answer = await turn(on_b, RECALL)
        assert answer["output_text"] == f'You said: "{FIRST}"'
        after = (await journal(pg_pool, thread))[handed_over:]
        assert after and all(e.event_id.startswith(f"{session['id']}.1:") for e in after)

        # A later session continues the thread on either process.
        for server in (b, a):
            later = await stack.enter_async_context(RealtimeClient(server.ws_url, server.token))
            await later.connect(
                requested_thread_id=thread.thread_id, previous_voice_session_id=session["id"]
            )
            assert (await turn(later, RECALL))["output_text"] == f'You said: "{RECALL}"'
            await later.close()
