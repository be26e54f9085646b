"""Conversation records against the real server and real WebSocket sessions (SPEC RES-3, RES-5,
CONV-4): a record saved with a session's runtime ids continues that thread; the continuation's
turns never overwrite the earlier session's; the journal of a thread in use is not erased."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from journal.events import EventKind, ThreadRef
from plugins.fakes import FakeBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins

__all__ = ["postgres_url"]

REPLIES = ["Hello Ada.", "Paris is in France.", "You asked about Paris.", "Goodbye, Ada."]


@pytest.fixture(params=["memory", "postgres"])
async def settings_for(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "memory":
        return Settings(port=0, storage="memory", data_dir=tmp_path / "data")
    url = request.getfixturevalue("postgres_url")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        await truncate_all(pool)
    finally:
        await pool.close()
    return Settings(port=0, storage="postgres", database_url=url, data_dir=tmp_path / "data")


@pytest.fixture
async def server_with_brain(
    settings_for: Settings,
) -> AsyncIterator[tuple[RunningServer, FakeBrain]]:
    brain = FakeBrain(REPLIES)
    async with running_server(settings_for, plugins=fake_plugins(brain=brain)) as server:
        yield server, brain


async def turn(client: RealtimeClient, text: str) -> dict[str, Any]:
    before = len(client.events("response.done"))
    await client.send_text(text)
    await client.wait_for(lambda _m: len(client.events("response.done")) > before)
    return client.events("response.done")[-1]


async def end(client: RealtimeClient) -> None:
    """End the session for good (not a drop: a dropped session waits to be resumed)."""
    await client.end_session()
    await client.wait_closed()
    await client.close()


def item_ids(client: RealtimeClient) -> list[str]:
    """The ids of the user items the session created (what a page keys messages by)."""
    return [
        str(e["item"]["id"])
        for e in client.events("conversation.item.added")
        if e["item"].get("role") == "user"
    ]


async def save(
    http: httpx.AsyncClient, auth: dict[str, str], record: str, base: int, start: int,
    messages: list[dict[str, str]], session: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    response = await http.post(
        "/api/conversations",
        headers=auth,
        json={
            "id": record,
            "idempotency_key": str(uuid.uuid4()),
            "base_version": base,
            "start_index": start,
            "messages": messages,
            "thread_id": session["thread_id"],
            "voice_session_id": session["id"],
            "role_id": session["role"]["id"],
        },
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_continue_from_a_record_keeps_the_thread_and_never_overwrites_earlier_turns(
    server_with_brain: tuple[RunningServer, FakeBrain],
) -> None:
    server, brain = server_with_brain
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        # Session 1: two turns, saved by "the page" as record rec-1.
        first = RealtimeClient(server.ws_url, server.token)
        s1 = await first.connect()
        await turn(first, "my name is Ada")
        await turn(first, "where is Paris?")
        page1 = [
            {"role": "user", "text": "my name is Ada"},
            {"role": "assistant", "text": REPLIES[0]},
            {"role": "user", "text": "where is Paris?"},
            {"role": "assistant", "text": REPLIES[1]},
        ]
        assert (await save(http, auth, "rec-1", 0, 0, page1, s1))["version"] == 1
        await end(first)

        # The history page: continuable, with the ids to continue from.
        detail = (await http.get("/api/conversations/rec-1", headers=auth)).json()
        assert detail["continuable"] is True, detail
        assert (detail["thread_id"], detail["voice_session_id"]) == (s1["thread_id"], s1["id"])

        # Session 2 continues the same thread from the record's ids and does two turns.
        second = RealtimeClient(server.ws_url, server.token)
        s2 = await second.connect(
            requested_thread_id=detail["thread_id"],
            previous_voice_session_id=detail["voice_session_id"],
        )
        assert s2["thread_id"] == s1["thread_id"] and s2["id"] != s1["id"]
        await turn(second, "what did I ask about?")
        await turn(second, "bye")
        page2 = [
            {"role": "user", "text": "what did I ask about?"},
            {"role": "assistant", "text": REPLIES[2]},
            {"role": "user", "text": "bye"},
            {"role": "assistant", "text": REPLIES[3]},
        ]
        # "Continue" keeps the page record id; the new session's messages follow the old ones.
        saved = await save(http, auth, "rec-1", 1, 4, page2, s2)
        assert saved == {"id": "rec-1", "version": 2, "message_count": 8}
        await end(second)

    # The brain of session 2 saw session 1's turns (history comes from the journal).
    assert "User: my name is Ada" in brain.requests[2].model_text
    assert f"Assistant: {REPLIES[1]}" in brain.requests[2].model_text

    # The journal holds all four turns of both sessions, none overwritten, in order.
    services = server.services
    principal = await services.accounts.authenticate(server.token)
    assert principal is not None
    events = await services.journal.read(
        ThreadRef(principal.tenant, principal.user, s1["thread_id"])
    )
    users = [e for e in events if e.kind is EventKind.USER_INPUT]
    answers = [e for e in events if e.kind is EventKind.ASSISTANT_OUTPUT]
    assert [e.payload["text"] for e in users] == [
        "my name is Ada", "where is Paris?", "what did I ask about?", "bye",
    ]  # fmt: skip
    assert [e.payload["text"] for e in answers] == REPLIES
    assert len({e.event_id for e in users}) == 4
    assert len({e.event_id for e in answers}) == 4
    assert [e.voice_session_id for e in users] == [s1["id"], s1["id"], s2["id"], s2["id"]]
    assert [e.voice_session_id for e in answers] == [s1["id"], s1["id"], s2["id"], s2["id"]]
    # Generation and turn numbers start afresh in every session; the ids carry the session, so
    # the continuation's turn 1 is not session 1's turn 1.
    assert {e.event_id for e in events[:4]}.isdisjoint(e.event_id for e in events[4:])
    # Item ids the page keys messages by do not repeat across the two sessions either.
    items1, items2 = item_ids(first), item_ids(second)
    assert len(items1) == len(items2) == 2
    assert set(items1).isdisjoint(items2)

    # The record shows all eight messages, session 1's untouched.
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        detail = (await http.get("/api/conversations/rec-1", headers=auth)).json()
    assert [m["text"] for m in detail["messages"]] == [m["text"] for m in page1 + page2]
    assert detail["voice_session_id"] == s2["id"]
    assert detail["continuable"] is True


async def test_the_journal_of_a_thread_in_use_is_not_erased(
    server_with_brain: tuple[RunningServer, FakeBrain],
) -> None:
    server, _ = server_with_brain
    auth = {"Authorization": f"Bearer {server.token}"}
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    client = RealtimeClient(server.ws_url, server.token)
    session = await client.connect()
    await turn(client, "my name is Ada")
    thread = ThreadRef(principal.tenant, principal.user, session["thread_id"])
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        await save(http, auth, "rec-1", 0, 0, [{"role": "user", "text": "my name is Ada"}], session)
        refused = await http.delete("/api/conversations/rec-1?erase_journal=true", headers=auth)
        assert refused.status_code == 409
        assert refused.json()["code"] == "thread_in_use"
        assert (await http.get("/api/conversations/rec-1", headers=auth)).status_code == 200
        assert len(await server.services.journal.read(thread)) == 2

        # A dropped connection still holds the session (it waits to be resumed) ...
        await client.drop()
        await asyncio.sleep(0.05)
        again = await http.delete("/api/conversations/rec-1?erase_journal=true", headers=auth)
        assert again.status_code == 409
        # ... until it is resumed and ended.
        await client.reconnect()
        await end(client)
        for _ in range(100):
            if not server.services.live_sessions:
                break
            await asyncio.sleep(0.01)
        done = await http.delete("/api/conversations/rec-1?erase_journal=true", headers=auth)
        assert done.status_code == 200, done.text
        assert done.json()["journal_events_removed"] == 2
    assert await server.services.journal.read(thread) == []
