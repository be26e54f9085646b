"""``POST /api/threads/{id}/fork`` over HTTP on both stores: what a fork copies (journal prefix,
checkpoints, carried amendments, thread memory cut to the copied items), that its memory is its
own, who may fork, and that a voice session continues a fork."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from journal.amendments import item_deleted, item_truncated
from journal.checkpoints import NewCheckpoint, source_checksum
from journal.errors import JournalUnavailable
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from memory.thread_memory import Overrides, ThreadFact, ThreadMemory
from plugins.fakes import FakeBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.http.thread_fork import carried_amendments
from runtime.roles import default_role
from runtime.server import running_server
from runtime.services import open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_api_conversations import Api, make_api

__all__ = ["postgres_url"]

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["memory", "postgres"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    extra: dict[str, Any] = {"storage": "memory"}
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            await truncate_all(pool)
        finally:
            await pool.close()
        extra = {"storage": "postgres", "database_url": url}
    services = await open_services(
        Settings(port=0, data_dir=tmp_path / "data", knowledge_semantic=False, **extra),
        plugins=fake_plugins(),
    )
    try:
        client = make_api(services)
        yield await anext(client)
        await client.aclose()
    finally:
        await services.close()


def turn(event_id: str, kind: EventKind, text: str, session: str = "vs_1") -> NewEvent:
    """A conversational event whose realtime item id is ``item_<event id>``."""
    payload: dict[str, Any] = {"text": text, "item_id": f"item_{event_id}"}
    if kind is EventKind.ASSISTANT_OUTPUT:
        payload |= {"heard_text": text, "interrupted": False, "generation": 1}
    return NewEvent(event_id, kind, payload, session)


HISTORY = [
    turn("e1", EventKind.USER_INPUT, "I live in Oslo"),
    turn("e2", EventKind.ASSISTANT_OUTPUT, "Oslo is lovely in spring"),
    turn("e3", EventKind.USER_INPUT, "I am moving to Bergen", session="vs_2"),
    turn("e4", EventKind.ASSISTANT_OUTPUT, "Bergen is rainy", session="vs_2"),
]


def fact(key: str, content: str, *sources: str, status: str = "active") -> ThreadFact:
    return ThreadFact(key, content, "fact", sources, status, NOW)  # type: ignore[arg-type]


MEMORY = ThreadMemory(
    facts={
        "home": fact("home", "The user lives in Oslo", "e1"),
        "moving": fact("moving", "The user moves to Bergen", "e3"),
        "weather": fact("weather", "Oslo is lovely, Bergen rainy", "e2", "e4"),
    },
    processed=frozenset({"e1", "e2", "e3", "e4"}),
    revision=3,
    overrides=Overrides(use=False, generate=None),
    last_failure="model_timeout",
)


async def thread_of(
    api: Api, thread_id: str = "th_src", events: list[NewEvent] | None = None
) -> ThreadRef:
    """Alice's thread ``thread_id`` with ``HISTORY`` (or ``events``) and ``MEMORY``."""
    services = api.services
    who = api.principal
    role = await default_role(services.roles, who.tenant)
    await services.threads.create(who.tenant, who.user, thread_id, role.id)
    ref = ThreadRef(who.tenant, who.user, thread_id)
    await services.journal.append(ref, HISTORY if events is None else events)
    await services.thread_memory.save(who.tenant, who.user, thread_id, MEMORY, 0)
    return ref


async def fork(
    api: Api, thread_id: str = "th_src", headers: dict[str, str] | None = None, **body: Any
) -> httpx.Response:
    return await api.http.post(
        f"/api/threads/{thread_id}/fork", json=body, headers=headers or api.alice
    )


def journal_view(events: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.seq, e.event_id, e.kind, e.payload, e.voice_session_id) for e in events]


async def test_a_fork_of_the_whole_thread_copies_its_events_and_memory(api: Api) -> None:
    source = await thread_of(api)
    response = await fork(api)
    assert response.status_code == 201, response.text
    answer = response.json()
    new_id = answer["thread_id"]
    assert new_id.startswith("th_") and new_id != "th_src"
    assert answer == {
        "thread_id": new_id, "forked_from": "th_src", "at": None, "events": 4,
        "voice_session_id": "vs_2",
    }  # fmt: skip

    services, who = api.services, api.principal
    copy = ThreadRef(who.tenant, who.user, new_id)
    assert journal_view(await services.journal.read(copy)) == journal_view(
        await services.journal.read(source)
    )
    thread = await services.threads.get(who.tenant, who.user, new_id)
    original = await services.threads.get(who.tenant, who.user, "th_src")
    assert thread is not None and original is not None
    assert thread.role_id == original.role_id

    memory = await services.thread_memory.load(who.tenant, who.user, new_id)
    assert dict(memory.facts) == dict(MEMORY.facts)
    assert memory.processed == MEMORY.processed
    assert memory.overrides == Overrides(use=False, generate=None)
    assert (memory.revision, memory.last_failure) == (1, None)


async def test_a_fork_at_an_item_copies_up_to_it_and_drops_facts_sourced_later(
    api: Api,
) -> None:
    await thread_of(api)
    response = await fork(api, at="e2")
    assert response.status_code == 201, response.text
    answer = response.json()
    assert (answer["at"], answer["events"], answer["voice_session_id"]) == ("e2", 2, "vs_1")

    services, who = api.services, api.principal
    copy = ThreadRef(who.tenant, who.user, answer["thread_id"])
    assert [e.event_id for e in await services.journal.read(copy)] == ["e1", "e2"]
    memory = await services.thread_memory.load(who.tenant, who.user, answer["thread_id"])
    assert set(memory.facts) == {"home", "weather"}  # "moving" cites only e3
    assert memory.facts["weather"].sources == ("e2",)  # e4 is not in the fork
    assert memory.processed == {"e1", "e2"}
    assert memory.overrides.use is False


async def test_a_fork_carries_later_amendments_of_its_items_and_earlier_checkpoints(
    api: Api,
) -> None:
    services, who = api.services, api.principal
    source = await thread_of(api)
    events = await services.journal.read(source)
    first = NewCheckpoint(
        1, 2, "Oslo talk", source_checksum(events[:2], None), None, "extractive"
    )  # fmt: skip
    second = NewCheckpoint(
        3, 4, "Bergen talk", source_checksum(events[2:4], first.checksum), first.checksum,
        "extractive",
    )  # fmt: skip
    await services.checkpoints.put(source, first)
    await services.checkpoints.put(source, second)
    # After the cut (at e3): the answer e2 was heard only in part, e1 deleted, and e4 — after
    # the cut — truncated.
    await services.journal.append(
        source,
        [
            item_truncated("a1", "item_e2", "Oslo is", voice_session_id="vs_2"),
            item_deleted("a2", "item_e1", voice_session_id="vs_2"),
            item_truncated("a3", "item_e4", "Bergen", voice_session_id="vs_2"),
        ],
    )

    response = await fork(api, at="e3")
    assert response.status_code == 201, response.text
    assert response.json()["events"] == 5
    copy = ThreadRef(who.tenant, who.user, response.json()["thread_id"])
    copied = await services.journal.read(copy)
    assert [e.event_id for e in copied] == ["e1", "e2", "e3", "a1", "a2"]
    assert [e.seq for e in copied] == [1, 2, 3, 4, 5]

    chain = await services.checkpoints.list(copy)
    assert [c.content() for c in chain] == [first]  # 3…4 ends after the cut
    assert chain[0].verifies(copied[:2])


def test_only_amendments_naming_copied_items_are_carried() -> None:
    ref = ThreadRef("t", "u", "th")
    stored = [
        stored_event(ref, 5, item_deleted("d1", "item_e1")),
        stored_event(ref, 6, item_deleted("d2", "item_later")),
        stored_event(ref, 7, NewEvent("e9", EventKind.USER_INPUT, {"text": "x"})),
        stored_event(ref, 8, item_truncated("t1", "item_e2", "he")),
    ]
    kept = carried_amendments({"item_e1", "item_e2"}, stored)
    assert [e.event_id for e in kept] == ["d1", "t1"]


def stored_event(ref: ThreadRef, seq: int, event: NewEvent) -> JournalEvent:
    return JournalEvent(ref, seq, event.event_id, event.kind, event.payload, None, NOW)


async def remember(api: Api, thread_id: str, key: str, content: str) -> dict[str, Any]:
    """A person's Remember through the thread memory route; the new view."""
    url = f"/api/threads/{thread_id}/memory"
    view = (await api.http.get(url, headers=api.alice)).json()
    command = {"type": "remember", "key": key, "content": content, "kind": "fact"}
    body = {"expected": view["head"], "revision": view["revision"], "command": command}
    response = await api.http.post(url, json=body, headers=api.alice)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def entries(api: Api, thread_id: str) -> dict[str, str]:
    view = await api.http.get(f"/api/threads/{thread_id}/memory", headers=api.alice)
    return {e["key"]: e["content"] for e in view.json()["entries"]}


async def test_a_forks_memory_is_its_own(api: Api) -> None:
    await thread_of(api)
    new_id = (await fork(api)).json()["thread_id"]
    assert await entries(api, new_id) == await entries(api, "th_src")

    await remember(api, new_id, "home", "The user lives in Tromso")
    await remember(api, new_id, "pet", "The user has a cat")
    source = await entries(api, "th_src")
    assert (source["home"], "pet" in source) == ("The user lives in Oslo", False)

    await remember(api, "th_src", "car", "The user drives a Volvo")
    mine = await entries(api, new_id)
    assert (mine["home"], "car" in mine) == ("The user lives in Tromso", False)
    # The fork's Remember notes are its own journal's: the source's history did not move.
    source_ref = ThreadRef(api.principal.tenant, api.principal.user, "th_src")
    kinds = [e.kind for e in await api.services.journal.read(source_ref)]
    assert kinds.count(EventKind.MEMORY_NOTE) == 1


async def test_only_the_owner_forks_and_at_must_be_an_event_of_the_thread(api: Api) -> None:
    await thread_of(api)
    await thread_of(api, "th_other", [turn("x1", EventKind.USER_INPUT, "hello")])
    for other in (api.bob, api.eve):
        refused = await fork(api, headers=other)
        assert refused.status_code == 404
        assert refused.json()["code"] == "thread_not_found"
    unknown = await fork(api, "th_nope")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "thread_not_found")
    for at in ("e9", "x1"):  # unknown, and an event of another thread
        missing = await fork(api, at=at)
        assert (missing.status_code, missing.json()["code"]) == (404, "item_not_found")
    extra = await fork(api, at="e1", thread_id_override="th_x")
    assert (extra.status_code, extra.json()["code"]) == (422, "invalid_request")
    # Nothing was made by the refusals; no body at all forks the whole thread.
    bare = await api.http.post("/api/threads/th_src/fork", headers=api.alice)
    assert bare.status_code == 201 and bare.json()["events"] == 4


async def test_a_fork_that_fails_halfway_leaves_nothing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    services, who = api.services, api.principal
    await thread_of(api)
    made: list[str] = []

    async def failing_copy(*args: Any) -> ThreadMemory:
        made.append(args[3])
        raise JournalUnavailable("down")

    monkeypatch.setattr(services.thread_memory, "copy", failing_copy)
    response = await fork(api)
    assert (response.status_code, response.json()["code"]) == (503, "journal_unavailable")
    [new_id] = made
    assert await services.threads.get(who.tenant, who.user, new_id) is None
    assert await services.journal.read(ThreadRef(who.tenant, who.user, new_id)) == []

    # The last step fails: the journal, checkpoints and memory written before it go too.
    source = ThreadRef(who.tenant, who.user, "th_src")
    events = await services.journal.read(source, limit=2)
    await services.checkpoints.put(
        source, NewCheckpoint(1, 2, "Oslo", source_checksum(events, None), None, "extractive")
    )
    monkeypatch.undo()
    created: list[str] = []

    async def failing_create(tenant: str, user: str, thread_id: str, role_id: str) -> Any:
        created.append(thread_id)
        raise RuntimeError("threads table gone")

    monkeypatch.setattr(services.threads, "create", failing_create)
    with pytest.raises(RuntimeError):
        await fork(api)
    copy = ThreadRef(who.tenant, who.user, created[0])
    assert await services.journal.read(copy) == []
    assert await services.checkpoints.list(copy) == []
    assert (await services.thread_memory.load(who.tenant, who.user, created[0])).revision == 0


# ---------------------------------------------------------------------------- continuing


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="openrealtime-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["memory", "postgres"])
def server_settings(request: pytest.FixtureRequest, data_dir: Path) -> Settings:
    if request.param == "memory":
        return Settings(port=0, data_dir=data_dir, storage="memory", knowledge_semantic=False)
    url = request.getfixturevalue("postgres_url")
    return Settings(port=0, data_dir=data_dir, database_url=url, knowledge_semantic=False)


async def test_a_voice_session_continues_a_fork(server_settings: Settings) -> None:
    brain = FakeBrain(["Nice to meet you, Ada.", "You are Ada.", "Still Ada."])
    async with running_server(server_settings, plugins=fake_plugins(brain=brain)) as server:
        auth = {"Authorization": f"Bearer {server.token}"}
        async with (
            httpx.AsyncClient(base_url=server.http_url, headers=auth) as http,
            RealtimeClient(server.ws_url, server.token) as first,
        ):
            started = await first.connect()
            await first.send_text("my name is Ada")
            await first.wait_type("response.done")
            memory_url = f"/api/threads/{started['thread_id']}/memory"
            view = (await http.get(memory_url)).json()
            command = {"type": "remember", "key": "drink", "content": "Ada drinks green tea"}
            remembered = await http.post(
                memory_url,
                json={"expected": view["head"], "revision": view["revision"], "command": command},
            )
            assert remembered.status_code == 200, remembered.text
            # The source's session is still connected: forking it is fine.
            response = await http.post(f"/api/threads/{started['thread_id']}/fork", json={})
            assert response.status_code == 201, response.text
        answer = response.json()
        assert answer["voice_session_id"] == started["id"]  # the note has no session
        assert answer["events"] >= 3  # the turn and the Remember's memory_note

        async with RealtimeClient(server.ws_url, server.token) as second:
            continued = await second.connect(
                requested_thread_id=answer["thread_id"],
                previous_voice_session_id=answer["voice_session_id"],
            )
            assert continued["thread_id"] == answer["thread_id"]
            await second.send_text("what is my name?")
            await second.wait_type("response.done")
        assert brain.requests[-1].model_text == (
            "Recent conversation context:\n"
            "User: my name is Ada\n"
            "Assistant: Nice to meet you, Ada.\n"
            "Current user input:what is my name?"
        )
        # The fork's memory reaches its model.
        assert "<thread_memory>" in brain.requests[-1].system
        assert "Ada drinks green tea" in brain.requests[-1].system
        # The source did not see the fork's new turn.
        principal = await server.services.authenticate(server.token)
        assert principal is not None
        source = ThreadRef(principal.tenant, principal.user, started["thread_id"])
        fork_ref = replace(source, thread_id=answer["thread_id"])
        assert len(await server.services.journal.read(source)) == answer["events"]
        assert len(await server.services.journal.read(fork_ref)) > answer["events"]
