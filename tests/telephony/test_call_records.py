"""Phone calls in the records (SPEC TEL-5, ``runtime/telephony/call_records.py``): the store
contract on memory and PostgreSQL (numbers sealed at rest), and ``/api/calls`` after real calls
— SIP and Twilio — on the running server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memory.crypto import Keyring, SealBroken
from runtime.telephony.call_records import (
    CallRecord,
    CallRecordStore,
    InMemoryCallRecords,
    PostgresCallRecords,
)
from tests.postgres import pg_pool, postgres_url
from tests.telephony.test_sip_calls import phone, question, sip_server_running, speech_ms
from tests.telephony.test_twilio_calls import RATE, tone, twilio_call
from tests.waiting import until

__all__ = ["pg_pool", "postgres_url"]

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def record(call_id: str, *, user: str = "ana", tenant: str = "t1", minute: int = 0) -> CallRecord:
    return CallRecord(
        tenant, user, call_id, "sip", "+15550001111", "+15550002222", "role_1", "th_1",
        T0 + timedelta(minutes=minute),
    )  # fmt: skip


@pytest.fixture(params=["memory", "postgres"])
def calls(request: pytest.FixtureRequest) -> CallRecordStore:
    if request.param == "memory":
        return InMemoryCallRecords()
    return PostgresCallRecords(request.getfixturevalue("pg_pool"), keyring=Keyring.generate())


async def test_records_are_kept_updated_and_listed_per_user_and_tenant(
    calls: CallRecordStore,
) -> None:
    await calls.save(record("sip:a", minute=0))
    await calls.save(record("sip:b", minute=1))
    await calls.save(record("sip:c", user="bo", minute=2))
    await calls.save(record("sip:d", tenant="t2", minute=3))
    ended = _ended(record("sip:a"), T0 + timedelta(seconds=95), "caller", "+15550150")
    await calls.save(ended)  # the end of the call replaces its record
    mine = await calls.list("t1", "ana")
    assert [r.call_id for r in mine] == ["sip:b", "sip:a"]  # newest first
    assert mine[1].ended_by == "caller" and mine[1].duration_s == 95.0
    assert mine[1].transfer_target == "+15550150" and mine[1].caller == "+15550001111"
    assert [r.call_id for r in await calls.list("t1", None)] == ["sip:c", "sip:b", "sip:a"]
    assert await calls.get("t1", ended.id) == ended
    assert await calls.get("t2", ended.id) is None  # scoped by tenant
    assert ended.id.startswith("call_") and "sip" not in ended.id


def _fields(r: CallRecord) -> dict[str, Any]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


def _ended(r: CallRecord, at: datetime, by: str, target: str | None) -> CallRecord:
    return CallRecord(**{**_fields(r), "ended_at": at, "ended_by": by, "transfer_target": target})


async def test_numbers_are_sealed_at_rest_and_open_only_in_their_own_row(pg_pool: Any) -> None:
    calls = PostgresCallRecords(pg_pool, keyring=Keyring.generate())
    await calls.save(_ended(record("sip:a"), T0, "agent", "sip:desk@pbx.example.com"))
    await calls.save(record("sip:b"))
    raw = await pg_pool.fetchrow("SELECT * FROM phone_calls WHERE call_id = 'sip:a'")
    text = repr(dict(raw))
    for plain in ("+15550001111", "15550002222", "desk@pbx"):
        assert plain not in text
    await pg_pool.execute(
        "UPDATE phone_calls SET numbers_sealed = (SELECT numbers_sealed FROM phone_calls"
        " WHERE call_id = 'sip:a') WHERE call_id = 'sip:b'"
    )
    with pytest.raises(SealBroken):
        await calls.list("t1", "ana")


async def test_the_api_lists_sip_and_twilio_calls_with_their_transcripts(tmp_path: Path) -> None:
    async with sip_server_running(tmp_path, "Sure. Here is the answer.") as server:
        async with phone(server) as p:
            await p.call()
            await p.say(question())
            await until(lambda: speech_ms(p) >= len("Sure. Here is the answer.") * 9.5, 20)
            await p.hang_up()
        await until(lambda: len(server.services.live_sessions) == 0)
        call = twilio_call(server)
        await call.webhook()
        await call.connect()
        await call.say(np.concatenate([tone(0.8), np.zeros(RATE // 2, np.int16)]))
        await until(lambda: call.played.speech_ms() >= 200, 20)
        await call.hang_up()
        await until(lambda: len(server.services.live_sessions) == 0)
        owner = {"Authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(base_url=server.http_url, headers=owner) as http:
            listed = (await http.get("/api/calls")).json()["calls"]
            sip = next(c for c in listed if c["provider"] == "sip")
            detail = (await http.get(f"/api/calls/{sip['id']}")).json()
            missing = await http.get("/api/calls/call_000000000000000000000000")
            tenant = await http.get("/api/calls", params={"scope": "tenant"})
    assert [c["provider"] for c in listed] == ["twilio", "sip"]
    assert sip["caller"] == "+15550001111" and sip["called"] == "+15550002222"
    assert sip["ended_by"] == "caller" and sip["duration_s"] is not None
    assert sip["call_id"] == f"sip:{p.call_id}" and sip["thread_id"]
    assert detail["messages"][0] == {"role": "user", "text": "what is the weather"}
    assert detail["messages"][1]["role"] == "assistant"
    assert missing.status_code == 404 and missing.json()["code"] == "call_not_found"
    assert tenant.status_code == 200 and len(tenant.json()["calls"]) == 2
