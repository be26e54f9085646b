"""What the brain is given for a turn: the thread's history within its budget, long-term memory,
the thread's learned facts, the person's words as enriched — and the thread's compaction after
an answer. One room of the engine (``pipeline/engine.py`` builds it and asks it per turn).

Theory of operation
-------------------
Rule 1. Nothing here fails a turn. A memory read, the thread's facts and the enrichment are each
        bounded (``memory_read_timeout_s``, ``enrichment_timeout_s``); one that fails or overruns
        is left out (a log line names its kind, never its content) and the turn goes on.
Rule 2. The history comes from the journal through ``ConversationHistory`` (the budgeted
        projection, checkpoints, compaction), up to the journal position of the turn's input;
        when the journal is unreachable (no position), what the session still holds (its buffer
        included), bounded by count, without the current input.
Rule 3. The long-term memory read was started with the turn (beside the input's recording): a
        read that is done is taken as it is, without a round of the event loop.
"""

from __future__ import annotations

import asyncio
import logging

from journal.errors import JournalError
from journal.events import ThreadRef
from journal.projection import render_context
from journal.store import JournalStore
from pipeline.content import TurnContent
from pipeline.engine_config import EngineSettings, InputEnrichment, Persona, ThreadMemoryHook
from pipeline.history import ConversationHistory
from plugins.contracts import ToolChoice, ToolSpec

log = logging.getLogger(__name__)

ALL_HISTORY = 2**62
"""``before_seq`` that takes the whole thread as context (an out-of-band response)."""


class TurnContextReader:
    """Reads a turn's context for the brain (module rules)."""

    def __init__(
        self,
        *,
        journal: JournalStore,
        history: ConversationHistory,
        thread: ThreadRef,
        settings: EngineSettings,
        enrichment: InputEnrichment | None = None,
        thread_memory: ThreadMemoryHook | None = None,
    ) -> None:
        self.journal = journal
        self.history = history
        self.thread = thread
        self.settings = settings
        self.enrichment = enrichment
        self.thread_memory = thread_memory

    async def enriched(self, text: str, seq: int | None) -> str:
        """The person's input as the brain sees it: rewritten by the session's
        ``InputEnrichment``, or as said (no hook, no journal position, no rewrite, a hook that
        failed or overran ``enrichment_timeout_s``). A barge-in cancels the wait."""
        if self.enrichment is None or seq is None:
            return text
        try:
            async with asyncio.timeout(self.settings.enrichment_timeout_s):
                rewritten = await self.enrichment.rewrite(text, seq=seq)
        except Exception as e:  # enrichment never fails the turn
            log.warning("input enrichment failed (the input goes on as said): %s", type(e).__name__)
            return text
        return rewritten or text

    async def content(
        self,
        current_input: str,
        *,
        before_seq: int | None,
        persona: Persona,
        instructions: str,
        tools: tuple[ToolSpec, ...],
        tool_choice: ToolChoice,
        max_output_tokens: int | None,
        memory: asyncio.Task[str | None] | None = None,
    ) -> TurnContent:
        """What the brain is given (Rules 2 and 3): ``before_seq`` is the input's journal
        position (``ALL_HISTORY``: everything so far; None: the journal is unreachable)."""
        thread_memory = await self._thread_memory_block(persona.language)
        if before_seq is not None:
            context = await self.history.context(
                self.thread,
                # The history's budget leaves room for the thread's facts too.
                instructions=f"{instructions}\n{thread_memory}" if thread_memory else instructions,
                tools=tools,
                current_input=current_input,
                language=persona.language,
                # The projector reads "everything so far" as None (it pages back from a seq).
                before_seq=None if before_seq == ALL_HISTORY else before_seq,
            )
        else:
            events = await self.journal.read_tail(self.thread, self.settings.history_events + 1)
            context = render_context(events[:-1], persona.language)
        return TurnContent(
            instructions=instructions,
            conversation_context=context.text,
            current_input=current_input,
            language=persona.language,
            memory_data=await self._memory_data(memory),
            thread_memory=thread_memory,
            tools=tools,
            history=context.history,
            tool_choice=tool_choice,
            max_output_tokens=max_output_tokens,
            role_id=persona.role_id,
            thread_id=self.thread.thread_id,
        )

    async def compact(self, language: str | None) -> None:
        """After an answer: the thread is compacted if it grew past its threshold (a failure
        waits for a later turn)."""
        try:
            await self.history.compact(self.thread, language=language)
        except JournalError as e:
            log.warning("compaction failed (will retry after a later turn): %s", e)

    async def _thread_memory_block(self, language: str | None) -> str | None:
        """The thread's learned facts for this turn (bounded like the memory read)."""
        if self.thread_memory is None:
            return None
        try:
            async with asyncio.timeout(self.settings.memory_read_timeout_s):
                return await self.thread_memory.read(language)
        except TimeoutError:
            log.warning("thread memory read timed out; the turn goes on without it")
            return None

    async def _memory_data(self, read: asyncio.Task[str | None] | None) -> str | None:
        if read is None:
            return None
        # Rule 3: asyncio.wait would still go round the loop (under load every round waits
        # behind every other session's frames).
        if not read.done():
            await asyncio.wait({read}, timeout=self.settings.memory_read_timeout_s)
        if not read.done():
            read.cancel()
            log.warning("memory read timed out; the turn goes on without memory")
            return None
        if read.cancelled() or read.exception() is not None:
            return None
        return read.result()


__all__ = ["ALL_HISTORY", "TurnContextReader"]
