"""Tool permissions through the real server (SPEC TOOL-4, TOOL-5): spoken questions and
answers, approval items, interruptions — against an HTTP tool server on 127.0.0.1 that
records every request it gets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import websockets

from journal.events import EventKind
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from plugins.fakes import FakeASR, FakeTTS
from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_ga_conformance import GAConnection, journal_of, silence, tone
from tools.capability import Capability
from tools.grants import GrantedBy, NewGrant
from tools.judgements import Judgement
from tools.postgres_grants import PostgresGrantStore
from tools.registry import HttpTool
from tools.rules import Author, Rule

__all__ = ["pg_pool", "postgres_url"]  # fixtures

ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}


@dataclass
class ToolServer:
    """A tiny HTTP server: records each request line; answers after ``delay_s`` (or never,
    ``hang``), and notes requests whose client went away before the answer."""

    delay_s: float = 0.0
    hang: bool = False
    requests: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode().strip()
        length = 0
        while (header := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = header.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        self.requests.append(line)
        if self.hang or self.delay_s:
            try:
                await asyncio.wait_for(reader.read(1), None if self.hang else self.delay_s)
                if reader.at_eof():
                    self.aborted.append(line)
                    writer.close()
                    return
            except TimeoutError:
                pass
        order = line.split("/orders/")[-1].split(" ")[0].split("/")[0]
        body = json.dumps({"order": order, "status": "cancelled"}).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        writer.write(head.encode() + b"Content-Type: application/json\r\n\r\n" + body)
        await writer.drain()
        writer.close()


@pytest.fixture
async def tool_server() -> AsyncIterator[ToolServer]:
    recorder = ToolServer()
    server = await asyncio.start_server(recorder.handle, "127.0.0.1", 0)
    recorder.port = server.sockets[0].getsockname()[1]
    async with server:
        yield recorder


class OrderBrain:
    """Calls ``cancel_order`` when the turn asks to cancel an order; answers from a result."""

    def __init__(self) -> None:
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if request.tool_results:
            yield BrainDelta(text=f"Result: {request.tool_results[-1].content}")
            return
        if "cancel order" in request.current_input.lower():
            n = len(self.requests)
            yield BrainDelta(tool_call=ToolCall(f"call_{n}", "cancel_order",
                                                {"order_id": "A10086"}))  # fmt: skip
            return
        yield BrainDelta(text="Sure, I am listening and will answer you in a moment.")


class SlowJudge:
    """A rules judge that takes ``delay_s`` to find no rule that decides."""

    name = "slow"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def judge(self, rules: Sequence[Rule], capability: Capability, *, lane: str) -> Judgement:
        await asyncio.sleep(self.delay_s)
        return Judgement(effect="none")


@dataclass
class Setup:
    server: RunningServer
    tools: ToolServer
    brain: OrderBrain
    tenant: str = ""
    user: str = ""
    role_id: str = ""


def cancel_tool(port: int, *, cancellable: bool = True) -> HttpTool:
    return HttpTool(
        name="cancel_order", description="Cancel an order.", parameters=ORDER_SCHEMA,
        method="POST", url_template=f"http://127.0.0.1:{port}/orders/{{order_id}}/cancel",
        target="order_id", confirm="cancel order {order_id}", timeout_s=5.0,
        cancellable=cancellable,
    )  # fmt: skip


@asynccontextmanager
async def started(
    tmp_path: Path, tools: ToolServer, asr: list[str], *, timeout_s: float = 30.0,
    cancellable: bool = True, tts_ms: float = 10.0, database_url: str | None = None,
) -> AsyncIterator[Setup]:  # fmt: skip
    storage: dict[str, Any] = (
        {"database_url": database_url, "knowledge_semantic": False} if database_url
        else {"storage": "memory"}
    )  # fmt: skip
    settings = Settings(port=0, data_dir=tmp_path, silence_ms=300, min_interrupt_ms=200,
                        tool_hosts="127.0.0.1", tool_confirm_timeout_s=timeout_s,
                        **storage)  # fmt: skip
    brain = OrderBrain()
    plugins = fake_plugins(brain=brain, asr=FakeASR(asr), tts=FakeTTS(ms_per_char=tts_ms))
    async with running_server(settings, plugins=plugins) as server:
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        role = await default_role(server.services.roles, principal.tenant)
        await server.services.tool_catalog.put(
            principal.tenant, role.id, cancel_tool(tools.port, cancellable=cancellable)
        )
        yield Setup(server, tools, brain, principal.tenant, principal.user, role.id)


async def connect(setup: Setup) -> tuple[GAConnection, Any]:
    headers = {"Authorization": f"Bearer {setup.server.token}"}
    ws = await websockets.connect(setup.server.ws_url + "?model=gpt-realtime",
                                  additional_headers=headers)  # fmt: skip
    conn = GAConnection(ws)
    await conn.wait("session.created")
    detection = {"type": "server_vad", "silence_duration_ms": 300}
    audio = {"input": {"format": {"type": "audio/pcm", "rate": 24_000},
                       "turn_detection": detection}}  # fmt: skip
    await conn.send({"type": "session.update", "session": {"type": "realtime", "audio": audio}})
    await conn.wait("session.updated")
    return conn, ws


async def speak(conn: GAConnection) -> None:
    """One utterance (its words are the fake ASR's next text)."""
    await asyncio.sleep(0.8)
    await conn.stream(tone(500) + silence(700))


def spoken(done: dict[str, Any]) -> str:
    parts = [c for item in done["response"]["output"] if item["type"] == "message"
             for c in item["content"]]  # fmt: skip
    return " ".join(p.get("transcript") or p.get("text") or "" for p in parts)


async def asked(conn: GAConnection) -> tuple[dict[str, Any], dict[str, Any]]:
    request = await conn.wait(
        "conversation.item.added", where=lambda e: e["item"]["type"] == "mcp_approval_request"
    )
    done = await conn.wait("response.done")
    return request["item"], done


async def test_yes_runs_the_call_once_and_the_answer_uses_its_result(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    async with started(tmp_path, tool_server, ["cancel order A10086", "yes"]) as setup:
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            request, done = await asked(conn)
            assert request["name"] == "cancel_order"
            assert json.loads(request["arguments"]) == {"order_id": "A10086"}
            assert "May I cancel order A10086?" in spoken(done)
            assert tool_server.requests == []
            await speak(conn)
            settled = await conn.wait(
                "conversation.item.added",
                where=lambda e: e["item"]["type"] == "mcp_approval_response",
            )
            assert settled["item"]["approve"] is True
            assert settled["item"]["approval_request_id"] == request["id"]
            done = await conn.wait("response.done")
            assert '"status": "cancelled"' in spoken(done)
        assert tool_server.requests == ["POST /orders/A10086/cancel HTTP/1.1"]
        grants = await setup.server.services.grants.list(setup.tenant, setup.role_id)
        assert [(g.effect, g.scope, g.status) for g in grants] == [("allow", "once", "used")]
        assert grants[0].granted_by == GrantedBy("person", setup.user)
        thread_id = done["response"]["conversation_id"]
        events = await journal_of(setup.server, thread_id)
        call = next(e for e in events if e.kind is EventKind.TOOL_CALL)
        assert call.payload["decision"]["effect"] == "none"
        assert call.payload["confirmation"] == request["id"]
        result = next(e for e in events if e.kind is EventKind.TOOL_RESULT)
        assert result.payload["confirmation"]["answer"] == "once"
        assert result.payload["confirmation"]["by"] == "voice"
        assert result.payload["confirmation"]["grant_id"] == grants[0].id


async def test_always_grants_for_life_and_the_next_call_is_not_asked(
    tmp_path: Path, tool_server: ToolServer, pg_pool: Any, postgres_url: str
) -> None:
    """On PostgreSQL: the grant and journal stores the runtime uses by default."""
    script = ["cancel order A10086", "always", "cancel order A10086"]
    async with started(tmp_path, tool_server, script, database_url=postgres_url) as setup:
        assert isinstance(setup.server.services.grants, PostgresGrantStore)
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            await asked(conn)
            await speak(conn)
            await conn.wait("response.done")
            await speak(conn)
            done = await conn.wait("response.done")
            assert '"status": "cancelled"' in spoken(done)
        approvals = [e for e in conn.events if e["type"] == "conversation.item.added"
                     and e["item"]["type"] == "mcp_approval_request"]  # fmt: skip
        assert len(approvals) == 1
        assert len(tool_server.requests) == 2
        grants = await setup.server.services.grants.list(setup.tenant, setup.role_id)
        assert [(g.effect, g.scope, g.status) for g in grants] == [("allow", "lifetime", "active")]


async def test_no_denies_for_the_thread_and_nothing_is_sent(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    script = ["cancel order A10086", "no, don't", "cancel order A10086"]
    async with started(tmp_path, tool_server, script) as setup:
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            await asked(conn)
            await speak(conn)
            done = await conn.wait("response.done")
            assert "declined" in spoken(done)
            await speak(conn)  # asked again: refused by the thread's deny, not asked
            done = await conn.wait("response.done")
            assert "Not permitted" in spoken(done)
        assert tool_server.requests == []
        grants = await setup.server.services.grants.list(setup.tenant, setup.role_id)
        assert [(g.effect, g.scope) for g in grants] == [("deny", "thread")]
        assert grants[0].thread_id == done["response"]["conversation_id"]


async def test_an_unanswered_question_is_a_no_for_this_call_only(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    async with started(tmp_path, tool_server, ["cancel order A10086"], timeout_s=0.5) as setup:
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            request, _ = await asked(conn)
            settled = await conn.wait(
                "conversation.item.added",
                where=lambda e: e["item"]["type"] == "mcp_approval_response",
            )
            assert settled["item"] == {**settled["item"], "approve": False,
                                       "approval_request_id": request["id"],
                                       "reason": "timeout"}  # fmt: skip
            done = await conn.wait("response.done")  # the turn goes on by itself
            assert "did not answer" in spoken(done)
        assert tool_server.requests == []
        assert await setup.server.services.grants.list(setup.tenant, setup.role_id) == []


async def test_other_words_withdraw_the_question_and_are_a_turn_of_their_own(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    script = ["cancel order A10086", "what time do you open", "yes"]
    async with started(tmp_path, tool_server, script) as setup:
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            await asked(conn)
            await speak(conn)
            done = await conn.wait("response.done")
            assert "listening" in spoken(done)
            await speak(conn)  # a late "yes" answers nothing
            done = await conn.wait("response.done")
            assert "listening" in spoken(done)
        assert tool_server.requests == []


async def test_an_approval_item_with_always_and_a_rule_grants_and_saves_the_rule(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    async with started(tmp_path, tool_server, ["cancel order A10086"]) as setup:
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            request, _ = await asked(conn)
            await conn.send({"type": "conversation.item.create", "item": {
                "type": "mcp_approval_response", "id": "mcpa_page_1",
                "approval_request_id": request["id"], "approve": True, "scope": "lifetime",
                "rule": "The assistant may cancel orders."}})  # fmt: skip
            done = await conn.wait("response.done")
            assert '"status": "cancelled"' in spoken(done)
            # A second answer to the same request finds nothing waiting.
            await conn.send({"type": "conversation.item.create", "event_id": "evt_late",
                             "item": {"type": "mcp_approval_response", "id": "mcpa_page_2",
                                      "approval_request_id": request["id"],
                                      "approve": False}})  # fmt: skip
            error = await conn.wait("error")
            assert error["error"]["code"] == "item_not_found"
        assert len(tool_server.requests) == 1
        services = setup.server.services
        grants = await services.grants.list(setup.tenant, setup.role_id)
        assert [(g.scope, g.granted_by.id) for g in grants] == [("lifetime", setup.user)]
        rules = await services.rules.list(setup.tenant, setup.role_id)
        assert [(r.text, r.author) for r in rules] == [
            ("The assistant may cancel orders.", Author("person", setup.user))
        ]


async def grant_for_life(setup: Setup) -> None:
    await setup.server.services.grants.create(setup.tenant, setup.role_id, NewGrant(
        capability=Capability("cancel_order", "A10086"), effect="allow", scope="lifetime",
        granted_by=GrantedBy("person", setup.user)))  # fmt: skip


async def test_a_barge_in_aborts_a_running_cancellable_call_and_its_result_is_never_used(
    tmp_path: Path,
) -> None:
    hanging = ToolServer(hang=True)
    http = await asyncio.start_server(hanging.handle, "127.0.0.1", 0)
    hanging.port = http.sockets[0].getsockname()[1]
    async with http:
        script = ["cancel order A10086", "never mind"]
        async with started(tmp_path, hanging, script) as setup:
            await grant_for_life(setup)
            conn, ws = await connect(setup)
            async with ws:
                await speak(conn)
                for _ in range(100):
                    if hanging.requests:
                        break
                    await asyncio.sleep(0.05)
                assert hanging.requests  # the call is running
                await speak(conn)  # the person speaks over it
                done = await conn.wait("response.done")
                assert done["response"]["status"] == "cancelled"
                done = await conn.wait("response.done")
                assert "cancelled" not in spoken(done)
            for _ in range(100):
                if hanging.aborted:
                    break
                await asyncio.sleep(0.05)
            assert hanging.aborted == hanging.requests
            thread_id = done["response"]["conversation_id"]
            events = await journal_of(setup.server, thread_id)
            assert not [e for e in events if e.kind is EventKind.TOOL_RESULT]
            assert all(not r.tool_results for r in setup.brain.requests)


async def test_a_call_that_cannot_be_cancelled_finishes_journaled_as_stale_and_unspoken(
    tmp_path: Path,
) -> None:
    slow = ToolServer(delay_s=4.0)
    http = await asyncio.start_server(slow.handle, "127.0.0.1", 0)
    slow.port = http.sockets[0].getsockname()[1]
    async with http:
        script = ["cancel order A10086", "never mind"]
        async with started(tmp_path, slow, script, cancellable=False) as setup:
            await grant_for_life(setup)
            conn, ws = await connect(setup)
            async with ws:
                await speak(conn)
                for _ in range(100):
                    if slow.requests:
                        break
                    await asyncio.sleep(0.05)
                await speak(conn)
                done = await conn.wait("response.done")
                assert done["response"]["status"] == "cancelled"
                done = await conn.wait("response.done")
                thread_id = done["response"]["conversation_id"]
                stale: list[Any] = []
                for _ in range(100):
                    events = await journal_of(setup.server, thread_id)
                    stale = [e for e in events if e.kind is EventKind.TOOL_RESULT]
                    if stale:
                        break
                    await asyncio.sleep(0.05)
            assert slow.aborted == []
            assert [e.payload["stale"] for e in stale] == [True]
            assert '"status": "cancelled"' in stale[0].payload["content"]
            said = " ".join(e["delta"] for e in conn.events
                            if e["type"] == "response.output_audio_transcript.delta")  # fmt: skip
            assert "cancelled" not in said
            assert all(not r.tool_results for r in setup.brain.requests)


async def test_a_call_interrupted_while_it_is_decided_never_starts(
    tmp_path: Path, tool_server: ToolServer
) -> None:
    script = ["cancel order A10086", "never mind"]
    async with started(tmp_path, tool_server, script) as setup:
        services = setup.server.services
        services.tool_judge = SlowJudge(3.0)
        await services.rules.create(setup.tenant, setup.role_id, "Orders may be looked up.",
                                    Author("person", setup.user))  # fmt: skip
        conn, ws = await connect(setup)
        async with ws:
            await speak(conn)
            await speak(conn)  # over the thinking: the judge is still deciding
            done = await conn.wait("response.done")
            assert done["response"]["status"] == "cancelled"
            await conn.wait("response.done")
            await asyncio.sleep(3.5)  # past the judge's answer: nothing may start late
        assert tool_server.requests == []
        approvals = [e for e in conn.events if e["type"] == "conversation.item.added"
                     and e["item"]["type"] == "mcp_approval_request"]  # fmt: skip
        assert approvals == []
