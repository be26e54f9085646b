"""The live registry's rules (``runtime/realtime/live.py``): places held for starting sessions (rule
1), continuations taking an id over (rule 2), claims by resuming connections (rule 3), removal
(rule 4) — on the registry itself, then the races they close, over real sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import websockets
from websockets.typing import Subprotocol

from journal.events import ThreadRef
from runtime.accounts import LOCAL_PRINCIPAL, Principal
from runtime.client import SUBPROTOCOL, RealtimeClient
from runtime.config import Settings
from runtime.errors import ContinuityRefused, Disconnected, Refused
from runtime.realtime.connection import Phase, RealtimeConnection
from runtime.realtime.continuity import BAD_TOKEN
from runtime.realtime.live import LiveSessions
from runtime.realtime.outbox import Outbox
from runtime.realtime.protocol import CloseCode, ErrorCode, Limits
from runtime.realtime.session import VoiceSession
from runtime.realtime.session_config import SessionConfig
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from runtime.services import Services, open_services
from tests.runtime.conftest import fake_plugins

ALICE = Principal("acme", "alice")
BOB = Principal("acme", "bob")


@dataclass
class Copy:
    """What the registry reads of a session."""

    id: str
    principal: Principal
    epoch: int = 0
    closed: bool = False


def session(session_id: str, principal: Principal = ALICE, *, epoch: int = 0) -> VoiceSession:
    return cast("VoiceSession", Copy(session_id, principal, epoch))


def too_many(caught: pytest.ExceptionInfo[Refused]) -> tuple[str, int]:
    return caught.value.error_code, caught.value.close_code


# Rule 1 — places


def test_a_place_is_held_from_the_check_until_the_session_is_registered() -> None:
    live = LiveSessions()
    with live.reserve(ALICE, limit=1) as place:
        with pytest.raises(Refused) as caught:
            live.reserve(ALICE, limit=1)  # the first start is still on its way
        assert too_many(caught) == (ErrorCode.TOO_MANY_SESSIONS, CloseCode.TOO_MANY_SESSIONS)
        assert live.reserve(BOB, limit=1) is not None  # places are per user
        place.register(session("vs_1"))
    assert dict(live) == {"vs_1": live["vs_1"]} and live.count(ALICE) == 1
    with pytest.raises(Refused):
        live.reserve(ALICE, limit=1)


def test_a_start_that_fails_gives_its_place_back() -> None:
    live = LiveSessions()
    with pytest.raises(RuntimeError), live.reserve(ALICE, limit=1):
        raise RuntimeError("the role store failed")
    assert live.count(ALICE) == 0 and len(live) == 0
    with live.reserve(ALICE, limit=1) as place:
        place.register(session("vs_1"))
    assert live.count(ALICE) == 1


def test_closed_sessions_do_not_count_and_are_not_looked_up() -> None:
    live = LiveSessions()
    with live.reserve(ALICE, limit=1) as place:
        place.register(session("vs_1"))
    cast("Copy", live["vs_1"]).closed = True
    assert live.lookup("vs_1") is None and live.lookup("vs_nope") is None
    assert live.count(ALICE) == 0


# Rules 2 and 4 — continuations and removal


def test_a_continuation_takes_the_id_over_and_the_old_copy_leaves_it_alone() -> None:
    live = LiveSessions()
    old, new = session("vs_1", epoch=0), session("vs_1", epoch=1)
    with live.reserve(ALICE, limit=5) as place:
        place.register(old)
    live.take_over(new)
    assert live.lookup("vs_1") is new
    live.remove(old)  # the fenced copy shuts down later
    assert live["vs_1"] is new
    live.remove(new)
    assert live == {}


# Rule 3 — claims


class Socket:
    """What a connection and its outbox use of a WebSocket, with no network behind it."""

    def __init__(self) -> None:
        self.sent: list[str | bytes] = []
        self.closed: tuple[int, str] | None = None
        self.media = None

    async def receive(self) -> str | bytes:
        raise Disconnected()

    async def send_text(self, data: str) -> None:
        self.sent.append(data)

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False)
    services = await open_services(settings, plugins=fake_plugins())
    try:
        yield services
    finally:
        await services.close()


def connection(services: Services) -> RealtimeConnection:
    return RealtimeConnection(Socket(), services)


async def live_session(services: Services, held_by: RealtimeConnection) -> VoiceSession:
    """A session of the local user, registered, held by ``held_by`` (serving)."""
    principal = LOCAL_PRINCIPAL
    role = await default_role(services.roles, principal.tenant)
    thread = ThreadRef(principal.tenant, principal.user, "th_1")
    session = VoiceSession(
        services,
        connection=held_by,
        outbox=Outbox(
            send_text=held_by.link.send_text,
            send_bytes=held_by.link.send_bytes,
            is_current=lambda _generation: False,
            max_queued=100,
        ),
        principal=principal,
        thread=thread,
        role=role,
        config=SessionConfig(),
        limits=Limits(),
    )
    with services.live_sessions.reserve(principal, limit=10) as place:
        place.register(session)
    held_by.phase = Phase.SERVING
    return session


def refused(caught: pytest.ExceptionInfo[ContinuityRefused]) -> tuple[str, int, str]:
    return caught.value.error_code, caught.value.close_code, caught.value.close_reason


async def test_a_claim_hands_the_session_over_and_names_the_connection_it_supersedes(
    services: Services,
) -> None:
    live, first, second, third = (services.live_sessions, *(connection(services) for _ in "123"))
    session = await live_session(services, first)
    claim = live.claim(session.id, epoch=0, connection=second)
    assert claim.session is session and claim.superseded is first  # the claimant closes it
    assert session.holds(second) and not session.holds(first)
    # A second claim while the first claimant is still in its handshake: the later one holds
    # the session; the earlier one, not serving yet, finds out itself (it is not named).
    claim = live.claim(session.id, epoch=0, connection=third)
    assert claim.session is session and claim.superseded is None
    assert session.holds(third) and not session.holds(second)


async def test_a_claim_cancels_the_wait_for_a_resume(services: Services) -> None:
    live, first, second = services.live_sessions, connection(services), connection(services)
    session = await live_session(services, first)
    await session.detach(first)
    assert session.connection is None and session._expiry is not None
    live.claim(session.id, epoch=0, connection=second)
    assert session._expiry is None and session.holds(second)


async def test_a_session_gone_moved_on_or_ending_is_not_claimed(services: Services) -> None:
    live, first, second = services.live_sessions, connection(services), connection(services)
    session = await live_session(services, first)
    bad_token = (ErrorCode.RESUME_REFUSED, CloseCode.FORBIDDEN, "resume refused")
    for session_id, epoch in (("vs_nope", 0), (session.id, 1)):
        with pytest.raises(ContinuityRefused) as caught:
            live.claim(session_id, epoch=epoch, connection=second)
        assert refused(caught) == bad_token
    assert session.begin_end()  # e.g. its client sent session.close; the token is being revoked
    with pytest.raises(ContinuityRefused) as caught:
        live.claim(session.id, epoch=0, connection=second)
    assert refused(caught) == bad_token and caught.value.message == BAD_TOKEN
    assert session.connection is first  # nothing changed hands
    await session.shutdown()
    assert live == {}


# Races, over real sockets


class Gate:
    """Holds the first call of ``owner.name`` that ``when`` picks until ``release`` (``entered``
    says it is waiting); every other call goes straight through."""

    def __init__(
        self, owner: object, name: str, when: Callable[..., bool] = lambda *a, **k: True
    ) -> None:
        self.entered, self.release = asyncio.Event(), asyncio.Event()
        call = getattr(owner, name)

        async def held(*args: Any, **kwargs: Any) -> Any:
            if not self.entered.is_set() and when(*args, **kwargs):
                self.entered.set()
                await self.release.wait()
            return await call(*args, **kwargs)

        setattr(owner, name, held)

    async def reached(self) -> None:
        await asyncio.wait_for(self.entered.wait(), 5)


# The race rule 1 closes: two starts of one user at the limit


@pytest.fixture
async def one_each(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, max_live_sessions_per_user=1)
    async with running_server(settings, plugins=fake_plugins()) as server:
        yield server


async def test_two_starts_at_the_limit_at_once_one_is_refused(one_each: RunningServer) -> None:
    """The second start is refused while the first is still issuing its resume token (before,
    both passed the check and both were registered)."""
    server = one_each
    issuing = Gate(server.services.resume_tokens, "issue")
    auth = {"Authorization": f"Bearer {server.token}"}
    async with websockets.connect(server.ws_url, additional_headers=auth) as first:
        await issuing.reached()
        async with websockets.connect(server.ws_url, additional_headers=auth) as second:
            error = json.loads(await asyncio.wait_for(second.recv(), 5))
            assert error["error"]["code"] == ErrorCode.TOO_MANY_SESSIONS
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await second.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.TOO_MANY_SESSIONS
        issuing.release.set()
        assert json.loads(await first.recv())["type"] == "session.created"
        assert len(server.services.live_sessions) == 1


# The races rule 3 closes


async def raw_resume(
    server: RunningServer, session_id: str, resume_token: str, last_seq: int
) -> websockets.ClientConnection:
    ws = await websockets.connect(server.ws_url, subprotocols=[Subprotocol(SUBPROTOCOL)])
    await ws.send(
        json.dumps(
            {
                "type": "openrealtime.session.resume",
                "token": server.token,
                "session_id": session_id,
                "resume_token": resume_token,
                "last_seq": last_seq,
            }
        )
    )
    return ws


async def close_code(ws: websockets.ClientConnection) -> int | None:
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), 5)
    return closed.value.rcvd.code if closed.value.rcvd is not None else None


async def converse(ws: websockets.ClientConnection) -> None:
    """A typed turn on ``ws``, answered."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    while True:
        data = await asyncio.wait_for(ws.recv(), 10)
        if isinstance(data, str) and json.loads(data)["type"] == "response.done":
            return


async def detached(session: VoiceSession) -> None:
    for _ in range(500):
        if session.connection is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the session still has its connection")


async def test_two_resumes_of_one_session_at_once_the_later_wins(server: RunningServer) -> None:
    """The first resume is still reconciling (its answer not sent) when the second claims the
    session: the second serves it; the first is refused with resume_refused and 4012 (before,
    both were answered and both read the second one's socket)."""
    async with RealtimeClient(server.ws_url, server.token) as client:
        info = await client.connect()
        await client.send_text("tell me")
        await client.wait_type("response.done")
        session = server.services.live_sessions[info["id"]]
        session.outbox.max_replay_bytes = 0  # a resume from seq 0 must reconcile
        token = client.resume_token
        await client.drop()
        await detached(session)

        reconciling = Gate(server.services.journal, "read_tail")  # the first resume's reconcile
        first = await raw_resume(server, info["id"], token, 0)
        await reconciling.reached()
        second = await raw_resume(server, info["id"], token, 0)  # the same token: rule 4 grace
        async with first, second:
            resumed = json.loads(await asyncio.wait_for(second.recv(), 5))
            assert resumed["type"] == "openrealtime.session.resumed"
            assert resumed["missing"] is not None and resumed["reconcile"] is not None
            reconciling.release.set()
            refusal = json.loads(await asyncio.wait_for(first.recv(), 5))
            assert refusal["type"] == "error"
            assert refusal["error"]["code"] == ErrorCode.RESUME_REFUSED
            assert await close_code(first) == CloseCode.SUPERSEDED
            await converse(second)
            assert session.connection is not None and session.connection.serving


async def test_a_resume_continuing_the_session_loses_to_a_later_one_alike(
    server: RunningServer,
) -> None:
    """The same race when the first resume is continuing the session from the journal (its
    copy registered, its reconcile not read yet) and the client's retry hands itself that copy:
    the retry serves it, the first is refused with resume_refused and 4012."""
    async with RealtimeClient(server.ws_url, server.token) as client:
        info = await client.connect()
        token, last_seq = client.resume_token, client.messages[-1].seq
        await client.drop()
        session = server.services.live_sessions[info["id"]]
        await detached(session)
    # Gone from this process, its token still good (as after a restart, or on another one):
    # a resume continues it from the journal.
    await session.shutdown()
    reconciling = Gate(server.services.journal, "read_tail")
    first = await raw_resume(server, info["id"], token, last_seq)
    await reconciling.reached()
    second = await raw_resume(server, info["id"], token, last_seq)
    async with first, second:
        resumed = json.loads(await asyncio.wait_for(second.recv(), 5))
        assert resumed["type"] == "openrealtime.session.resumed"
        reconciling.release.set()
        refusal = json.loads(await asyncio.wait_for(first.recv(), 5))
        assert refusal["error"]["code"] == ErrorCode.RESUME_REFUSED
        assert await close_code(first) == CloseCode.SUPERSEDED
        await converse(second)
        assert server.services.live_sessions[info["id"]].epoch == 1


async def test_a_resume_while_the_session_is_being_closed_is_refused(
    server: RunningServer,
) -> None:
    """Its client closed it and its token is being revoked: a resume with that token gets what
    it gets once the token is gone (before, it was handed the session being shut down)."""
    revoking = Gate(server.services.resume_tokens, "extend", lambda _id, *, ttl_s: ttl_s == 0)
    async with RealtimeClient(server.ws_url, server.token) as client:
        info = await client.connect()
        await client.end_session()
        await revoking.reached()
        ws = await raw_resume(server, info["id"], client.resume_token, 1)
        async with ws:
            refusal = json.loads(await asyncio.wait_for(ws.recv(), 5))
            assert refusal["error"]["code"] == ErrorCode.RESUME_REFUSED
            assert await close_code(ws) == CloseCode.FORBIDDEN
        revoking.release.set()
        assert await client.wait_closed() == CloseCode.NORMAL
    assert server.services.live_sessions == {}


async def test_a_resume_while_the_session_starts_waiting_is_not_cut_off(tmp_path: Path) -> None:
    """The connection dropped and the session is extending its token when a resume claims it:
    the wait that begins after that await does not arm the expiry under the new connection
    (before, the session ended resume_ttl_s later while it was served)."""
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, resume_ttl_s=0.3)
    async with running_server(settings, plugins=fake_plugins()) as server:
        tokens = server.services.resume_tokens
        extending = Gate(tokens, "extend", lambda _id, *, ttl_s: ttl_s > 0)
        async with RealtimeClient(server.ws_url, server.token) as client:
            info = await client.connect()
            await client.drop()
            await extending.reached()
            ws = await raw_resume(server, info["id"], client.resume_token, client.messages[-1].seq)
            async with ws:
                resumed = json.loads(await asyncio.wait_for(ws.recv(), 5))
                assert resumed["type"] == "openrealtime.session.resumed"
                extending.release.set()
                await asyncio.sleep(0.6)  # past resume_ttl_s
                await converse(ws)
                assert info["id"] in server.services.live_sessions
