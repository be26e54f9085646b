"""Wiring long-term memory (``memory/``) into a voice session.

``session_memory`` builds the engine's ``TurnMemory`` for one session: the services' memory
store, scoped to the session's tenant, user and role; ``memory_enabled`` is read from the role
store, with the user's own override (``runtime/roles.py``), at the start of every read and
extraction (so switching memory off for a role, or for oneself, takes effect at the next turn of
running sessions, and a deleted role has no memory); extraction
status goes to the client as ``openrealtime.memory.status`` events through the outbox.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from journal.events import ThreadRef
from memory.session import MemorySettings, SessionMemory
from pipeline.events import ServerEvent
from runtime.roles import Role, memory_enabled_for

if TYPE_CHECKING:
    from memory.fact_reader import FactReader
    from memory.store import MemoryStore
    from runtime.config import Settings
    from runtime.roles import RoleStore

log = logging.getLogger(__name__)

MemorySwitch = Callable[[], Awaitable[bool]]


class HasRoles(Protocol):
    """The services' roles (``runtime.services.Services`` has them)."""

    roles: RoleStore


class MemoryServices(HasRoles, Protocol):
    """What a session's long-term memory takes of the services."""

    settings: Settings
    memory: MemoryStore
    fact_reader: FactReader | None


def memory_settings(services: MemoryServices) -> MemorySettings:
    settings = services.settings
    return MemorySettings(
        budget_chars=settings.memory_budget_chars,
        max_entries=settings.memory_inject_max_entries,
        read_timeout_s=settings.memory_read_timeout_s,
    )


def memory_switch(services: HasRoles, thread: ThreadRef, role_id: str) -> MemorySwitch:
    """Whether long-term memory is on for the thread's user and the role, read anew on every
    call (the role's switch and the user's override; a deleted role has none)."""
    tenant = thread.tenant

    async def is_enabled() -> bool:
        current = await services.roles.get(tenant, role_id)
        if current is None or not current.memory_enabled:
            return False
        overrides = await services.roles.overrides(tenant, thread.user, role_id)
        return memory_enabled_for(current, overrides)

    return is_enabled


def session_memory(
    services: MemoryServices,
    thread: ThreadRef,
    role: Role,
    send_event: Callable[[ServerEvent], None],
) -> SessionMemory:
    tenant, role_id = thread.tenant, role.id
    is_enabled = memory_switch(services, thread, role_id)
    return SessionMemory(
        services.memory,
        tenant=tenant,
        user=thread.user,
        role_id=role_id,
        language=role.language,
        is_enabled=is_enabled,
        report=send_event,
        settings=memory_settings(services),
        facts=services.fact_reader,
    )
