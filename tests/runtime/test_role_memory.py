"""RoleMemoryModels (``runtime/role_memory.py`` rules 1–5): the role's model, its budget, its
concurrency gate within the wait bound, the call log and its costs."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from memory.role_records import Budget, InMemoryRoleRecords, ModelCall, RoleMemorySettings
from runtime.role_memory import RoleMemoryModels, confirmed_cost_micros
from tests.runtime.role_memory_fakes import ScriptedMemoryModel
from tests.virtual_time import in_virtual_time

NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
MESSAGES = [{"role": "user", "content": "I was unsure about the dates."}]
SCHEMA: dict[str, object] = {"type": "object"}


async def models_with(
    settings: RoleMemorySettings, **models: ScriptedMemoryModel
) -> tuple[RoleMemoryModels, InMemoryRoleRecords]:
    records = InMemoryRoleRecords()
    await records.put_settings("t", "r", settings, expected=0)
    return RoleMemoryModels(dict(models), records, now=lambda: NOW), records


async def call(models: RoleMemoryModels, *, timeout_s: float = 15.0) -> str | None:
    return await models.call(
        "t", "r", "confide", MESSAGES, SCHEMA, max_tokens=50, timeout_s=timeout_s, thread_id="th"
    )


async def test_no_memory_model_returns_none_at_once_without_a_call() -> None:
    model = ScriptedMemoryModel()
    models, records = await models_with(RoleMemorySettings(), local=model)

    assert await call(models) is None
    assert model.calls == []
    assert await records.calls("t", "r") == []
    assert not await models.available("t", "r")


async def test_a_model_the_server_does_not_know_is_no_model() -> None:
    models, records = await models_with(RoleMemorySettings(memory_model="gone"))

    assert await call(models) is None
    assert await records.calls("t", "r") == []


async def test_a_call_is_logged_with_its_request_and_the_local_models_cost_is_zero() -> None:
    model = ScriptedMemoryModel(['{"answer": "ok"}'], provider_charges=False)
    models, records = await models_with(RoleMemorySettings(memory_model="local"), local=model)

    assert await call(models) == '{"answer": "ok"}'
    (logged,) = await records.calls("t", "r")
    assert logged.purpose == "confide" and logged.model == "local" and logged.thread_id == "th"
    assert json.loads(logged.request) == MESSAGES
    assert logged.response == '{"answer": "ok"}'
    assert logged.cost_micros == 0
    assert model.calls[0]["lane"] == "th"


async def test_a_model_that_reports_no_usage_is_unknown_and_never_charged() -> None:
    model = ScriptedMemoryModel(['{"answer": "ok"}'], provider_charges=True)
    budget = Budget("day", 1)
    models, records = await models_with(
        RoleMemorySettings(memory_model="remote", budget=budget), remote=model
    )

    for _ in range(3):
        assert await call(models) is not None
    assert [c.cost_micros for c in await records.calls("t", "r")] == [None, None, None]
    assert await records.spent_micros("t", "r", since=budget.period_start(NOW)) == 0
    assert confirmed_cost_micros(object()) is None


async def test_a_spent_budget_returns_none_without_a_call() -> None:
    model = ScriptedMemoryModel()
    budget = Budget("month", 1_000)
    models, records = await models_with(
        RoleMemorySettings(memory_model="local", budget=budget), local=model
    )
    spent = ModelCall("c1", "t", "r", "learn", "local", "{}", "{}", 1_000, at=NOW)
    await records.log_call(spent)

    assert not await models.available("t", "r")
    assert await call(models) is None
    assert model.calls == []
    # Spend of an earlier period does not count: a daily budget starts afresh tomorrow.
    daily = RoleMemorySettings(memory_model="local", budget=Budget("day", 1_000))
    await records.put_settings("t", "r", daily, expected=1)
    tomorrow = RoleMemoryModels({"local": model}, records, now=lambda: NOW + timedelta(days=1))
    assert await tomorrow.available("t", "r")


async def test_a_model_error_or_timeout_is_none_and_the_call_is_logged_as_unknown() -> None:
    never = asyncio.Event()
    model = ScriptedMemoryModel([RuntimeError("boom"), never])
    models, records = await models_with(RoleMemorySettings(memory_model="m"), m=model)

    assert await call(models) is None
    assert await call(models, timeout_s=0.05) is None
    logged = await records.calls("t", "r")
    assert [(c.response, c.cost_micros) for c in logged] == [("", None), ("", None)]


@in_virtual_time
async def test_queueing_for_a_busy_role_counts_toward_the_wait_bound() -> None:
    release = asyncio.Event()
    model = ScriptedMemoryModel([release, '{"answer": "late"}'])
    models, records = await models_with(
        RoleMemorySettings(memory_model="m", concurrency=1), m=model
    )
    loop = asyncio.get_running_loop()
    first = asyncio.ensure_future(call(models, timeout_s=120.0))  # holds the one slot
    await asyncio.sleep(0)
    assert models.in_use("t", "r") == 1

    started = loop.time()
    second = await call(models, timeout_s=15.0)  # waits for the slot, never reaches the model

    assert second is None
    assert loop.time() - started == 15.0  # virtual seconds: the whole wait, queueing included
    assert len(model.calls) == 1
    release.set()
    assert await first == '{"answer": "late"}'
    assert models.in_use("t", "r") == 0  # the gate is dropped once nobody uses it
    assert len(await records.calls("t", "r")) == 1


@in_virtual_time
async def test_without_a_limit_calls_run_at_once() -> None:
    release = asyncio.Event()
    model = ScriptedMemoryModel([release, '{"answer": "a"}'])
    models, _ = await models_with(RoleMemorySettings(memory_model="m"), m=model)

    both = asyncio.gather(call(models), call(models))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(model.calls) == 2
    release.set()
    assert await both == ['{"answer": "a"}', '{"answer": "a"}']
