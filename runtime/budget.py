"""Budgets (SPEC OPS-6, seeds/000: micro-USD): when a tenant has spent its budget for the day or
the month, paid model work stops — the person is told calmly, or the embedded stack answers.

Rules
-----
1. A tenant's budget is a daily and/or a monthly amount in micro-USD, set by its admins
   (``PUT /api/usage/budget``); none set: no limit. Spend is the usage ledger's cost
   (``runtime.usage`` Rule 3) for today and for this month, UTC.
2. Only paid work stops: each stage of a session — brain, ASR, TTS — is guarded when its prices
   are not 0 (``BudgetedBrain``, ``BudgetedASR``, ``BudgetedTTS``). Before each call (each brain
   round, transcription, sentence spoken) it asks whether the tenant has spent its budget (the
   answer kept for ``budget_check_interval_s``: a busy tenant costs one ledger read every few
   seconds); spent, the paid provider is not called. When the deployment names a fallback
   (``OPENREALTIME_BUDGET_FALLBACK``: ``rules`` or ``llm``, the embedded brains) the embedded
   stack takes over every paid stage (that brain, Whisper, the embedded TTS). Without one, the
   brain's answer is that it cannot answer now, in the person's language (``BUDGET_SPENT``); a
   paid ASR or TTS fails its turn with ``budget_spent`` (the client gets the error; nothing can
   be heard or spoken without a provider).
3. A ledger that cannot be read does not stop a conversation: the paid brain answers and the
   failure is logged (availability over a budget that is checked again a few seconds later).
4. Spend is counted after the fact, so the turn that crosses the budget is answered in full;
   the next one is not.
5. A session's background model work on the paid brain — its thread memory's consolidation —
   asks the same question first and is skipped once the budget is spent; so does a person's
   "refresh" of a thread's memory (``402 budget_spent``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

from plugins.audio import PCM
from plugins.contracts import ASR, TTS, Brain, BrainDelta, BrainInput, SpeechChunk, Transcript
from plugins.errors import PluginError
from plugins.language import dominant_language, zh_or_en
from runtime.usage import Budget, Prices, UsageLedger

log = logging.getLogger(__name__)
Stage = TypeVar("Stage")

SPEND_CACHE_S = 5.0
BUDGET_SPENT = {
    "en": "I'm sorry — I can't answer right now: this service has used its budget for the "
    "moment. Please try again later.",
    "zh": "抱歉，我现在无法回答：这项服务的预算暂时用完了，请稍后再试。",
}
"""Rule 2's words when no fallback answers."""


@dataclass(frozen=True, slots=True)
class Spend:
    today_micro_usd: int
    month_micro_usd: int

    def over(self, budget: Budget) -> bool:
        daily, monthly = budget.daily_micro_usd, budget.monthly_micro_usd
        return (daily is not None and self.today_micro_usd >= daily) or (
            monthly is not None and self.month_micro_usd >= monthly
        )


async def spend_of(ledger: UsageLedger, prices: Prices, tenant: str) -> Spend:
    """Rule 1: the tenant's cost today and this month."""
    today = datetime.now(UTC).date()
    rows = await ledger.rows(tenant, None, today.replace(day=1), today)
    month = sum(prices.cost_micro_usd(r.counts) for r in rows)
    day = sum(prices.cost_micro_usd(r.counts) for r in rows if r.key.day == today)
    return Spend(day, month)


class BudgetGuard:
    """Rules 1–3 for every session of the process: whether a tenant may use paid work now."""

    def __init__(
        self, ledger: UsageLedger, prices: Prices, *, cache_s: float = SPEND_CACHE_S
    ) -> None:
        self.ledger = ledger
        self.prices = prices
        self.cache_s = cache_s
        self._known: dict[str, tuple[float, bool]] = {}

    async def spent(self, tenant: str) -> bool:
        now = time.monotonic()
        known = self._known.get(tenant)
        if known is not None and now - known[0] < self.cache_s:
            return known[1]
        try:
            budget = await self.ledger.budget(tenant)
            over = budget is not None and (await spend_of(self.ledger, self.prices, tenant)).over(
                budget
            )
        except Exception as e:  # Rule 3
            log.warning("budget of %s not read (%s): paid work goes on", tenant, type(e).__name__)
            return False
        self._known[tenant] = (now, over)
        return over

    def known_spent(self, tenant: str) -> bool:
        """The last answer of ``spent`` for the tenant, without reading the ledger."""
        known = self._known.get(tenant)
        return known is not None and known[1]

    def forget(self, tenant: str) -> None:
        """A budget changed: the next round reads it again."""
        self._known.pop(tenant, None)


def unpriced_stages(
    guard: BudgetGuard | None, paid: dict[str, bool], tenant: str, *, own_agent: bool = False
) -> Callable[[str], bool] | None:
    """``runtime.usage`` Rule 7: whether a paid stage is not calling its provider now (the
    budget was found spent at its last call; a role's own agent answers instead of the brain:
    ``runtime.role_agent`` Rule 4)."""
    if guard is None:
        return None

    def unpriced(stage: str) -> bool:
        if stage == "brain" and own_agent:
            return True
        return paid.get(stage, False) and guard.known_spent(tenant)

    return unpriced


class BudgetSpent(PluginError):
    """Rule 2: a paid stage without a fallback, for a tenant that spent its budget."""

    code = "budget_spent"

    def __init__(self, stage: str) -> None:
        super().__init__(
            f"the {stage} provider is not called: this tenant has spent its budget",
            retryable=False,
        )


class _Guarded(Generic[Stage]):
    """Rule 2 for one session's paid stage: the provider, the guard, the fallback."""

    def __init__(
        self, paid: Stage, *, guard: BudgetGuard, tenant: str, fallback: Stage | None
    ) -> None:
        self.paid = paid
        self.guard = guard
        self.tenant = tenant
        self.fallback = fallback


class BudgetedBrain(_Guarded[Brain]):
    """Rule 2 for one session's paid brain."""

    async def stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        if not await self.guard.spent(self.tenant):
            async for delta in self.paid.stream(request):
                yield delta
        elif self.fallback is not None:
            async for delta in self.fallback.stream(request):
                yield delta
        else:
            said = dominant_language(request.current_input)  # the person's, else the role's
            yield BrainDelta(text=BUDGET_SPENT[zh_or_en(said or request.language)])


class BudgetedASR(_Guarded[ASR]):
    """Rule 2 for one session's paid ASR."""

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        if not await self.guard.spent(self.tenant):
            return await self.paid.transcribe(utterance, language=language)
        if self.fallback is None:
            raise BudgetSpent("ASR")
        return await self.fallback.transcribe(utterance, language=language)


class BudgetedTTS(_Guarded[TTS]):
    """Rule 2 for one session's paid TTS."""

    async def stream(
        self, text: str, *, voice: str | None, language: str | None
    ) -> AsyncGenerator[SpeechChunk, None]:
        if not await self.guard.spent(self.tenant):
            tts = self.paid
        elif self.fallback is None:
            raise BudgetSpent("TTS")
        else:
            tts, voice = self.fallback, None  # the provider's voice names mean nothing to it
        stream = tts.stream(text, voice=voice, language=language)
        try:
            async for chunk in stream:
                yield chunk
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
