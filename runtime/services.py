"""Services: what one server process shares between sessions (stores, loaded models)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from journal.checkpoints import CheckpointStore, InMemoryCheckpointStore
from journal.postgres_checkpoints import PostgresCheckpointStore
from journal.postgres_store import PostgresJournalStore
from journal.projector import BudgetedConversationContextProjector
from journal.store import InMemoryJournalStore, JournalStore
from pipeline.engine import Plugins
from runtime.accounts import AccountStore, InMemoryAccountStore, Principal, ensure_local_token
from runtime.config import Settings
from runtime.database import Database, open_database
from runtime.metrics import LoopLagMonitor
from runtime.migrations import apply_migrations
from runtime.plugin_factory import build_plugins, warm_up
from runtime.postgres_stores import PostgresAccountStore, PostgresRoleStore, PostgresThreadStore
from runtime.resume import InMemoryResumeTokenStore, PostgresResumeTokenStore, ResumeTokenStore
from runtime.roles import InMemoryRoleStore, Role, RoleStore, default_role
from runtime.threads import InMemoryThreadStore, ThreadStore

log = logging.getLogger(__name__)


MIGRATED_PACKAGES = ("runtime", "journal")
"""Every domain package whose schema the runtime applies at start, in order."""


@dataclass
class Services:
    settings: Settings
    plugins: Plugins
    accounts: AccountStore
    roles: RoleStore
    threads: ThreadStore
    journal: JournalStore
    checkpoints: CheckpointStore
    projector: BudgetedConversationContextProjector = field(
        default_factory=BudgetedConversationContextProjector
    )
    resume_tokens: ResumeTokenStore = field(default_factory=InMemoryResumeTokenStore)
    database: Database | None = None
    local_token: str | None = None
    active_sessions: set[str] = field(default_factory=set)
    live_sessions: dict[str, Any] = field(default_factory=dict)
    """Voice sessions of this process by id, connected or waiting to be resumed."""
    loop_lag: LoopLagMonitor = field(default_factory=LoopLagMonitor)

    async def authenticate_header(self, header: str | None) -> Principal | None:
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        return await self.accounts.authenticate(token.strip())

    async def role_for(self, principal: Principal, role_id: str | None) -> Role | None:
        if role_id is None:
            return await default_role(self.roles, principal.tenant)
        return await self.roles.get(principal.tenant, role_id)

    async def close(self) -> None:
        for session in list(self.live_sessions.values()):
            await session.shutdown()
        if self.database is not None:
            await self.database.close()
            self.database = None


async def open_services(settings: Settings, *, plugins: Plugins | None = None) -> Services:
    """Build the process's services. ``plugins`` overrides the configured ones (tests,
    benchmarks with instant fakes)."""
    if plugins is None:
        plugins = build_plugins(settings)
        await warm_up(plugins)
    if settings.storage == "memory":
        services = Services(
            settings=settings,
            plugins=plugins,
            accounts=InMemoryAccountStore(),
            roles=InMemoryRoleStore(),
            threads=InMemoryThreadStore(),
            journal=InMemoryJournalStore(),
            checkpoints=InMemoryCheckpointStore(),
        )
    else:
        database = await open_database(
            database_url=settings.database_url, data_dir=settings.data_dir
        )
        try:
            await apply_migrations(database.pool, MIGRATED_PACKAGES)
        except BaseException:
            await database.close()
            raise
        services = Services(
            settings=settings,
            plugins=plugins,
            accounts=PostgresAccountStore(database.pool),
            roles=PostgresRoleStore(database.pool),
            threads=PostgresThreadStore(database.pool),
            journal=PostgresJournalStore(database.pool),
            checkpoints=PostgresCheckpointStore(database.pool),
            resume_tokens=PostgresResumeTokenStore(database.pool),
            database=database,
        )
    services.local_token = await ensure_local_token(services.accounts, settings.data_dir)
    return services
