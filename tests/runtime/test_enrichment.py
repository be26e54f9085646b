"""Input enrichment on the turn path (``runtime/enrichment.py`` with the engine): the brain sees
the rewrite as the current input while the journal keeps the person's words and the record is
stored; nothing is called without visible entries, with memory off or without a memory model;
a missing, refused, slow or cancelled answer leaves the input as said — and the wiring of a
real session (``runtime/realtime/session.py``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from memory.enrichment import EnrichmentLimits
from memory.pool import (
    EntryMeta,
    PoolEntry,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from memory.pool_store import InMemoryPoolStore, PoolLocks, PoolStore
from memory.postgres_pool_store import PostgresPoolStore
from memory.role_records import (
    CallPurpose,
    ChatMessages,
    InMemoryRoleRecords,
    RoleMemorySettings,
)
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.response import ResponseOptions
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.enrichment import SessionEnrichment
from runtime.server import running_server
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]

T, USER, ROLE = "t", "alice", "role_a"
THREAD = ThreadRef(T, USER, "th_1")
ORIGINAL = "What should I drink tonight?"
REWRITE = "What should I drink tonight? I like green tea with honey."


def entry(
    id: str, content: str, *, user: str = USER, tenant: str = T, role: str = ROLE
) -> PoolEntry:
    source = ThreadSource("th_0", f"item-{id}")
    tags = {tenant_tag(tenant), thread_tag("th_0"), from_tag(user), for_person_tag(user)}
    meta = EntryMeta(
        id=id, role_id=role, layer="fact", tags=frozenset(tags), sources=(source,),
        created_at=datetime(2026, 5, 1, tzinfo=UTC) + timedelta(minutes=len(id)),
        access=(ThreadAccess("th_0", source.item_id, frozenset({user})),),
    )  # fmt: skip
    return PoolEntry(meta, content)


class ScriptedCalls:
    """``MemoryModelCalls`` with a script: each call answers with the next reply (a str, None,
    or a callable of the messages), optionally after waiting for ``gate``."""

    def __init__(self, *replies: str | None | Callable[[ChatMessages], str]) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []
        self.gate: asyncio.Event | None = None
        self.cancelled = 0
        self.called = asyncio.Event()

    async def call(
        self,
        tenant: str,
        role_id: str,
        purpose: CallPurpose,
        messages: ChatMessages,
        schema: dict[str, object],
        *,
        max_tokens: int,
        timeout_s: float,
        thread_id: str | None = None,
    ) -> str | None:
        self.calls.append(
            {"tenant": tenant, "role_id": role_id, "purpose": purpose, "messages": messages,
             "schema": schema, "timeout_s": timeout_s, "thread_id": thread_id}
        )  # fmt: skip
        self.called.set()
        if self.gate is not None:
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        reply = self.replies.pop(0) if self.replies else None
        return reply(messages) if callable(reply) else reply


def rewrite_answer(text: str = REWRITE, *refs: str) -> str:
    return json.dumps({"rewrite": text, "used": list(refs or ("e1",))})


class Sink:
    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.statuses: list[str] = []

    def send(self, value: ServerEvent) -> None:
        event = wire(value, extensions=True)
        if event["type"] == "response.done":
            self.statuses.append(event["response"]["status"])
            self.done.set()


class Setup:
    def __init__(
        self,
        calls: ScriptedCalls,
        *,
        enabled: bool = True,
        model: str | None = "scripted",
        limits: EnrichmentLimits | None = None,
        pool: PoolStore | None = None,
    ) -> None:
        self.pool = pool or InMemoryPoolStore(locks=PoolLocks())
        self.records = InMemoryRoleRecords()
        self.calls = calls
        self.journal = InMemoryJournalStore()
        self.brain = FakeBrain(["Okay."])
        self.sink = Sink()
        self.model = model

        async def is_enabled() -> bool:
            return enabled

        self.enrichment = SessionEnrichment(
            pool=self.pool, records=self.records, calls=calls, thread=THREAD, role_id=ROLE,
            is_enabled=is_enabled, limits=limits,
        )  # fmt: skip
        self.engine = Engine(
            plugins=Plugins(EnergyVAD(), FakeASR(), self.brain, FakeTTS(ms_per_char=0.1)),
            sink=self.sink,
            journal=self.journal,
            thread=THREAD,
            persona=Persona("Be brief."),
            voice_session_id="vs_enrich",
            settings=EngineSettings(),
            enrichment=self.enrichment,
        )

    async def prepare(self, *entries: PoolEntry) -> None:
        if self.model is not None:
            await self.records.put_settings(
                T, ROLE, RoleMemorySettings(memory_model=self.model, instructions="Be discreet."),
                expected=0,
            )  # fmt: skip
        for e in entries:
            await self.pool.add(e, "memory_model")

    async def turn(
        self, text: str = ORIGINAL, during: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.sink.done.clear()
        try:
            self.engine.push_text(text)
            if during is not None:
                await during()
            await asyncio.wait_for(self.sink.done.wait(), 5)
        finally:
            await self.engine.close()

    async def journaled_inputs(self) -> list[str]:
        events = await self.journal.read_tail(THREAD, 50)
        return [e.payload["text"] for e in events if e.kind is EventKind.USER_INPUT]


TEA = entry("f_tea", "The person likes green tea with honey.")


@pytest.fixture(params=["memory", "postgres"])
def pool_store(request: pytest.FixtureRequest) -> PoolStore:
    if request.param == "memory":
        return InMemoryPoolStore(locks=PoolLocks())
    return PostgresPoolStore(request.getfixturevalue("pg_pool"), locks=PoolLocks())


async def test_the_brain_sees_the_rewrite_and_the_journal_keeps_the_words(
    pool_store: PoolStore,
) -> None:
    setup = Setup(ScriptedCalls(rewrite_answer()), pool=pool_store)
    await setup.prepare(TEA, entry("f_bob", "Bob's secret.", user="bob"))
    await setup.turn()
    assert setup.sink.statuses == ["completed"]
    (request,) = setup.brain.requests
    assert request.current_input == REWRITE
    assert request.model_text.endswith(REWRITE)
    assert "memory" not in request.system.lower()  # the brain is not told where it came from
    assert await setup.journaled_inputs() == [ORIGINAL]
    (call,) = setup.calls.calls
    assert (call["purpose"], call["tenant"], call["role_id"]) == ("enrich", T, ROLE)
    assert call["thread_id"] == "th_1" and 0 < call["timeout_s"] <= 15
    shown = json.dumps(call["messages"])
    assert "green tea" in shown and "Bob's secret" not in shown  # only what alice may see
    assert "Be discreet." in call["messages"][0]["content"]
    (record,) = await setup.records.enrichments(T, "th_1")
    assert (record.text, record.original, record.entry_ids) == (REWRITE, ORIGINAL, ("f_tea",))
    assert (record.role_id, record.seq) == (ROLE, 1)
    assert setup.enrichment.outcomes == {"rewritten": 1}


async def test_no_visible_entries_means_no_model_call() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer()))
    await setup.prepare(entry("f_bob", "Bob likes coffee.", user="bob"))
    await setup.turn()
    assert setup.calls.calls == []
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert setup.enrichment.outcomes == {"no_entries": 1}


async def test_an_invalidated_entry_is_not_used() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer()))
    await setup.prepare(TEA)
    await setup.pool.invalidate(T, ROLE, "f_tea", datetime.now(UTC), by="person")
    await setup.turn()
    assert setup.calls.calls == []
    assert setup.enrichment.outcomes == {"no_entries": 1}


async def test_memory_off_leaves_the_input_unchanged() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer()), enabled=False)
    await setup.prepare(TEA)
    await setup.turn()
    assert setup.calls.calls == []
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert setup.enrichment.outcomes == {"disabled": 1}


async def test_no_memory_model_leaves_the_input_unchanged() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer()), model=None)
    await setup.prepare(TEA)
    await setup.turn()
    assert setup.calls.calls == []
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert setup.enrichment.outcomes == {"no_memory_model": 1}


async def test_no_answer_leaves_the_input_unchanged() -> None:
    setup = Setup(ScriptedCalls(None))
    await setup.prepare(TEA)
    await setup.turn()
    assert len(setup.calls.calls) == 1
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert await setup.records.enrichments(T, "th_1") == []
    assert setup.enrichment.outcomes == {"no_answer": 1}


async def test_a_refused_rewrite_leaves_the_input_unchanged() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer("What should I drink? Green tea.")))
    await setup.prepare(TEA)
    await setup.turn()
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert await setup.records.enrichments(T, "th_1") == []
    assert setup.enrichment.outcomes == {"dropped_words": 1}


async def test_a_model_past_the_bound_leaves_the_input_unchanged() -> None:
    calls = ScriptedCalls(rewrite_answer())
    calls.gate = asyncio.Event()  # never set: the model ignores its own timeout
    setup = Setup(calls, limits=EnrichmentLimits(timeout_s=0.3, save_timeout_s=0.05))
    await setup.prepare(TEA)
    await setup.turn()
    assert setup.sink.statuses == ["completed"]
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert calls.cancelled == 1
    assert setup.enrichment.outcomes == {"timeout": 1}


async def test_a_failing_model_never_fails_the_turn() -> None:
    def broken(messages: ChatMessages) -> str:
        raise RuntimeError("model down")

    setup = Setup(ScriptedCalls(broken))
    await setup.prepare(TEA)
    await setup.turn()
    assert setup.sink.statuses == ["completed"]
    assert setup.brain.requests[0].current_input == ORIGINAL
    assert setup.enrichment.outcomes == {"failed": 1}


async def test_a_barge_in_cancels_the_enrichment() -> None:
    calls = ScriptedCalls(rewrite_answer())
    calls.gate = asyncio.Event()
    setup = Setup(calls)
    await setup.prepare(TEA)

    async def cancel_while_enriching() -> None:
        await calls.called.wait()
        assert setup.engine.cancel_response()

    await setup.turn(during=cancel_while_enriching)
    assert setup.sink.statuses == ["cancelled"]
    assert calls.cancelled == 1
    assert setup.brain.requests == []
    assert await setup.records.enrichments(T, "th_1") == []
    assert await setup.journaled_inputs() == [ORIGINAL]


async def test_a_clients_out_of_band_input_is_not_enriched() -> None:
    setup = Setup(ScriptedCalls(rewrite_answer(), rewrite_answer()))
    await setup.prepare(TEA)
    try:
        setup.engine.push_text(ORIGINAL)
        await asyncio.wait_for(setup.sink.done.wait(), 5)
        setup.sink.done.clear()
        options = ResponseOptions(in_conversation=False, input_text="What should I drink now?")
        setup.engine.create_response(options)
        await asyncio.wait_for(setup.sink.done.wait(), 5)
    finally:
        await setup.engine.close()
    assert len(setup.calls.calls) == 1  # the person's turn only
    assert [r.current_input for r in setup.brain.requests] == [REWRITE, "What should I drink now?"]


# ------------------------------------------------------------------ a real session


class EnrichingCalls(ScriptedCalls):
    """Appends the first entry shown to the person's input, citing it."""

    def __init__(self) -> None:
        super().__init__()

    async def call(self, *args: Any, **kwargs: Any) -> str | None:
        await super().call(*args, **kwargs)
        user = args[3][-1]["content"]
        said = user.rsplit("Input: ", 1)[1]
        return rewrite_answer(f"{said} I live in Porto.", "e1")


async def test_a_session_enriches_its_turns(tmp_path: Path) -> None:
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", knowledge_semantic=False
    )
    brain = FakeBrain(["Noted."])
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        services = server.services
        calls = services.memory_calls = EnrichingCalls()
        principal = await services.authenticate(server.token)
        assert principal is not None
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            thread_id, role_id = client.session["thread_id"], client.session["role"]["id"]
            await services.role_records.put_settings(
                principal.tenant, role_id, RoleMemorySettings(memory_model="brain"), expected=0
            )
            porto = entry("f_porto", "The person lives in Porto.", user=principal.user,
                          tenant=principal.tenant, role=role_id)  # fmt: skip
            await services.pool.add(porto, "memory_model")
            await client.send_text("Where should I eat?")
            await client.wait_type("response.done", 10)
        assert brain.requests[-1].current_input == "Where should I eat? I live in Porto."
        assert len(calls.calls) == 1
        (record,) = await services.role_records.enrichments(principal.tenant, thread_id)
        assert record.original == "Where should I eat?" and record.entry_ids == ("f_porto",)
