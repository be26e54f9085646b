"""What the brain sees of the thread: budgeted projection per turn, compaction after it.

``ConversationHistory`` binds the journal to the budgeted projector (SPEC J-3, J-5: checkpoint +
tail by index, cost bounded by the budget) and, when checkpoints are stored, to the compactor
(J-4: verified summaries of older events). One instance serves one session; the projector (and
its cache of verified checkpoints) is shared by the process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from journal.budget import ContextBudget
from journal.checkpoints import CheckpointStore
from journal.compaction import CompactionPolicy, ThreadCompactor
from journal.events import ThreadRef
from journal.projection import RenderedContext
from journal.projector import BudgetedConversationContextProjector
from journal.store import JournalStore
from plugins.contracts import ToolSpec

log = logging.getLogger(__name__)


@dataclass
class ConversationHistory:
    journal: JournalStore
    checkpoints: CheckpointStore | None = None
    projector: BudgetedConversationContextProjector = field(
        default_factory=BudgetedConversationContextProjector
    )
    context_window: int = 8_192
    """Tokens of the brain's context window."""
    reserved_output: int = 1_024
    _compactor: ThreadCompactor | None = None

    def __post_init__(self) -> None:
        if self.checkpoints is not None:
            # The history budget a turn typically gets: the window less output, the safety
            # margin (10 %) and a little for instructions and the current input.
            history = max(64, int((self.context_window - self.reserved_output) * 0.85))
            self._compactor = ThreadCompactor(
                self.journal,
                self.checkpoints,
                policy=CompactionPolicy.for_budget(
                    history, max_summary_tokens=min(400, history // 4)
                ),
            )

    async def context(
        self,
        thread: ThreadRef,
        *,
        instructions: str,
        tools: Sequence[ToolSpec],
        current_input: str,
        language: str | None,
        before_seq: int | None,
    ) -> RenderedContext:
        """The history before the current input, within this turn's budget: its text and its
        turns."""
        budget = ContextBudget.for_turn(
            context_window=self.context_window,
            reserved_output=self.reserved_output,
            instructions=instructions,
            tools=tools,
            current_input=current_input,
        )
        projected = await self.projector.project_thread(
            self.journal,
            thread,
            budget=budget,
            language=language,
            checkpoints=self.checkpoints,
            before_seq=before_seq,
        )
        return RenderedContext(projected.conversation_context, projected.history)

    async def compact(self, thread: ThreadRef, *, language: str | None) -> None:
        """Summarise older events once the thread passes the threshold (idempotent)."""
        if self._compactor is None:
            return
        result = await self._compactor.compact(thread, language=language)
        log.debug("compaction: %s", result.outcome)
