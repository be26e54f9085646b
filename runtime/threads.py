"""Threads: which user owns which conversation, with which role (SPEC RES-2).

A thread is recorded when a voice session first serves it. Continuing a thread is only allowed
for its owner, while its role still exists, and when the previous voice session really appears
in that thread's journal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Thread:
    tenant: str
    user: str
    thread_id: str
    role_id: str
    created_at: datetime


class ThreadStore(Protocol):
    async def create(self, tenant: str, user: str, thread_id: str, role_id: str) -> Thread: ...

    async def get(self, tenant: str, user: str, thread_id: str) -> Thread | None:
        """The thread if this user owns it; None for someone else's or an unknown thread."""
        ...

    async def count_for_role(self, tenant: str, role_id: str) -> int:
        """How many threads of the tenant (every user's) a role serves."""
        ...


class InMemoryThreadStore:
    def __init__(self) -> None:
        self._threads: dict[tuple[str, str, str], Thread] = {}

    async def create(self, tenant: str, user: str, thread_id: str, role_id: str) -> Thread:
        key = (tenant, user, thread_id)
        existing = self._threads.get(key)
        if existing is not None:
            return existing
        thread = Thread(tenant, user, thread_id, role_id, datetime.now(UTC))
        self._threads[key] = thread
        return thread

    async def get(self, tenant: str, user: str, thread_id: str) -> Thread | None:
        return self._threads.get((tenant, user, thread_id))

    async def count_for_role(self, tenant: str, role_id: str) -> int:
        return sum(1 for t in self._threads.values() if (t.tenant, t.role_id) == (tenant, role_id))
