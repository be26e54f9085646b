"""What role memory keeps beside its pool (SPEC RM-4…RM-8): settings, confessions, enrichments,
the model call log — the contract every store keeps, and its in-memory implementation.

Theory of operation
-------------------
The pool (``memory/pool_store.py``) holds what a role has learned. This module holds the rest of
role memory's durable state, each record scoped by ``(tenant, role_id)`` and, for the records a
conversation produced, by its thread:

1. ``RoleMemorySettings`` (RM-6, one per role, admins write it): the memory model (``None``: no
   model — confide gets the calm answer, inputs are not rewritten, nothing is learned through
   confide), plain-language privacy ``instructions`` the memory model follows, ``concurrency``
   (most learning runs of the role at once in a process; ``None``: no limit) and a ``Budget``
   (confirmed model cost per day or month in micro-USD; ``None``: no limit). A write names the
   revision it read (``expected``; 0 for a role without settings) and moves it one on
   (``StaleRevision`` otherwise).
2. ``Confession`` (RM-4, RM-7): what the agent said through ``confide`` and the answer it got
   (``answered_by``: ``memory_model`` or ``calm``, the fixed answer), with the thread, its owner
   and the journal position of the turn. Listed per thread, oldest first, for its owner only
   (the caller checks ownership; the store filters by tenant and thread).
3. ``Enrichment`` (RM-5): the rewritten input the model saw (``text``), the person's words
   (``original``) and the ids of the pool entries used, per thread and turn.
4. ``ModelCall`` (RM-8): one memory-model request and its response, what it was for
   (``purpose``), and its cost: ``cost_micros`` is the provider-confirmed cost in micro-USD, or
   ``None`` when usage was missing (recorded as unknown, never charged). ``spent_micros`` sums
   the confirmed cost of a role since a moment (the budget's period start).
5. At rest (PostgreSQL) the texts — confession text and answer, enrichment text and original,
   call request and response, privacy instructions — are sealed with the memory keyring under a
   context naming the row and column (``memory.crypto.row_context``), key id per row; ids,
   times, entry ids and costs stay plain so listing and budgeting never decrypt. In memory they
   are held as they are.
6. Every list is bounded (``MAX_RECORDS_LISTED``, newest kept when cut); texts are bounded by
   ``MAX_RECORD_CHARS`` (``InvalidMemory`` past it: a caller's bug, never silently cut).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, Protocol, get_args

from memory.errors import InvalidMemory, StaleRevision

BudgetPeriod = Literal["day", "month"]
BUDGET_PERIODS: tuple[BudgetPeriod, ...] = get_args(BudgetPeriod)
AnsweredBy = Literal["memory_model", "calm"]
CallPurpose = Literal["confide", "enrich", "learn"]
CALL_PURPOSES: tuple[CallPurpose, ...] = get_args(CallPurpose)

MAX_RECORDS_LISTED = 1_000
"""Most records one list call returns (the newest)."""
MAX_RECORD_CHARS = 64_000
"""Longest text one record field holds."""
MAX_INSTRUCTIONS_CHARS = 4_000
"""Longest privacy instructions."""
MAX_CONCURRENCY = 64
MAX_BUDGET_MICROS = 10**12
"""A million USD: past it a budget is a typo."""


@dataclass(frozen=True, slots=True)
class Budget:
    period: BudgetPeriod
    limit_micros: int

    def __post_init__(self) -> None:
        if self.period not in BUDGET_PERIODS:
            raise InvalidMemory("budget period must be day or month")
        if not 0 <= self.limit_micros <= MAX_BUDGET_MICROS:
            raise InvalidMemory(f"budget limit must be between 0 and {MAX_BUDGET_MICROS}")

    def period_start(self, now: datetime) -> datetime:
        """The start (UTC) of the period ``now`` is in."""
        now = now.astimezone(UTC)
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start.replace(day=1) if self.period == "month" else start


@dataclass(frozen=True, slots=True)
class RoleMemorySettings:
    memory_model: str | None = None
    """The memory model's name (``runtime`` resolves it); ``None``: no memory model."""
    instructions: str = ""
    concurrency: int | None = None
    budget: Budget | None = None
    revision: int = 0
    """0: never written (the defaults)."""

    def __post_init__(self) -> None:
        if self.memory_model is not None and not 0 < len(self.memory_model) <= 100:
            raise InvalidMemory("memory model name must be 1 to 100 characters")
        if len(self.instructions) > MAX_INSTRUCTIONS_CHARS:
            raise InvalidMemory(f"instructions hold at most {MAX_INSTRUCTIONS_CHARS} characters")
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidMemory(f"concurrency must be between 1 and {MAX_CONCURRENCY}")


def _check_text(name: str, text: str) -> str:
    if len(text) > MAX_RECORD_CHARS:
        raise InvalidMemory(f"{name} holds at most {MAX_RECORD_CHARS} characters")
    return text


def _now() -> datetime:
    return datetime.now(UTC)


def new_record_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass(frozen=True, slots=True)
class Confession:
    id: str
    tenant: str
    role_id: str
    thread_id: str
    user: str
    """The thread's owner (the person in the conversation)."""
    seq: int
    """The journal position of the turn that confided."""
    text: str
    answer: str
    answered_by: AnsweredBy
    at: datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        _check_text("confession text", self.text)
        _check_text("confession answer", self.answer)


@dataclass(frozen=True, slots=True)
class Enrichment:
    id: str
    tenant: str
    role_id: str
    thread_id: str
    seq: int
    """The journal position of the person's input that was rewritten."""
    text: str
    original: str
    entry_ids: tuple[str, ...]
    at: datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        _check_text("enrichment text", self.text)
        _check_text("enrichment original", self.original)


@dataclass(frozen=True, slots=True)
class ModelCall:
    id: str
    tenant: str
    role_id: str
    purpose: CallPurpose
    model: str
    request: str
    response: str
    cost_micros: int | None
    """Provider-confirmed cost; ``None``: usage missing (unknown, not charged)."""
    thread_id: str | None = None
    at: datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        if self.purpose not in CALL_PURPOSES:
            raise InvalidMemory("unknown model call purpose")
        if self.cost_micros is not None and self.cost_micros < 0:
            raise InvalidMemory("a cost is never negative")
        _check_text("model request", self.request)
        _check_text("model response", self.response)


class RoleRecords(Protocol):
    async def settings(self, tenant: str, role_id: str) -> RoleMemorySettings:
        """The role's settings (the defaults, revision 0, when never written)."""
        ...

    async def put_settings(
        self, tenant: str, role_id: str, settings: RoleMemorySettings, *, expected: int
    ) -> RoleMemorySettings:
        """Replace the settings if their revision is ``expected`` (``StaleRevision``
        otherwise); returns them at the next revision."""
        ...

    async def add_confession(self, confession: Confession) -> None: ...

    async def confessions(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Confession]:
        """The thread's confessions, oldest first (the newest ``limit``)."""
        ...

    async def add_enrichment(self, enrichment: Enrichment) -> None: ...

    async def enrichments(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Enrichment]: ...

    async def log_call(self, call: ModelCall) -> None: ...

    async def spent_micros(self, tenant: str, role_id: str, *, since: datetime) -> int:
        """Confirmed cost of the role's calls at or after ``since``."""
        ...

    async def calls(
        self, tenant: str, role_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[ModelCall]:
        """The role's call log, oldest first (the newest ``limit``)."""
        ...

    async def forget_role(self, tenant: str, role_id: str) -> int:
        """Delete every record of a deleted role; the count."""
        ...


class InMemoryRoleRecords:
    """``RoleRecords`` in process memory (tests, ``storage=memory``)."""

    def __init__(self) -> None:
        self._settings: dict[tuple[str, str], RoleMemorySettings] = {}
        self._confessions: list[Confession] = []
        self._enrichments: list[Enrichment] = []
        self._calls: list[ModelCall] = []

    async def settings(self, tenant: str, role_id: str) -> RoleMemorySettings:
        return self._settings.get((tenant, role_id), RoleMemorySettings())

    async def put_settings(
        self, tenant: str, role_id: str, settings: RoleMemorySettings, *, expected: int
    ) -> RoleMemorySettings:
        current = await self.settings(tenant, role_id)
        if current.revision != expected:
            raise StaleRevision("the settings changed since they were read", current.revision)
        saved = replace(settings, revision=current.revision + 1)
        self._settings[(tenant, role_id)] = saved
        return saved

    async def add_confession(self, confession: Confession) -> None:
        self._confessions.append(confession)

    async def confessions(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Confession]:
        found = [c for c in self._confessions if c.tenant == tenant and c.thread_id == thread_id]
        return found[-limit:] if limit > 0 else []

    async def add_enrichment(self, enrichment: Enrichment) -> None:
        self._enrichments.append(enrichment)

    async def enrichments(
        self, tenant: str, thread_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[Enrichment]:
        found = [e for e in self._enrichments if e.tenant == tenant and e.thread_id == thread_id]
        return found[-limit:] if limit > 0 else []

    async def log_call(self, call: ModelCall) -> None:
        self._calls.append(call)

    async def spent_micros(self, tenant: str, role_id: str, *, since: datetime) -> int:
        return sum(
            c.cost_micros
            for c in self._calls
            if c.tenant == tenant and c.role_id == role_id and c.at >= since
            if c.cost_micros is not None
        )

    async def calls(
        self, tenant: str, role_id: str, *, limit: int = MAX_RECORDS_LISTED
    ) -> list[ModelCall]:
        found = [c for c in self._calls if c.tenant == tenant and c.role_id == role_id]
        return found[-limit:] if limit > 0 else []

    async def forget_role(self, tenant: str, role_id: str) -> int:
        def keep(record: Confession | Enrichment | ModelCall) -> bool:
            return not (record.tenant == tenant and record.role_id == role_id)

        before = len(self._confessions) + len(self._enrichments) + len(self._calls)
        self._confessions = [c for c in self._confessions if keep(c)]
        self._enrichments = [e for e in self._enrichments if keep(e)]
        self._calls = [c for c in self._calls if keep(c)]
        had_settings = self._settings.pop((tenant, role_id), None) is not None
        after = len(self._confessions) + len(self._enrichments) + len(self._calls)
        return before - after + int(had_settings)


ChatMessages = list[dict[str, str]]


class MemoryModelCalls(Protocol):
    """One call of a role's memory model, with every RM-6 rule around it (``runtime``
    implements it): the role's model, its budget and concurrency, the wait bound, the call log.

    Returns the model's JSON text, or ``None`` when there is no answer to use — no memory model
    set, the budget exhausted, the wait (queueing included) past ``timeout_s``, or the model
    failed — so the caller falls back (the calm answer, the input unchanged) and never raises
    for any of these."""

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
    ) -> str | None: ...
