"""Where thread memory lives (SPEC TM-1, TM-2, TM-5): the store contract and the in-memory store.

Theory of operation
-------------------
1. Every read and write is scoped by ``(tenant, owner_key(user), thread_id)``: another user's
   thread id reads as empty memory, and the user id itself is never stored.
2. ``load`` returns the thread's ``ThreadMemory``, or the empty one (revision 0) when the
   thread has none.
3. ``save(…, new, expected_revision)`` is a compare-and-set: it writes ``new`` only when the
   stored revision is still ``expected_revision``, atomically (in PostgreSQL one statement),
   else raises ``RevisionConflict`` carrying what is stored now. ``new.revision`` must be
   above ``expected_revision`` (the pure functions of ``memory/thread_memory.py`` bump it);
   a ``new`` at ``expected_revision`` writes nothing and returns the stored memory (after the
   same check). Of two saves at one expected revision exactly one wins.
4. ``copy(…, from_thread, to_thread, keep_sources)`` gives a fork its memory
   (``thread_memory.forked``): the target is replaced, at its own revision + 1, so a reader of
   the target sees the change.
5. ``delete`` removes a thread's memory (deleting the thread); a later ``load`` is empty.
6. Tenant defaults (``get_defaults``/``set_defaults``): both switches on unless set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from memory.entries import owner_key
from memory.errors import RevisionConflict
from memory.thread_memory import Settings, ThreadMemory, forked

EMPTY = ThreadMemory()


class ThreadMemoryStore(Protocol):
    async def load(self, tenant: str, user: str, thread_id: str) -> ThreadMemory: ...

    async def save(
        self,
        tenant: str,
        user: str,
        thread_id: str,
        new: ThreadMemory,
        expected_revision: int,
    ) -> ThreadMemory: ...

    async def copy(
        self,
        tenant: str,
        user: str,
        from_thread: str,
        to_thread: str,
        keep_sources: set[str] | None,
    ) -> ThreadMemory: ...

    async def delete(self, tenant: str, user: str, thread_id: str) -> None: ...

    async def get_defaults(self, tenant: str) -> Settings: ...

    async def set_defaults(self, tenant: str, settings: Settings) -> None: ...


def check_new_revision(new: ThreadMemory, expected_revision: int) -> None:
    if new.revision < expected_revision:
        raise ValueError(
            f"new memory at revision {new.revision} is below the expected {expected_revision}"
        )


class InMemoryThreadMemoryStore:
    """``ThreadMemoryStore`` in a dict (tests, ``OPENREALTIME_STORAGE=memory``)."""

    def __init__(self) -> None:
        self._threads: dict[tuple[str, str, str], ThreadMemory] = {}
        self._defaults: dict[str, Settings] = {}

    async def load(self, tenant: str, user: str, thread_id: str) -> ThreadMemory:
        return self._threads.get((tenant, owner_key(user), thread_id), EMPTY)

    async def save(
        self,
        tenant: str,
        user: str,
        thread_id: str,
        new: ThreadMemory,
        expected_revision: int,
    ) -> ThreadMemory:
        check_new_revision(new, expected_revision)
        where = (tenant, owner_key(user), thread_id)
        stored = self._threads.get(where, EMPTY)
        if stored.revision != expected_revision:
            raise RevisionConflict(stored)
        if new.revision == expected_revision:
            return stored
        self._threads[where] = new
        return new

    async def copy(
        self,
        tenant: str,
        user: str,
        from_thread: str,
        to_thread: str,
        keep_sources: set[str] | None,
    ) -> ThreadMemory:
        owner = owner_key(user)
        source = self._threads.get((tenant, owner, from_thread), EMPTY)
        target = self._threads.get((tenant, owner, to_thread), EMPTY)
        copied = forked(source, keep_sources, revision=target.revision + 1)
        self._threads[(tenant, owner, to_thread)] = copied
        return copied

    async def delete(self, tenant: str, user: str, thread_id: str) -> None:
        self._threads.pop((tenant, owner_key(user), thread_id), None)

    async def get_defaults(self, tenant: str) -> Settings:
        return self._defaults.get(tenant, Settings())

    async def set_defaults(self, tenant: str, settings: Settings) -> None:
        self._defaults[tenant] = replace(settings)
