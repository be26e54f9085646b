"""Durable learning runs (SPEC RM-4, RM-6, RM-8): the records, their store contract, in memory.

Theory of operation
-------------------
A learning run is a saved promise to learn from one thread's journal up to a turn. It names
its evidence by position only — ``(tenant, role_id, thread_id)`` and ``up_to_seq``, the source
turn's last journal seq — and the evidence is the journal items in
``(learned_up_to_seq, up_to_seq]``, where ``learned_up_to_seq`` is the thread's read position
(0: nothing learned yet). The runner (``memory/learner.py``) claims a run, calls the memory
model in numbered steps, and ends it with ``finish``; this module holds what is stored and the
rules every store keeps:

1. Ids only (RM-8): a run row carries ids and positions, never content; a step stores a digest
   of its request and the model's response as opaque bytes, written and read only through
   ``StepPayloads`` (the one place the crypto layer wraps).
2. Enqueue: a run that is not failed for the same thread and ``up_to_seq`` is returned as it is
   (idempotent); a queued, running or done run at a later ``up_to_seq`` covers the request and is
   returned; otherwise queued runs of the thread at an earlier ``up_to_seq`` become
   ``superseded`` and a new queued run is saved. A failed run never covers: a later request may
   learn from the same evidence again (RM-6).
3. Claim: the oldest queued run of a role not excluded becomes ``running`` with ``attempts + 1``,
   a fresh claim token and a lease. Two claimers never get the same run (PostgreSQL:
   ``FOR UPDATE SKIP LOCKED``).
4. Lease: the holder renews it; a running run whose lease ran out belongs to a process that
   died. ``recover`` puts it back to ``queued`` (its steps kept) or, after ``max_attempts``
   claims, ends it ``failed`` (``run_attempts_exhausted``).
5. Fencing: every write of a claimed run (a step, the end) names its claim token; a token that
   no longer holds raises ``LostClaim`` and writes nothing.
6. Finish is one transaction (PostgreSQL: one asyncpg transaction; in memory: one lock): the
   claim still holds; the read position is locked; if it has reached ``up_to_seq`` the run ends
   ``done`` without applying (``COVERED``); if it moved since the evidence was read,
   ``PositionMoved`` and nothing is written; else ``apply(tx)`` runs, the position becomes
   ``up_to_seq`` and the run ends ``done`` (``APPLIED``). So no evidence is applied twice.
7. Fail ends a run ``failed`` with a safe error code; the read position never moves.

States and their transitions are ``TRANSITIONS``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from memory.crypto import Keyring, Sealed, row_context
from memory.errors import MemoryStoreError, SealBroken


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class StepState(StrEnum):
    PENDING = "pending"
    """Sent (or about to be) to the model; no response stored."""
    DONE = "done"
    FAILED = "failed"


TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.QUEUED: frozenset({RunState.RUNNING, RunState.SUPERSEDED}),
    RunState.RUNNING: frozenset({RunState.DONE, RunState.FAILED, RunState.QUEUED}),
    RunState.DONE: frozenset(),
    RunState.FAILED: frozenset(),
    RunState.SUPERSEDED: frozenset(),
}
ENDED = frozenset({RunState.DONE, RunState.FAILED, RunState.SUPERSEDED})


class FinishOutcome(StrEnum):
    APPLIED = "applied"
    COVERED = "covered"
    """The read position had already reached ``up_to_seq``: done, nothing applied."""


class LearningRunError(MemoryStoreError):
    code = "learning_run_error"


class LostClaim(LearningRunError):
    """The run is no longer held by this claim (its lease ran out and it was recovered)."""

    code = "learning_run_lost_claim"


class PositionMoved(LearningRunError):
    """Another run advanced the read position since this run read its evidence."""

    code = "learning_position_moved"
    retryable = True


class UnknownRun(LearningRunError):
    code = "learning_run_not_found"


@dataclass(frozen=True, slots=True)
class LearningRun:
    id: str
    tenant: str
    role_id: str
    thread_id: str
    user: str
    up_to_seq: int
    state: RunState
    attempts: int
    error_code: str | None
    created_at: datetime
    updated_at: datetime
    claim_token: str | None = None
    """Set while ``running``: the fencing token of the claim (rule 5)."""

    @property
    def role_key(self) -> tuple[str, str]:
        return (self.tenant, self.role_id)


@dataclass(frozen=True, slots=True)
class RunStep:
    run_id: str
    step: int
    request_digest: str
    response: bytes | None
    """The sealed model response (``StepPayloads``), ``None`` until it arrived."""
    attempts: int
    state: StepState


def request_digest(request: str) -> str:
    """SHA-256 (hex) of a step's request: a stored response is reused only for the same one."""
    return hashlib.sha256(request.encode("utf-8")).hexdigest()


def new_run_id() -> str:
    return "lrn_" + uuid.uuid4().hex


class StepPayloads:
    """Where step responses become stored bytes and back (rule 1): plain UTF-8 here.

    The encryption layer subclasses it (or wraps ``seal``/``open``); the run and step number
    are given so it can bind them as associated data.
    """

    def seal(self, run: LearningRun, step: int, response: str) -> bytes:
        return response.encode("utf-8")

    def open(self, run: LearningRun, step: int, stored: bytes) -> str:
        return stored.decode("utf-8")


class SealedStepPayloads(StepPayloads):
    """Step responses sealed with the memory keyring (RM-8): stored as ``key id`` + NUL +
    ``nonce + ciphertext + tag``, bound to the run, its role and the step number, so a response
    copied to another run or step does not open (``SealBroken``)."""

    def __init__(self, keyring: Keyring) -> None:
        self.keyring = keyring

    @staticmethod
    def _context(run: LearningRun, step: int) -> bytes:
        return row_context(
            "learning_run_steps", "response", run.tenant, run.role_id, run.id, str(step)
        )

    def seal(self, run: LearningRun, step: int, response: str) -> bytes:
        sealed = self.keyring.seal(response, context=self._context(run, step))
        return sealed.key_id.encode("ascii") + b"\0" + sealed.blob

    def open(self, run: LearningRun, step: int, stored: bytes) -> str:
        key_id, sep, blob = stored.partition(b"\0")
        if not sep:
            raise SealBroken("a stored step response is not sealed")
        sealed = Sealed(key_id.decode("ascii", errors="replace"), blob)
        return self.keyring.open(sealed, context=self._context(run, step))


Apply = Callable[[Any], Awaitable[None]]
"""The memory change of a finish, given the open transaction (an asyncpg connection in one, or
the in-memory store under its lock)."""


class LearningRunStore(Protocol):
    """Durable runs, steps and read positions (rules 1–7 of this module)."""

    async def enqueue(
        self, *, tenant: str, role_id: str, thread_id: str, user: str, up_to_seq: int
    ) -> LearningRun: ...

    async def get(self, run_id: str) -> LearningRun: ...

    async def claim(
        self, *, exclude_roles: Collection[tuple[str, str]], lease: float
    ) -> LearningRun | None: ...

    async def renew(self, run: LearningRun, *, lease: float) -> bool:
        """Extend the lease; ``False`` when the claim no longer holds."""
        ...

    async def recover(self, *, max_attempts: int) -> int:
        """Requeue (or fail) running runs whose lease ran out; how many."""
        ...

    async def release(self, run: LearningRun) -> None:
        """Put a held run back to ``queued`` now (a clean shutdown)."""
        ...

    async def position(self, tenant: str, role_id: str, thread_id: str) -> int: ...

    async def steps(self, run_id: str) -> dict[int, RunStep]: ...

    async def save_step(self, run: LearningRun, step: RunStep) -> None: ...

    async def fail(self, run: LearningRun, code: str) -> None: ...

    async def finish(
        self, run: LearningRun, *, expected_position: int, apply: Apply
    ) -> FinishOutcome: ...


def _now() -> datetime:
    return datetime.now(UTC)


class InMemoryLearningRunStore:
    """``LearningRunStore`` in one process; ``clock`` (seconds, monotonic) times the leases.

    Every method but ``finish`` runs without awaiting, so it is atomic on the event loop;
    ``finish`` holds ``lock`` across ``apply``. ``apply``'s own writes cannot be rolled back here:
    when it raises, the position and the run are left as they were.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = asyncio.Lock()
        self.runs: dict[str, LearningRun] = {}
        self.leases: dict[str, float] = {}
        self.step_rows: dict[str, dict[int, RunStep]] = {}
        self.positions: dict[tuple[str, str, str], int] = {}

    def _set(self, run: LearningRun, **changes: Any) -> LearningRun:
        run = self.runs[run.id]
        new = replace(run, updated_at=_now(), **changes)
        if new.state != run.state and new.state not in TRANSITIONS[run.state]:
            raise AssertionError(f"{run.state} -> {new.state}")  # a bug in this store
        self.runs[run.id] = new
        return new

    def _thread_runs(self, tenant: str, role_id: str, thread_id: str) -> list[LearningRun]:
        return [
            r
            for r in self.runs.values()
            if (r.tenant, r.role_id, r.thread_id) == (tenant, role_id, thread_id)
        ]

    async def enqueue(
        self, *, tenant: str, role_id: str, thread_id: str, user: str, up_to_seq: int
    ) -> LearningRun:
        runs = self._thread_runs(tenant, role_id, thread_id)
        for r in runs:
            if r.up_to_seq == up_to_seq and r.state is not RunState.FAILED:
                return r
        covering = [
            r
            for r in runs
            if r.up_to_seq >= up_to_seq
            and r.state in (RunState.QUEUED, RunState.RUNNING, RunState.DONE)
        ]
        if covering:
            return min(covering, key=lambda r: r.up_to_seq)
        for r in runs:
            if r.state is RunState.QUEUED:
                self._set(r, state=RunState.SUPERSEDED)
        now = _now()
        run = LearningRun(
            id=new_run_id(), tenant=tenant, role_id=role_id, thread_id=thread_id, user=user,
            up_to_seq=up_to_seq, state=RunState.QUEUED, attempts=0, error_code=None,
            created_at=now, updated_at=now,
        )  # fmt: skip
        self.runs[run.id] = run
        return run

    async def get(self, run_id: str) -> LearningRun:
        try:
            return self.runs[run_id]
        except KeyError:
            raise UnknownRun(run_id) from None

    async def claim(
        self, *, exclude_roles: Collection[tuple[str, str]], lease: float
    ) -> LearningRun | None:
        queued = [
            r
            for r in self.runs.values()
            if r.state is RunState.QUEUED and r.role_key not in exclude_roles
        ]
        if not queued:
            return None
        oldest = min(queued, key=lambda r: (r.created_at, r.id))
        self.leases[oldest.id] = self.clock() + lease
        return self._set(
            oldest,
            state=RunState.RUNNING,
            attempts=oldest.attempts + 1,
            claim_token=uuid.uuid4().hex,
        )

    def _holds(self, run: LearningRun) -> bool:
        current = self.runs.get(run.id)
        return (
            current is not None
            and current.state is RunState.RUNNING
            and current.claim_token == run.claim_token
        )

    async def renew(self, run: LearningRun, *, lease: float) -> bool:
        if not self._holds(run):
            return False
        self.leases[run.id] = self.clock() + lease
        return True

    async def recover(self, *, max_attempts: int) -> int:
        now = self.clock()
        count = 0
        for r in list(self.runs.values()):
            if r.state is RunState.RUNNING and self.leases.get(r.id, 0.0) < now:
                if r.attempts >= max_attempts:
                    self._set(
                        r,
                        state=RunState.FAILED,
                        error_code="run_attempts_exhausted",
                        claim_token=None,
                    )
                else:
                    self._set(r, state=RunState.QUEUED, claim_token=None)
                count += 1
        return count

    async def release(self, run: LearningRun) -> None:
        if self._holds(run):
            self._set(run, state=RunState.QUEUED, claim_token=None)

    async def position(self, tenant: str, role_id: str, thread_id: str) -> int:
        return self.positions.get((tenant, role_id, thread_id), 0)

    async def steps(self, run_id: str) -> dict[int, RunStep]:
        return dict(self.step_rows.get(run_id, {}))

    async def save_step(self, run: LearningRun, step: RunStep) -> None:
        if not self._holds(run):
            raise LostClaim(run.id)
        self.step_rows.setdefault(run.id, {})[step.step] = step

    async def fail(self, run: LearningRun, code: str) -> None:
        if not self._holds(run):
            raise LostClaim(run.id)
        self._set(run, state=RunState.FAILED, error_code=code, claim_token=None)

    async def finish(
        self, run: LearningRun, *, expected_position: int, apply: Apply
    ) -> FinishOutcome:
        async with self.lock:
            if not self._holds(run):
                raise LostClaim(run.id)
            key = (run.tenant, run.role_id, run.thread_id)
            position = self.positions.get(key, 0)
            if position >= run.up_to_seq:
                self._set(run, state=RunState.DONE, claim_token=None)
                return FinishOutcome.COVERED
            if position != expected_position:
                raise PositionMoved(run.id)
            await apply(self)
            self.positions[key] = run.up_to_seq
            self._set(run, state=RunState.DONE, claim_token=None)
            return FinishOutcome.APPLIED
