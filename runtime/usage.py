"""What each conversation used and cost (SPEC OPS-6): metered per session, kept per tenant, day,
role and user, priced from a table.

Rules
-----
1. A session's ``UsageMeter`` is one of its engine's taps: it sees every input frame and every
   event the session sends. It counts audio seconds in (every frame received) and out (every
   answer audio delta), ASR seconds (each transcription's ``usage.seconds``), TTS characters
   (the transcript of every spoken answer), text tokens in and out (each ``response.done``'s
   ``usage``, estimated: ``pipeline.event_items.Usage``), responses, and tool calls (every
   function call item the session shows).
2. At each ``response.done`` — and when the session ends — what was counted since the last
   write is added to the ledger's row of (tenant, day in UTC, role, user), one writer task per
   session, in order, off the audio path. A write that fails is logged (the session's id and
   the error's kind) and its counts are kept for the next one; usage never fails a session.
3. Prices (``OPENREALTIME_PRICES``, JSON) are per provider and model of each stage; the
   embedded stack's are 0 by default. Cost is integer micro-USD (seeds/000's unit), computed
   when read, so a changed price table reprices history — the table is the one truth.
4. Reads are scoped: a member's own rows; an admin's, the tenant's (``GET /api/usage``).
5. Model time (``model_ms``): the wall time a session's work waited on its models — each
   transcription, each wait for the brain's next piece of an answer, each wait for the TTS's next
   chunk — measured at the session's own plugins (``metered``), so time a shared model spent on
   others while this session queued for it counts too; the time the session spent doing
   anything else (playing audio, waiting for the person) does not.
6. CPU time (``cpu_ms``), estimated: the process's CPU time (``time.process_time``: every
   thread, the models' native ones included) is shared out among the live sessions each time
   one of them writes (``CpuShare``): in proportion to their model time since the last share,
   evenly when none used a model (the audio path was what ran). It is the session process's CPU
   only: models served by another process (``openrealtime serve-models``) are not in it.
   The embedded stack's cost is 0; its CPU time is what it used.
7. Work a paid stage did not send to its provider — the tenant had spent its budget, and the
   embedded fallback did it or the agent said it cannot answer (``runtime.budget``) — is counted
   as usage and also as ``unpriced_*`` (tokens, ASR ms, TTS characters), which the price table
   does not charge: a fallback's answers never spend the budget. The meter asks the budget's
   last answer (``fallback_in_use``) when it counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Protocol

from pipeline import events as ev
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from runtime.config import Settings
from storage.postgres import PooledCalls

log = logging.getLogger(__name__)

COUNTERS = (
    "responses", "input_tokens", "output_tokens", "audio_in_ms", "audio_out_ms", "asr_ms",
    "tts_chars", "tool_calls", "model_ms", "cpu_ms", "unpriced_input_tokens",
    "unpriced_output_tokens", "unpriced_asr_ms", "unpriced_tts_chars",
)  # fmt: skip


@dataclass(slots=True)
class Counts:
    responses: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    audio_in_ms: int = 0
    audio_out_ms: int = 0
    asr_ms: int = 0
    tts_chars: int = 0
    tool_calls: int = 0
    model_ms: int = 0
    cpu_ms: int = 0
    unpriced_input_tokens: int = 0
    unpriced_output_tokens: int = 0
    unpriced_asr_ms: int = 0
    unpriced_tts_chars: int = 0
    """Rule 7: of the counts above, what a paid stage's provider did not do."""

    def add(self, other: Counts) -> None:
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def empty(self) -> bool:
        return not any(getattr(self, name) for name in COUNTERS)

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}


@dataclass(frozen=True, slots=True)
class UsageKey:
    tenant: str
    day: date
    role_id: str
    user: str


@dataclass(frozen=True, slots=True)
class UsageRow:
    key: UsageKey
    counts: Counts


@dataclass(frozen=True, slots=True)
class Budget:
    daily_micro_usd: int | None = None
    monthly_micro_usd: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {
            "daily_micro_usd": self.daily_micro_usd,
            "monthly_micro_usd": self.monthly_micro_usd,
        }


class UsageLedger(Protocol):
    async def add(self, key: UsageKey, counts: Counts) -> None: ...

    async def budget(self, tenant: str) -> Budget | None:
        """The tenant's budget (``runtime.budget``); None: none set."""
        ...

    async def set_budget(self, tenant: str, budget: Budget, at: datetime) -> None: ...

    async def rows(self, tenant: str, user: str | None, since: date, until: date) -> list[UsageRow]:
        """The tenant's rows from ``since`` to ``until`` (inclusive); ``user`` None: everyone's."""
        ...


class InMemoryUsageLedger:
    def __init__(self) -> None:
        self._rows: dict[UsageKey, Counts] = {}
        self._budgets: dict[str, Budget] = {}

    async def budget(self, tenant: str) -> Budget | None:
        return self._budgets.get(tenant)

    async def set_budget(self, tenant: str, budget: Budget, at: datetime) -> None:
        self._budgets[tenant] = budget

    async def add(self, key: UsageKey, counts: Counts) -> None:
        self._rows.setdefault(key, Counts()).add(counts)

    async def rows(self, tenant: str, user: str | None, since: date, until: date) -> list[UsageRow]:
        return sorted(
            (
                UsageRow(k, dataclasses.replace(c))
                for k, c in self._rows.items()
                if k.tenant == tenant and user in (None, k.user) and since <= k.day <= until
            ),
            key=lambda r: (r.key.day, r.key.role_id, r.key.user),
        )


_TIMEOUT = 10.0


class UsageUnavailable(Exception):
    code = "usage_unavailable"


class PostgresUsageLedger:
    def __init__(self, pool: Any) -> None:
        self._call = PooledCalls(
            pool, acquire_timeout=_TIMEOUT, unavailable=UsageUnavailable, what="usage"
        )

    async def budget(self, tenant: str) -> Budget | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                "SELECT * FROM usage_budgets WHERE tenant = $1", tenant, timeout=_TIMEOUT
            )
        )
        if row is None:
            return None
        return Budget(row["daily_micro_usd"], row["monthly_micro_usd"])

    async def set_budget(self, tenant: str, budget: Budget, at: datetime) -> None:
        await self._call(
            lambda conn: conn.execute(
                """INSERT INTO usage_budgets (tenant, daily_micro_usd, monthly_micro_usd,
                       updated_at) VALUES ($1, $2, $3, $4)
                   ON CONFLICT (tenant) DO UPDATE SET daily_micro_usd = EXCLUDED.daily_micro_usd,
                       monthly_micro_usd = EXCLUDED.monthly_micro_usd,
                       updated_at = EXCLUDED.updated_at""",
                tenant,
                budget.daily_micro_usd,
                budget.monthly_micro_usd,
                at,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )

    async def add(self, key: UsageKey, counts: Counts) -> None:
        values = [getattr(counts, name) for name in COUNTERS]
        columns = ", ".join(COUNTERS)
        placeholders = ", ".join(f"${i}" for i in range(5, 5 + len(COUNTERS)))
        updates = ", ".join(f"{n} = usage_daily.{n} + EXCLUDED.{n}" for n in COUNTERS)
        await self._call(
            lambda conn: conn.execute(
                f"""INSERT INTO usage_daily (tenant, day, role_id, user_id, {columns})
                    VALUES ($1, $2, $3, $4, {placeholders})
                    ON CONFLICT (tenant, day, role_id, user_id) DO UPDATE SET {updates}""",
                key.tenant,
                key.day,
                key.role_id,
                key.user,
                *values,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )

    async def rows(self, tenant: str, user: str | None, since: date, until: date) -> list[UsageRow]:
        found = await self._call(
            lambda conn: conn.fetch(
                """SELECT * FROM usage_daily WHERE tenant = $1
                       AND ($2::text IS NULL OR user_id = $2) AND day BETWEEN $3 AND $4
                   ORDER BY day, role_id, user_id""",
                tenant,
                user,
                since,
                until,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return [
            UsageRow(
                UsageKey(r["tenant"], r["day"], r["role_id"], r["user_id"]),
                Counts(**{name: int(r[name]) for name in COUNTERS}),
            )
            for r in found
        ]


# ------------------------------------------------------------------ prices (Rule 3)


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per unit for the running stack: the brain's tokens, the ASR's minutes, the TTS's
    characters. ``stack`` names what they price (``brain=llm:…``)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    asr_per_minute: float = 0.0
    tts_per_mchar: float = 0.0
    stack: Mapping[str, str] = field(default_factory=dict)

    def cost_micro_usd(self, counts: Counts) -> int:
        usd = (  # Rule 7: what no provider did is not priced
            (counts.input_tokens - counts.unpriced_input_tokens) * self.input_per_mtok / 1e6
            + (counts.output_tokens - counts.unpriced_output_tokens) * self.output_per_mtok / 1e6
            + (counts.asr_ms - counts.unpriced_asr_ms) / 60_000 * self.asr_per_minute
            + (counts.tts_chars - counts.unpriced_tts_chars) * self.tts_per_mchar / 1e6
        )
        return math.ceil(round(usd * 1e6, 6))

    @property
    def paid(self) -> dict[str, bool]:
        """Which stages cost money (``runtime.budget`` guards those)."""
        return {
            "brain": bool(self.input_per_mtok or self.output_per_mtok),
            "asr": bool(self.asr_per_minute),
            "tts": bool(self.tts_per_mchar),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "input_per_mtok_usd": self.input_per_mtok,
            "output_per_mtok_usd": self.output_per_mtok,
            "asr_per_minute_usd": self.asr_per_minute,
            "tts_per_mchar_usd": self.tts_per_mchar,
            "stack": dict(self.stack),
        }


def stack_of(settings: Settings) -> dict[str, str]:
    """What the price table is keyed by: each stage's provider and model."""
    brain = {
        "openai": f"openai:{settings.brain_model}",
        "llm": "llm:embedded",
        "rules": "rules:embedded",
        "local": "rules:embedded",
        "http": "http:agent",
    }.get(settings.brain, f"plugin:{settings.brain}")
    asr = (
        f"openai:{settings.asr_model_name}"
        if settings.asr == "openai"
        else f"whisper:{settings.asr_model}"
    )
    tts = f"openai:{settings.tts_model}" if settings.tts == "openai" else f"{settings.tts}:embedded"
    return {"brain": brain, "asr": asr, "tts": tts}


def prices_for(table_json: str, stack: Mapping[str, str]) -> Prices:
    """The running stack's prices from ``OPENREALTIME_PRICES``: ``{"<stage>:<provider>:<model>":
    {…}}`` entries for ``brain``, ``asr`` and ``tts`` (keys ``input_per_mtok``,
    ``output_per_mtok``; ``per_minute``; ``per_mchar``); anything not listed costs 0."""
    table = json.loads(table_json) if table_json.strip() else {}
    if not isinstance(table, dict):
        raise ValueError("OPENREALTIME_PRICES is not a JSON object")
    brain = table.get(f"brain:{stack.get('brain', '')}", {})
    asr = table.get(f"asr:{stack.get('asr', '')}", {})
    tts = table.get(f"tts:{stack.get('tts', '')}", {})
    return Prices(
        input_per_mtok=float(brain.get("input_per_mtok", 0.0)),
        output_per_mtok=float(brain.get("output_per_mtok", 0.0)),
        asr_per_minute=float(asr.get("per_minute", 0.0)),
        tts_per_mchar=float(tts.get("per_mchar", 0.0)),
        stack=stack,
    )


# ------------------------------------------------------------------ the meter (Rules 1, 2)


class CpuShare:
    """Rule 6 for one process: its CPU time shared out among the live sessions' meters."""

    def __init__(self, clock: Callable[[], float] = time.process_time) -> None:
        self._clock = clock
        self._last = clock()
        self._weights: dict[UsageMeter, float] = {}

    def join(self, meter: UsageMeter) -> None:
        if not self._weights:  # nobody was live: what the process did meanwhile is no one's
            self._last = self._clock()
        self._weights.setdefault(meter, 0.0)

    def weigh(self, meter: UsageMeter, model_ms: float) -> None:
        if meter in self._weights:
            self._weights[meter] += model_ms

    def share(self) -> None:
        """The CPU time since the last share, to the live meters."""
        now = self._clock()
        spent_ms, self._last = (now - self._last) * 1000.0, now
        if not self._weights or spent_ms <= 0:
            return
        total = sum(self._weights.values())
        for meter, weight in self._weights.items():
            meter.used_cpu(spent_ms * (weight / total if total > 0 else 1 / len(self._weights)))
            self._weights[meter] = 0.0

    def leave(self, meter: UsageMeter) -> None:
        if meter in self._weights:
            self.share()
            del self._weights[meter]


class UsageMeter:
    """One session's usage: an engine tap (Rule 1) writing to the ledger (Rule 2)."""

    def __init__(
        self,
        ledger: UsageLedger,
        *,
        tenant: str,
        user: str,
        role_id: str,
        session_id: str,
        output_rate: int,
        cpu: CpuShare | None = None,
        unpriced: Callable[[str], bool] | None = None,
    ) -> None:
        self.ledger = ledger
        self.unpriced = unpriced
        """Rule 7: whether a stage (``brain``, ``asr``, ``tts``) is not calling its provider."""
        self.cpu = cpu
        if cpu is not None:
            cpu.join(self)
        self._fractions = {"model_ms": 0.0, "cpu_ms": 0.0}
        """Rules 5, 6: what is not yet a whole millisecond."""
        self.tenant, self.user, self.role_id = tenant, user, role_id
        self.session_id = session_id
        self.total = Counts()
        """Everything this session used (its writes included)."""
        self._since = Counts()
        """Counted since the last write."""
        self._samples_in = 0
        self._out_bytes = 0
        self._output_rate = output_rate
        self._writes: asyncio.Queue[Counts | None] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None

    def heard(self, pcm: PCM) -> None:
        self._samples_in += pcm.size
        if self._samples_in >= INPUT_SAMPLE_RATE // 10:  # a tenth of a second at a time
            ms = self._samples_in * 1000 // INPUT_SAMPLE_RATE
            self._samples_in -= ms * INPUT_SAMPLE_RATE // 1000
            self._count("audio_in_ms", ms)

    def sent(self, event: ev.ServerEvent) -> None:
        if isinstance(event, ev.OutputAudioDelta):
            self._count("audio_out_ms", len(event.delta) * 1000 // (2 * self._output_rate))
        elif isinstance(event, ev.TranscriptionCompleted):
            self._count("asr_ms", round(event.usage.seconds * 1000), stage="asr")
        elif isinstance(event, ev.OutputAudioTranscriptDone):
            self._count("tts_chars", len(event.transcript), stage="tts")
        elif isinstance(event, ev.ItemDone) and isinstance(event.item, ev.FunctionCallItem):
            self._count("tool_calls", 1)
        elif isinstance(event, ev.ResponseDone):
            usage = event.response.usage
            self._count("responses", 1)
            if usage is not None:
                self._count("input_tokens", usage.input_tokens, stage="brain")
                self._count("output_tokens", usage.output_tokens, stage="brain")
            self.flush()

    def used_model(self, ms: float) -> None:
        """Rule 5: the session waited ``ms`` on one of its models."""
        self._count_fraction("model_ms", ms)
        if self.cpu is not None:
            self.cpu.weigh(self, ms)

    def used_cpu(self, ms: float) -> None:
        """Rule 6: the session's share of the process's CPU time."""
        self._count_fraction("cpu_ms", ms)

    def _count_fraction(self, name: str, ms: float) -> None:
        pending = self._fractions[name] + ms
        whole = int(pending)
        self._fractions[name] = pending - whole
        if whole:
            self._count(name, whole)

    def _count(self, name: str, amount: int, *, stage: str | None = None) -> None:
        if stage is not None and self.unpriced is not None and self.unpriced(stage):
            self._count(f"unpriced_{name}", amount)  # Rule 7
        setattr(self._since, name, getattr(self._since, name) + amount)
        setattr(self.total, name, getattr(self.total, name) + amount)

    def flush(self) -> None:
        """Rule 2: what was counted since the last write goes to the ledger."""
        if self.cpu is not None:
            self.cpu.share()
        if self._since.empty():
            return
        counts, self._since = self._since, Counts()
        self._writes.put_nowait(counts)
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while (counts := await self._writes.get()) is not None:
            if not await self._add(counts):
                self._since.add(counts)  # Rule 2: kept for the next write

    async def _add(self, counts: Counts) -> bool:
        key = UsageKey(self.tenant, datetime.now(UTC).date(), self.role_id, self.user)
        try:
            await self.ledger.add(key, counts)
        except Exception as e:
            log.warning("usage of %s not written (%s)", self.session_id, type(e).__name__)
            return False
        return True

    async def close(self) -> None:
        """The session ended: the rest written (a failed last write is tried once more)."""
        if self.cpu is not None:
            self.cpu.leave(self)
            self.cpu = None
        self.flush()
        if self._writer is not None:
            self._writes.put_nowait(None)
            await self._writer
            if not self._since.empty():
                await self._add(self._since)
