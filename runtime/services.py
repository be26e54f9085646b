"""Services: what one server process shares between sessions (stores, loaded models)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from journal.store import InMemoryJournalStore, JournalStore
from pipeline.engine import Plugins
from runtime.accounts import AccountStore, InMemoryAccountStore, Principal, ensure_local_token
from runtime.config import Settings
from runtime.plugin_factory import build_plugins, warm_up
from runtime.roles import InMemoryRoleStore, Role, RoleStore, default_role

log = logging.getLogger(__name__)


@dataclass
class Services:
    settings: Settings
    plugins: Plugins
    accounts: AccountStore
    roles: RoleStore
    journal: JournalStore
    local_token: str | None = None
    active_sessions: set[str] = field(default_factory=set)

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
        pass


async def open_services(settings: Settings, *, plugins: Plugins | None = None) -> Services:
    """Build the process's services. ``plugins`` overrides the configured ones (tests,
    benchmarks with instant fakes)."""
    accounts = InMemoryAccountStore()
    if plugins is None:
        plugins = build_plugins(settings)
        await warm_up(plugins)
    services = Services(
        settings=settings,
        plugins=plugins,
        accounts=accounts,
        roles=InMemoryRoleStore(),
        journal=InMemoryJournalStore(),
    )
    services.local_token = await ensure_local_token(accounts, settings.data_dir)
    return services
