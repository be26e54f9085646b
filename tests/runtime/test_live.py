"""The live registry's rules (``runtime/live.py``): places held for starting sessions (rule 1),
continuations taking an id over (rule 2), removal (rule 3) — on the registry itself, then the
races they close, over real sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest
import websockets

from runtime.accounts import Principal
from runtime.config import Settings
from runtime.live import LiveSessions
from runtime.protocol import CloseCode, ErrorCode, Refused
from runtime.resume import VoiceSessionRecord
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

if TYPE_CHECKING:
    from runtime.session import VoiceSession

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


# Rules 2 and 3 — continuations and removal


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
    tokens = server.services.resume_tokens
    issue = tokens.issue
    issuing, release = asyncio.Event(), asyncio.Event()

    async def slow_issue(record: VoiceSessionRecord, *, ttl_s: float) -> str:
        issuing.set()
        await release.wait()
        return await issue(record, ttl_s=ttl_s)

    tokens.issue = slow_issue  # type: ignore[method-assign]
    auth = {"Authorization": f"Bearer {server.token}"}
    async with websockets.connect(server.ws_url, additional_headers=auth) as first:
        await asyncio.wait_for(issuing.wait(), 5)
        async with websockets.connect(server.ws_url, additional_headers=auth) as second:
            error = json.loads(await asyncio.wait_for(second.recv(), 5))
            assert error["error"]["code"] == ErrorCode.TOO_MANY_SESSIONS
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await second.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.TOO_MANY_SESSIONS
        release.set()
        assert json.loads(await first.recv())["type"] == "session.created"
        assert len(server.services.live_sessions) == 1
