"""BufferedJournal (``runtime/journal_buffer.py``) against a scripted journal store, in virtual
time: the append timeout, buffering in order behind an outage, the retry's backoff and batches,
idempotent write-back, overflow, reads that merge the buffer, and ``close``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import pytest

from journal.errors import JournalUnavailable
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.store import InMemoryJournalStore
from runtime.journal_buffer import BufferedJournal, JournalBufferFull
from tests.virtual_time import in_virtual_time

THREAD = ThreadRef("acme", "alice", "th_1")
OTHER = ThreadRef("acme", "alice", "th_2")

Outcome = Literal["ok", "down", "hang", "commit_then_hang"]


def said(event_id: str) -> NewEvent:
    return NewEvent(event_id, EventKind.USER_INPUT, {"text": event_id, "source": "text"}, "vs_1")


async def _hang() -> None:
    await asyncio.Event().wait()


class ScriptedStore(InMemoryJournalStore):
    """An in-memory journal whose calls follow a script: each append takes the next scripted
    outcome (then ``append_mode``), each tail read ``read_mode``. ``down`` fails at once,
    ``hang`` never answers, ``commit_then_hang`` writes and then never answers (a commit whose
    answer was lost). Every append is recorded with its virtual time."""

    def __init__(self, script: Sequence[Outcome] = ()) -> None:
        super().__init__()
        self.script: list[Outcome] = list(script)
        self.append_mode: Outcome = "ok"
        self.read_mode: Outcome = "ok"
        self.appends: list[tuple[float, ThreadRef, list[str]]] = []

    async def append(self, thread: ThreadRef, events: Sequence[NewEvent]) -> list[JournalEvent]:
        now = asyncio.get_running_loop().time()
        self.appends.append((now, thread, [e.event_id for e in events]))
        outcome = self.script.pop(0) if self.script else self.append_mode
        if outcome == "down":
            raise JournalUnavailable("database unreachable (test)")
        if outcome == "hang":
            await _hang()
        stored = await super().append(thread, events)
        if outcome == "commit_then_hang":
            await _hang()
        return stored

    async def read_tail(self, thread: ThreadRef, count: int) -> list[JournalEvent]:
        if self.read_mode == "down":
            raise JournalUnavailable("database unreachable (test)")
        if self.read_mode == "hang":
            await _hang()
        return await super().read_tail(thread, count)

    async def ids(self, thread: ThreadRef = THREAD) -> list[tuple[int, str]]:
        return [(e.seq, e.event_id) for e in await self.read(thread)]


@dataclass
class Session:
    """What the session is told, in order, with virtual times."""

    told: list[tuple[float, str, str]] = field(default_factory=list)

    def _note(self, what: str, detail: str = "") -> None:
        self.told.append((asyncio.get_running_loop().time(), what, detail))

    def outage(self, message: str) -> None:
        self._note("outage", message)

    def recovered(self) -> None:
        self._note("recovered")

    def overflow(self) -> None:
        self._note("overflow")

    def kinds(self) -> list[str]:
        return [what for _, what, _ in self.told]


def buffered(store: ScriptedStore, **settings: float) -> tuple[BufferedJournal, Session]:
    session = Session()
    journal = BufferedJournal(
        store,
        on_outage=session.outage,
        on_recovered=session.recovered,
        on_overflow=session.overflow,
        **settings,  # type: ignore[arg-type]
    )
    return journal, session


async def until(condition: object, *, step: float = 0.05, limit: float = 60.0) -> None:
    """Let virtual time pass until ``condition()`` holds (at most ``limit`` virtual seconds)."""
    assert callable(condition)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, "condition not reached in virtual time"
        await asyncio.sleep(step)


# ---------------------------------------------------------------- appends


@in_virtual_time
async def test_an_append_goes_straight_to_the_store_when_nothing_is_buffered() -> None:
    store = ScriptedStore()
    journal, session = buffered(store)
    stored = await journal.append(THREAD, [said("a"), said("b")])
    assert [(e.seq, e.event_id) for e in stored] == [(1, "a"), (2, "b")]
    assert journal.buffered == 0 and session.told == []
    assert await store.ids() == [(1, "a"), (2, "b")]


@in_virtual_time
async def test_an_unavailable_store_buffers_the_events_and_tells_the_session() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store)
    events = [said("a"), said("b")]
    provisional = await journal.append(THREAD, events)
    assert journal.buffered == 2
    assert session.told == [(0.0, "outage", "database unreachable (test)")]
    # The caller gets the events back as if stored, with provisional (negative) seqs.
    assert [(e.event_id, e.kind, e.payload, e.voice_session_id) for e in provisional] == [
        (e.event_id, e.kind, e.payload, e.voice_session_id) for e in events
    ]
    assert all(e.seq < 0 and e.thread == THREAD for e in provisional)
    await journal.close(timeout=0.0)


@in_virtual_time
async def test_a_store_that_does_not_answer_within_append_timeout_counts_as_unavailable() -> None:
    store = ScriptedStore(["hang"])
    journal, session = buffered(store, append_timeout=3.0)
    loop = asyncio.get_running_loop()
    await journal.append(THREAD, [said("a")])
    assert loop.time() == 3.0
    assert session.told[0] == (3.0, "outage", "the journal did not answer in time")
    assert journal.buffered == 1
    await until(lambda: journal.buffered == 0)
    assert await store.ids() == [(1, "a")]


@in_virtual_time
async def test_appends_during_an_outage_queue_behind_the_buffer_and_keep_their_order() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store, retry_initial=1.0, retry_max=1.0)
    await journal.append(THREAD, [said("a")])
    await journal.append(THREAD, [said("b")])
    await journal.append(THREAD, [said("c"), said("d")])
    assert journal.buffered == 4
    # Told once; b, c and d never went to the store on their own, ahead of a.
    assert session.kinds() == ["outage"]
    assert all(ids[0] == "a" for _, _, ids in store.appends)
    store.append_mode = "ok"
    await until(lambda: journal.buffered == 0)
    assert await store.ids() == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert session.kinds() == ["outage", "recovered"]
    # Back to normal: the next append goes straight through.
    calls = len(store.appends)
    stored = await journal.append(THREAD, [said("e")])
    assert [e.seq for e in stored] == [5] and len(store.appends) == calls + 1


@in_virtual_time
async def test_the_retry_backs_off_doubling_up_to_retry_max() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store, retry_initial=0.2, retry_max=1.0)
    await journal.append(THREAD, [said("a")])
    await asyncio.sleep(5.0)
    store.append_mode = "ok"
    await until(lambda: journal.buffered == 0)
    times = [at for at, _, _ in store.appends]
    gaps = [round(b - a, 9) for a, b in zip(times[1:], times[2:], strict=False)]
    assert times[:2] == [0.0, 0.0]  # the failed append, then the retry's first attempt at once
    assert gaps[:5] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert set(gaps[3:]) == {1.0}
    assert session.kinds() == ["outage", "recovered"]
    assert session.told[-1][0] == times[-1]


@in_virtual_time
async def test_the_retry_writes_batches_of_at_most_100_and_backs_off_afresh_after_each() -> None:
    store = ScriptedStore(["down", "down", "down", "ok", "down", "ok"])
    journal, _ = buffered(store, max_buffered=300, retry_initial=0.2, retry_max=5.0)
    await journal.append(THREAD, [said(f"e{i}") for i in range(150)])
    await until(lambda: journal.buffered == 0)
    assert [(round(at, 9), len(ids)) for at, _, ids in store.appends] == [
        (0.0, 150),  # the append itself
        (0.0, 100),
        (0.2, 100),
        (0.6, 100),  # written: the delay starts again from retry_initial
        (0.6, 50),
        (0.8, 50),
    ]
    assert await store.ids() == [(i + 1, f"e{i}") for i in range(150)]


@in_virtual_time
async def test_the_retry_writes_each_threads_events_in_their_order() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, _ = buffered(store)
    await journal.append(THREAD, [said("a1")])
    await journal.append(OTHER, [said("b1")])
    await journal.append(THREAD, [said("a2")])
    store.append_mode = "ok"
    await until(lambda: journal.buffered == 0)
    assert await store.ids(THREAD) == [(1, "a1"), (2, "a2")]
    assert await store.ids(OTHER) == [(1, "b1")]


@in_virtual_time
async def test_an_attempt_that_timed_out_but_committed_is_not_written_twice() -> None:
    store = ScriptedStore(["commit_then_hang"])
    journal, session = buffered(store, append_timeout=3.0)
    await journal.append(THREAD, [said("a")])
    assert journal.buffered == 1  # unknown whether it committed: kept
    await until(lambda: journal.buffered == 0)
    assert len(store.appends) == 2  # the retry sent it again ...
    assert await store.ids() == [(1, "a")]  # ... and the event id kept it single
    assert session.kinds() == ["outage", "recovered"]


@in_virtual_time
async def test_an_overflowing_append_is_refused_and_told_and_nothing_is_dropped() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store, max_buffered=3)
    await journal.append(THREAD, [said("a"), said("b")])
    with pytest.raises(JournalBufferFull) as refused:
        await journal.append(THREAD, [said("c"), said("d")])
    assert refused.value.code == "journal_buffer_full" and refused.value.retryable is False
    assert isinstance(refused.value, JournalUnavailable)
    assert session.kinds() == ["outage", "overflow"]
    assert journal.buffered == 2  # what was buffered stays; the refused batch was not kept
    await journal.append(THREAD, [said("c")])  # one more still fits
    store.append_mode = "ok"
    await until(lambda: journal.buffered == 0)
    assert await store.ids() == [(1, "a"), (2, "b"), (3, "c")]


@in_virtual_time
async def test_a_first_failed_batch_larger_than_the_buffer_overflows_at_once() -> None:
    store = ScriptedStore(["down"])
    journal, session = buffered(store, max_buffered=2)
    with pytest.raises(JournalBufferFull):
        await journal.append(THREAD, [said("a"), said("b"), said("c")])
    assert session.kinds() == ["outage", "overflow"]
    assert journal.buffered == 0  # and no retry task was left behind (the harness checks)


@in_virtual_time
async def test_a_second_outage_is_told_and_recovered_again() -> None:
    store = ScriptedStore(["down", "ok", "ok", "down", "ok"])
    journal, session = buffered(store)
    await journal.append(THREAD, [said("a")])
    await until(lambda: journal.buffered == 0)
    await journal.append(THREAD, [said("b")])
    await journal.append(THREAD, [said("c")])
    await until(lambda: journal.buffered == 0)
    assert session.kinds() == ["outage", "recovered", "outage", "recovered"]
    assert await store.ids() == [(1, "a"), (2, "b"), (3, "c")]


@in_virtual_time
async def test_an_append_made_while_an_earlier_one_is_in_flight_keeps_the_order() -> None:
    store = ScriptedStore(["hang", "ok"])  # a dead connection for a, a healthy one for b
    journal, _ = buffered(store, append_timeout=3.0)
    first = asyncio.create_task(journal.append(THREAD, [said("a")]))
    await asyncio.sleep(0.1)
    await journal.append(THREAD, [said("b")])
    await first
    await until(lambda: journal.buffered == 0)
    assert [event_id for _, event_id in await store.ids()] == ["a", "b"]


# ---------------------------------------------------------------- reads


@in_virtual_time
async def test_a_tail_read_in_an_outage_has_the_buffered_events_after_the_stored() -> None:
    store = ScriptedStore(["ok"])
    store.append_mode = "down"
    journal, _ = buffered(store)
    await journal.append(THREAD, [said("a")])
    await journal.append(THREAD, [said("b")])
    await journal.append(THREAD, [said("c")])
    tail = await journal.read_tail(THREAD, 10)
    assert [e.event_id for e in tail] == ["a", "b", "c"]
    assert tail[0].seq == 1
    assert [e.seq for e in tail[1:]] == [-2, -1]  # provisional, in buffer order
    assert [e.event_id for e in await journal.read_tail(THREAD, 2)] == ["b", "c"]
    assert await journal.read_tail(THREAD, 0) == []
    assert await journal.read_tail(OTHER, 10) == []  # another thread's buffer is not mixed in
    await journal.close(timeout=0.0)


@in_virtual_time
async def test_a_tail_read_when_the_store_cannot_be_read_returns_the_buffer_alone() -> None:
    store = ScriptedStore(["ok"])
    store.append_mode = "down"
    journal, _ = buffered(store)
    await journal.append(THREAD, [said("a")])
    await journal.append(THREAD, [said("b")])
    store.read_mode = "down"
    assert [e.event_id for e in await journal.read_tail(THREAD, 10)] == ["b"]
    store.read_mode = "hang"
    loop = asyncio.get_running_loop()
    asked = loop.time()
    assert [e.event_id for e in await journal.read_tail(THREAD, 10)] == ["b"]
    assert loop.time() == asked + 3.0  # bounded by append_timeout
    await journal.close(timeout=0.0)


@in_virtual_time
async def test_a_tail_read_with_nothing_buffered_and_the_store_down_raises() -> None:
    store = ScriptedStore()
    store.read_mode = "down"
    journal, _ = buffered(store)
    with pytest.raises(JournalUnavailable):
        await journal.read_tail(THREAD, 10)


@in_virtual_time
async def test_a_tail_read_of_a_store_that_does_not_answer_raises_journal_unavailable() -> None:
    store = ScriptedStore()
    store.read_mode = "hang"
    journal, _ = buffered(store, append_timeout=3.0)
    with pytest.raises(JournalUnavailable):
        await journal.read_tail(THREAD, 10)


@in_virtual_time
async def test_an_event_both_stored_and_still_buffered_is_read_once() -> None:
    # a commits but its answer is lost; the retry's first attempt hangs: a is in both places.
    store = ScriptedStore(["commit_then_hang", "hang"])
    journal, _ = buffered(store, append_timeout=3.0)
    await journal.append(THREAD, [said("a")])
    await asyncio.sleep(0.5)
    assert journal.buffered == 1
    tail = await journal.read_tail(THREAD, 10)
    assert [(e.seq, e.event_id) for e in tail] == [(1, "a")]
    await until(lambda: journal.buffered == 0)


# ---------------------------------------------------------------- close


@in_virtual_time
async def test_close_with_nothing_buffered_returns_at_once() -> None:
    journal, session = buffered(ScriptedStore())
    await journal.append(THREAD, [said("a")])
    loop = asyncio.get_running_loop()
    await journal.close(timeout=5.0)
    assert loop.time() == 0.0 and session.told == []


@in_virtual_time
async def test_close_gives_the_buffer_a_last_chance() -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store, retry_initial=0.2, retry_max=5.0)
    await journal.append(THREAD, [said("a")])
    loop = asyncio.get_running_loop()
    loop.call_later(1.0, setattr, store, "append_mode", "ok")
    await journal.close(timeout=5.0)
    assert loop.time() == pytest.approx(1.4)  # attempts at 0, 0.2, 0.6 fail; 1.4 succeeds
    assert journal.buffered == 0 and await store.ids() == [(1, "a")]
    assert session.kinds() == ["outage", "recovered"]


@in_virtual_time
async def test_close_stops_retrying_after_its_timeout_and_says_what_is_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ScriptedStore()
    store.append_mode = "down"
    journal, session = buffered(store)
    await journal.append(THREAD, [said("a"), said("b")])
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.ERROR, logger="runtime.journal_buffer"):
        await journal.close(timeout=2.0)
    assert loop.time() == 2.0
    assert "closing with 2 journal events unsaved" in caplog.text
    attempts = len(store.appends)
    await asyncio.sleep(30.0)
    assert len(store.appends) == attempts  # the retry stopped
    assert journal.buffered == 2 and session.kinds() == ["outage"]
