"""Role memory in the running server (SPEC RM-4, RM-6): the memory model's calls and the learner.

Theory of operation
-------------------
``RoleMemoryModels`` is the one way runtime code calls a role's memory model (confide's answer,
input enrichment, learning steps); it implements ``memory.role_records.MemoryModelCalls`` over
``Services.memory_models`` and ``Services.role_records``. Its rules:

1. The role's settings name the model. ``None`` (the default) — or a name the server does not
   know — returns ``None`` at once: no model call, nothing logged.
2. Budget: when the role has one, the confirmed spend since the start of its period
   (``spent_micros`` since ``budget.period_start(now)``) at or past the limit returns ``None``
   without a call ("learning waits" for the next period; confide gets the calm answer).
3. Concurrency: at most ``settings.concurrency`` calls of a role run at once in this process
   (``None``: no limit); the others queue. The whole call — reading the settings and the
   spend, queueing, the model — is bounded by ``timeout_s`` on the event loop's clock, so the
   wait for a free slot counts (RM-6: confide and enrichment at most 15 s in all, a learning
   step at most 2 minutes). Past it: ``None``.
4. Every call that reached the model is written to ``role_records.log_call``: the request (the
   messages as JSON), the response text (empty when it failed) and the cost. Only
   provider-confirmed cost is charged: a model whose calls cost nothing (the local model,
   ``provider_charges = False``) is confirmed 0; any other model reports no usage here, so its
   cost is ``None`` (unknown, never charged).
5. A model error or timeout returns ``None`` and is logged by type only; so is a failure to
   write the call log (the answer is still used). Cancellation propagates. Logs never carry
   the messages or the answer (STYLE 12).

``RoleLearning`` puts the ``Learner`` (``memory/learner.py``) to work for the server: the
procedure is ``memory.role_learning.RoleLearningProcedure``; each learning step goes through
``RoleMemoryModels`` with purpose ``learn``; a role's runs at once are bounded by its
``settings.concurrency`` (read when the learner claims). ``SourceTurns`` tells a run to wait
until the turn it learns from has ended in this process (RM-4: "after the source turn ends").
``start`` (on server start: recovery, then the dispatcher) and ``close`` (on stop: the workers
are cancelled and their runs released) are called by ``runtime/server.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memory.learner import DEFAULT_STEP_TIMEOUT, Learner
from memory.learning_runs import LearningRun, LearningRunStore, SealedStepPayloads, StepPayloads
from memory.pool_store import PoolStore
from memory.role_learning import (
    LEARN_MAX_TOKENS,
    LearningRequest,
    RoleLearningProcedure,
)
from memory.role_records import (
    CallPurpose,
    ChatMessages,
    ModelCall,
    RoleMemorySettings,
    RoleRecords,
    new_record_id,
)
from memory.thread_consolidation import JsonModel
from plugins.brain.model_queue import BACKGROUND_WAIT_S, bound_runs

if TYPE_CHECKING:
    from journal.store import JournalStore
    from memory.crypto import Keyring

log = logging.getLogger(__name__)

CONFIDE_WAIT_S = 15.0
"""RM-6: confide's answer waits at most this long, queueing included."""
ENRICH_WAIT_S = 15.0
"""RM-6: input rewriting waits at most this long, queueing included."""
LEARNING_STEP_S = DEFAULT_STEP_TIMEOUT
"""RM-6: one learning step takes at most 2 minutes."""


def confirmed_cost_micros(model: object) -> int | None:
    """Rule 4: 0 for a model whose calls cost nothing, else ``None`` (no usage reported)."""
    return 0 if getattr(model, "provider_charges", True) is False else None


@dataclass(slots=True)
class _Gate:
    limit: int
    slots: asyncio.Semaphore
    users: int = 0


class RoleMemoryModels:
    """``MemoryModelCalls`` for the server (rules 1–5). ``now`` is the wall clock of budget
    periods; waits use the event loop's clock (virtual in tests)."""

    def __init__(
        self,
        models: Mapping[str, JsonModel],
        records: RoleRecords,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.models = models
        self.records = records
        self.now = now
        self._gates: dict[tuple[str, str], _Gate] = {}

    async def settings(self, tenant: str, role_id: str) -> RoleMemorySettings:
        return await self.records.settings(tenant, role_id)

    async def available(self, tenant: str, role_id: str) -> bool:
        """Whether a call could be made now: a known model is set and the budget is not spent
        (rules 1–2)."""
        return await self._model_for(tenant, role_id, await self.settings(tenant, role_id))

    async def _model_for(self, tenant: str, role_id: str, settings: RoleMemorySettings) -> bool:
        name = settings.memory_model
        if name is None:
            return False
        if name not in self.models:
            log.warning("role memory: the role names a memory model this server does not have")
            return False
        budget = settings.budget
        if budget is not None:
            spent = await self.records.spent_micros(
                tenant, role_id, since=budget.period_start(self.now())
            )
            if spent >= budget.limit_micros:
                log.info("role memory: the role's model budget is spent for this period")
                return False
        return True

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
        """The memory model's answer to one call, or None (rule 5). ``timeout_s`` bounds the
        model's running; learning, background work, may first wait for a pause (the model
        queue's Rule 8)."""
        started = False
        name = ""
        text = ""
        wait = BACKGROUND_WAIT_S if purpose == "learn" else 0.0
        try:
            async with asyncio.timeout(wait + timeout_s) as bound:
                with bound_runs(bound, timeout_s):
                    settings = await self.settings(tenant, role_id)
                    if not await self._model_for(tenant, role_id, settings):
                        return None
                    assert settings.memory_model is not None
                    name = settings.memory_model
                    model = self.models[name]
                    async with self._slot(tenant, role_id, settings.concurrency):
                        started = True
                        text = await model.complete_json(
                            messages,
                            dict(schema),
                            max_tokens=max_tokens,
                            lane=thread_id or f"role-memory:{role_id}",
                            # Learning is background work (SPEC RT-11); confide and enrichment
                            # answer a person who is waiting.
                            background=purpose == "learn",
                        )
            result: str | None = text
        except TimeoutError:
            log.warning("role memory %s call: no answer within %.0f s", purpose, timeout_s)
            result = None
        except Exception as e:  # a model failure is no answer (rule 5)
            log.warning("role memory %s call failed: %s", purpose, type(e).__name__)
            result = None
        if started:
            await self._log(tenant, role_id, purpose, name, messages, text, thread_id)
        return result

    async def _log(
        self,
        tenant: str,
        role_id: str,
        purpose: CallPurpose,
        name: str,
        messages: ChatMessages,
        response: str,
        thread_id: str | None,
    ) -> None:
        cost = confirmed_cost_micros(self.models.get(name)) if response else None
        try:
            await self.records.log_call(
                ModelCall(
                    id=new_record_id("mcall"),
                    tenant=tenant,
                    role_id=role_id,
                    purpose=purpose,
                    model=name,
                    request=json.dumps(messages, ensure_ascii=False),
                    response=response,
                    cost_micros=cost,
                    thread_id=thread_id,
                )
            )
        except Exception as e:  # the answer is still used (rule 5)
            log.warning("role memory: the call log was not written: %s", type(e).__name__)

    @contextlib.asynccontextmanager
    async def _slot(self, tenant: str, role_id: str, limit: int | None) -> Any:
        """Rule 3: one of the role's ``limit`` slots (none needed without a limit). A gate
        whose limit changed is replaced; calls holding the old one finish on it."""
        if limit is None:
            yield
            return
        key = (tenant, role_id)
        gate = self._gates.get(key)
        if gate is None or gate.limit != limit:
            gate = self._gates[key] = _Gate(limit, asyncio.Semaphore(limit))
        gate.users += 1
        try:
            async with gate.slots:
                yield
        finally:
            gate.users -= 1
            if not gate.users and self._gates.get(key) is gate:
                del self._gates[key]  # nobody holds or awaits it: the gate goes

    def in_use(self, tenant: str, role_id: str) -> int:
        """Calls of the role holding or awaiting a slot now (tests, metrics)."""
        gate = self._gates.get((tenant, role_id))
        return 0 if gate is None else gate.users


@dataclass(slots=True)
class SourceTurns:
    """Turns in progress in this process, by thread: a learning run of a thread waits until
    its turn has ended (at most ``max_wait_s``; a process that does not hold the turn does not
    wait)."""

    max_wait_s: float = 120.0
    _open: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)

    def begin(self, tenant: str, thread_id: str) -> None:
        self._open.setdefault((tenant, thread_id), asyncio.Event())

    def end(self, tenant: str, thread_id: str) -> None:
        event = self._open.pop((tenant, thread_id), None)
        if event is not None:
            event.set()

    def open(self, tenant: str, thread_id: str) -> bool:
        return (tenant, thread_id) in self._open

    async def wait(self, run: LearningRun) -> None:
        event = self._open.get((run.tenant, run.thread_id))
        if event is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.max_wait_s):
                await event.wait()


class RoleLearning:
    """The server's learner of role memory (module docstring)."""

    def __init__(
        self,
        *,
        models: RoleMemoryModels,
        runs: LearningRunStore,
        pool: PoolStore,
        journal: JournalStore,
        records: RoleRecords,
        keyring: Keyring | None,
        step_timeout: float = LEARNING_STEP_S,
        poll_interval: float = 1.0,
    ) -> None:
        self.models = models
        self.turns = SourceTurns()
        self._concurrency: dict[tuple[str, str], int | None] = {}
        self.procedure = RoleLearningProcedure(
            journal=journal,
            pool=pool,
            records=records,
            before_reading=self.turns.wait,
            concurrency_seen=self._remember_concurrency,
        )
        payloads: StepPayloads = (
            SealedStepPayloads(keyring) if keyring is not None else StepPayloads()
        )
        self.learner: Learner[Any, Any] = Learner(
            runs,
            self.procedure,
            self._step,
            max_concurrency=lambda tenant, role: self._concurrency.get((tenant, role), 2),
            step_timeout=step_timeout,
            step_wait=BACKGROUND_WAIT_S,  # learning waits for a pause (SPEC RT-11)
            poll_interval=poll_interval,
            payloads=payloads,
        )
        self._started = False

    def _remember_concurrency(self, tenant: str, role_id: str, limit: int | None) -> None:
        self._concurrency[(tenant, role_id)] = limit

    async def _step(self, request: str) -> str:
        """One learning step (``Learner``'s model step): the request names its role."""
        parsed = LearningRequest.from_text(request)
        answer = await self.models.call(
            parsed.tenant,
            parsed.role_id,
            "learn",
            parsed.messages,
            parsed.schema,
            max_tokens=LEARN_MAX_TOKENS,
            # A little past the learner's own step bound, so its timeout is the one that
            # fires and the run ends with learning_step_timeout.
            timeout_s=self.learner.step_timeout + 1.0,
            thread_id=parsed.thread_id,
        )
        if answer is None:
            raise NoMemoryAnswer("the memory model gave no answer")
        return answer

    async def enqueue(
        self, tenant: str, role_id: str, thread_id: str, user: str, up_to_seq: int
    ) -> str:
        settings = await self.models.settings(tenant, role_id)
        self._remember_concurrency(tenant, role_id, settings.concurrency)
        return await self.learner.enqueue(tenant, role_id, thread_id, user, up_to_seq)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self.learner.start()

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.learner.close()


class NoMemoryAnswer(Exception):
    """A learning step got no answer (no model, budget spent, timeout, model error)."""
