"""The voice path's memory hook: one ``SessionMemory`` per voice session (SPEC MEM-2, MEM-5).

The engine calls ``read()`` when a turn starts (concurrently with transcription and journaling,
bounded by ``read_timeout_s``) and ``on_user_final(...)`` after it journaled a final user
message. Both first ask ``is_enabled()`` — the role's ``memory_enabled`` read once, at that
moment: the role is frozen for the rest of that read or extraction. With memory disabled
nothing is read, injected or extracted, and nothing is deleted.

A correction that names what it corrects ("I've moved to York, not Leeds", 「其实是七个人，不是
五个」: ``memory.extraction.corrected_values``) deletes the earlier entries holding the old
value and sharing another word with it, so what is no longer true is not said back beside what
is (an entry kept as said has no key for the correction to replace).

What the patterns find nothing in, a ``FactReader`` (when the process has a memory model) reads
in the background with the model (``memory/model_extraction.py``); its entries are saved
without a status event (the session may be over by then).

Extraction never fails the turn: every error is caught, logged (without content) and counted,
and reported to the client as an ``openrealtime.memory.status`` event through ``report``:
``{"status": "saved"|"unchanged"|"limit_reached"|"failed", "entries": [{id, kind, key,
action}], "code"?}``. Nothing is reported for a message with nothing to remember.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory.entries import MemoryDraft, MemorySource, SaveOutcome
from memory.extraction import Extracted, Subject, corrected_values, extract, next_subject
from memory.fact_reader import FactRead, FactReader
from memory.injection import DEFAULT_BUDGET_CHARS, DEFAULT_MAX_ENTRIES, render_memory_block
from memory.model_extraction import put_right, unread
from memory.store import MemoryStore
from pipeline.events import MemoryStatus, ServerEvent
from plugins.text import content_terms

log = logging.getLogger(__name__)

STATUS_EVENT = MemoryStatus.TYPE


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySettings:
    budget_chars: int = DEFAULT_BUDGET_CHARS
    """Characters of entry lines injected per turn."""
    max_entries: int = DEFAULT_MAX_ENTRIES
    """Most recent entries read per turn."""
    read_timeout_s: float = 0.5
    save_timeout_s: float = 5.0


@dataclass
class MemoryCounters:
    reads: int = 0
    read_failures: int = 0
    extractions: int = 0
    saved: int = 0
    failures: int = 0
    failure_codes: dict[str, int] = field(default_factory=dict)


class SessionMemory:
    def __init__(
        self,
        store: MemoryStore,
        *,
        tenant: str,
        user: str,
        role_id: str,
        language: str | None,
        is_enabled: Callable[[], Awaitable[bool]],
        report: Callable[[ServerEvent], None] | None = None,
        settings: MemorySettings | None = None,
        facts: FactReader | None = None,
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.user = user
        self.role_id = role_id
        self.language = language
        self.is_enabled = is_enabled
        self.report = report
        self.settings = settings or MemorySettings()
        self.counters = MemoryCounters()
        self.facts = facts
        """Reads, in the background, what the patterns found nothing in (``fact_reader``)."""
        self._subject: Subject | None = None
        """The relative or pet the person's last message spoke of: whom "he"/"she"/"it" at
        the start of the next means (``memory.extraction.next_subject``)."""
        self._keyed: Extracted | None = None
        """The last attribute-with-a-key the person's last message stated: what a bare
        value put right in the next one corrects (``memory.model_extraction.put_right``)."""

    async def read(self) -> str | None:
        """The ``<memory_data>`` block for this turn, or None (disabled, empty, failed)."""
        settings = self.settings
        self.counters.reads += 1
        try:
            async with asyncio.timeout(settings.read_timeout_s):
                if not await self.is_enabled():
                    return None
                entries = await self.store.list_entries(
                    self.tenant, self.user, self.role_id, limit=settings.max_entries
                )
        except Exception as e:  # a read failure never fails the turn
            self.counters.read_failures += 1
            log.warning("memory read failed (turn goes on without memory): %s", type(e).__name__)
            return None
        return render_memory_block(
            entries, budget_chars=settings.budget_chars, language=self.language
        )

    async def on_user_final(
        self, text: str, *, thread_id: str, seq: int | None, at: datetime
    ) -> None:
        """Extract and save what a final user message states; never raises."""
        try:
            outcomes = await self._extract(text, MemorySource(thread_id, seq, at))
        except Exception as e:  # a failed extraction must never fail the turn
            code = getattr(e, "code", "memory_error")
            self.counters.failures += 1
            self.counters.failure_codes[code] = self.counters.failure_codes.get(code, 0) + 1
            log.warning("memory extraction failed: %s (%s)", type(e).__name__, code)
            self._report({"status": "failed", "code": code, "entries": []})
            return
        if not outcomes:
            return
        changed = [o for o in outcomes if o.changed]
        self.counters.saved += len(changed)
        if changed:
            status = "saved"
        elif any(o.action == "full" for o in outcomes):
            status = "limit_reached"
        else:
            status = "unchanged"
        self._report(
            {
                "status": status,
                "entries": [
                    {
                        "id": o.entry.id if o.entry else None,
                        "kind": o.entry.kind if o.entry else None,
                        "key": o.entry.key if o.entry else None,
                        "action": o.action,
                    }
                    for o in outcomes
                ],
            }
        )

    async def _extract(self, text: str, source: MemorySource) -> list[SaveOutcome]:
        if not await self.is_enabled():
            return []
        subject, self._subject = self._subject, next_subject(text, self._subject)
        found = extract(text, subject)
        if not found:
            corrected = put_right(text, self._keyed)
            found = [corrected] if corrected is not None else []
        self._keyed = next((item for item in reversed(found) if item.key is not None), None)
        if self.facts is not None:
            for stated in unread(text, found):
                read = FactRead(
                    self.tenant, self.user, self.role_id, stated, source, self.is_enabled
                )
                self.facts.offer(read)
        outcomes: list[SaveOutcome] = []
        if found:
            self.counters.extractions += 1
            async with asyncio.timeout(self.settings.save_timeout_s):
                for item in found:
                    draft = MemoryDraft(item.kind, item.content, item.key, "extraction", source)
                    saved = await self.store.save(self.tenant, self.user, self.role_id, draft)
                    outcomes.append(saved)
        await self._forget_corrected(text, source)
        return outcomes

    async def _forget_corrected(self, text: str, source: MemorySource) -> None:
        """A correction that names what it corrects ("I've moved to York, not Leeds", 「其实是
        七个人，不是五个」) deletes the earlier entries that said it: an entry holding an old
        value and sharing another word with the correction ("我们一共五个人"), so what is no
        longer true is not said back beside what is. An entry that only mentions the old
        value ("I'm driving down from Leeds at six") stays."""
        olds = corrected_values(text)
        if not olds:
            return
        said = content_terms(text)
        for old in olds:
            said -= content_terms(old)
        async with asyncio.timeout(self.settings.save_timeout_s):
            entries = await self.store.list_entries(self.tenant, self.user, self.role_id)
            for entry in entries:
                if entry.source_thread_id == source.thread_id and entry.source_seq == source.seq:
                    continue  # this message's own
                content = entry.content.casefold()
                if any(old.casefold() in content for old in olds) and said & content_terms(
                    entry.content
                ):
                    await self.store.delete(
                        self.tenant, self.user, entry.id, revision=entry.revision
                    )

    def _report(self, body: dict[str, Any]) -> None:
        if self.report is not None:
            self.report(MemoryStatus(self.role_id, body))
