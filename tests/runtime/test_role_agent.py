"""A role's own agent (``runtime.role_agent``): the credential is read when a turn asks and a
missing one or a host taken off the allowlist fails the turn with its code, before any request
leaves; a role without an agent keeps the deployment's brain."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pytest

from plugins.contracts import BrainInput
from plugins.errors import ProviderError
from plugins.fakes import FakeBrain
from runtime.config import Settings
from runtime.role_agent import RoleAgentBrain, brain_of
from runtime.roles import Role
from tools.catalog import InMemoryToolSecrets, ToolSecrets

NOW = datetime(2026, 12, 6, tzinfo=UTC)
ROLE = Role(
    id="role_1", tenant="acme", name="Desk", instructions="", voice=None, language="en",
    memory_enabled=True, is_default=False, created_at=NOW, updated_at=NOW,
    agent_url="http://agents.example/turn", agent_secret="agent_token",
)  # fmt: skip


@dataclass
class Services:
    settings: Settings = field(default_factory=lambda: Settings(tool_hosts="agents.example"))
    tool_secrets: ToolSecrets = field(default_factory=InMemoryToolSecrets)


async def first_delta(brain: RoleAgentBrain) -> None:
    async for _ in brain.stream(BrainInput(system="", model_text="hi", current_input="hi")):
        break


def test_a_role_without_an_agent_keeps_the_deployments_brain() -> None:
    deployment = FakeBrain(["hello"])
    assert brain_of(Services(), replace(ROLE, agent_url=None), deployment) is deployment
    assert isinstance(brain_of(Services(), ROLE, deployment), RoleAgentBrain)


async def test_a_secret_that_is_gone_fails_the_turn_with_its_code() -> None:
    brain = RoleAgentBrain(Services(), ROLE)
    with pytest.raises(ProviderError) as raised:
        await first_delta(brain)
    assert raised.value.code == "agent_credential_missing" and not raised.value.retryable
    assert "agent_token" in str(raised.value)


async def test_a_host_taken_off_the_allowlist_fails_the_turn() -> None:
    services = Services(settings=Settings(tool_hosts="other.example"))
    await services.tool_secrets.set("acme", "agent_token", "s3cret")
    with pytest.raises(ProviderError) as raised:
        await first_delta(RoleAgentBrain(services, ROLE))
    assert raised.value.code == "host_not_allowed"
    assert "s3cret" not in str(raised.value)
