"""Your own chat agent behind the voice (SPEC BRAIN-6): examples/echo_agent.py, run as its own
process, holds a spoken conversation through the real server and WebSocket — an interruption
closes its stream and the next request says what was heard, and a tool call it asks for is run
by the runtime (the knowledge search) and answered from. Per role too: a role that names the
agent and a tenant secret is answered by it, with that credential; the others by the
deployment's brain."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from plugins.contracts import Transcript
from plugins.fakes import FakeTTS
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.plugin_factory import build_brain
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

ROOT = Path(__file__).parents[2]
AGENT_TOKEN = "agent-secret"
"""What the example agent asks of every request (its ECHO_AGENT_TOKEN)."""
SAID_MS = {"hello agent": 400, "tell me a story": 1_400, "what did you say": 2_400,
           "look up the opening hours": 3_400}  # fmt: skip


class HearsByLength:
    """A fake ASR that hears each utterance by its length (each turn's tone is its own), so
    transcribing a piece of speech twice — a barge-in judged, then heard — hears it alike."""

    async def transcribe(self, utterance: Any, *, language: str | None = None) -> Transcript:
        ms = utterance.size * 1000 // 16_000
        text = min(SAID_MS, key=lambda said: abs(SAID_MS[said] + 500 - ms))
        return Transcript(text=text, language=language or "en")


@pytest.fixture
async def echo_agent() -> AsyncIterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "uvicorn", "examples.echo_agent:app",
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "ECHO_AGENT_TOKEN": AGENT_TOKEN},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http, asyncio.timeout(30):
            while True:  # until it answers
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"{url}/seen")).status_code == 200:
                        break
                if process.returncode is not None:
                    assert process.stderr is not None
                    raise RuntimeError((await process.stderr.read()).decode()[-2000:])
                await asyncio.sleep(0.1)
        yield url
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


@pytest.fixture
async def server(tmp_path: Path, echo_agent: str) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300,
        min_interrupt_ms=300, brain="http", agent_url=f"{echo_agent}/turn",
        agent_token=AGENT_TOKEN, preemptive=False, transcript_cues=False,
    )  # fmt: skip
    plugins = fake_plugins(
        asr=HearsByLength(), brain=build_brain(settings), tts=FakeTTS(ms_per_char=20.0)
    )
    async with running_server(settings, plugins=plugins) as running:
        yield running


async def seen(agent: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return dict((await http.get(f"{agent}/seen")).json())


def transcript(done: dict[str, Any]) -> str:
    return str(done["response"]["output"][0]["content"][0]["transcript"])


async def test_the_example_agent_holds_a_spoken_conversation_through_the_runtime(
    server: RunningServer, echo_agent: str
) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()

        async def say(words: str) -> dict[str, Any]:
            """One spoken turn, the microphone streaming on while the answer plays."""
            done = asyncio.ensure_future(client.wait_type("response.done", timeout=30))
            await stream(client, tone_frame(), SAID_MS[words])
            while not done.done():
                await stream(client, SILENCE, 100)
            return await done

        first = await say("hello agent")
        # A long story; the person talks over it once its audio plays.
        story = asyncio.ensure_future(client.wait_type("response.done", timeout=30))
        before = len(client.audio())
        await stream(client, tone_frame(), SAID_MS["tell me a story"])
        async with asyncio.timeout(30):
            while len(client.audio()) == before:  # until the story is heard
                await stream(client, SILENCE, 100)
        await stream(client, SILENCE, 600)
        await stream(client, tone_frame(), SAID_MS["what did you say"])  # the barge-in
        cut = await story
        after = asyncio.ensure_future(client.wait_type("response.done", timeout=30))
        while not after.done():
            await stream(client, SILENCE, 100)
        heard = await after
        looked_up = await say("look up the opening hours")
    agent = await seen(echo_agent)
    requests = agent["requests"]

    assert transcript(first) == "You said: hello agent."
    assert cut["response"]["status"] == "cancelled"
    assert agent["closed_early"] == 1  # the interruption closed the agent's stream
    interrupted = requests[2]
    assert interrupted["input"] == "what did you say"
    assert interrupted["previous_answer"]["interrupted"] is True
    assert interrupted["previous_answer"]["text"].startswith("Once upon a time")
    assert transcript(heard) == "You said: what did you say. (You cut me off earlier.)"
    # The tool call it asked for: the runtime searched, and the next round carried the result.
    asked, answered = requests[3], requests[4]
    assert asked["input"] == "look up the opening hours" and asked["tool_results"] == []
    assert [r["name"] for r in answered["tool_results"]] == ["knowledge_search"]
    assert answered["tool_calls"][0]["arguments"] == {"query": "the opening hours"}
    assert transcript(looked_up).startswith("Here is what I found: ")
    assert all(r["thread_id"] == requests[0]["thread_id"] for r in requests)
    assert len({r["response_id"] for r in requests}) == 4  # the tool round is the same answer


# ------------------------------------------------------------------ per role


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """The deployment's brain is its own (a scripted one); the agent is reachable as a tool
    host is."""
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", tool_hosts="127.0.0.1",
        preemptive=False, transcript_cues=False,
    )  # fmt: skip
    async with running_server(settings, plugins=fake_plugins()) as running:
        yield running


async def typed_answer(server: RunningServer, words: str, role_id: str | None) -> dict[str, Any]:
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect(role_id=role_id)
        await client.send_text(words)
        return await client.wait_type("response.done", timeout=30)


async def test_a_role_names_its_own_agent_and_is_answered_by_it_with_the_tenants_secret(
    deployment: RunningServer, echo_agent: str
) -> None:
    url = f"{echo_agent}/turn"
    async with httpx.AsyncClient(
        base_url=deployment.http_url, headers={"Authorization": f"Bearer {deployment.token}"}
    ) as api:
        role = (await api.post("/api/roles", json={"name": "Front desk"})).json()
        refused = [
            await api.patch(
                f"/api/roles/{role['id']}", json={"agent_url": "http://agents.example/t"}
            ),
            await api.patch(f"/api/roles/{role['id']}", json={"agent_url": "file:///etc/passwd"}),
            await api.patch(f"/api/roles/{role['id']}", json={"agent_secret": "nobody_set_it"}),
        ]
        put = await api.put("/api/tool-secrets/echo_token", json={"value": AGENT_TOKEN})
        patched = await api.patch(
            f"/api/roles/{role['id']}", json={"agent_url": url, "agent_secret": "echo_token"}
        )
        assert put.status_code < 300 and patched.status_code == 200, patched.text
        listed = (await api.get("/api/roles")).json()["roles"]

        answered = await typed_answer(deployment, "hello agent", role["id"])
        other = await typed_answer(deployment, "hello agent", None)  # the default role
        # The secret changes to one the agent does not accept: the next session's turn fails
        # with the agent's refusal, named, and the person is not left with silence.
        await api.put("/api/tool-secrets/echo_token", json={"value": "not-the-token"})
        failed = await typed_answer(deployment, "hello agent", role["id"])
        cleared = await api.patch(f"/api/roles/{role['id']}", json={"agent_url": None})
        after = await typed_answer(deployment, "hello agent", role["id"])

    assert [r.status_code for r in refused] == [422, 422, 422]
    assert [r.json()["code"] for r in refused] == [
        "host_not_allowed", "invalid_tool", "invalid_role"
    ]  # fmt: skip
    assert patched.json()["agent_url"] == url and patched.json()["agent_secret"] == "echo_token"
    assert AGENT_TOKEN not in str(listed)  # the role keeps the secret's name only
    assert transcript(answered) == "You said: hello agent."
    assert transcript(other) == transcript(after) == "Sure. Here is the answer. Anything else?"
    assert cleared.json()["agent_url"] is None
    requests = (await seen(echo_agent))["requests"]
    assert len(requests) == 1  # the refused one never reached /turn's body
    assert requests[0]["role_id"] == role["id"] and requests[0]["input"] == "hello agent"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["status_details"]["error"]["code"] == "provider_error"
