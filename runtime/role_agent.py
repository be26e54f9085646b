"""A role's own chat agent (SPEC BRAIN-6, "per role too"): a role that names ``agent_url`` is
answered by that agent, over the documented protocol (``plugins.brain.http_agent``), instead of
the deployment's brain.

Rules
-----
1. The session's brain is chosen when it starts (``brain_of``): the role's agent when its role
   names one, else the deployment's brain. A change to the role applies to sessions started after
   it.
2. The credential is the tenant's tool secret the role names (``agent_secret``), read from the
   sealed secret store when the session's first turn asks, kept for the session only, and sent
   as ``Authorization: Bearer …``; a secret that is gone fails the turn with
   ``agent_credential_missing`` (the next turn reads it again), never calls the agent without it.
3. The agent's host must be on the tool allowlist when the turn runs, not only when the admin
   set it: a host taken off the list fails the turn with ``host_not_allowed``.
4. The agent's own costs are the team's: the runtime meters its text tokens like any brain's
   but as unpriced (``runtime.usage`` Rule 7: the price table's brain row prices the
   deployment's brain, not this agent), and budgets do not stop it (``runtime.budget`` guards
   the deployment's paid providers).
5. The session's connection to the agent is closed when the session ends (``aclose``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from plugins.brain.http_agent import HttpAgentBrain
from plugins.contracts import Brain, BrainDelta, BrainInput
from plugins.errors import ProviderError
from runtime.config import Settings
from runtime.roles import Role
from tools.catalog import ToolSecrets
from tools.errors import ToolError
from tools.registry import check_host


class AgentCredentialMissing(ProviderError):
    code = "agent_credential_missing"


class AgentNotAllowed(ProviderError):
    code = "host_not_allowed"


class RoleAgentServices(Protocol):
    settings: Settings
    tool_secrets: ToolSecrets


class RoleAgentBrain:
    """Rules 2, 3, 5 for one session of one role."""

    def __init__(self, services: RoleAgentServices, role: Role) -> None:
        assert role.agent_url is not None
        self.url = role.agent_url
        self.secret = role.agent_secret
        self.tenant = role.tenant
        self.services = services
        self._agent: HttpAgentBrain | None = None

    async def _connected(self) -> HttpAgentBrain:
        try:
            check_host(self.url, self.services.settings.tool_host_set())
        except ToolError as e:
            raise AgentNotAllowed(f"the role's agent: {e.message}", retryable=False) from None
        if self._agent is None:
            token = ""
            if self.secret is not None:
                try:
                    found = await self.services.tool_secrets.get(self.tenant, self.secret)
                except ToolError as e:
                    raise ProviderError(
                        f"the role's agent credential could not be read ({e.code})",
                        retryable=True,
                    ) from None
                if found is None:
                    raise AgentCredentialMissing(
                        f"the role's agent credential (tool secret {self.secret!r}) is gone",
                        retryable=False,
                    )
                token = found
            self._agent = HttpAgentBrain(
                self.url, token=token, timeout_s=self.services.settings.agent_timeout_s
            )
        return self._agent

    async def stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        agent = await self._connected()
        async for delta in agent.stream(request):
            yield delta

    async def aclose(self) -> None:
        if self._agent is not None:
            await self._agent.aclose()
            self._agent = None


def brain_of(services: RoleAgentServices, role: Role, deployment: Brain) -> Brain:
    """Rule 1: the brain a session of ``role`` talks to."""
    if role.agent_url is None:
        return deployment
    return RoleAgentBrain(services, role)
