"""The continuation handshake under racing orders (``runtime/realtime/continuity.py`` rule 6,
``runtime/realtime/live.py`` rule 3): no answer given twice, no retry refused.

Two servers in this test process share one PostgreSQL database, as two processes would. Each
interleaving is injected — a brain held at a gate, a journal fence or a token redeem held at a
gate, a process deaf to the claim's notification — and the test waits for the state it needs
(polling the registries), never for time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import websockets

from journal.events import EventKind, JournalEvent, ThreadRef
from plugins.contracts import BrainDelta, BrainInput
from plugins.fakes import FakeBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.protocol import CloseCode
from runtime.realtime.session import VoiceSession
from runtime.server import RunningServer, running_server
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_resume_journal import gone, raw_resume

__all__ = ["pg_pool", "postgres_url"]

OLD_ANSWER = "The old process answers."
NEW_ANSWER = "The new process answers."


class GatedBrain:
    """Answers ``OLD_ANSWER`` once ``gate`` is open; ``asked`` is set when a request came."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.asked = asyncio.Event()

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.asked.set()
        await self.gate.wait()
        yield BrainDelta(text=OLD_ANSWER)


class Gate:
    """Holds the first call of an async method until opened."""

    def __init__(self, method: Callable[..., Awaitable[Any]]) -> None:
        self.method = method
        self.reached = asyncio.Event()
        self.open = asyncio.Event()
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.reached.set()
            await self.open.wait()
        return await self.method(*args, **kwargs)


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the state the test waits for never came")


@pytest.fixture
async def servers(
    postgres_url: str, pg_pool: Any, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, RunningServer, GatedBrain]]:
    """A (its brain held at a gate) and B on one database."""
    settings = Settings(port=0, data_dir=tmp_path, database_url=postgres_url, resume_ttl_s=30)
    brain_a = GatedBrain()
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            running_server(settings, plugins=fake_plugins(brain=brain_a))
        )
        b = await stack.enter_async_context(
            running_server(settings, plugins=fake_plugins(brain=FakeBrain([NEW_ANSWER])))
        )
        yield a, b, brain_a


async def thread_events(server: RunningServer, client: RealtimeClient) -> list[JournalEvent]:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    thread = ThreadRef(principal.tenant, principal.user, str(client.session["thread_id"]))
    return await server.services.journal.read(thread)


def answers(events: list[JournalEvent]) -> list[str]:
    return [str(e.payload["text"]) for e in events if e.kind is EventKind.ASSISTANT_OUTPUT]


async def refused_and_closed(ws: websockets.ClientConnection) -> None:
    """The abandoned attempt is never answered: at most ``resume_refused``, then 4012."""
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            message = json.loads(await ws.recv())
            assert message["type"] == "error", message
            assert message["error"]["code"] == "resume_refused"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CloseCode.SUPERSEDED


async def test_an_answer_the_old_copy_finishes_after_the_continuation_is_never_journaled(
    servers: tuple[RunningServer, RunningServer, GatedBrain],
) -> None:
    """A is still thinking when the client continues on B, and never hears of the claim: the
    journal's fence alone stops A's late answer, and A's copy fences itself."""
    a, b, brain_a = servers
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await client.send_text("my name is Ada")
        await brain_a.asked.wait()  # the input is journaled, the answer is on its way
        await a.services.resume_tokens.close()  # A stops listening for fences
        await client.drop()
        client.url = b.ws_url
        resumed = await client.reconnect()
        assert resumed["replayed"] is False and client.reconcile is not None
        assert [(i["role"], i["text"]) for i in client.reconcile["items"]] == [
            ("user", "my name is Ada")
        ]
        await client.send_json({"type": "response.create"})  # the turn is answered here
        done = await client.wait_type("response.done")
        assert done["response"]["status"] == "completed"

        brain_a.gate.set()  # A's answer is ready now, too late
        await gone(a, session["id"])
        events = await thread_events(b, client)
        assert answers(events) == [NEW_ANSWER]
        assert [e.kind for e in events].count(EventKind.USER_INPUT) == 1


async def test_a_retry_on_the_process_mid_handshake_gets_the_reconcile(
    servers: tuple[RunningServer, RunningServer, GatedBrain],
) -> None:
    """The first attempt on B is held at the journal fence; the client gives up on it and
    retries on B: the retry takes the session over and gets the same answer (the reconcile),
    the attempt it gave up on is refused."""
    a, b, brain_a = servers
    brain_a.gate.set()
    fence = Gate(b.services.journal.fence)
    b.services.journal.fence = fence  # type: ignore[method-assign]
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await client.send_text("hello")
        await client.wait_type("response.done")
        await client.drop()
        first = await raw_resume(
            b.ws_url, b.token, session["id"], client.resume_token, client.messages[-1].seq
        )
        await fence.reached.wait()
        held = b.services.live_sessions[session["id"]]
        assert isinstance(held, VoiceSession)
        first_connection = held.connection

        client.url = b.ws_url
        retry = asyncio.create_task(client.reconnect())
        await until(lambda: held.connection is not first_connection)
        fence.open.set()
        resumed = await retry
        assert resumed["replayed"] is False and client.reconcile is not None
        assert [(i["role"], i["text"]) for i in client.reconcile["items"]] == [
            ("user", "hello"),
            ("assistant", OLD_ANSWER),
        ]
        await refused_and_closed(first)
        await client.send_text("again")
        done = await client.wait_type("response.done")
        assert done["response"]["output_text"] == NEW_ANSWER


async def test_a_retry_on_another_process_while_the_first_is_mid_handshake_succeeds(
    servers: tuple[RunningServer, RunningServer, GatedBrain],
) -> None:
    """The first attempt on B is held at the journal fence; the retry lands back on A: A
    continues the session (B's copy is fenced), the attempt given up on is refused."""
    a, b, brain_a = servers
    brain_a.gate.set()
    fence = Gate(b.services.journal.fence)
    b.services.journal.fence = fence  # type: ignore[method-assign]
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await client.send_text("hello")
        await client.wait_type("response.done")
        await client.drop()
        first = await raw_resume(
            b.ws_url, b.token, session["id"], client.resume_token, client.messages[-1].seq
        )
        await fence.reached.wait()

        resumed = await client.reconnect()  # on A
        assert resumed["replayed"] is False and client.reconcile is not None
        assert [i["text"] for i in client.reconcile["items"]] == ["hello", OLD_ANSWER]
        await gone(b, session["id"])  # B's copy was fenced by A's claim
        fence.open.set()
        await refused_and_closed(first)
        await client.send_text("again")
        assert (await client.wait_type("response.done"))["response"]["status"] == "completed"
        assert answers(await thread_events(a, client)).count(OLD_ANSWER) == 2  # one per turn


async def test_an_attempt_the_client_gave_up_on_never_takes_the_session_from_its_retry(
    servers: tuple[RunningServer, RunningServer, GatedBrain],
) -> None:
    """The first attempt's token redeem is slow; the retry arrives later and is served first.
    When the first attempt's redeem comes back it is refused, and the retry keeps serving."""
    a, _, brain_a = servers
    brain_a.gate.set()
    async with RealtimeClient(a.ws_url, a.token) as client:
        session = await client.connect()
        await client.send_text("hello")
        await client.wait_type("response.done")
        await client.drop()
        redeem = Gate(a.services.resume_tokens.redeem)
        a.services.resume_tokens.redeem = redeem  # type: ignore[method-assign]
        first = await raw_resume(
            a.ws_url, a.token, session["id"], client.resume_token, client.messages[-1].seq
        )
        await redeem.reached.wait()

        resumed = await client.reconnect()  # the retry, served while the first still redeems
        assert resumed["type"] == "openrealtime.session.resumed"
        redeem.open.set()
        await refused_and_closed(first)
        await client.send_text("again")
        assert (await client.wait_type("response.done"))["response"]["status"] == "completed"


async def test_a_copy_fenced_between_its_answer_and_its_loop_closes_its_connection(
    servers: tuple[RunningServer, RunningServer, GatedBrain],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The continuation on B has answered its client, and B's copy is fenced (a later resume
    continued the session elsewhere) and ended before B's receive loop starts: no connection
    was serving, so the fence closed none. The loop must not serve an ended copy — a client on
    it would wait for answers forever — it closes 4012, and the client resumes again. (Today no
    await separates the answer from the loop; the test makes one, as a later change might.)"""
    a, b, brain_a = servers
    brain_a.gate.set()
    serve = RealtimeConnection.serve

    async def fenced_first(self: RealtimeConnection, session: VoiceSession) -> None:
        if self.services is b.services:
            session.fence(session.epoch + 1)  # what a later claim's notification does
            await until(lambda: session.outbox.failed)  # its end is over: nothing was closed
        await serve(self, session)

    monkeypatch.setattr(RealtimeConnection, "serve", fenced_first)
    async with RealtimeClient(a.ws_url, a.token) as client:
        await client.connect()
        await client.send_text("hello")
        await client.wait_type("response.done")
        await client.drop()
        client.url = b.ws_url
        resumed = await client.reconnect()
        assert resumed["replayed"] is False
        assert await client.wait_closed(timeout=5) == CloseCode.SUPERSEDED
