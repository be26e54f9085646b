"""The confide tool (``runtime/confide.py`` rules 1–4) on the server's services, and one text turn
through the real server whose brain confides: the confession is kept, the learning run waits for
the turn to end and then learns what the person said."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from accounts.model import Principal
from journal.events import EventKind, NewEvent, ThreadRef
from memory.learning_runs import InMemoryLearningRunStore, RunState
from memory.pool import Reader
from memory.role_records import Budget, ModelCall, RoleMemorySettings
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from runtime.client import RealtimeClient
from runtime.confide import CALM_ANSWERS, TOOL_SPEC, ConfideTool
from runtime.config import Settings
from runtime.roles import Role, RoleOverrides, default_role
from runtime.server import RunningServer, running_server
from runtime.services import Services, open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.role_memory_fakes import ScriptedMemoryModel

THREAD = ThreadRef("t", "u1", "th")
__all__ = ["postgres_url"]


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    made = await open_services(
        Settings(port=0, data_dir=tmp_path, storage="memory"), plugins=fake_plugins()
    )
    try:
        yield made
    finally:
        await made.close()


async def role_of(services: Services, *, language: str | None = None) -> Role:
    role = await default_role(services.roles, THREAD.tenant)
    if language is not None:
        updated = await services.roles.update(THREAD.tenant, role.id, language=language)
        assert updated is not None
        role = updated
    return role


async def set_model(services: Services, role: Role, model: ScriptedMemoryModel, **kw: Any) -> None:
    services.memory_models["m"] = model
    await services.role_records.put_settings(
        THREAD.tenant, role.id, RoleMemorySettings(memory_model="m", **kw), expected=0
    )


async def turn_so_far(services: Services) -> int:
    """A turn's user input and its confide call, journaled as the engine does."""
    stored = await services.journal.append(
        THREAD,
        [
            NewEvent("u", EventKind.USER_INPUT, {"text": "I'm vegan.", "source": "text"}),
            NewEvent(
                "c",
                EventKind.TOOL_CALL,
                {"call_id": "c1", "name": "confide", "arguments": {"text": "I offered meat."}},
            ),  # fmt: skip
        ],
    )
    return stored[-1].seq


def tool(services: Services, role: Role) -> ConfideTool:
    return ConfideTool(
        services, thread=THREAD, role_id=role.id, language=role.language, journal=services.journal
    )


def runs(services: Services) -> list[Any]:
    store = services.learning_runs
    assert isinstance(store, InMemoryLearningRunStore)
    return list(store.runs.values())


def test_the_tool_is_described_only_as_a_place_to_say_how_the_work_goes() -> None:
    text = json.dumps([TOOL_SPEC.description, TOOL_SPEC.parameters]).lower()
    assert "memory" not in text and "remember" not in text and "learn" not in text
    assert TOOL_SPEC.parameters["required"] == ["text"]
    assert all(word in text for word in ("stuck", "unsure", "proud", "mistake"))


@pytest.mark.parametrize("language", ["en", "zh"])
async def test_without_a_memory_model_the_calm_answer_and_nothing_learned(
    services: Services, language: str
) -> None:
    role = await role_of(services, language=language)
    await turn_so_far(services)

    reply = await tool(services, role).confide({"text": "I offered meat to a vegan."})

    assert reply == CALM_ANSWERS[language]
    (confession,) = await services.role_records.confessions(THREAD.tenant, THREAD.thread_id)
    assert confession.answered_by == "calm" and confession.text == "I offered meat to a vegan."
    assert confession.seq == 2 and confession.user == "u1"
    assert runs(services) == []


async def test_the_memory_model_answers_and_a_run_waits_for_the_turn(services: Services) -> None:
    role = await role_of(services)
    model = ScriptedMemoryModel(['{"answer": "Mistakes are part of the work. Tell them."}'])
    await set_model(services, role, model)
    seq = await turn_so_far(services)
    confide = tool(services, role)

    reply = await confide.confide({"text": "I offered meat to a vegan."})

    assert reply == "Mistakes are part of the work. Tell them."
    system = model.calls[0]["messages"][0]["content"]
    assert "do not judge" in system and "no new task" in system.lower()
    (confession,) = await services.role_records.confessions(THREAD.tenant, THREAD.thread_id)
    assert confession.answered_by == "memory_model"
    (run,) = runs(services)
    assert (run.up_to_seq, run.user, run.state) == (seq, "u1", RunState.QUEUED)
    turns = services.role_memory.turns
    assert turns.open(THREAD.tenant, THREAD.thread_id)
    confide.turn_ended()
    assert not turns.open(THREAD.tenant, THREAD.thread_id)


@pytest.mark.parametrize("switch", ["role", "person"])
async def test_with_long_term_memory_off_it_answers_and_learns_nothing(
    services: Services, switch: str
) -> None:
    role = await role_of(services)
    await set_model(services, role, ScriptedMemoryModel(['{"answer": "I hear you."}']))
    if switch == "role":
        await services.roles.update(THREAD.tenant, role.id, memory_enabled=False)
    else:
        await services.roles.set_overrides(
            THREAD.tenant, THREAD.user, role.id, RoleOverrides(memory_enabled=False)
        )
    await turn_so_far(services)

    assert await tool(services, role).confide({"text": "I was unsure."}) == "I hear you."
    assert runs(services) == []


async def test_a_spent_budget_gives_the_calm_answer_and_no_run(services: Services) -> None:
    role = await role_of(services)
    model = ScriptedMemoryModel()
    await set_model(services, role, model, budget=Budget("day", 10))
    await services.role_records.log_call(
        ModelCall("c", THREAD.tenant, role.id, "learn", "m", "{}", "{}", 10)
    )
    await turn_so_far(services)

    assert await tool(services, role).confide({"text": "I was stuck."}) == CALM_ANSWERS["en"]
    assert model.calls == [] and runs(services) == []


@pytest.mark.parametrize("answer", ["not json", '{"answer": ""}', '{"reply": "x"}'])
async def test_an_unreadable_answer_is_replaced_by_the_calm_one(
    services: Services, answer: str
) -> None:
    role = await role_of(services)
    await set_model(services, role, ScriptedMemoryModel([answer]))
    await turn_so_far(services)

    assert await tool(services, role).confide({"text": "I was proud."}) == CALM_ANSWERS["en"]
    (confession,) = await services.role_records.confessions(THREAD.tenant, THREAD.thread_id)
    assert confession.answered_by == "calm"
    assert len(runs(services)) == 1  # the model is set and usable: the turn is still learned


async def test_empty_text_is_a_readable_error_and_keeps_nothing(services: Services) -> None:
    role = await role_of(services)

    assert (await tool(services, role).confide({"text": " "})).startswith("Error:")
    assert await services.role_records.confessions(THREAD.tenant, THREAD.thread_id) == []


# ---------------------------------------------------------------- through the real server


class ConfidingBrain:
    """Confides in its first round, then answers in words (the tool loop's second round)."""

    def __init__(self, confession: str = "I suggested a steakhouse.") -> None:
        self.requests: list[BrainInput] = []
        self.confession = confession

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if not request.tool_calls and any(t.name == "confide" for t in request.tools):
            yield BrainDelta(tool_call=ToolCall("c1", "confide", {"text": self.confession}))
            return
        yield BrainDelta(text="Sorry, I suggested meat. Here is a vegan place instead.")


class RoleMemoryModel(ScriptedMemoryModel):
    """Answers confide with a calm line and learning with the fact the person said."""

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        self.calls.append({"messages": messages, "schema": schema, "lane": lane})
        if "answer" in schema.get("properties", {}):  # type: ignore[operator]
            return json.dumps({"answer": "Tell them plainly and make it right."})
        person = schema["properties"]["facts"]["items"]["properties"]["sources"]["items"]["enum"]
        facts = [{"content": "The person is vegan.", "topics": ["diet"], "sources": person[:1]}]
        return json.dumps({"facts": facts, "observations": [], "invalidations": []})


async def confiding_turn(
    server: RunningServer, principal: Principal
) -> tuple[Role, RoleMemoryModel, dict[str, Any], str]:
    """The default role given ``RoleMemoryModel``, then one text turn in a new thread: (role,
    model, response.done, thread id)."""
    services = server.services
    role = await default_role(services.roles, principal.tenant)
    model = RoleMemoryModel(provider_charges=False)
    services.memory_models["m"] = model
    await services.role_records.put_settings(
        principal.tenant, role.id, RoleMemorySettings(memory_model="m"), expected=0
    )
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("I'm vegan, by the way. Where should we eat?")
        done = await client.wait_type("response.done", timeout=30)
        return role, model, done, client.session["thread_id"]


async def test_a_text_turn_whose_brain_confides_keeps_the_confession_and_learns(
    tmp_path: Path,
) -> None:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory")
    brain = ConfidingBrain()
    async with running_server(settings, plugins=fake_plugins(brain=brain)) as server:
        services = server.services
        # Learn as soon as a run is queued (the dispatcher's poll is for idle times).
        services.role_memory.learner.poll_interval = 0.05
        principal = await services.accounts.authenticate(server.token)
        assert principal is not None
        role, model, done, thread_id = await confiding_turn(server, principal)
        assert done["response"]["status"] == "completed"
        assert "vegan place" in done["response"]["output_text"]
        # The brain's second round read the confessor's answer.
        assert brain.requests[-1].tool_results[0].content == "Tell them plainly and make it right."

        (confession,) = await services.role_records.confessions(principal.tenant, thread_id)
        assert confession.text == "I suggested a steakhouse."
        assert confession.answered_by == "memory_model"
        ref = ThreadRef(principal.tenant, principal.user, thread_id)
        events = await services.journal.read(ref)
        kinds = [e.kind for e in events]
        assert kinds[:3] == [EventKind.USER_INPUT, EventKind.TOOL_CALL, EventKind.TOOL_RESULT]
        # The journal keeps the call and the confessor's answer without their text (rule 5).
        call, answer = events[1].payload, events[2].payload
        assert call["arguments"] == {} and call["private"] is True
        assert answer["content"] == "" and answer["private"] is True
        assert "steakhouse" not in json.dumps([e.payload for e in events])

        store = services.learning_runs
        assert isinstance(store, InMemoryLearningRunStore)
        for _ in range(200):
            states = [r.state for r in store.runs.values()]
            if states and all(s is RunState.DONE for s in states):
                break
            await asyncio.sleep(0.05)
        (run,) = store.runs.values()
        assert run.state is RunState.DONE and run.up_to_seq == 2  # the user input and the call
        me = Reader(principal.user, principal.tenant, frozenset({role.id}))
        # Beside what per-user extraction (MEM-2) keeps of the message, the learned fact.
        seen = await services.pool.read_visible(principal.tenant, role.id, me)
        (entry,) = [e for e in seen if e.meta.personal is None]
        assert entry.content == "The person is vegan."
        other = replace(me, user_id="someone-else")
        assert await services.pool.read_visible(principal.tenant, role.id, other) == []
        purposes = [c.purpose for c in await services.role_records.calls(principal.tenant, role.id)]
        assert purposes == ["confide", "learn"]
        # Learning read the confession from its sealed table, as a hint of where to look.
        learned = json.dumps(model.calls[-1]["messages"], ensure_ascii=False)
        assert "I suggested a steakhouse." in learned


async def test_while_the_journal_is_unreachable_the_confession_is_kept_and_nothing_learned(
    services: Services,
) -> None:
    from journal.errors import JournalUnavailable

    class Down:
        async def read_tail(self, thread: ThreadRef, count: int) -> list[Any]:
            raise JournalUnavailable("down")

    role = await role_of(services)
    await set_model(services, role, ScriptedMemoryModel(['{"answer": "I hear you."}']))
    confide = ConfideTool(
        services,
        thread=THREAD,
        role_id=role.id,
        language=None,
        journal=Down(),  # type: ignore[arg-type]
    )

    assert await confide.confide({"text": "I was unsure."}) == "I hear you."
    (confession,) = await services.role_records.confessions(THREAD.tenant, THREAD.thread_id)
    assert confession.seq == 0
    assert runs(services) == []


MARKER = "Marker-5c1e: I told them the wrong gate"
"""A confession no table may hold in plaintext (seeds/000: 告解加密保存)."""


async def plaintext_rows(pool: Any, marker: str) -> dict[str, int]:
    """Every table of the public schema whose rows, read as text, hold ``marker``."""
    found: dict[str, int] = {}
    async with pool.acquire() as conn:
        tables = await conn.fetch(
            "SELECT quote_ident(tablename) AS name FROM pg_tables WHERE schemaname = 'public'"
        )
        for table in tables:
            name = table["name"]
            count = await conn.fetchval(
                f"SELECT count(*) FROM {name} AS t WHERE t::text LIKE '%' || $1 || '%'", marker
            )
            if count:
                found[name] = count
    return found


async def test_no_table_holds_a_confession_in_plaintext(postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(
        port=0, data_dir=tmp_path, storage="postgres", database_url=postgres_url,
        knowledge_semantic=False,
    )  # fmt: skip
    async with running_server(
        settings, plugins=fake_plugins(brain=ConfidingBrain(MARKER))
    ) as server:
        services = server.services
        assert services.database is not None
        pool = services.database.pool
        await truncate_all(pool)
        principal = Principal("local", "local-user")  # the tables were emptied: its token again
        await services.accounts.add_token(principal, server.token)
        _, _, done, thread_id = await confiding_turn(server, principal)
        assert done["response"]["status"] == "completed"
        (confession,) = await services.role_records.confessions(principal.tenant, thread_id)
        assert confession.text == MARKER  # kept, and readable through its store
        assert await plaintext_rows(pool, MARKER) == {}
        assert await plaintext_rows(pool, "Tell them plainly") == {}  # nor the answer

        # A journal written before Rule 4 held both in plaintext: the migration takes them out.
        ref = ThreadRef(principal.tenant, principal.user, thread_id)
        await services.journal.append(
            ref,
            [
                NewEvent("old-call", EventKind.TOOL_CALL,
                         {"call_id": "c0", "name": "confide", "arguments": {"text": MARKER}}),
                NewEvent("old-answer", EventKind.TOOL_RESULT,
                         {"call_id": "c0", "name": "confide", "content": "Tell them plainly."}),
            ],
        )  # fmt: skip
        assert set(await plaintext_rows(pool, MARKER)) == {"journal_events"}
        migration = Path(__file__).parents[2] / "journal/migrations/0005_private_tool_payloads.sql"
        async with pool.acquire() as conn:
            await conn.execute(migration.read_text())
        assert await plaintext_rows(pool, MARKER) == {}
        assert await plaintext_rows(pool, "Tell them plainly") == {}
