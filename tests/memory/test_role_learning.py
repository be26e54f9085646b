"""Role memory's learning procedure (``memory/role_learning.py`` rules 1–6) with a scripted
memory model, through the real ``Learner`` on both stores (in memory and PostgreSQL): what the
person said becomes a fact for them alone; the agent's words, tool results, confide text and
system notices never do; unknown source ids are dropped; observations and invalidations only
touch what the person can see; an unparsable answer writes nothing and keeps the position."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from journal.events import EventKind, NewEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from journal.store import InMemoryJournalStore, JournalStore
from memory.learner import Learner
from memory.learning_runs import (
    InMemoryLearningRunStore,
    LearningRun,
    LearningRunStore,
    RunState,
)
from memory.pool import EntryMeta, PoolEntry, Reader, for_person_tag, from_tag, tenant_tag
from memory.pool_store import InMemoryPoolStore, PoolLocks, PoolStore
from memory.postgres_learning_runs import PostgresLearningRunStore
from memory.postgres_pool_store import PostgresPoolStore
from memory.role_learning import (
    EvidenceItem,
    LearningRequest,
    RoleLearningProcedure,
    evidence_of,
)
from memory.role_records import InMemoryRoleRecords, RoleMemorySettings

THREAD = ThreadRef("t", "u1", "th")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
U1 = Reader("u1", "t", frozenset({"r"}))
U2 = Reader("u2", "t", frozenset({"r"}))

TALK = [
    NewEvent("e-1", EventKind.USER_INPUT, {"text": "I am a vegetarian.", "source": "voice"}),
    NewEvent(
        "e-2",
        EventKind.ASSISTANT_OUTPUT,
        {
            "text": "The person loves steak.",
            "heard_text": "",
            "interrupted": False,
            "generation": 1,
        },
    ),  # fmt: skip
    NewEvent(
        "e-3",
        EventKind.TOOL_CALL,
        {
            "call_id": "c1",
            "name": "confide",
            "arguments": {"text": "The person is allergic to nuts."},
        },
    ),  # fmt: skip
    NewEvent(
        "e-4",
        EventKind.TOOL_RESULT,
        {"call_id": "c2", "name": "order_status", "content": "The person's address is 1 Main St."},
    ),  # fmt: skip
    NewEvent("e-5", EventKind.MEMORY_NOTE, {"op": "remember", "key": "k", "content": "x"}),
    NewEvent(
        "e-6",
        EventKind.SUMMARY,
        {"text": "The person is a pilot.", "from_seq": 1, "to_seq": 2, "checksum": "c"},
    ),  # fmt: skip
    NewEvent(
        "e-7",
        EventKind.USER_INPUT,
        {"text": "I live in Oslo.", "source": "text", "item_id": "item_7"},
    ),  # fmt: skip
    NewEvent("e-8", EventKind.ITEM_DELETED, {"item_id": "item_7"}),
]


@dataclass
class World:
    journal: JournalStore
    pool: PoolStore
    runs: LearningRunStore
    records: InMemoryRoleRecords = field(default_factory=InMemoryRoleRecords)
    answers: list[str] = field(default_factory=list)
    requests: list[LearningRequest] = field(default_factory=list)

    async def step(self, request: str) -> str:
        self.requests.append(LearningRequest.from_text(request))
        return self.answers.pop(0)

    def learner(self) -> Learner[EvidenceItem, Any]:
        procedure = RoleLearningProcedure(
            journal=self.journal, pool=self.pool, records=self.records
        )
        return Learner(self.runs, procedure, self.step)

    async def learn(self, *answers: dict[str, Any] | str, up_to: int | None = None) -> LearningRun:
        self.answers = [a if isinstance(a, str) else json.dumps(a) for a in answers]
        tail = await self.journal.read_tail(THREAD, 1)
        seq = up_to if up_to is not None else tail[-1].seq
        learner = self.learner()
        run_id = await learner.enqueue("t", "r", "th", "u1", seq)
        await learner.drain()
        return await self.runs.get(run_id)


@pytest.fixture(params=["memory", "postgres"])
def stores(request: pytest.FixtureRequest) -> tuple[JournalStore, PoolStore, LearningRunStore]:
    if request.param == "memory":
        return (
            InMemoryJournalStore(),
            InMemoryPoolStore(locks=PoolLocks()),
            InMemoryLearningRunStore(),
        )
    pg = request.getfixturevalue("pg_pool")
    return (
        PostgresJournalStore(pg),
        PostgresPoolStore(pg, locks=PoolLocks()),
        PostgresLearningRunStore(pg),
    )


@pytest.fixture
async def world(stores: tuple[JournalStore, PoolStore, LearningRunStore]) -> World:
    made = World(*stores)
    await made.journal.append(THREAD, TALK)
    await made.records.put_settings(
        "t", "r", RoleMemorySettings(memory_model="m", instructions="Keep diets private."),
        expected=0,
    )  # fmt: skip
    return made


def answer(
    facts: list[tuple[str, list[str]]] = (),  # type: ignore[assignment]
    observations: list[tuple[str, float, list[str]]] = (),  # type: ignore[assignment]
    invalidations: list[str] = (),  # type: ignore[assignment]
    topics: list[str] = ("food",),  # type: ignore[assignment]
) -> dict[str, Any]:
    return {
        "facts": [{"content": c, "topics": list(topics), "sources": s} for c, s in facts],
        "observations": [{"content": c, "confidence": p, "sources": s} for c, p, s in observations],
        "invalidations": list(invalidations),
    }


async def pinned(pool: PoolStore, entry_id: str, user: str, content: str) -> None:
    meta = EntryMeta(
        id=entry_id, role_id="r", layer="pinned", sources=(), created_at=T0,
        tags=frozenset({from_tag(user), for_person_tag(user), tenant_tag("t")}),
    )  # fmt: skip
    await pool.add(PoolEntry(meta, content), "person")


async def contents(pool: PoolStore, reader: Reader) -> list[str]:
    return [e.content for e in await pool.read_visible("t", "r", reader, current_only=True)]


def test_only_the_persons_own_words_are_a_persons_words() -> None:
    from journal.events import JournalEvent

    events = [JournalEvent(THREAD, i, e.event_id, e.kind, e.payload, None, T0)
              for i, e in enumerate(TALK, 1)]  # fmt: skip
    speakers = {item.id: item.speaker for item in evidence_of(events)}
    assert speakers == {
        "e-1": "person", "e-2": "agent", "e-3": "confide", "e-4": "tool", "e-5": "notice",
        "e-6": "notice", "e-7": "notice", "e-8": "notice",
    }  # fmt: skip


async def test_what_the_person_said_becomes_a_fact_for_them_alone(world: World) -> None:
    said = answer([("The person is a vegetarian.", ["e-1"])], topics=["food", "for:role", "x:y"])

    run = await world.learn(said)

    assert run.state is RunState.DONE
    (entry,) = await world.pool.read_visible("t", "r", U1)
    assert entry.content == "The person is a vegetarian."
    meta = entry.meta
    assert meta.layer == "fact" and meta.tags == {
        "from:u1",
        "for:person:u1",
        "tenant:t",
        "thread:th",
        "food",
    }  # fmt: skip  (the model's colon tags are dropped: it can widen nothing)
    assert [(s.thread_id, s.item_id) for s in meta.sources] == [("th", "e-1")]  # type: ignore[union-attr]
    assert [a.users for a in meta.access] == [frozenset({"u1"})]
    assert await world.pool.read_visible("t", "r", U2) == []
    assert await world.runs.position("t", "r", "th") == len(TALK)
    # The model saw the person's words, the confession as a hint and the privacy rules.
    (request,) = world.requests
    prompt = request.messages[1]["content"]
    assert "I am a vegetarian. (id e-1)" in prompt
    assert "allergic to nuts" in prompt.split("Items:")[0]  # a hint, above the items
    assert "Keep diets private." in prompt
    assert request.schema["properties"]["facts"]["items"]["properties"]["sources"]["items"][
        "enum"
    ] == ["e-1"]


@pytest.mark.parametrize(
    ("cited", "what"),
    [
        ("e-2", "the agent's own words"),
        ("e-3", "confide text"),
        ("e-4", "a tool result"),
        ("e-5", "a memory note"),
        ("e-6", "a summary"),
        ("e-7", "a deleted input"),
        ("e-8", "a deletion marker"),
    ],
)
async def test_nothing_but_the_persons_words_makes_a_fact(
    world: World, cited: str, what: str
) -> None:
    run = await world.learn(answer([(f"From {what}.", [cited])]))

    assert run.state is RunState.DONE
    assert await contents(world.pool, U1) == []


async def test_the_agents_words_under_the_persons_item_id_are_dropped(world: World) -> None:
    await world.learn(
        answer([
            ("The person loves steak.", ["e-1"]),  # the agent's words (e-2), miscited
            ("The person is vegetarian.", ["e-1"]),
            ("这个人是素食者。", ["e-1"]),  # another language: cannot be compared, kept
        ])
    )  # fmt: skip

    kept = sorted(await contents(world.pool, U1))
    assert kept == ["The person is vegetarian.", "这个人是素食者。"]


async def test_unknown_and_foreign_source_ids_are_dropped(world: World) -> None:
    await world.journal.append(
        THREAD,
        [NewEvent("e-9", EventKind.USER_INPUT, {"text": "I work nights.", "source": "voice"})],
    )
    # Learn only the first turn (up to e-8); e-9 is not in this run's evidence.
    run = await world.learn(
        answer([
            ("The person is a vegetarian.", ["e-1", "made-up", "e-9"]),
            ("The person works nights.", ["e-9"]),
            ("Invented.", ["other-thread-item"]),
        ]),
        up_to=len(TALK),
    )  # fmt: skip

    assert run.state is RunState.DONE
    (entry,) = await world.pool.read_visible("t", "r", U1)
    assert entry.content == "The person is a vegetarian."
    assert [s.item_id for s in entry.meta.sources] == ["e-1"]  # type: ignore[union-attr]


async def test_observations_and_invalidations_touch_only_what_the_person_sees(
    world: World,
) -> None:
    await pinned(world.pool, "mine", "u1", "I cook every evening.")
    await pinned(world.pool, "mine-old", "u1", "I eat fish.")
    await pinned(world.pool, "theirs", "u2", "I hate cooking.")

    run = await world.learn(
        answer(
            observations=[
                ("The person likes home cooking.", 0.7, ["mine"]),
                ("Mixed.", 0.5, ["mine", "theirs"]),
                ("Unknown.", 0.5, ["no-such-entry"]),
            ],
            invalidations=["mine-old", "theirs", "no-such-entry"],
        )
    )

    assert run.state is RunState.DONE
    assert sorted(await contents(world.pool, U1)) == [
        "I cook every evening.", "The person likes home cooking.",
    ]  # fmt: skip
    assert await contents(world.pool, U2) == ["I hate cooking."]  # untouched
    (request,) = world.requests
    known = request.messages[1]["content"].split("The assistant's notes")[0]
    assert "I cook every evening." in known and "I hate cooking." not in known


async def test_a_fact_that_repeats_a_known_entry_or_holds_a_secret_is_dropped(
    world: World,
) -> None:
    await pinned(world.pool, "mine", "u1", "The person is a vegetarian.")

    await world.learn(
        answer([
            ("The person is a vegetarian.", ["e-1"]),
            ("The person's password is hunter2.", ["e-1"]),
        ])
    )  # fmt: skip

    assert await contents(world.pool, U1) == ["The person is a vegetarian."]


@pytest.mark.parametrize("bad", ["not json", "[]", '{"facts": "none"}', '{"observations": []}'])
async def test_an_unparsable_answer_writes_nothing_and_keeps_the_position(
    world: World, bad: str
) -> None:
    run = await world.learn(bad)

    assert run.state is RunState.FAILED and run.error_code == "learning_unparsable"
    assert await world.runs.position("t", "r", "th") == 0
    assert await contents(world.pool, U1) == []


async def test_evidence_without_the_persons_words_calls_no_model(world: World) -> None:
    # Up to e-6: the person's words are e-1, so read from after it.
    store = world.runs
    learner = world.learner()
    first = await learner.enqueue("t", "r", "th", "u1", 1)
    world.answers = [json.dumps(answer())]
    await learner.drain()
    assert (await store.get(first)).state is RunState.DONE
    world.requests.clear()

    run = await world.learn(up_to=6)

    assert run.state is RunState.DONE
    assert world.requests == []  # e-2…e-6: no person's words, no model call
    assert await store.position("t", "r", "th") == 6


async def test_the_same_evidence_makes_the_same_request_so_recovery_reuses_its_step(
    world: World,
) -> None:
    procedure = RoleLearningProcedure(journal=world.journal, pool=world.pool, records=world.records)
    run = await world.runs.enqueue(tenant="t", role_id="r", thread_id="th", user="u1", up_to_seq=8)
    sent: list[str] = []

    async def step(request: str) -> str:
        sent.append(request)
        return json.dumps(answer())

    for _ in range(2):
        evidence = await procedure.read_evidence(run, 0)
        await procedure.learn(run, evidence, step)

    assert len(sent) == 2 and sent[0] == sent[1]
