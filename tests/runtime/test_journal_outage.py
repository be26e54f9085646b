"""A database outage during a conversation: the client is told, nothing is lost or duplicated,
and a session whose unsaved events would overflow its buffer closes with 4011."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from journal.errors import JournalUnavailable
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.store import InMemoryJournalStore, WriterFence
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode
from runtime.server import running_server
from runtime.services import open_services
from tests.runtime.conftest import fake_plugins


class FlakyStore(InMemoryJournalStore):
    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        if self.down:
            raise JournalUnavailable("database unreachable (test)")
        return await super().append(thread, events)

    async def append_fenced(
        self, thread: ThreadRef, events: Sequence[NewEvent], fence: WriterFence
    ) -> list[JournalEvent]:
        if self.down:  # how a session appends (journal/store.py rule 4)
            raise JournalUnavailable("database unreachable (test)")
        return await super().append_fenced(thread, events, fence)

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        if self.down:
            raise JournalUnavailable("database unreachable (test)")
        return await super().read_tail(thread, count)


async def test_outage_is_reported_buffered_and_written_back_once(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory")
    services = await open_services(settings, plugins=fake_plugins())
    store = FlakyStore()
    services.journal = store
    async with running_server(settings, services=services) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            session = await client.connect()
            store.down = True
            await client.send_text("remember this while the database is down")
            error = await client.wait_type("error")
            assert error["error"]["code"] == "journal_unavailable"
            assert error["error"]["retryable"] is True
            # The turn still gets an answer: the buffered input is part of the history.
            done = await client.wait_type("response.done")
            assert done["response"]["status"] == "completed"
            store.down = False
            await client.wait_type("openrealtime.journal.recovered", timeout=15)
            await client.send_text("and this after it came back")
            await client.wait_type("response.done")
    principal = await services.accounts.authenticate(server.token)
    assert principal is not None
    ref = ThreadRef(principal.tenant, principal.user, session["thread_id"])
    events = await store.read(ref)
    assert [e.kind for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT] * 2
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[0].payload["text"] == "remember this while the database is down"


async def test_buffer_overflow_closes_the_session_with_4011(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory", max_unsaved_events=3)
    services = await open_services(settings, plugins=fake_plugins())
    store = FlakyStore()
    store.down = True
    services.journal = store
    async with running_server(settings, services=services) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            for text in ("one", "two", "three"):
                await client.send_text(text)
                await asyncio.sleep(0.05)
            assert await client.wait_closed(timeout=15) == CloseCode.JOURNAL_UNAVAILABLE
