"""Durable learning runs (RM-4, RM-6) on both stores: ``memory/learning_runs.py``,
``memory/postgres_learning_runs.py`` and the runner ``memory/learner.py``.

"Two processes" are two store instances on one database (PostgreSQL: two pools; in memory: one
store shared by two learners). The SIGKILL test runs ``tests/memory/learning_worker.py`` twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memory.crypto import Keyring
from memory.errors import SealBroken
from memory.learner import Learner
from memory.learning_runs import (
    InMemoryLearningRunStore,
    LearningRunStore,
    RunState,
    RunStep,
    SealedStepPayloads,
    StepPayloads,
    StepState,
    request_digest,
)
from memory.postgres_learning_runs import PostgresLearningRunStore
from plugins.brain.model_queue import model_run_started
from tests.memory.learning_fakes import APPLIED_TABLE, ScriptedModel, SyntheticProcedure

REPO = Path(__file__).resolve().parents[2]
StoreFactory = Callable[[], Awaitable[LearningRunStore]]


@pytest.fixture
async def second_pool(pg_pool: Any, postgres_url: str) -> AsyncIterator[Any]:
    """Another pool on the test's database (another "process"); makes the apply table."""
    await pg_pool.execute(APPLIED_TABLE)
    pool = await asyncpg.create_pool(postgres_url, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(params=["memory", "postgres"])
def stores(request: pytest.FixtureRequest) -> StoreFactory:
    """Makes store instances on one database (each call: another "process")."""
    if request.param == "memory":
        shared = InMemoryLearningRunStore()

        async def memory_store() -> LearningRunStore:
            return shared

        return memory_store
    pools = [request.getfixturevalue("pg_pool"), request.getfixturevalue("second_pool")]
    made: list[LearningRunStore] = []

    async def postgres_store() -> LearningRunStore:
        made.append(PostgresLearningRunStore(pools[len(made) % 2]))
        return made[-1]

    return postgres_store


def learner(
    store: LearningRunStore, model: ScriptedModel, procedure: SyntheticProcedure, **kw: Any
) -> Learner[int, str]:
    return Learner(store, procedure, model, **kw)


async def test_enqueue_is_idempotent_for_the_same_thread_and_seq(stores: StoreFactory) -> None:
    store = await stores()
    a = await store.enqueue(tenant="t", role_id="r", thread_id="th", user="u", up_to_seq=5)
    again = await store.enqueue(tenant="t", role_id="r", thread_id="th", user="u", up_to_seq=5)
    other = await store.enqueue(tenant="t", role_id="r", thread_id="th2", user="u", up_to_seq=5)
    assert again.id == a.id
    assert other.id != a.id
    assert a.state is RunState.QUEUED and a.attempts == 0


async def test_a_later_seq_supersedes_a_queued_earlier_run(stores: StoreFactory) -> None:
    store = await stores()
    model, procedure = ScriptedModel(), SyntheticProcedure()
    runner = learner(store, model, procedure)
    first = await runner.enqueue("t", "r", "th", "u", 3)
    later = await runner.enqueue("t", "r", "th", "u", 6)
    assert later != first
    assert (await store.get(first)).state is RunState.SUPERSEDED
    # An earlier seq is covered by the queued later run.
    assert await runner.enqueue("t", "r", "th", "u", 4) == later
    await runner.drain()
    assert (await store.get(later)).state is RunState.DONE
    assert sorted(seq for _, seq in procedure.applied) == [1, 2, 3, 4, 5, 6]
    assert await store.position("t", "r", "th") == 6
    assert model.count("extract") == 1
    # Done covers; a done run at the same seq is returned as it is.
    assert await runner.enqueue("t", "r", "th", "u", 6) == later


async def test_runs_per_role_never_exceed_max_concurrency(stores: StoreFactory) -> None:
    store = await stores()
    model, procedure = ScriptedModel(), SyntheticProcedure()
    model.block = lambda request: request.startswith("extract")
    runner = learner(store, model, procedure, max_concurrency=lambda tenant, role: 2)
    ids = [await runner.enqueue("t", "r", f"th{i}", "u", 2) for i in range(5)]
    other_role = await runner.enqueue("t", "r2", "x", "u", 1)
    drain = asyncio.create_task(runner.drain())
    for _ in range(200):
        if model.in_flight >= 3:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert model.in_flight == 3  # two of role r, one of role r2
    assert sum(1 for c in model.calls if c.startswith("extract th")) == 2
    model.release.set()
    await drain
    assert model.max_in_flight == 3
    for run_id in [*ids, other_role]:
        assert (await store.get(run_id)).state is RunState.DONE


async def test_two_learners_never_apply_the_same_evidence_twice(stores: StoreFactory) -> None:
    store_a, store_b = await stores(), await stores()
    model, procedure = ScriptedModel(), SyntheticProcedure()
    model.block = lambda request: len(model.calls) <= 2  # both runs reach the model first
    a = learner(store_a, model, procedure)
    b = learner(store_b, model, procedure)
    await a.enqueue("t", "r", "th", "u", 3)
    run_a = asyncio.create_task(a.drain())
    for _ in range(200):
        if model.calls:
            break
        await asyncio.sleep(0.01)
    await b.enqueue("t", "r", "th", "u", 6)  # the first is running: a second run is queued
    run_b = asyncio.create_task(b.drain())
    for _ in range(200):
        if len(model.calls) >= 2:
            break
        await asyncio.sleep(0.01)
    assert len(model.calls) == 2
    model.release.set()
    await asyncio.gather(run_a, run_b)
    seqs = sorted(seq for _, seq in procedure.applied)
    assert seqs == [1, 2, 3, 4, 5, 6]
    assert await store_a.position("t", "r", "th") == 6
    if isinstance(store_a, PostgresLearningRunStore):
        rows = await store_a.pool.fetch("SELECT seq FROM learning_test_applied ORDER BY seq")
        assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5, 6]


async def test_a_step_timeout_fails_the_run_and_keeps_the_read_position(
    stores: StoreFactory,
) -> None:
    store = await stores()
    model, procedure = ScriptedModel(), SyntheticProcedure()
    model.block = lambda request: request.startswith("consolidate")
    runner = learner(store, model, procedure, step_timeout=0.05)
    run_id = await runner.enqueue("t", "r", "th", "u", 4)
    await runner.drain()
    run = await store.get(run_id)
    assert run.state is RunState.FAILED
    assert run.error_code == "learning_step_timeout"
    assert await store.position("t", "r", "th") == 0
    assert procedure.applied == []
    steps = await store.steps(run_id)
    assert steps[1].state is StepState.DONE and steps[2].state is StepState.FAILED
    # A later request may learn from the same evidence again (a failed run never covers).
    model.block = lambda request: False
    assert await runner.enqueue("t", "r", "th", "u", 4) != run_id
    await runner.drain()
    assert await store.position("t", "r", "th") == 4


async def test_recovery_reuses_stored_steps(stores: StoreFactory) -> None:
    store = await stores()
    model, procedure = ScriptedModel(), SyntheticProcedure()
    runner = learner(store, model, procedure, lease=0.05)
    run_id = await runner.enqueue("t", "r", "th", "u", 3)
    # A process claimed it, stored step 1's response and step 2's attempt, then died.
    # Its lease is long enough that the first recover surely falls inside it, even on a loaded
    # machine (at 0.05 s it once ran out between the claim and the recover).
    crashed = await store.claim(exclude_roles=(), lease=2.0)
    assert crashed is not None and crashed.id == run_id
    first = "extract th [1, 2, 3]"
    sealed = StepPayloads().seal(crashed, 1, "facts of th [1, 2, 3]")
    await store.save_step(
        crashed, RunStep(run_id, 1, request_digest(first), sealed, 1, StepState.DONE)
    )
    second = request_digest("consolidate th facts of th [1, 2, 3]")
    await store.save_step(crashed, RunStep(run_id, 2, second, None, 1, StepState.PENDING))
    assert await runner.recover() == 0  # its lease still holds
    await asyncio.sleep(2.1)
    assert await runner.recover() == 1
    await runner.drain()
    assert model.calls == ["consolidate th facts of th [1, 2, 3]"]
    run = await store.get(run_id)
    assert run.state is RunState.DONE and run.attempts == 2
    assert (await store.steps(run_id))[2].attempts == 2
    assert await store.position("t", "r", "th") == 3
    # The crashed claim is fenced off.
    assert not await store.renew(crashed, lease=1.0)


async def test_a_run_claimed_too_often_ends_failed(stores: StoreFactory) -> None:
    store = await stores()
    runner = learner(store, ScriptedModel(), SyntheticProcedure(), max_run_attempts=1)
    run_id = await runner.enqueue("t", "r", "th", "u", 1)
    assert await store.claim(exclude_roles=(), lease=0.01) is not None
    await asyncio.sleep(0.05)
    assert await runner.recover() == 1
    run = await store.get(run_id)
    assert run.state is RunState.FAILED and run.error_code == "run_attempts_exhausted"


async def test_close_releases_running_runs(stores: StoreFactory) -> None:
    store = await stores()
    model = ScriptedModel()
    model.block = lambda request: True
    runner = learner(store, model, SyntheticProcedure(), poll_interval=0.01)
    await runner.start()
    run_id = await runner.enqueue("t", "r", "th", "u", 1)
    for _ in range(200):
        if model.calls:
            break
        await asyncio.sleep(0.01)
    await runner.close()
    assert (await store.get(run_id)).state is RunState.QUEUED


def _worker(url: str, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.memory.learning_worker", url, mode],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    return await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)


async def test_a_killed_process_s_run_is_finished_by_the_next_once(
    pg_pool: Any, postgres_url: str
) -> None:
    await pg_pool.execute(APPLIED_TABLE)
    await pg_pool.execute(
        "CREATE TABLE IF NOT EXISTS learning_test_model_calls (pid int, request text)"
    )
    first = _worker(postgres_url, "block")
    try:
        assert (await _read_line(first, 30)).strip() == "blocked"
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = _worker(postgres_url, "finish")
    try:
        assert (await _read_line(second, 30)).strip() == "done"
        assert await asyncio.to_thread(second.wait, 10) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    calls = await pg_pool.fetch("SELECT pid, request FROM learning_test_model_calls")
    extracts = [c for c in calls if c["request"].startswith("extract")]
    consolidates = [c for c in calls if c["request"].startswith("consolidate")]
    assert [c["pid"] for c in extracts] == [first.pid]  # not re-sent after the kill
    assert {c["pid"] for c in consolidates} == {first.pid, second.pid}
    applied = await pg_pool.fetch("SELECT seq FROM learning_test_applied ORDER BY seq")
    assert [r["seq"] for r in applied] == [1, 2, 3]
    store = PostgresLearningRunStore(pg_pool)
    assert await store.position("t", "r", "th") == 3
    run = await pg_pool.fetchrow("SELECT state, attempts FROM learning_runs")
    assert run["state"] == "done" and run["attempts"] == 2


async def test_sealed_step_responses_hold_no_plaintext_and_open_only_where_written(
    pg_pool: Any,
) -> None:
    store = PostgresLearningRunStore(pg_pool)
    payloads = SealedStepPayloads(Keyring.generate("k1"))
    model, procedure = ScriptedModel(), SyntheticProcedure()
    runner = Learner(store, procedure, model, payloads=payloads)
    run_id = await runner.enqueue("t", "r", "th_sealed", "u", 3)
    await runner.drain()
    run = await store.get(run_id)
    assert run.state is RunState.DONE
    steps = await store.steps(run_id)
    assert steps and all(s.response is not None for s in steps.values())
    async with pg_pool.acquire() as conn:
        raw = await conn.fetch("SELECT response FROM learning_run_steps WHERE run_id = $1", run_id)
    for row in raw:
        assert b"facts of th_sealed" not in bytes(row["response"])
    first = steps[1].response
    assert first is not None
    assert payloads.open(run, 1, first).startswith("facts of th_sealed")
    with pytest.raises(SealBroken):
        payloads.open(run, 2, first)  # bound to its step
    with pytest.raises(SealBroken):
        payloads.open(run, 1, b"not sealed at all")


class QueuedModel(ScriptedModel):
    """A model whose requests wait for a pause before running (the local model's background
    work): each call waits for ``pause``, says it started, then takes ``run_s`` to answer."""

    def __init__(self, run_s: float) -> None:
        super().__init__()
        self.pause = asyncio.Event()
        self.run_s = run_s

    async def __call__(self, request: str) -> str:
        await self.pause.wait()
        model_run_started()
        await asyncio.sleep(self.run_s)
        return await super().__call__(request)


async def test_a_step_waiting_for_a_pause_is_not_timed_out_by_its_running_bound(
    stores: StoreFactory,
) -> None:
    store = await stores()
    model, procedure = QueuedModel(run_s=0.01), SyntheticProcedure()
    runner = learner(store, model, procedure, step_timeout=0.1, step_wait=60.0)
    run_id = await runner.enqueue("t", "r", "th", "u", 4)
    drain = asyncio.create_task(runner.drain())
    await asyncio.sleep(0.3)  # three step bounds pass while the model is busy with people
    assert not drain.done() and model.calls == []
    model.pause.set()
    await drain
    assert (await store.get(run_id)).state is RunState.DONE
    assert await store.position("t", "r", "th") == 4


async def test_a_step_that_runs_past_its_bound_after_starting_times_out(
    stores: StoreFactory,
) -> None:
    store = await stores()
    model, procedure = QueuedModel(run_s=10.0), SyntheticProcedure()
    model.pause.set()
    runner = learner(store, model, procedure, step_timeout=0.05, step_wait=60.0)
    run_id = await runner.enqueue("t", "r", "th", "u", 4)
    await runner.drain()
    run = await store.get(run_id)
    assert run.state is RunState.FAILED and run.error_code == "learning_step_timeout"
