"""The durable path: roles, threads and the journal in PostgreSQL survive a restart, and a
thread can be continued only by its owner, with its role, from a session that served it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugins.fakes import FakeBrain
from runtime.accounts import Principal
from runtime.client import ClientClosed, RealtimeClient
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode
from runtime.server import running_server
from tests.postgres import postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["postgres_url"]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not under pytest's tmp_path: its parents are 0700, which the embedded server's system
    # user cannot enter.
    path = Path(tempfile.mkdtemp(prefix="openrealtime-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def talk(settings: Settings, brain: FakeBrain, text: str, **start: str) -> dict[str, str]:
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            session = await client.connect(**start)
            await client.send_text(text)
            await client.wait_type("response.done")
            return {"session_id": session["id"], "thread_id": session["thread_id"]}


async def test_history_survives_a_restart_on_the_embedded_database(data_dir: Path) -> None:
    """The product default: no DATABASE_URL, an embedded PostgreSQL under the data dir."""
    settings = Settings(port=0, data_dir=data_dir)
    brain = FakeBrain(["Nice to meet you, Ada.", "You are Ada."])
    first = await talk(settings, brain, "my name is Ada")
    # A new server process on the same data directory (the embedded server was stopped).
    assert not (data_dir / "postgres" / "postmaster.pid").exists()
    second = await talk(
        settings,
        brain,
        "what is my name?",
        requested_thread_id=first["thread_id"],
        previous_voice_session_id=first["session_id"],
    )
    assert second["thread_id"] == first["thread_id"]
    assert second["session_id"] != first["session_id"]
    assert brain.requests[-1].model_text == (
        "Recent conversation context:\n"
        "User: my name is Ada\n"
        "Assistant: Nice to meet you, Ada.\n"
        "Current user input:what is my name?"
    )


async def refused(settings: Settings, token: str | None = None, **start: str) -> str:
    async with running_server(settings, plugins=fake_plugins()) as server:
        if token is not None:
            await server.services.accounts.add_token(Principal("local", "bob"), token)
        client = RealtimeClient(server.ws_url, token or server.token)
        with pytest.raises(ClientClosed) as refusal:
            await client.connect(**start)
        assert await client.wait_closed() == CloseCode.FORBIDDEN
        await client.close()
        return str(refusal.value)


async def test_continuation_is_refused_unless_everything_matches(
    postgres_url: str, data_dir: Path
) -> None:
    settings = Settings(port=0, data_dir=data_dir, database_url=postgres_url)
    first = await talk(settings, FakeBrain(), "hello")
    other = await talk(settings, FakeBrain(), "hello from another thread")
    thread, session = first["thread_id"], first["session_id"]

    # Another user with A's thread id: refused, and told nothing about the thread.
    assert "thread_not_found" in await refused(
        settings,
        token="bobs-token",
        requested_thread_id=thread,
        previous_voice_session_id=session,
    )
    # A session that never served this thread.
    assert "previous_session_not_in_thread" in await refused(
        settings, requested_thread_id=thread, previous_voice_session_id=other["session_id"]
    )
    # An unknown thread.
    assert "thread_not_found" in await refused(
        settings, requested_thread_id="th_nope", previous_voice_session_id=session
    )
    # A thread id without the previous session.
    assert "invalid_message" in await refused(settings, requested_thread_id=thread)

    # Deleting the role makes its threads unresumable (SPEC RT-7).
    async with running_server(settings, plugins=fake_plugins()) as server:
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        role = await server.services.roles.create(
            principal.tenant,
            name="Temporary",
            instructions="",
            voice=None,
            language=None,
            memory_enabled=False,
        )
    on_role = await talk(settings, FakeBrain(), "hi", role_id=role.id)
    async with running_server(settings, plugins=fake_plugins()) as server:
        await server.services.roles.delete(role.tenant, role.id)
    assert "role_not_found" in await refused(
        settings,
        requested_thread_id=on_role["thread_id"],
        previous_voice_session_id=on_role["session_id"],
    )
