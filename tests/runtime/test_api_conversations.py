"""``/api/conversations`` over real HTTP (httpx on the ASGI app) on both stores: segments,
idempotent retries, versions, per-user isolation, limits, continuability and deletion."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from journal.checkpoints import NewCheckpoint, source_checksum
from journal.events import EventKind, NewEvent, ThreadRef
from memory.errors import MemoryUnavailable
from runtime.accounts import Principal
from runtime.app import create_app
from runtime.config import Settings
from runtime.http.conversations import JOURNAL_GONE, NO_RUNTIME_IDS, ROLE_DELETED, THREAD_UNKNOWN
from runtime.roles import default_role
from runtime.services import Services, open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins

__all__ = ["postgres_url"]

BOB = Principal("local", "bob")
EVE = Principal("other-tenant", "local-user")  # the same user name in another tenant


@dataclass
class Receipt:
    receipt_id: str
    deleted: int


@dataclass
class RecordingMemory:
    """Stands in for ``services.memory`` (issue 7) with only the call CONV-4 makes: it holds
    (tenant, user, source thread) → entry count and records every ``delete_source``."""

    sources: dict[tuple[str, str, str], int] = field(default_factory=dict)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> Receipt:
        self.calls.append((tenant, user, source_thread_id))
        deleted = self.sources.pop((tenant, user, source_thread_id), 0)
        return Receipt(f"rcpt_{len(self.calls)}", deleted)


@dataclass
class Api:
    services: Services
    http: httpx.AsyncClient
    alice: dict[str, str]
    bob: dict[str, str]
    eve: dict[str, str]
    principal: Principal

    async def post(self, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
        return await self.http.post("/api/conversations", json=body, headers=headers or self.alice)

    async def segment(self, record: str, base: int, start: int, *texts: str, **fields: Any) -> Any:
        body = segment_body(record, base, start, *texts, **fields)
        response = await self.post(**body)
        assert response.status_code == 200, response.text
        return response.json()

    async def detail(self, record: str, headers: dict[str, str] | None = None) -> httpx.Response:
        return await self.http.get(f"/api/conversations/{record}", headers=headers or self.alice)


def segment_body(record: str, base: int, start: int, *texts: str, **fields: Any) -> dict[str, Any]:
    messages = [
        {
            "role": "user" if (start + i) % 2 == 0 else "assistant",
            "text": t,
            "at": "2026-11-29T10:00:00Z",
        }
        for i, t in enumerate(texts)
    ]
    return {
        "id": record,
        "idempotency_key": fields.pop("key", None) or f"k-{uuid.uuid4()}",
        "base_version": base,
        "start_index": start,
        "messages": messages,
        **fields,
    }


async def make_api(services: Services) -> AsyncIterator[Api]:
    await services.accounts.add_token(BOB, "bobs-token")
    await services.accounts.add_token(EVE, "eves-token")
    principal = await services.accounts.authenticate(services.local_token or "")
    assert principal is not None
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield Api(
            services,
            http,
            {"Authorization": f"Bearer {services.local_token}"},
            {"Authorization": "Bearer bobs-token"},
            {"Authorization": "Bearer eves-token"},
            principal,
        )


ApiFactory = Callable[..., Any]


@pytest.fixture(params=["memory", "postgres"])
async def api_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """Opens services (in-memory or PostgreSQL) with extra settings and an API client on them."""
    opened: list[Services] = []
    clients: list[Any] = []
    extra: dict[str, Any] = {"storage": "memory"}
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            await truncate_all(pool)
        finally:
            await pool.close()
        extra = {"storage": "postgres", "database_url": url}

    async def factory(**settings: Any) -> Api:
        services = await open_services(
            Settings(port=0, data_dir=tmp_path / "data", **extra, **settings),
            plugins=fake_plugins(),
        )
        opened.append(services)
        client = make_api(services)
        clients.append(client)
        return await anext(client)

    yield factory
    for client in clients:
        await client.aclose()
    for services in opened:
        await services.close()


@pytest.fixture
async def api(api_factory: ApiFactory) -> Api:
    result: Api = await api_factory()
    return result


async def journaled_thread(api: Api, thread_id: str, session: str, events: int = 2) -> ThreadRef:
    """A thread of alice's with ``events`` journaled events of voice session ``session``."""
    role = await default_role(api.services.roles, api.principal.tenant)
    await api.services.threads.create(api.principal.tenant, api.principal.user, thread_id, role.id)
    ref = ThreadRef(api.principal.tenant, api.principal.user, thread_id)
    await api.services.journal.append(
        ref,
        [
            NewEvent(f"{session}:{i}", EventKind.USER_INPUT, {"text": f"turn {i}"}, session)
            for i in range(events)
        ],
    )
    return ref


# ---------------------------------------------------------------------------- saving


async def test_segments_make_a_record_the_list_and_detail_show(api: Api) -> None:
    first = await api.segment("rec-1", 0, 0, "hello", "hi there", title="Greeting")
    assert first == {"id": "rec-1", "version": 1, "message_count": 2}
    second = await api.segment("rec-1", 1, 2, "what's new?")
    assert second == {"id": "rec-1", "version": 2, "message_count": 3}

    listing = (await api.http.get("/api/conversations", headers=api.alice)).json()
    [summary] = listing["conversations"]
    assert summary["id"] == "rec-1"
    assert summary["title"] == "Greeting"
    assert (summary["version"], summary["message_count"]) == (2, 3)
    assert summary["continuable"] is False
    assert summary["view_only_reason"] == NO_RUNTIME_IDS
    assert set(summary) == {
        "id", "title", "role_id", "thread_id", "voice_session_id", "message_count", "version",
        "created_at", "updated_at", "continuable", "view_only_reason",
    }  # fmt: skip
    assert listing["limits"] == {
        "max_segment_messages": 100,
        "max_segment_bytes": 256 * 1024,
        "max_messages": 100_000,
    }

    detail = (await api.detail("rec-1")).json()
    assert {k: v for k, v in detail.items() if k != "messages"} == summary
    assert detail["messages"] == [
        {"index": 0, "role": "user", "text": "hello", "at": "2026-11-29T10:00:00+00:00"},
        {"index": 1, "role": "assistant", "text": "hi there", "at": "2026-11-29T10:00:00+00:00"},
        {"index": 2, "role": "user", "text": "what's new?", "at": "2026-11-29T10:00:00+00:00"},
    ]
    page = await api.http.get("/api/conversations/rec-1?from_index=1&limit=1", headers=api.alice)
    assert [m["index"] for m in page.json()["messages"]] == [1]


async def test_a_retried_segment_returns_the_same_result_and_writes_once(api: Api) -> None:
    body = segment_body("rec-1", 0, 0, "hello", "hi there", key="seg-1")
    first = await api.post(**body)
    again = await api.post(**body)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() == {"id": "rec-1", "version": 1, "message_count": 2}
    # The response of a later segment was lost too: its retry still answers, no conflict.
    later = segment_body("rec-1", 1, 2, "more", key="seg-2")
    assert (await api.post(**later)).json()["version"] == 2
    assert (await api.post(**later)).json() == {"id": "rec-1", "version": 2, "message_count": 3}
    assert (await api.post(**body)).json()["version"] == 1
    detail = (await api.detail("rec-1")).json()
    assert detail["version"] == 2
    assert [m["text"] for m in detail["messages"]] == ["hello", "hi there", "more"]
    # The same key with other content is a client bug, not a retry.
    reused = await api.post(**segment_body("rec-1", 2, 3, "other", key="seg-1"))
    assert reused.status_code == 422
    assert reused.json()["code"] == "idempotency_key_reused"


async def test_concurrent_posts_with_one_key_write_once(api: Api) -> None:
    body = segment_body("rec-1", 0, 0, "hello", "hi there", "bye", key="seg-1")
    responses = await asyncio.gather(*(api.post(**body) for _ in range(6)))
    assert {r.status_code for r in responses} == {200}
    assert {tuple(r.json().items()) for r in responses} == {
        (("id", "rec-1"), ("version", 1), ("message_count", 3))
    }
    detail = (await api.detail("rec-1")).json()
    assert detail["version"] == 1
    assert [m["text"] for m in detail["messages"]] == ["hello", "hi there", "bye"]


async def test_a_stale_base_version_is_a_409_with_the_current_version(api: Api) -> None:
    await api.segment("rec-1", 0, 0, "hello")
    await api.segment("rec-1", 1, 1, "hi")
    stale = await api.post(**segment_body("rec-1", 1, 1, "overwrite?"))
    assert stale.status_code == 409
    assert stale.json()["code"] == "version_conflict"
    assert stale.json()["current_version"] == 2
    created_again = await api.post(**segment_body("rec-1", 0, 0, "fresh start"))
    assert created_again.status_code == 409
    assert created_again.json()["current_version"] == 2
    assert [m["text"] for m in (await api.detail("rec-1")).json()["messages"]] == ["hello", "hi"]
    missing = await api.post(**segment_body("rec-gone", 4, 0, "late segment"))
    assert missing.status_code == 404
    assert missing.json()["code"] == "conversation_not_found"


async def test_records_are_per_user(api: Api) -> None:
    await api.segment("rec-1", 0, 0, "alice's secret", thread_id="th_alice")
    for other in (api.bob, api.eve):
        for response in (
            await api.detail("rec-1", headers=other),
            await api.http.delete("/api/conversations/rec-1", headers=other),
            await api.post(other, **segment_body("rec-1", 1, 1, "intrusion")),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["code"] == "conversation_not_found"
        listing = await api.http.get("/api/conversations", headers=other)
        assert listing.json()["conversations"] == []
        # Writing version 0 under the same id makes the other user's own record.
        own = await api.post(other, **segment_body("rec-1", 0, 0, "my own"))
        assert own.json() == {"id": "rec-1", "version": 1, "message_count": 1}
        mine = (await api.detail("rec-1", headers=other)).json()
        assert [m["text"] for m in mine["messages"]] == ["my own"]
    alice = (await api.detail("rec-1")).json()
    assert alice["version"] == 1
    assert [m["text"] for m in alice["messages"]] == ["alice's secret"]
    assert (await api.http.get("/api/conversations")).status_code == 401
    assert (await api.http.get("/api/conversations/rec-1")).status_code == 401
    assert (
        await api.post({"Authorization": "Bearer nope"}, **segment_body("r", 0, 0))
    ).status_code == 401


# ---------------------------------------------------------------------------- limits and input


async def test_segment_limits_are_413_with_stable_codes(api: Api) -> None:
    too_many = await api.post(**segment_body("rec-1", 0, 0, *[f"m{i}" for i in range(101)]))
    assert too_many.status_code == 413
    assert too_many.json()["code"] == "segment_too_many_messages"
    exactly = await api.post(**segment_body("rec-1", 0, 0, *[f"m{i}" for i in range(100)]))
    assert exactly.json()["message_count"] == 100

    limit = 256 * 1024
    text = "语" * (limit // 3) + "x" * (limit % 3)  # exactly the limit in UTF-8
    assert len(text.encode("utf-8")) == limit
    fits = await api.post(**segment_body("rec-2", 0, 0, text))
    assert fits.status_code == 200, fits.text
    over = await api.post(**segment_body("rec-3", 0, 0, text, "!"))
    assert over.status_code == 413
    assert over.json()["code"] == "segment_too_large"
    # A body far past any segment is refused before it is parsed.
    huge = await api.http.post(
        "/api/conversations",
        content=b'{"id": "rec-4", "padding": "' + b"x" * (3 * limit) + b'"}',
        headers={**api.alice, "content-type": "application/json"},
    )
    assert huge.status_code == 413
    assert huge.json()["code"] == "segment_too_large"
    assert (await api.detail("rec-3")).status_code == 404
    assert (await api.detail("rec-4")).status_code == 404


async def test_the_conversation_cap_is_configurable(api_factory: ApiFactory) -> None:
    api: Api = await api_factory(conversation_max_messages=5)
    await api.segment("rec-1", 0, 0, "a", "b", "c", "d")
    full = await api.post(**segment_body("rec-1", 1, 4, "e", "f"))
    assert full.status_code == 413
    assert full.json()["code"] == "conversation_too_long"
    assert (await api.segment("rec-1", 1, 4, "e"))["message_count"] == 5
    assert (await api.post(**segment_body("rec-1", 2, 5, "f"))).status_code == 413
    listing = (await api.http.get("/api/conversations", headers=api.alice)).json()
    assert listing["limits"]["max_messages"] == 5


async def test_bad_segments_are_422_and_tokens_are_never_accepted(api: Api) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({**segment_body("rec-1", 0, 0, "hi"), "resume_token": "secret"}, "token_not_accepted"),
        ({**segment_body("rec-1", 0, 0, "hi"), "token": "secret"}, "token_not_accepted"),
        ({**segment_body("rec-1", 0, 0, "hi"), "unknown": 1}, "invalid_request"),
        (segment_body("rec-1", 0, 2, "gap"), "segment_gap"),
        (segment_body("rec 1", 0, 0, "hi"), "invalid_request"),
        (segment_body("rec-1", -1, 0, "hi"), "invalid_request"),
        ({**segment_body("rec-1", 0, 0), "messages": [{"role": "system", "text": "x"}]},
         "invalid_request"),
        ({**segment_body("rec-1", 0, 0), "messages": [{"role": "user", "text": "a\x00"}]},
         "invalid_request"),
        ({**segment_body("rec-1", 0, 0), "messages": [{"role": "user", "text": "hi",
                                                        "resume_token": "x"}]},
         "token_not_accepted"),
    ]  # fmt: skip
    for body, code in cases:
        response = await api.post(**body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["code"] == code, (body, response.text)
    broken = await api.http.post(
        "/api/conversations",
        content=b"{not json",
        headers={**api.alice, "content-type": "application/json"},
    )
    assert broken.status_code == 422 and broken.json()["code"] == "invalid_request"
    assert (await api.detail("rec-1")).status_code == 404
    # A thread, once recorded, stays the record's thread.
    await api.segment("rec-2", 0, 0, "hi", thread_id="th_1")
    moved = await api.post(**segment_body("rec-2", 1, 1, "x", thread_id="th_2"))
    assert moved.status_code == 409 and moved.json()["code"] == "thread_mismatch"


# ---------------------------------------------------------------------------- continuing


async def test_continuable_only_with_runtime_ids_of_a_live_thread(api: Api) -> None:
    ref = await journaled_thread(api, "th_one", "vs_one")
    await api.segment("ok", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    await api.segment("old", 0, 0, "from before runtime ids")
    await api.segment("half", 0, 0, "hi", thread_id="th_one")
    await api.segment("unknown", 0, 0, "hi", thread_id="th_nope", voice_session_id="vs_one")
    # A session that was continued and left before its first turn: the thread's latest
    # journaled session stands in for it.
    await api.segment("quiet", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_quiet")

    def by_id(listing: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {c["id"]: c for c in listing["conversations"]}

    views = by_id((await api.http.get("/api/conversations", headers=api.alice)).json())
    assert (views["ok"]["continuable"], views["ok"]["view_only_reason"]) == (True, None)
    assert views["ok"]["voice_session_id"] == "vs_one"
    assert views["old"]["view_only_reason"] == NO_RUNTIME_IDS
    assert views["half"]["view_only_reason"] == NO_RUNTIME_IDS
    assert views["unknown"]["view_only_reason"] == THREAD_UNKNOWN
    assert (views["quiet"]["continuable"], views["quiet"]["voice_session_id"]) == (True, "vs_one")
    assert not any(views[i]["continuable"] for i in ("old", "half", "unknown"))

    # Bob holds alice's ids in his own record: the thread is not his, so not continuable.
    await api.post(
        api.bob, **segment_body("b", 0, 0, "x", thread_id="th_one", voice_session_id="vs_one")
    )
    bobs = (await api.detail("b", headers=api.bob)).json()
    assert (bobs["continuable"], bobs["view_only_reason"]) == (False, THREAD_UNKNOWN)

    # The journal erased (or lost with an in-memory runtime): view only.
    await api.services.journal.delete_thread(ref)
    gone = (await api.detail("ok")).json()
    assert (gone["continuable"], gone["view_only_reason"]) == (False, JOURNAL_GONE)

    # The thread's role deleted: view only.
    role = await api.services.roles.create(
        api.principal.tenant, name="Temp", instructions="", voice=None, language=None,
        memory_enabled=False,
    )  # fmt: skip
    await api.services.threads.create(api.principal.tenant, api.principal.user, "th_two", role.id)
    await api.services.journal.append(
        ThreadRef(api.principal.tenant, api.principal.user, "th_two"),
        [NewEvent("e1", EventKind.USER_INPUT, {"text": "hi"}, "vs_two")],
    )
    await api.segment("roled", 0, 0, "hi", thread_id="th_two", voice_session_id="vs_two")
    assert (await api.detail("roled")).json()["continuable"] is True
    await api.services.roles.delete(role.tenant, role.id)
    roled = (await api.detail("roled")).json()
    assert (roled["continuable"], roled["view_only_reason"]) == (False, ROLE_DELETED)


# ---------------------------------------------------------------------------- deleting


async def test_delete_removes_sourced_memories_and_erases_the_journal_on_request(
    api: Api,
) -> None:
    memory = RecordingMemory()
    api.services.memory = memory
    tenant, user = api.principal.tenant, api.principal.user
    ref = await journaled_thread(api, "th_one", "vs_one", events=3)
    events = await api.services.journal.read(ref)
    await api.services.checkpoints.put(
        ref,
        NewCheckpoint(1, 3, "summary", source_checksum(events, None), None, "test"),
    )
    memory.sources[(tenant, user, "th_one")] = 2
    await api.segment("rec-1", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")

    response = await api.http.delete(
        "/api/conversations/rec-1?erase_journal=true", headers=api.alice
    )
    assert response.status_code == 200, response.text
    assert response.json() == {
        "deleted": True,
        "memories_removed": 2,
        "receipt_id": "rcpt_1",
        "journal_events_removed": 3,
        "recordings_scheduled": [],  # the thread was not recorded
        "kept": [],
    }
    assert memory.calls == [(tenant, user, "th_one")]
    assert await api.services.journal.read(ref) == []
    assert await api.services.checkpoints.latest(ref) is None
    assert (await api.detail("rec-1")).status_code == 404
    again = await api.http.delete("/api/conversations/rec-1", headers=api.alice)
    assert again.status_code == 404


async def test_delete_keeps_the_journal_unless_asked_and_says_why(api: Api) -> None:
    memory = RecordingMemory()
    api.services.memory = memory
    tenant, user = api.principal.tenant, api.principal.user
    ref = await journaled_thread(api, "th_one", "vs_one")
    memory.sources[(tenant, user, "th_one")] = 1
    await api.segment("rec-1", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    body = (await api.http.delete("/api/conversations/rec-1", headers=api.alice)).json()
    assert body["deleted"] is True
    assert (body["memories_removed"], body["receipt_id"]) == (1, "rcpt_1")
    assert body["journal_events_removed"] == 0
    assert [k["what"] for k in body["kept"]] == ["runtime journal"]
    assert "erase_journal=false" in body["kept"][0]["why"]
    assert len(await api.services.journal.read(ref)) == 2


async def test_delete_keeps_a_thread_other_records_still_use(api: Api) -> None:
    memory = RecordingMemory()
    api.services.memory = memory
    ref = await journaled_thread(api, "th_one", "vs_one")
    await api.segment("rec-1", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    await api.segment("rec-2", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    body = (
        await api.http.delete("/api/conversations/rec-1?erase_journal=true", headers=api.alice)
    ).json()
    assert (body["deleted"], body["memories_removed"], body["journal_events_removed"]) == (
        True, 0, 0,
    )  # fmt: skip
    assert [k["what"] for k in body["kept"]] == ["memories", "runtime journal"]
    assert all("rec-2" in k["why"] for k in body["kept"])
    assert memory.calls == []
    assert len(await api.services.journal.read(ref)) == 2
    # The last record of the thread takes the thread's memories and journal with it.
    last = (
        await api.http.delete("/api/conversations/rec-2?erase_journal=true", headers=api.alice)
    ).json()
    assert (last["journal_events_removed"], last["kept"]) == (2, [])
    assert memory.calls == [(api.principal.tenant, api.principal.user, "th_one")]


class UnreachableMemory:
    async def delete_source(self, tenant: str, user: str, source_thread_id: str) -> Receipt:
        raise MemoryUnavailable("connection refused")


async def test_delete_with_the_memory_store_down_is_503_and_keeps_everything(
    api: Api,
) -> None:
    api.services.memory = UnreachableMemory()  # type: ignore[assignment]
    ref = await journaled_thread(api, "th_one", "vs_one")
    await api.segment("rec-1", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    response = await api.http.delete(
        "/api/conversations/rec-1?erase_journal=true", headers=api.alice
    )
    assert response.status_code == 503
    assert response.json()["code"] == MemoryUnavailable.code
    assert (await api.detail("rec-1")).status_code == 200
    assert len(await api.services.journal.read(ref)) == 2


async def test_delete_without_runtime_ids_reports_what_was_kept(api: Api) -> None:
    await api.segment("old", 0, 0, "from before runtime ids")
    old = (
        await api.http.delete("/api/conversations/old?erase_journal=true", headers=api.alice)
    ).json()
    assert old["deleted"] is True
    assert [k["what"] for k in old["kept"]] == ["memories", "runtime journal"]
    assert (await api.detail("old")).status_code == 404


async def test_delete_removes_the_memories_the_memory_store_holds_for_the_thread(
    api: Api,
) -> None:
    """With the runtime's own memory store (issue 7): only the deleted conversation's
    extracted memories go, with the store's receipt."""
    from memory.entries import MemoryDraft, MemorySource

    memory = api.services.memory
    tenant, user = api.principal.tenant, api.principal.user
    role = await default_role(api.services.roles, tenant)
    await journaled_thread(api, "th_one", "vs_one")
    now = datetime.now(UTC)
    for seq, (content, thread) in enumerate(
        (("likes green tea", "th_one"), ("lives in Lyon", "th_one"), ("is a nurse", "th_other")),
        start=1,
    ):
        source = MemorySource(thread, seq, now)
        draft = MemoryDraft("fact", content, actor="extraction", source=source)
        assert (await memory.save(tenant, user, role.id, draft)).changed
    await api.segment("rec-1", 0, 0, "hi", thread_id="th_one", voice_session_id="vs_one")
    body = (
        await api.http.delete("/api/conversations/rec-1?erase_journal=true", headers=api.alice)
    ).json()
    assert (body["memories_removed"], body["journal_events_removed"], body["kept"]) == (2, 2, [])
    assert body["receipt_id"]
    left = await memory.list_entries(tenant, user, role.id)
    assert [e.content for e in left] == ["is a nurse"]
