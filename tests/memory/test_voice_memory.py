"""Memory on the voice path, through the real WebSocket server (text turns, fake ASR/TTS, the
offline LocalBrain wrapped to record its exact input): a fact said in one thread is in the
<memory_data> of a new thread with the same role and user, and absent for another user, another
role, or when the role's memory is off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from plugins.brain.local import LocalBrain, memory_entries
from plugins.contracts import BrainDelta, BrainInput
from plugins.fakes import FakeTTS
from runtime.accounts import Principal
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.postgres import truncate_all
from tests.runtime.conftest import fake_plugins

BOB = Principal("local", "bob")


class RecordingBrain:
    """LocalBrain, keeping every ``BrainInput`` it is given."""

    def __init__(self) -> None:
        self.inner = LocalBrain()
        self.inputs: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.inputs.append(request)
        async for delta in self.inner.stream(request):
            yield delta


@pytest.fixture(params=["memory", "postgres"])
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningServer, RecordingBrain]]:
    brain = RecordingBrain()
    plugins = fake_plugins(brain=brain, tts=FakeTTS(ms_per_char=0.5))
    if request.param == "memory":
        settings = Settings(port=0, data_dir=tmp_path, storage="memory", knowledge_semantic=False)
    else:
        url = request.getfixturevalue("postgres_url")
        settings = Settings(
            port=0,
            data_dir=tmp_path,
            storage="postgres",
            database_url=url,
            knowledge_semantic=False,
        )
    async with running_server(settings, plugins=plugins) as server:
        if server.services.database is not None:
            await truncate_all(server.services.database.pool)
            await server.services.accounts.add_token(Principal("local", "local-user"), server.token)
        await server.services.accounts.add_token(BOB, "bobs-token")
        yield server, brain


async def turn(
    server: RunningServer, text: str, *, token: str | None = None, role_id: str | None = None,
    expect_memory_status: bool = False,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:  # fmt: skip
    """One text turn in a new thread: (response.done event, memory status events)."""
    async with RealtimeClient(server.ws_url, token or server.token) as client:
        await client.connect(role_id=role_id)
        await client.send_text(text)
        done = await client.wait_type("response.done", timeout=10)
        if expect_memory_status:
            # Extraction runs beside the response: its status may come before or after it.
            if not client.events("openrealtime.memory.status"):
                await client.wait_type("openrealtime.memory.status", timeout=5)
        return done, client.events("openrealtime.memory.status")


async def test_a_fact_said_in_one_thread_is_in_memory_data_of_the_next(
    served: tuple[RunningServer, RecordingBrain],
) -> None:
    server, brain = served
    _, status = await turn(server, "My name is Ann. I like green tea.", expect_memory_status=True)
    assert status[0]["status"] == "saved"
    assert [e["key"] for e in status[0]["entries"]] == ["name", None]

    done, _ = await turn(server, "What do you remember about me?")
    system = brain.inputs[-1].system
    assert "<memory_data>" in system and "current instructions" in system
    assert memory_entries(system) == ["I like green tea", "My name is Ann"]
    assert "you like green tea" in done["response"]["output_text"]
    # It is a new thread: the earlier words are memory, not history.
    assert "My name is Ann" not in brain.inputs[-1].model_text

    # Another user of the same tenant and role gets nothing of it.
    done, _ = await turn(server, "What do you remember about me?", token="bobs-token")
    assert "<memory_data>" not in brain.inputs[-1].system
    assert "do not remember" in done["response"]["output_text"]


async def test_another_role_and_a_disabled_role_get_no_memory(
    served: tuple[RunningServer, RecordingBrain],
) -> None:
    server, brain = served
    services = server.services
    principal = await services.accounts.authenticate(server.token)
    assert principal is not None
    await turn(server, "我的目标是学会日语", expect_memory_status=True)
    coach = await services.roles.create(
        principal.tenant, name="Coach", instructions="Coach.", voice=None, language=None,
        memory_enabled=True,
    )  # fmt: skip
    await turn(server, "What do you remember about me?", role_id=coach.id)
    assert "<memory_data>" not in brain.inputs[-1].system

    role = await services.role_for(principal, None)
    assert role is not None
    await services.roles.update(principal.tenant, role.id, memory_enabled=False)
    _, status = await turn(server, "I like coffee. 你记得我什么?")
    assert status == []  # no extraction while disabled
    assert "<memory_data>" not in brain.inputs[-1].system
    await services.roles.update(principal.tenant, role.id, memory_enabled=True)
    await turn(server, "你记得我什么?")
    assert memory_entries(brain.inputs[-1].system) == ["我的目标是学会日语"]  # nothing deleted
