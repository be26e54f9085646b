"""Thread memory in the running server (SPEC TM-1 … TM-5): the view, the commands, the turn hook.

Theory of operation
-------------------
The facts, rules and stores are ``memory.thread_memory`` / ``thread_store`` /
``thread_consolidation``; this module puts them to work for one thread of one user.

Rule 1. The view (``view_json``) is what the command route and the live event show: the
        thread's ``head`` (its latest journal event id, None for an empty thread), the memory's
        ``revision``, the facts (newest first, retracted ones too, marked), ``processed``, the
        effective ``settings``, the thread's own ``overrides`` and the tenant's ``defaults``,
        ``last_failure``, and ``can_refresh`` (the server has a model to learn with). Every turn
        moves the head, and no event says so unless the memory changed: a client re-reads the
        view before a command after a turn (or gets an honest 409).
Rule 2. A command (``run_command``) names the head and revision it was made against; if either
        moved it is refused (``ThreadConflict``, 409 ``thread_conflict``, with the current
        values). Remember and Forget also append a small ``memory_note`` journal event that
        records the change and becomes the fact's source, so the head moves past it; Configure
        changes no history (the head stays). Refresh consolidates now (rule 4). The memory is
        saved compare-and-set on its revision: of two writers at one revision one wins, the
        other gets 409. The note is appended after the save succeeds (a lost race leaves no
        note); if that append fails the fact cites an event that is not there, which the
        caller hears as an error.
Rule 3. Injection (``ThreadMemoryHook.read``): when ``use`` is in force, the active facts as
        ``memory.thread_memory.render_block`` writes them, within ``thread_memory_budget_chars``.
Rule 4. Consolidation (``consolidate``): after a finished turn when ``generate`` is in force,
        the turn's model (the brain's JSON model: the local model, or the OpenAI-compatible
        brain) reads the thread's unprocessed items and its changes are applied to the latest
        memory. A brain with no model (the rules brain, a fake), or a turn the local model took
        no part in (code answered it), runs nothing and changes nothing. A failure is recorded
        in ``last_failure`` and retried after the next turn; it never fails the turn. The voice
        path comes first (SPEC RT-11): the model call is background work — it waits for a pause
        and yields to any person's turn in the model's queue (``plugins.brain.model_queue``),
        and a session that ends leaves its consolidation running to the end (the service owns
        it; the server's shutdown cancels it).
Rule 5. Every change is announced to the live sessions of the thread in this process as
        ``openrealtime.thread_memory.updated`` (an extension event); their next turn reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from journal.events import EventKind, NewEvent, ThreadRef
from memory.errors import RevisionConflict
from memory.thread_consolidation import (
    ConsolidationLimits,
    Consolidator,
    JsonModel,
    save_consolidation,
)
from memory.thread_memory import (
    UNSET,
    Settings,
    ThreadFact,
    ThreadMemory,
    Unset,
    configure,
    effective,
    forget,
    normalize_key,
    remember,
    render_block,
)
from pipeline import events as ev

if TYPE_CHECKING:
    from journal.store import JournalStore
    from memory.thread_store import ThreadMemoryStore
    from pipeline.engine_config import Plugins
    from runtime.config import Settings as ServerSettings
    from runtime.realtime.live import LiveSessions

log = logging.getLogger(__name__)

HISTORY_READ = 200
"""Journal events read back for a consolidation (its unprocessed ones are the input)."""


class ThreadConflict(Exception):
    """Rule 2: the command's head or revision is stale."""

    def __init__(self, head: str | None, revision: int) -> None:
        super().__init__("the thread changed since you looked")
        self.head = head
        self.revision = revision


class NoMemoryModel(Exception):
    """Refresh on a server whose brain has no model to consolidate with."""


def json_model_of(brain: object) -> JsonModel | None:
    """The brain's model as a ``JsonModel`` (rule 4), or None when it has none."""
    if callable(getattr(brain, "complete_json", None)):
        return brain  # type: ignore[return-value]  # the OpenAI-compatible brain is one
    model = getattr(brain, "model", None)
    if model is not None and callable(getattr(model, "chat", None)):
        from plugins.brain.json_model import LocalJsonModel

        return LocalJsonModel(model)
    return None


def fact_json(fact: ThreadFact) -> dict[str, Any]:
    return {
        "key": fact.key,
        "content": fact.content,
        "kind": fact.kind,
        "sources": list(fact.sources),
        "status": fact.status,
        "updated_at": fact.updated_at.isoformat(),
    }


def view_json(
    thread_id: str,
    head: str | None,
    memory: ThreadMemory,
    defaults: Settings,
    *,
    can_refresh: bool = False,
) -> dict[str, Any]:
    """Rule 1 (``defaults``: what clearing an override goes back to; ``can_refresh``: the
    server has a model to consolidate with)."""
    settings = effective(defaults, memory.overrides)
    facts = sorted(memory.facts.values(), key=lambda f: (f.updated_at, f.key), reverse=True)
    return {
        "thread_id": thread_id,
        "head": head,
        "revision": memory.revision,
        "entries": [fact_json(f) for f in facts],
        "processed": sorted(memory.processed),
        "settings": {"use": settings.use, "generate": settings.generate},
        "overrides": {"use": memory.overrides.use, "generate": memory.overrides.generate},
        "defaults": {"use": defaults.use, "generate": defaults.generate},
        "last_failure": memory.last_failure,
        "can_refresh": can_refresh,
    }


@dataclass(frozen=True, slots=True)
class Command:
    type: Literal["remember", "forget", "configure", "refresh"]
    key: str = ""
    content: str = ""
    kind: str = "fact"
    use: bool | None | Unset = UNSET
    generate: bool | None | Unset = UNSET


class ThreadMemoryServices(Protocol):
    """What thread memory takes of the services."""

    settings: ServerSettings
    plugins: Plugins
    journal: JournalStore
    thread_memory: ThreadMemoryStore
    live_sessions: LiveSessions


class ThreadMemoryService:
    """Thread memory for the server (``Services.thread_memory_service``)."""

    def __init__(self, services: ThreadMemoryServices) -> None:
        self.services = services
        self._consolidating: dict[ThreadRef, tuple[asyncio.Lock, int]] = {}
        """One consolidation per thread at a time: its lock and how many hold or await it."""
        self._kept: set[asyncio.Task[None]] = set()
        """Consolidations of sessions that ended, finishing in the background (rule 4)."""

    def keep(self, task: asyncio.Task[None]) -> None:
        """Let a consolidation outlive its session; ``close`` cancels what is left."""
        self._kept.add(task)
        task.add_done_callback(self._kept.discard)

    async def close(self) -> None:
        tasks = list(self._kept)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    # ------------------------------------------------------------ reading

    async def head(self, thread: ThreadRef) -> str | None:
        tail = await self.services.journal.read_tail(thread, 1)
        return tail[-1].event_id if tail else None

    async def memory(self, thread: ThreadRef) -> ThreadMemory:
        return await self.services.thread_memory.load(thread.tenant, thread.user, thread.thread_id)

    async def view(self, thread: ThreadRef) -> dict[str, Any]:
        memory = await self.memory(thread)
        return await self._view(thread, memory)

    async def _view(self, thread: ThreadRef, memory: ThreadMemory) -> dict[str, Any]:
        defaults = await self.services.thread_memory.get_defaults(thread.tenant)
        can_refresh = json_model_of(self.services.plugins.brain) is not None
        return view_json(
            thread.thread_id, await self.head(thread), memory, defaults, can_refresh=can_refresh
        )

    async def settings(self, thread: ThreadRef, memory: ThreadMemory) -> Settings:
        defaults = await self.services.thread_memory.get_defaults(thread.tenant)
        return effective(defaults, memory.overrides)

    async def block(self, thread: ThreadRef, language: str | None) -> str | None:
        """Rule 3: what a turn of this thread is shown, or None."""
        memory = await self.memory(thread)
        if not (await self.settings(thread, memory)).use:
            return None
        limit = self.services.settings.thread_memory_budget_chars
        return render_block(memory.facts.values(), limit, language=language) or None

    # ------------------------------------------------------------ commands (rule 2)

    async def run_command(
        self, thread: ThreadRef, *, expected: str | None, revision: int, command: Command
    ) -> dict[str, Any]:
        store = self.services.thread_memory
        current = await self.memory(thread)
        head = await self.head(thread)
        if expected != head or revision != current.revision:
            raise ThreadConflict(head, current.revision)
        now = datetime.now(UTC)
        if command.type == "refresh":
            model = json_model_of(self.services.plugins.brain)
            if model is None:
                raise NoMemoryModel()
            saved = await self.consolidate(thread, model, force=True)
            return await self._view(thread, saved or await self.memory(thread))
        note: NewEvent | None = None
        if command.type == "configure":
            new = configure(current, use=command.use, generate=command.generate)
        else:
            note_id = f"mem_{uuid.uuid4().hex}"
            if command.type == "remember":
                new = remember(
                    current, command.key, command.content, command.kind, note_id, now=now
                )
                saved_fact = new.facts[normalize_key(command.key)]
                payload: dict[str, Any] = {
                    "op": "remember",
                    "key": saved_fact.key,
                    "content": saved_fact.content,
                    "kind": saved_fact.kind,
                }
            else:
                new = forget(current, command.key, note_id, now=now)
                payload = {"op": "forget", "key": normalize_key(command.key)}
            new = replace(new, processed=new.processed | {note_id})
            note = NewEvent(note_id, EventKind.MEMORY_NOTE, payload)
        try:
            saved = await store.save(thread.tenant, thread.user, thread.thread_id, new, revision)
        except RevisionConflict as e:
            raise ThreadConflict(await self.head(thread), e.current.revision) from None
        if note is not None:
            await self.services.journal.append(thread, [note])
        view = await self._view(thread, saved)
        self.announce(thread, view)
        return view

    # ------------------------------------------------------------ consolidation (rule 4)

    async def consolidate(
        self, thread: ThreadRef, model: JsonModel, *, force: bool = False
    ) -> ThreadMemory | None:
        """Read the thread's unprocessed items with ``model`` and save what it learned; None
        when ``generate`` is off (unless ``force``: a person's Refresh) or nothing changed.
        One consolidation per thread at a time; never raises for a model failure."""
        lock, users = self._consolidating.get(thread, (asyncio.Lock(), 0))
        self._consolidating[thread] = (lock, users + 1)
        try:
            async with lock:
                return await self._consolidate_locked(thread, model, force=force)
        finally:
            lock, users = self._consolidating[thread]
            if users == 1:
                del self._consolidating[thread]  # no one else waits: the lock goes
            else:
                self._consolidating[thread] = (lock, users - 1)

    async def _consolidate_locked(
        self, thread: ThreadRef, model: JsonModel, *, force: bool
    ) -> ThreadMemory | None:
        current = await self.memory(thread)
        if not force and not (await self.settings(thread, current)).generate:
            return None
        events = await self.services.journal.read_tail(thread, HISTORY_READ)
        timeout_s = self.services.settings.thread_memory_model_timeout_s
        # A person's Refresh waits for its answer; consolidation after a turn does not.
        limits = ConsolidationLimits(timeout_s=timeout_s, background=not force)
        consolidator = Consolidator(model, limits=limits)
        result = await consolidator.consolidate(events, current, lane=thread.thread_id)
        saved = await save_consolidation(
            self.services.thread_memory,
            thread.tenant,
            thread.user,
            thread.thread_id,
            result,
            now=datetime.now(UTC),
        )
        if saved.revision != current.revision:
            self.announce(thread, await self._view(thread, saved))
            return saved
        return None

    # ------------------------------------------------------------ announcing (rule 5)

    def announce(self, thread: ThreadRef, view: Mapping[str, Any]) -> None:
        event = ev.ThreadMemoryUpdated(thread.thread_id, dict(view))
        for session in list(self.services.live_sessions.values()):
            if session.thread == thread and not session.closed:
                session.outbox.send(event)


class ThreadMemoryHook:
    """One session's thread memory (rules 3, 4): what a turn reads, what runs after it."""

    def __init__(
        self,
        service: ThreadMemoryService,
        thread: ThreadRef,
        brain: object,
        *,
        lane: str = "",
        may_use_model: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.service = service
        self.thread = thread
        self.model = json_model_of(brain)
        self.may_use_model = may_use_model
        """Asked before each consolidation: False (a paid brain whose tenant has spent its
        budget, ``runtime.budget``) skips it."""
        self.lane = lane
        """The session's lane on the brain's model (its voice session id)."""
        counter = getattr(getattr(brain, "model", None), "calls", None)
        self._calls: Callable[[str], int] | None = counter if callable(counter) else None
        self._seen = 0
        self._task: asyncio.Task[None] | None = None

    async def read(self, language: str | None) -> str | None:
        try:
            return await self.service.block(self.thread, language)
        except Exception as e:  # memory never fails a turn
            log.warning("thread memory read failed: %s", type(e).__name__)
            return None

    def after_turn(self) -> asyncio.Task[None] | None:
        """A turn finished: consolidate in the background. No model — or, with the local
        model, a turn that code answered without it — runs nothing (TM-4)."""
        if self.model is None:
            return None
        if self._calls is not None:
            calls = self._calls(self.lane)
            if calls == self._seen:
                return None
            self._seen = calls
        if self._task is not None and not self._task.done():
            return self._task  # the next turn's items are read by the one still running
        self._task = asyncio.ensure_future(self._consolidate(self.model))
        return self._task

    async def _consolidate(self, model: JsonModel) -> None:
        try:
            if self.may_use_model is not None and not await self.may_use_model():
                return
            await self.service.consolidate(self.thread, model)
        except Exception as e:  # recorded by the consolidator when it is the model's
            log.warning("thread memory consolidation failed: %s", type(e).__name__)

    async def close(self) -> None:
        """The session ended: a consolidation still running finishes in the service (rule 4)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            self.service.keep(task)
