"""The tool gate on an engine in virtual time (``runtime/tool_gate.py``): the question's
timeout, an answer typed over the question, and a cancel of the response that asked."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import httpx

from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.response import CallOrigin
from plugins.brain.tool_loop import PROCEED
from plugins.contracts import ToolCall, ToolSpec
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.tool_gate import ToolGate
from tests.runtime.test_tool_gate_e2e import OrderBrain, cancel_tool
from tests.virtual_time import in_virtual_time
from tools.capability import Capability
from tools.catalog import InMemoryToolCatalog
from tools.decide import ToolDecider
from tools.errors import ToolsUnavailable
from tools.grants import GrantedBy, InMemoryGrantStore, NewGrant
from tools.http_tool import HttpToolExecutor, InMemorySecrets
from tools.judgements import InMemoryJudgementCache
from tools.rules import Author, InMemoryRuleStore

THREAD = ThreadRef("tenant", "user", "thread")


class Sink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def send(self, value: ServerEvent) -> None:
        self.events.append(wire(value, extensions=True))

    def items(self, kind: str) -> list[dict[str, Any]]:
        added = [e["item"] for e in self.events if e["type"] == "conversation.item.added"]
        return [item for item in added if item["type"] == kind]

    def done(self) -> list[dict[str, Any]]:
        return [e["response"] for e in self.events if e["type"] == "response.done"]


class Session:
    """An engine with a tool gate over in-memory stores; HTTP requests are recorded by the
    executor's transport (a call that is never sent is what these tests prove)."""

    def __init__(self, *, tts_ms: float = 10.0) -> None:
        self.sent: list[str] = []

        def answer(request: httpx.Request) -> httpx.Response:
            self.sent.append(f"{request.method} {request.url.path}")
            return httpx.Response(200, json={"status": "cancelled"})

        self.sink = Sink()
        self.journal = InMemoryJournalStore()
        self.grants = InMemoryGrantStore()
        self.catalog = InMemoryToolCatalog({"127.0.0.1"})
        rules = InMemoryRuleStore()
        hosts = frozenset({"127.0.0.1"})
        self.gate = ToolGate(
            decider=ToolDecider(self.grants, rules, InMemoryJudgementCache(), None),
            grants=self.grants, rules=rules, catalog=self.catalog,
            executor=HttpToolExecutor(InMemorySecrets(), hosts,
                                      transport=httpx.MockTransport(answer)),
            journal=self.journal, thread=THREAD, role_id="role", person="user",
            voice_session_id="vs_test", allowed_hosts=hosts, language="en",
            confirm_timeout_s=30.0,
        )  # fmt: skip
        self.engine = Engine(
            plugins=Plugins(EnergyVAD(), FakeASR(), OrderBrain(), FakeTTS(ms_per_char=tts_ms)),
            sink=self.sink, journal=self.journal, thread=THREAD, persona=Persona("Be brief."),
            voice_session_id="vs_test", settings=EngineSettings(),
            clock=asyncio.get_running_loop().time, tool_gate=self.gate,
        )  # fmt: skip

    async def start(self) -> None:
        await self.catalog.put("tenant", "role", cancel_tool(8080))

    async def until(self, check: Any, *, within_s: float = 60.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not check():
            assert loop.time() < deadline, "not within the time"
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        await self.engine.close()
        await self.gate.close()


@in_virtual_time
async def test_an_unanswered_question_times_out_in_virtual_time_as_a_no() -> None:
    session = Session()
    await session.start()
    loop = asyncio.get_running_loop()
    try:
        session.engine.push_text("cancel order A10086")
        await session.until(lambda: session.sink.items("mcp_approval_request"))
        asked_at = loop.time()
        await session.until(lambda: len(session.sink.done()) == 1)
        await asyncio.sleep(29.0 - (loop.time() - asked_at))
        assert session.sink.items("mcp_approval_response") == []
        await session.until(lambda: len(session.sink.done()) == 2, within_s=5.0)
        settled = session.sink.items("mcp_approval_response")
        assert [(s["approve"], s.get("reason")) for s in settled] == [(False, "timeout")]
        assert 30.0 <= loop.time() - asked_at < 31.0
        assert "did not answer" in session.sink.done()[-1]["output_text"]
    finally:
        await session.close()
    assert session.sent == []
    assert await session.grants.list("tenant", "role") == []
    results = [e for e in await session.journal.read(THREAD) if e.kind is EventKind.TOOL_RESULT]
    assert [r.payload["confirmation"]["by"] for r in results] == ["timeout"]


@in_virtual_time
async def test_yes_typed_over_the_question_answers_it() -> None:
    session = Session(tts_ms=200.0)  # the question takes seconds to say
    await session.start()
    try:
        session.engine.push_text("cancel order A10086")
        await session.until(lambda: session.sink.items("mcp_approval_request"))
        session.engine.push_text("yes")  # interrupts the question (text input)
        await session.until(lambda: any("Result" in (d.get("output_text") or "")
                                        for d in session.sink.done()))  # fmt: skip
        assert session.sink.done()[0]["status"] == "cancelled"
    finally:
        await session.close()
    assert session.sent == ["POST /orders/A10086/cancel"]


@in_virtual_time
async def test_cancelling_the_response_that_asks_withdraws_the_question() -> None:
    session = Session(tts_ms=200.0)
    await session.start()
    try:
        session.engine.push_text("cancel order A10086")
        await session.until(lambda: session.sink.items("mcp_approval_request"))
        assert session.engine.cancel_response()
        await session.until(lambda: session.sink.items("mcp_approval_response"))
        settled = session.sink.items("mcp_approval_response")
        assert [(s["approve"], s.get("reason")) for s in settled] == [(False, "withdrawn")]
        session.engine.push_text("yes")  # answers nothing now: an ordinary turn
        await session.until(lambda: len(session.sink.done()) == 2)
        assert "listening" in session.sink.done()[-1]["output_text"]
        await asyncio.sleep(60.0)  # no timeout fires for a withdrawn question
    finally:
        await session.close()
    assert session.sent == []
    assert len(session.sink.items("mcp_approval_response")) == 1


class ForbiddingJudge:
    """Denies every call, quoting the role's first rule."""

    name = "forbidding"

    async def judge(self, rules: Any, capability: Any, *, lane: str) -> Any:
        from tools.judgements import Judgement, Quote

        return Judgement(effect="deny", quotes=(Quote(rules[0].id, rules[0].text),))


async def decide(gate: ToolGate, call: ToolCall) -> Any:
    return await gate.gate(CallOrigin(1, 1, "cancel order A10086", None))(call)


@in_virtual_time
async def test_a_rule_that_forbids_is_quoted_and_bad_arguments_get_no_decision() -> None:
    session = Session()
    await session.start()
    rules = InMemoryRuleStore()
    rule = await rules.create("tenant", "role", "Never cancel orders.", Author("person", "user"))
    session.gate.decider = ToolDecider(session.grants, rules, InMemoryJudgementCache(),
                                       ForbiddingJudge())  # fmt: skip
    try:
        verdict = await decide(session.gate, ToolCall("c1", "cancel_order", {"order_id": "A1"}))
        assert verdict.refused == 'Not permitted: "Never cancel orders."'
        fields = session.gate.journal_fields("c1")["decision"]
        assert (fields["effect"], fields["decided_by"], fields["quotes"]) == (
            "deny", "judgement", [rule.text]
        )  # fmt: skip
        verdict = await decide(session.gate, ToolCall("c2", "cancel_order", {"order_id": 7}))
        assert verdict.refused is not None and verdict.refused.startswith("Error: invalid")
        assert "7" not in verdict.refused  # the path is named, never the value
        assert session.gate.journal_fields("c2")["decision"]["effect"] == "none"
        verdict = await decide(session.gate, ToolCall("c3", "drop_tables", {}))
        assert verdict.refused is not None and "no tool named" in verdict.refused
        builtin = await decide(session.gate, ToolCall("c4", "knowledge_search", {"q": "x"}))
        assert builtin == PROCEED
    finally:
        await session.close()
    assert session.sent == []


WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


async def test_a_client_function_no_grant_decides_goes_to_the_client_unless_denied() -> None:
    session = Session()
    await session.start()
    try:
        session.gate.set_client_tools((WEATHER,))
        verdict = await decide(session.gate, ToolCall("c1", "get_weather", {"city": "Paris"}))
        assert verdict == PROCEED and session.gate.runs_on_client("c1")
        fields = session.gate.journal_fields("c1")["decision"]
        assert (fields["effect"], fields["decided_by"]) == ("allow", "client")
        assert session.sink.items("mcp_approval_request") == []
        # A deny still refuses it, whoever the client is.
        await session.grants.create("tenant", "role", NewGrant(
            capability=Capability("get_weather"), effect="deny", scope="lifetime",
            granted_by=GrantedBy("person", "admin")))  # fmt: skip
        verdict = await decide(session.gate, ToolCall("c2", "get_weather", {"city": "Rome"}))
        assert verdict.refused is not None and not session.gate.runs_on_client("c2")
        # Asking first is a setting (tool_client_undecided="ask").
        session.gate.client_undecided = "ask"
        verdict = await decide(session.gate, ToolCall("c3", "get_weather", {"city": "Oslo"}))
        assert verdict.refused is not None  # the deny grant decides before anyone is asked
    finally:
        await session.close()


class SlowFailingCatalog(InMemoryToolCatalog):
    """A catalog whose read fails (the database unreachable) after ``gate`` opens."""

    def __init__(self) -> None:
        super().__init__({"127.0.0.1"})
        self.gate = asyncio.Event()

    async def list(self, tenant: str, role_id: str) -> list[Any]:
        await self.gate.wait()
        raise ToolsUnavailable("tool catalog unavailable: TimeoutError")


async def test_a_catalog_read_that_fails_after_its_turn_was_cancelled_is_not_left_unretrieved() -> (
    None
):
    """The turn that started the role's tools' read is cancelled (a barge-in); the read then
    fails, and the session ends before another turn asks. Nobody awaited the failure: it must
    not surface as an asyncio "exception was never retrieved" traceback when collected."""
    session = Session()
    catalog = SlowFailingCatalog()
    session.gate.catalog = catalog
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        turn = asyncio.ensure_future(session.gate.specs())
        await asyncio.sleep(0.01)
        turn.cancel()
        catalog.gate.set()
        await asyncio.sleep(0.01)
        await session.close()
        del turn, session
        gc.collect()
        await asyncio.sleep(0)
        assert unhandled == []
    finally:
        loop.set_exception_handler(None)
