"""The ``RoleRecords`` contract (``memory/role_records.py``) on both stores (``role_records``: in
memory and PostgreSQL), and what only PostgreSQL can show: no plaintext in any column, sealed
texts bound to their row, key rotation, an unreachable database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from memory.crypto import Keyring
from memory.errors import InvalidMemory, MemoryUnavailable, SealBroken, StaleRevision
from memory.postgres_role_records import TABLES, PostgresRoleRecords
from memory.role_records import (
    Budget,
    Confession,
    Enrichment,
    ModelCall,
    RoleMemorySettings,
    RoleRecords,
    new_record_id,
)

T = "t1"
ROLE = "role_a"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def confession(
    n: int, *, thread: str = "th1", tenant: str = T, role: str = ROLE, user: str = "alice"
) -> Confession:
    return Confession(
        id=new_record_id("conf"), tenant=tenant, role_id=role, thread_id=thread, user=user,
        seq=n, text=f"I am stuck on step {n}", answer=f"calm answer {n}",
        answered_by="memory_model" if n % 2 else "calm", at=NOW + timedelta(seconds=n),
    )  # fmt: skip


def enrichment(n: int, *, thread: str = "th1", tenant: str = T) -> Enrichment:
    return Enrichment(
        id=new_record_id("enr"), tenant=tenant, role_id=ROLE, thread_id=thread, seq=n,
        text=f"rewritten input {n}", original=f"what the person said {n}",
        entry_ids=(f"mem_{n}", f"mem_{n + 1}"), at=NOW + timedelta(seconds=n),
    )  # fmt: skip


def call(cost: int | None, *, at: datetime = NOW, role: str = ROLE, tenant: str = T) -> ModelCall:
    return ModelCall(
        id=new_record_id("call"), tenant=tenant, role_id=role, purpose="learn", model="brain",
        request='{"messages": "the request"}', response='{"answer": "the response"}',
        cost_micros=cost, thread_id="th1", at=at,
    )  # fmt: skip


async def test_settings_start_as_the_defaults_and_are_compare_and_set(
    role_records: RoleRecords,
) -> None:
    assert await role_records.settings(T, ROLE) == RoleMemorySettings()
    wanted = RoleMemorySettings(
        memory_model="brain", instructions="Decisions may be shared with the team.",
        concurrency=2, budget=Budget("month", 5_000_000),
    )  # fmt: skip
    with pytest.raises(StaleRevision) as stale:  # no settings yet: only expected=0 writes
        await role_records.put_settings(T, ROLE, wanted, expected=3)
    assert stale.value.current_revision == 0
    assert await role_records.settings(T, ROLE) == RoleMemorySettings()

    first = await role_records.put_settings(T, ROLE, wanted, expected=0)
    assert first.revision == 1
    assert await role_records.settings(T, ROLE) == first
    with pytest.raises(StaleRevision) as stale:
        await role_records.put_settings(T, ROLE, RoleMemorySettings(), expected=0)
    assert stale.value.current_revision == 1

    cleared = await role_records.put_settings(T, ROLE, RoleMemorySettings(), expected=1)
    assert cleared == RoleMemorySettings(revision=2)
    assert await role_records.settings(T, ROLE) == cleared
    # Scoped by tenant and role.
    assert await role_records.settings("t2", ROLE) == RoleMemorySettings()
    assert await role_records.settings(T, "role_b") == RoleMemorySettings()


def test_settings_values_are_bounded() -> None:
    with pytest.raises(InvalidMemory):
        Budget("week", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidMemory):
        RoleMemorySettings(concurrency=0)
    with pytest.raises(InvalidMemory):
        RoleMemorySettings(instructions="x" * 4_001)


async def test_confessions_are_listed_per_thread_oldest_first_and_bounded(
    role_records: RoleRecords,
) -> None:
    written = [confession(n) for n in range(1, 6)]
    for c in written:
        await role_records.add_confession(c)
    await role_records.add_confession(confession(9, thread="th2"))
    await role_records.add_confession(confession(9, tenant="t2"))
    assert await role_records.confessions(T, "th1") == written
    assert await role_records.confessions(T, "th1", limit=2) == written[-2:]
    assert await role_records.confessions(T, "th1", limit=0) == []
    assert [c.seq for c in await role_records.confessions(T, "th2")] == [9]
    assert [c.tenant for c in await role_records.confessions("t2", "th1")] == ["t2"]
    assert await role_records.confessions(T, "th-unknown") == []


async def test_enrichments_keep_text_original_and_entry_ids(role_records: RoleRecords) -> None:
    written = [enrichment(n) for n in (1, 2, 3)]
    for e in written:
        await role_records.add_enrichment(e)
    await role_records.add_enrichment(enrichment(4, thread="th2"))
    await role_records.add_enrichment(enrichment(5, tenant="t2"))
    got = await role_records.enrichments(T, "th1")
    assert got == written
    assert got[0].entry_ids == ("mem_1", "mem_2")
    assert await role_records.enrichments(T, "th1", limit=1) == written[-1:]
    assert [e.seq for e in await role_records.enrichments("t2", "th1")] == [5]


async def test_the_call_log_and_spending_charge_only_confirmed_cost(
    role_records: RoleRecords,
) -> None:
    budget = Budget("day", 1_000)
    start = budget.period_start(NOW)
    yesterday = call(700, at=start - timedelta(seconds=1))
    today = [call(120, at=start), call(None, at=NOW), call(30, at=NOW + timedelta(hours=1))]
    for c in [yesterday, *today]:
        await role_records.log_call(c)
    await role_records.log_call(call(5_000, role="role_b"))
    await role_records.log_call(call(5_000, tenant="t2"))
    assert await role_records.spent_micros(T, ROLE, since=start) == 150
    assert await role_records.spent_micros(T, ROLE, since=start - timedelta(days=1)) == 850
    assert await role_records.spent_micros(T, "role_none", since=start) == 0
    logged = await role_records.calls(T, ROLE)
    assert logged == [yesterday, *today]
    assert logged[2].cost_micros is None  # unknown usage is kept as unknown
    assert await role_records.calls(T, ROLE, limit=2) == today[-2:]


async def test_forget_role_removes_every_record_of_that_role_only(
    role_records: RoleRecords,
) -> None:
    await role_records.put_settings(T, ROLE, RoleMemorySettings(memory_model="brain"), expected=0)
    await role_records.put_settings("t2", ROLE, RoleMemorySettings(), expected=0)
    await role_records.add_confession(confession(1))
    await role_records.add_confession(confession(2, role="role_b"))
    await role_records.add_confession(confession(3, tenant="t2"))
    await role_records.add_enrichment(enrichment(1))
    await role_records.log_call(call(10))
    await role_records.log_call(call(10, role="role_b"))
    assert await role_records.forget_role(T, ROLE) == 4  # settings, confession, enrichment, call
    assert await role_records.settings(T, ROLE) == RoleMemorySettings()
    assert [c.role_id for c in await role_records.confessions(T, "th1")] == ["role_b"]
    assert await role_records.enrichments(T, "th1") == []
    assert await role_records.calls(T, ROLE) == []
    assert len(await role_records.calls(T, "role_b")) == 1
    assert (await role_records.settings("t2", ROLE)).revision == 1
    assert len(await role_records.confessions("t2", "th1")) == 1
    assert await role_records.forget_role(T, ROLE) == 0


# ---------------------------------------------------------------------------- PostgreSQL only

SECRETS = (
    "Alice's salary is 4200 euros",
    "never tell Bob about the merger",
    "the merger talk",
    "Keep health topics private",
)


async def _write_everything(records: PostgresRoleRecords) -> None:
    await records.put_settings(
        T, ROLE, RoleMemorySettings(memory_model="brain", instructions=SECRETS[3]), expected=0
    )
    base = confession(1)
    await records.add_confession(
        Confession(**{**_fields(base), "text": SECRETS[0], "answer": SECRETS[1]})
    )
    base_e = enrichment(1)
    await records.add_enrichment(
        Enrichment(**{**_fields(base_e), "text": SECRETS[2], "original": SECRETS[0]})
    )
    base_c = call(10)
    await records.log_call(
        ModelCall(**{**_fields(base_c), "request": SECRETS[1], "response": SECRETS[2]})
    )


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


async def test_no_plaintext_reaches_any_column(pg_pool: Any) -> None:
    records = PostgresRoleRecords(pg_pool)
    await _write_everything(records)
    assert (await records.settings(T, ROLE)).instructions == SECRETS[3]
    (c,) = await records.confessions(T, "th1")
    assert (c.text, c.answer) == SECRETS[:2]
    for table in TABLES:
        columns = await pg_pool.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $1",
            table.name,
        )
        rows = await pg_pool.fetch(f"SELECT * FROM {table.name}")
        assert rows, table.name
        for row in rows:
            for column in (c["column_name"] for c in columns):
                value = row[column]
                raw = value if isinstance(value, bytes) else str(value).encode()
                for secret in SECRETS:
                    for word in (secret, *(w for w in secret.split() if len(w) >= 6)):
                        assert word.encode() not in raw, (table.name, column)
                        assert word.encode().hex().encode() not in raw, (table.name, column)


async def test_a_sealed_text_opens_only_in_its_own_row(pg_pool: Any) -> None:
    records = PostgresRoleRecords(pg_pool)
    await records.add_confession(confession(1))
    await records.add_confession(confession(2))
    await pg_pool.execute(
        "UPDATE role_memory_confessions SET text_sealed = (SELECT text_sealed FROM"
        " role_memory_confessions WHERE turn_seq = 1) WHERE turn_seq = 2"
    )
    with pytest.raises(SealBroken):
        await records.confessions(T, "th1")
    # A row moved to another thread (or user) does not open there either.
    await pg_pool.execute("DELETE FROM role_memory_confessions WHERE turn_seq = 2")
    await pg_pool.execute("UPDATE role_memory_confessions SET thread_id = 'th2'")
    with pytest.raises(SealBroken):
        await records.confessions(T, "th2")


async def test_rotate_moves_every_row_to_the_active_key(pg_pool: Any) -> None:
    old = Keyring.generate("old")
    await _write_everything(PostgresRoleRecords(pg_pool, keyring=old))
    assert await PostgresRoleRecords(pg_pool, keyring=old).key_ids_in_use() == {"old": 4}
    rotated = PostgresRoleRecords(pg_pool, keyring=old.with_new_active_key("new"))
    assert await rotated.rotate(batch=1) == 4
    assert await rotated.key_ids_in_use() == {"new": 4}
    assert await rotated.rotate() == 0
    only_new = PostgresRoleRecords(pg_pool, keyring=rotated.keyring.without({"old"}))
    assert (await only_new.settings(T, ROLE)).instructions == SECRETS[3]
    ((request, response),) = [(c.request, c.response) for c in await only_new.calls(T, ROLE)]
    assert (request, response) == (SECRETS[1], SECRETS[2])
    (e,) = await only_new.enrichments(T, "th1")
    assert (e.text, e.original) == (SECRETS[2], SECRETS[0])


async def test_an_unreachable_database_is_memory_unavailable(postgres_url: str) -> None:
    pool = await asyncpg.create_pool(postgres_url, min_size=0, max_size=1)
    await pool.close()
    records = PostgresRoleRecords(pool)
    with pytest.raises(MemoryUnavailable):
        await records.settings(T, ROLE)
    with pytest.raises(MemoryUnavailable):
        await records.add_confession(confession(1))
