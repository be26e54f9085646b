"""The runner of durable learning runs (SPEC RM-4, RM-6): claim, step, finish — or fail safely.

Theory of operation
-------------------
``Learner`` drives runs of a ``LearningRunStore`` (``memory/learning_runs.py``) through a
``LearningProcedure``, the part that knows what learning means (reading journal items, the
memory model's prompts, the pool's changes). It keeps these rules:

1. ``enqueue`` saves a run and returns its id (the store's rule 2: idempotent, a later
   ``up_to_seq`` supersedes a queued earlier one); nothing else is passed around but ids.
2. Workers are bounded: at most ``max_workers`` runs at once in this process and at most
   ``max_concurrency(tenant, role)`` per role (``None``: no per-role limit); a claim skips the
   roles that are full.
3. A claimed run's lease is renewed every ``lease / 3`` s; when renewal fails (the run was
   recovered elsewhere) the run is cancelled and writes nothing more.
4. The run reads its read position and the evidence after it, then ``learn`` calls the model
   only through the durable ``step``: step *n* with the same request digest as a stored
   response returns that response without a model call; otherwise the attempt is stored
   first, then the model is called with ``step_timeout`` (default 120 s) of running — a step
   may first wait up to ``step_wait`` for the model to start it (background work waits for a
   pause: the model queue's Rule 8) — then the response is stored. A step stored
   ``max_step_attempts`` times without a response ends the run.
5. ``finish`` applies in one transaction with the read position (store rule 6). When another
   run moved the position first, the evidence is read again from the new position and learned
   again (at most ``max_position_retries`` times); when the position already covers the run, it
   ends without a model call.
6. A step that times out ends the run ``failed`` with ``learning_step_timeout``; a model error
   with ``learning_step_failed``; anything else the procedure raises with ``learning_failed``.
   The read position stays where it was, so a later run can learn from the same evidence.
   Errors are logged by type and code only, never content.
7. ``recover`` (at start and on every idle poll) requeues runs whose lease ran out, so a
   crashed process's runs continue with their stored steps. ``close`` cancels the workers and
   releases their runs back to ``queued``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from memory.errors import MemoryUnavailable
from memory.learning_runs import (
    FinishOutcome,
    LearningRun,
    LearningRunError,
    LearningRunStore,
    LostClaim,
    PositionMoved,
    RunStep,
    StepPayloads,
    StepState,
    request_digest,
)
from plugins.brain.model_queue import bound_runs

logger = logging.getLogger(__name__)

E = TypeVar("E")
R = TypeVar("R")

ModelStep = Callable[[str], Awaitable[str]]
"""One call of the memory model: request text in, response text out."""

DEFAULT_STEP_TIMEOUT = 120.0
"""RM-6: a learning step takes at most 2 minutes."""


class LearningStepTimeout(LearningRunError):
    code = "learning_step_timeout"


class LearningStepFailed(LearningRunError):
    code = "learning_step_failed"


class StepAttemptsExhausted(LearningRunError):
    code = "step_attempts_exhausted"


class LearningProcedure(Protocol[E, R]):
    """What a run learns; ``Learner`` supplies durability, bounds and the transaction."""

    async def read_evidence(self, run: LearningRun, after_seq: int) -> Sequence[E]:
        """The thread's journal items with ``after_seq < seq <= run.up_to_seq``."""
        ...

    async def learn(
        self, run: LearningRun, evidence: Sequence[E], step: Callable[[str], Awaitable[str]]
    ) -> R:
        """Call the model only through ``step``; deterministic requests make recovery reuse."""
        ...

    async def apply(self, tx: Any, run: LearningRun, evidence: Sequence[E], result: R) -> None:
        """Write the memory changes with ``tx``, inside the finishing transaction."""
        ...


class DurableSteps:
    """The ``step`` callable of one learning pass (rule 4); numbers its calls from 1."""

    def __init__(
        self,
        store: LearningRunStore,
        run: LearningRun,
        stored: dict[int, RunStep],
        *,
        model_step: ModelStep,
        payloads: StepPayloads,
        timeout: float,
        max_attempts: int,
        wait: float = 0.0,
    ) -> None:
        self.store = store
        self.run = run
        self.stored = stored
        self.model_step = model_step
        self.payloads = payloads
        self.timeout = timeout
        self.wait = wait
        self.max_attempts = max_attempts
        self.number = 0
        self.model_calls = 0

    async def __call__(self, request: str) -> str:
        self.number += 1
        number = self.number
        digest = request_digest(request)
        before = self.stored.get(number)
        if before is not None and before.request_digest == digest:
            if before.state is StepState.DONE and before.response is not None:
                return self.payloads.open(self.run, number, before.response)
            attempts = before.attempts
        else:
            attempts = 0
        if attempts >= self.max_attempts:
            raise StepAttemptsExhausted(f"step {number}")
        attempts += 1
        await self.store.save_step(
            self.run, RunStep(self.run.id, number, digest, None, attempts, StepState.PENDING)
        )
        self.model_calls += 1
        try:
            async with asyncio.timeout(self.wait + self.timeout) as bound:
                with bound_runs(bound, self.timeout):
                    response = await self.model_step(request)
        except TimeoutError:
            await self._failed(number, digest, attempts)
            raise LearningStepTimeout(f"step {number}") from None
        except Exception as e:
            await self._failed(number, digest, attempts)
            raise LearningStepFailed(f"step {number}: {type(e).__name__}") from e
        sealed = self.payloads.seal(self.run, number, response)
        done = RunStep(self.run.id, number, digest, sealed, attempts, StepState.DONE)
        await self.store.save_step(self.run, done)
        self.stored[number] = done
        return response

    async def _failed(self, number: int, digest: str, attempts: int) -> None:
        await self.store.save_step(
            self.run, RunStep(self.run.id, number, digest, None, attempts, StepState.FAILED)
        )


class Learner(Generic[E, R]):
    """Runs learning runs of ``store`` with ``procedure`` and the memory model ``model_step``.

    Use ``start``/``close`` for the background workers, or ``drain`` to run everything
    claimable now and return (tests, one-shot jobs).
    """

    def __init__(
        self,
        store: LearningRunStore,
        procedure: LearningProcedure[E, R],
        model_step: ModelStep,
        *,
        max_concurrency: Callable[[str, str], int | None] = lambda tenant, role: 2,
        max_workers: int = 8,
        step_timeout: float = DEFAULT_STEP_TIMEOUT,
        step_wait: float = 0.0,
        lease: float = 30.0,
        poll_interval: float = 1.0,
        max_step_attempts: int = 3,
        max_run_attempts: int = 5,
        max_position_retries: int = 3,
        payloads: StepPayloads | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.store = store
        self.procedure = procedure
        self.model_step = model_step
        self.max_concurrency = max_concurrency
        self.max_workers = max_workers
        self.step_timeout = step_timeout
        self.step_wait = step_wait
        self.lease = lease
        self.poll_interval = poll_interval
        self.max_step_attempts = max_step_attempts
        self.max_run_attempts = max_run_attempts
        self.max_position_retries = max_position_retries
        self.payloads = payloads or StepPayloads()
        self.running: dict[tuple[str, str], int] = {}
        self._workers: dict[asyncio.Task[None], LearningRun] = {}
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None

    async def enqueue(
        self, tenant: str, role_id: str, thread_id: str, user: str, up_to_seq: int
    ) -> str:
        run = await self.store.enqueue(
            tenant=tenant, role_id=role_id, thread_id=thread_id, user=user, up_to_seq=up_to_seq
        )
        self._wake.set()
        return run.id

    async def recover(self) -> int:
        count = await self.store.recover(max_attempts=self.max_run_attempts)
        if count:
            logger.info("learning runs recovered: %d", count)
        return count

    def _full_roles(self) -> set[tuple[str, str]]:
        full = set()
        for key, count in self.running.items():
            limit = self.max_concurrency(*key)
            if limit is not None and count >= limit:
                full.add(key)
        return full

    async def _claim_and_spawn(self) -> bool:
        """Start one more worker if a slot and a run are free."""
        if len(self._workers) >= self.max_workers:
            return False
        run = await self.store.claim(exclude_roles=self._full_roles(), lease=self.lease)
        if run is None:
            return False
        self.running[run.role_key] = self.running.get(run.role_key, 0) + 1
        task = asyncio.create_task(self._work(run), name=f"learning-run-{run.id}")
        self._workers[task] = run
        task.add_done_callback(self._worker_done)
        return True

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        run = self._workers.pop(task)
        self.running[run.role_key] -= 1
        if not self.running[run.role_key]:
            del self.running[run.role_key]
        self._wake.set()

    async def drain(self) -> None:
        """Run claimable runs (bounded as always) until none is left or running."""
        while True:
            while await self._claim_and_spawn():
                pass
            if not self._workers:
                # Workers that ended during the last claim left its excluded roles stale: a
                # claim with none running is exact.
                if not await self._claim_and_spawn():
                    return
                continue
            await asyncio.wait(list(self._workers), return_when=asyncio.FIRST_COMPLETED)

    async def start(self) -> None:
        await self.recover()
        self._dispatcher = asyncio.create_task(self._dispatch(), name="learning-dispatcher")

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            try:
                while await self._claim_and_spawn():
                    pass
            except MemoryUnavailable:
                logger.warning("learning runs: store unavailable")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await self._wake.wait()
            if not self._wake.is_set():
                with contextlib.suppress(MemoryUnavailable):
                    await self.recover()

    async def close(self) -> None:
        """Stop claiming, cancel the workers and release their runs."""
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            try:
                await self._dispatcher
            except asyncio.CancelledError:
                pass
            except Exception as e:  # it failed before the cancel reached it: closing goes on
                logger.warning("learning dispatcher failed while closing: %s", type(e).__name__)
            self._dispatcher = None
        held = list(self._workers.items())
        for task, _ in held:
            task.cancel()
        for task, run in held:
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(MemoryUnavailable, LearningRunError):
                await self.store.release(run)

    async def _work(self, run: LearningRun) -> None:
        work = asyncio.current_task()
        assert work is not None

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(self.lease / 3)
                try:
                    held = await self.store.renew(run, lease=self.lease)
                except MemoryUnavailable:
                    continue  # the lease may still hold; the next write is fenced anyway
                if not held:
                    work.cancel()
                    return

        beat = asyncio.create_task(heartbeat(), name=f"learning-lease-{run.id}")
        try:
            await self._run(run)
        except asyncio.CancelledError:
            if beat.done():  # cancelled by a lost lease, not by close()
                logger.warning("learning run %s: claim lost", run.id)
                return
            raise
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _run(self, run: LearningRun) -> None:
        try:
            await self._learn(run)
        except LostClaim:
            logger.warning("learning run %s: claim lost", run.id)
        except MemoryUnavailable:
            logger.warning("learning run %s: store unavailable; the lease will recover it", run.id)
        except LearningRunError as e:
            await self._fail(run, e.code)
        except Exception as e:
            logger.error("learning run %s failed: %s", run.id, type(e).__name__)
            await self._fail(run, "learning_failed")

    async def _fail(self, run: LearningRun, code: str) -> None:
        logger.warning("learning run %s failed: %s", run.id, code)
        with contextlib.suppress(LostClaim, MemoryUnavailable):
            await self.store.fail(run, code)

    async def _learn(self, run: LearningRun) -> FinishOutcome:
        stored = await self.store.steps(run.id)
        for _ in range(self.max_position_retries + 1):
            position = await self.store.position(run.tenant, run.role_id, run.thread_id)
            if position >= run.up_to_seq:
                return await self.store.finish(run, expected_position=position, apply=_nothing)
            evidence = await self.procedure.read_evidence(run, position)
            steps = DurableSteps(
                self.store,
                run,
                stored,
                model_step=self.model_step,
                payloads=self.payloads,
                timeout=self.step_timeout,
                wait=self.step_wait,
                max_attempts=self.max_step_attempts,
            )
            result = await self.procedure.learn(run, evidence, steps)

            async def apply(tx: Any, evidence: Sequence[E] = evidence, result: R = result) -> None:
                await self.procedure.apply(tx, run, evidence, result)

            try:
                return await self.store.finish(run, expected_position=position, apply=apply)
            except PositionMoved:
                stored = await self.store.steps(run.id)
        raise PositionContended(run.id)


class PositionContended(LearningRunError):
    code = "learning_position_contended"


async def _nothing(tx: Any) -> None:
    return None
