"""Input enrichment in a voice session (SPEC RM-5, RM-6): the engine's ``InputEnrichment``.

Theory of operation
-------------------
The prompt, the parse and the checks are ``memory/enrichment.py``; this module runs them for
one session (one thread of one user, one role) when a turn's input is the person's words:

1. In order, each step able to end it with the input unchanged (an outcome code, counted):
   long-term memory off for the user and role (``disabled``, read anew each turn like the
   memory read: ``runtime.memory_hook.memory_switch``); the role's settings name no memory
   model (``no_memory_model``); the person sees no visible current entry in the role's pool
   (``no_entries``: ``hasEntries`` false — the model is never called); no entry fits the text
   budget (``no_entry_fits``); the input is empty or too long; no journal position (the
   record could not say which input it rewrote).
2. The model is called through ``MemoryModelCalls.call(purpose="enrich")``, which owns the
   model choice, the budget, the concurrency gate and the call log (RM-6, RM-8); ``None`` from
   it (``no_answer``: no model, budget spent, timed out, failed) leaves the input unchanged.
3. The answer is judged (``memory.enrichment.judge``); a refusal leaves the input unchanged
   (its reason code is counted and logged). An accepted rewrite is used only once its
   ``Enrichment`` record (text, original, entry ids, thread, seq) is saved: the person can
   always see what the brain was given instead of their words.
4. Bounded: the whole enrichment of a turn — the switch, the settings, the visibility read
   (itself at most ``read_timeout_s``), the model's queueing and answer, the record — ends
   within ``timeout_s`` (15 s, RM-6): the model gets what is left less ``save_timeout_s``,
   kept for the record. Past the bound: ``timeout``, the input unchanged. Any error:
   ``failed`` (logged by type), the input unchanged. Cancellation (a barge-in) propagates and
   cancels the model call with it; nothing is recorded.
5. Logs and counters carry outcome codes only, never the input, the entries or the rewrite.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Protocol

from journal.events import ThreadRef
from memory.enrichment import EnrichmentLimits, Refused, build_prompt, judge, skip_reason
from memory.pool import Reader
from memory.pool_store import PoolStore
from memory.role_records import Enrichment, MemoryModelCalls, RoleRecords, new_record_id
from runtime.memory_hook import HasRoles, MemorySwitch, memory_switch
from runtime.roles import Role

log = logging.getLogger(__name__)


class EnrichmentServices(HasRoles, Protocol):
    """What a session's enrichment takes of the services."""

    memory_calls: MemoryModelCalls | None
    pool: PoolStore
    role_records: RoleRecords


class SessionEnrichment:
    """``pipeline.engine_config.InputEnrichment`` for one session (module docstring)."""

    def __init__(
        self,
        *,
        pool: PoolStore,
        records: RoleRecords,
        calls: MemoryModelCalls,
        thread: ThreadRef,
        role_id: str,
        is_enabled: MemorySwitch,
        limits: EnrichmentLimits | None = None,
    ) -> None:
        self.pool = pool
        self.records = records
        self.calls = calls
        self.thread = thread
        self.role_id = role_id
        self.is_enabled = is_enabled
        self.limits = limits or EnrichmentLimits()
        self.reader = Reader(thread.user, thread.tenant, frozenset({role_id}))
        self.outcomes: Counter[str] = Counter()
        """How each turn's enrichment ended, by code (rule 1–4 and ``rewritten``)."""

    async def rewrite(self, text: str, *, seq: int) -> str | None:
        """The rewrite the brain sees instead of ``text``, or None (the input unchanged)."""
        skipped = skip_reason(text, self.limits)
        if skipped is not None:
            self.outcomes[skipped] += 1
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                rewritten, outcome = await self._rewrite(text, seq, deadline)
        except TimeoutError:
            rewritten, outcome = None, "timeout"
        except Exception as e:  # enrichment never fails the turn (rule 4)
            log.warning("input enrichment failed (input unchanged): %s", type(e).__name__)
            rewritten, outcome = None, "failed"
        self.outcomes[outcome] += 1
        if outcome != "rewritten":
            log.debug("input enrichment: %s", outcome)
        return rewritten

    async def _rewrite(self, text: str, seq: int, deadline: float) -> tuple[str | None, str]:
        tenant, role_id, limits = self.thread.tenant, self.role_id, self.limits
        if not await self.is_enabled():
            return None, "disabled"
        settings = await self.records.settings(tenant, role_id)
        if settings.memory_model is None:
            return None, "no_memory_model"
        async with asyncio.timeout(limits.read_timeout_s):
            entries = await self.pool.read_visible(tenant, role_id, self.reader, current_only=True)
        prompt = build_prompt(text, entries, instructions=settings.instructions, limits=limits)
        if isinstance(prompt, str):
            return None, prompt
        loop = asyncio.get_running_loop()
        left = deadline - loop.time() - limits.save_timeout_s
        if left <= 0:
            return None, "timeout"
        answer = await self.calls.call(
            tenant,
            role_id,
            "enrich",
            prompt.messages,
            prompt.schema,
            max_tokens=prompt.max_tokens,
            timeout_s=left,
            thread_id=self.thread.thread_id,
        )
        if answer is None:
            return None, "no_answer"
        verdict = judge(prompt, answer)
        if isinstance(verdict, Refused):
            log.info("input enrichment refused: %s", verdict.reason)
            return None, verdict.reason
        record = Enrichment(
            id=new_record_id("enr"),
            tenant=tenant,
            role_id=role_id,
            thread_id=self.thread.thread_id,
            seq=seq,
            text=verdict.text,
            original=text,
            entry_ids=verdict.entry_ids,
        )
        async with asyncio.timeout(limits.save_timeout_s):
            await self.records.add_enrichment(record)
        return verdict.text, "rewritten"


def session_enrichment(
    services: EnrichmentServices,
    thread: ThreadRef,
    role: Role,
    *,
    limits: EnrichmentLimits | None = None,
) -> SessionEnrichment | None:
    """The session's enrichment, or None when the services call no memory model at all."""
    calls = services.memory_calls
    if calls is None:
        return None
    return SessionEnrichment(
        pool=services.pool,
        records=services.role_records,
        calls=calls,
        thread=thread,
        role_id=role.id,
        is_enabled=memory_switch(services, thread, role.id),
        limits=limits,
    )
