"""Forking a thread (SPEC TM-1, RES-2): ``POST /api/threads/{thread_id}/fork``.

Theory of operation
-------------------
A fork is a new thread that starts with another thread's history — all of it, or up to one of
its events — and goes its own way from there. The rules:

1. Who: only the thread's owner forks it. Another user's thread answers 404
   ``thread_not_found`` exactly like an unknown one (``runtime/http/policy.py`` rule 3).
2. Where: ``at`` names an event of the thread by its event id; the fork's history is the events
   up to and including it. An id that is not an event of this thread is 404
   ``item_not_found``. Without ``at`` the fork takes the history as it stands when the fork
   starts: the thread's head is read once, first. A voice session may be serving the thread
   meanwhile — its journal is append-only, so the copy is of what is there; events appended
   after that point stay the source's.
3. The journal (``journal/store.py``) is copied as a *prefix*: events ``1 … cut`` with the same
   event ids, kinds, payloads and voice session ids, in pages of ``COPY_PAGE``. The fork's seqs
   are therefore the source's, which keeps everything that points at seqs or ids true:

   a. Summary checkpoints (``journal/checkpoints.py``) that end at or before the cut are copied
      as stored — their checksums cover (seq, id, kind, payload, session) of their events, all
      the same in the fork, so they verify there. One that ends after the cut is left out with
      every later one (its sources up to the cut are copied raw; the fork compacts them itself).
      A ``summary`` journal event in the prefix covers only events before it, so it stays
      valid too; one after the cut is not copied, whatever its range (its range may end after
      the cut, and nothing reads summary events today: summaries live in checkpoints).
   b. Amendments (``journal/amendments.py``) always come after the item they name, so those in
      the prefix name copied items. An amendment journaled *after* the cut that names a copied
      item — a deletion, or the cut of an answer to what was heard, typically written a moment
      after that answer — is carried too, appended after the prefix in its order: a deleted item
      stays deleted in the fork and an interrupted answer stays cut. Amendments of items after
      the cut are not copied (their items are not).
4. Thread memory (``memory/thread_store.py`` ``copy``, ``memory.thread_memory.forked``) is
   copied with ``keep_sources`` = the copied event ids: a fact keeps only its sources among
   them and is dropped when none is left (a fact learned from later items, a retraction made
   later, a person's Remember whose ``memory_note`` comes after the cut); ``processed`` is
   cut the same way; the thread's overrides (``use``/``generate``) are carried; the last
   consolidation failure is not. From then on the two memories are separate rows: a change to
   one never shows in the other, and no other thread sees either.
5. Order and failure: journal, checkpoints and memory are written under the new id first and
   the thread record (``runtime/threads.py``) last. Until that record exists no route knows the
   fork and no session can continue it, so a fork that fails halfway is never seen half made:
   what was written is removed (best effort) and the request answers 503 — retry it; a retry
   makes a new fork id.
6. What a fork does not carry:

   - Conversation records (``runtime/records.py``): a record is the page's display copy of a
     conversation, written by the page (CONV-2). The fork makes none. A page that wants the
     fork on the history page saves a record naming the new ``thread_id`` and the answer's
     ``voice_session_id``; until then the fork is reachable by its id only.
   - Role memory (``services.memory``, per role and user, MEM/TM-6) belongs to no thread: the
     fork uses it like any thread of its role, and nothing of it is copied or changed.
   - Sessions and resume tokens: the fork is served by no session. One continues it with
     ``openrealtime.session.start`` with ``requested_thread_id`` = the fork and
     ``previous_voice_session_id`` = the answer's ``voice_session_id`` (the session of the
     latest copied event): that session appears in the fork's journal, which is what
     ``runtime.realtime.continuity.check_continuation`` asks. A fork of a history without any
     session (``voice_session_id`` null) cannot be continued that way.
7. Bounded: a thread of more than ``MAX_FORK_EVENTS`` events is refused (409
   ``thread_too_long``) before anything is written; the route reads the source at most twice
   (find ``at``, then copy), one page at a time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from journal.amendments import ITEM_KINDS
from journal.checkpoints import MAX_LIST, CheckpointStore
from journal.errors import JournalError, JournalUnavailable
from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.store import JournalStore
from memory.errors import MemoryUnavailable
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.services import Services
from runtime.threads import Thread

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/threads", tags=["threads"], dependencies=[allow(Policy.MEMBER)])

MAX_FORK_EVENTS = 100_000
"""Longest thread a fork copies (rule 7), as many as a conversation record holds messages."""
COPY_PAGE = 500
"""Events per journal read and per append (below the journal's ``max_batch``)."""
MAX_EVENT_ID_CHARS = 256

_AMENDMENT_KINDS = frozenset({EventKind.ITEM_DELETED, EventKind.ITEM_TRUNCATED})


class ForkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at: str | None = Field(default=None, min_length=1, max_length=MAX_EVENT_ID_CHARS)
    """The event id the fork's history ends with; None: the whole history."""


@dataclass(frozen=True, slots=True)
class Fork:
    thread_id: str
    events: int
    voice_session_id: str | None
    """The session of the latest copied event: what a continuation of the fork names."""


class _ForkFailed(Exception):
    """The fork's new thread was not empty (rule 3 would not hold): give it up (rule 5)."""


def _item_id(event: JournalEvent) -> str | None:
    value = event.payload.get("item_id")
    return value if isinstance(value, str) and value else None


def carried_amendments(copied_items: set[str], later: Iterable[JournalEvent]) -> list[JournalEvent]:
    """Rule 3b: the amendments among ``later`` (events after the cut, in order) that name one
    of ``copied_items`` (the item ids of the copied events)."""
    return [e for e in later if e.kind in _AMENDMENT_KINDS and _item_id(e) in copied_items]


async def _pages(
    journal: JournalStore, thread: ThreadRef, end_seq: int
) -> AsyncIterator[list[JournalEvent]]:
    """The thread's events ``1 … end_seq``, one page at a time."""
    after = 0
    while after < end_seq:
        page = await journal.read(thread, after_seq=after, limit=min(COPY_PAGE, end_seq - after))
        if not page:
            return
        yield page
        after = page[-1].seq


async def _find_cut(journal: JournalStore, thread: ThreadRef, at: str, head: int) -> int | None:
    async for page in _pages(journal, thread, head):
        for event in page:
            if event.event_id == at:
                return event.seq
    return None


def _new(event: JournalEvent) -> NewEvent:
    return NewEvent(event.event_id, event.kind, event.payload, event.voice_session_id)


async def _copy_journal(
    journal: JournalStore, source: ThreadRef, target: ThreadRef, cut: int, head: int
) -> tuple[int, set[str], str | None]:
    """Rules 3, 3b: (events copied, their ids, the latest copied event's session)."""
    ids: set[str] = set()
    items: set[str] = set()
    session: str | None = None
    later: list[JournalEvent] = []
    async for page in _pages(journal, source, head):
        prefix = [e for e in page if e.seq <= cut]
        if prefix:
            stored = await journal.append(target, [_new(e) for e in prefix])
            if [e.seq for e in stored] != [e.seq for e in prefix]:
                # Rule 3 rests on this: the target was new, so its seqs are the source's.
                raise _ForkFailed(f"fork {target.thread_id} was not empty")
            for event in prefix:
                ids.add(event.event_id)
                if event.kind in ITEM_KINDS and (item := _item_id(event)) is not None:
                    items.add(item)
                if event.voice_session_id is not None:
                    session = event.voice_session_id
        later.extend(carried_amendments(items, (e for e in page if e.seq > cut)))
    for start in range(0, len(later), COPY_PAGE):
        batch = later[start : start + COPY_PAGE]
        await journal.append(target, [_new(e) for e in batch])
        ids.update(e.event_id for e in batch)
    return len(ids), ids, session


async def _copy_checkpoints(
    checkpoints: CheckpointStore, source: ThreadRef, target: ThreadRef, cut: int
) -> None:
    """Rule 3a: the chain's checkpoints that end at or before the cut, in order."""
    after = 0
    while True:
        chain = await checkpoints.list(source, after_seq=after, limit=MAX_LIST)
        for checkpoint in chain:
            if checkpoint.to_seq > cut:
                return
            await checkpoints.put(target, checkpoint.content())
        if len(chain) < MAX_LIST:
            return
        after = chain[-1].from_seq


async def fork_thread(services: Services, source: Thread, at: str | None) -> Fork:
    """Rules 2–5: fork ``source`` (the caller's own thread) at event ``at``.

    Raises ``ApiError`` 404 ``item_not_found``, 409 ``thread_too_long``, 503 when a store fails.
    """
    ref = ThreadRef(source.tenant, source.user, source.thread_id)
    try:
        tail = await services.journal.read_tail(ref, 1)
        head = tail[0].seq if tail else 0
        if head > MAX_FORK_EVENTS:
            raise ApiError(
                409, "thread_too_long", f"a fork copies threads of at most {MAX_FORK_EVENTS} events"
            )
        cut = head if at is None else await _find_cut(services.journal, ref, at, head)
    except JournalUnavailable as e:
        raise _unavailable(e) from e
    if cut is None:
        raise ApiError(404, "item_not_found", "no such event in this thread")
    target = ThreadRef(source.tenant, source.user, f"th_{uuid.uuid4().hex}")
    try:
        count, ids, session = await _copy_journal(services.journal, ref, target, cut, head)
        await _copy_checkpoints(services.checkpoints, ref, target, cut)
        await services.thread_memory.copy(
            source.tenant, source.user, source.thread_id, target.thread_id, ids
        )
        await services.threads.create(target.tenant, target.user, target.thread_id, source.role_id)
    except BaseException as e:
        await _discard(services, target)
        if isinstance(e, JournalUnavailable | MemoryUnavailable):
            raise _unavailable(e) from e
        if isinstance(e, JournalError | _ForkFailed):
            log.error("fork of a thread failed: %s", e)
            raise ApiError(503, "fork_failed", "the fork could not be written; retry") from e
        raise
    return Fork(target.thread_id, count, session)


async def _discard(services: Services, target: ThreadRef) -> None:
    """Rule 5: remove what a failed fork wrote (the thread record is never among it)."""
    removals: tuple[Callable[[], Awaitable[object]], ...] = (
        lambda: services.journal.delete_thread(target),
        lambda: services.checkpoints.delete_thread(target),
        lambda: services.thread_memory.delete(target.tenant, target.user, target.thread_id),
    )
    for remove in removals:
        try:
            await remove()
        except Exception as e:  # best effort: the fork stays unknown to every route anyway
            log.warning("could not remove a failed fork's data: %s", type(e).__name__)


def _unavailable(error: JournalUnavailable | MemoryUnavailable) -> ApiError:
    log.warning("thread fork: a store is unavailable: %s", error)
    return ApiError(503, error.code, "the journal or thread memory cannot be reached; retry")


@router.post("/{thread_id}/fork", status_code=201)
async def fork(
    thread_id: str, who: Caller, services: ServicesDep, body: ForkIn | None = None
) -> dict[str, Any]:
    source = await services.threads.get(who.tenant, who.user, thread_id)
    if source is None:
        raise ApiError(404, "thread_not_found", "no such thread")
    at = None if body is None else body.at
    made = await fork_thread(services, source, at)
    return {
        "thread_id": made.thread_id,
        "forked_from": source.thread_id,
        "at": at,
        "events": made.events,
        "voice_session_id": made.voice_session_id,
    }
