"""Summary compaction (SPEC J-4): folding a thread's older events into a checkpoint.

Theory of operation
-------------------
*Un-summarised history* is the events after the thread's latest checkpoint. When its tokens
pass ``CompactionPolicy.threshold_tokens`` (or it holds more than ``2 × max_segment_events``
events), one compaction round:

1. keeps the newest ``keep_recent_tokens`` of it raw — recent turns stay verbatim;
2. takes the older part, at most ``max_segment_events`` events, as the *segment*, moving its end
   back so that no tool call is separated from its result and, when it can, so that the raw
   part starts with a user input (a turn boundary);
3. verifies the latest checkpoint against its own segment (a broken chain is not extended:
   ``CHAIN_BROKEN``, nothing written);
4. asks the ``Summarizer`` for the new rolling summary — the previous summary folded together
   with the segment, at most ``max_summary_tokens`` — and stores a checkpoint for
   ``from_seq … to_seq`` with the checksum of its sources (``journal/checkpoints.py``).

Deleted and truncated items (``journal/amendments.py``): the summarizer is given the segment as
amended by every amendment the round read — a deleted item (with its tool exchange) left out, a
truncated output cut to its heard prefix — and token counts are of the amended events. A round
reads all un-summarised history, so it knows every amendment journaled so far, unless a backlog
longer than its window (``2 × max_segment_events``) has built up: then it knows those in the
window and in the thread's tail. The checksum is over the stored events, as they are. An item
deleted after it was summarised stays in that summary (amendments rule 7).

Every read is bounded by the policy (``read(after_seq=…, limit=…)`` from the latest
checkpoint), never by the thread's length. Idempotent and safe under concurrent runs on one
thread: runs that see the same state compute the same segment; the store accepts the first
checkpoint and returns it to identical retries, and refuses a different one at the same place
(``RACED``), so the chain never forks. A run that finds history below the threshold writes
nothing.

The summary is written by a ``Summarizer`` (``journal/summarizers.py``): the offline
``ExtractiveSummarizer`` by default, or a model through ``ModelSummarizer``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from journal.amendments import apply_amendments
from journal.checkpoints import (
    MAX_SUMMARY_CHARS,
    Checkpoint,
    CheckpointStore,
    NewCheckpoint,
    source_checksum,
)
from journal.errors import CheckpointConflict
from journal.events import EventKind, JournalEvent, ThreadRef
from journal.projection import event_line
from journal.store import JournalStore
from journal.summarizers import ExtractiveSummarizer, Summarizer, SummaryRequest
from journal.tokens import EstimatingTokenCounter, TokenCounter

logger = logging.getLogger(__name__)

__all__ = ["CompactionOutcome", "CompactionPolicy", "CompactionResult", "ThreadCompactor"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionPolicy:
    """When and how much to compact (see the module docstring). Defaults suit a few-thousand
    token history budget: compaction keeps un-summarised history under ~3,000 tokens."""

    threshold_tokens: int = 3000
    keep_recent_tokens: int = 1000
    max_segment_events: int = 400
    max_summary_tokens: int = 400
    max_rounds: int = 4
    """Rounds per ``compact`` call (each one segment): bounds one call on a long backlog."""

    @classmethod
    def for_budget(cls, history_tokens: int, *, max_summary_tokens: int = 400) -> CompactionPolicy:
        """A policy matched to a projection budget: compaction starts when the raw history
        would no longer fit beside the summary (90% of what the summary leaves) and keeps half
        of that raw, so a turn sees the summary plus 45–90% of the budget in verbatim events."""
        room = max(4, history_tokens - max_summary_tokens)
        threshold = max(2, int(room * 0.9))
        return cls(
            threshold_tokens=threshold,
            keep_recent_tokens=threshold // 2,
            max_summary_tokens=max_summary_tokens,
        )

    def __post_init__(self) -> None:
        if not 0 <= self.keep_recent_tokens < self.threshold_tokens:
            raise ValueError("keep_recent_tokens must be below threshold_tokens")
        if self.max_segment_events < 1 or self.max_summary_tokens < 1 or self.max_rounds < 1:
            raise ValueError("max_segment_events, max_summary_tokens, max_rounds must be >= 1")


class CompactionOutcome(enum.StrEnum):
    COMPACTED = "compacted"
    BELOW_THRESHOLD = "below_threshold"
    RACED = "raced"
    """Another run extended the chain first; nothing written by this one."""
    CHAIN_BROKEN = "chain_broken"
    """The latest checkpoint does not verify; it is not built upon (an operator should look)."""


@dataclass(frozen=True, slots=True)
class CompactionResult:
    outcome: CompactionOutcome
    checkpoint: Checkpoint | None
    """The latest checkpoint after this call."""
    rounds: int
    """Checkpoints this call wrote (or found already written by an identical run)."""
    events_summarized: int


class ThreadCompactor:
    """Runs compaction rounds for threads of one journal (see the module docstring)."""

    def __init__(
        self,
        store: JournalStore,
        checkpoints: CheckpointStore,
        *,
        summarizer: Summarizer | None = None,
        policy: CompactionPolicy | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        self.store = store
        self.checkpoints = checkpoints
        self.counter = counter or EstimatingTokenCounter()
        self.summarizer = summarizer or ExtractiveSummarizer(counter=self.counter)
        self.policy = policy or CompactionPolicy()

    async def compact(self, thread: ThreadRef, *, language: str | None = None) -> CompactionResult:
        """Compact ``thread`` until its un-summarised history is below the threshold (at most
        ``policy.max_rounds`` rounds)."""
        rounds = summarized = 0
        outcome = CompactionOutcome.BELOW_THRESHOLD
        latest = await self.checkpoints.latest(thread)
        while rounds < self.policy.max_rounds:
            # A checkpoint this call just wrote was made from events it read: no need to
            # verify it again before building on it.
            trusted = rounds > 0
            outcome, latest, count = await self._round(thread, latest, language, trusted)
            if outcome is not CompactionOutcome.COMPACTED:
                break
            rounds += 1
            summarized += count
        if rounds and outcome is CompactionOutcome.BELOW_THRESHOLD:
            outcome = CompactionOutcome.COMPACTED
        return CompactionResult(outcome, latest, rounds, summarized)

    async def _round(
        self, thread: ThreadRef, latest: Checkpoint | None, language: str | None, trusted: bool
    ) -> tuple[CompactionOutcome, Checkpoint | None, int]:
        policy = self.policy
        start = latest.to_seq if latest is not None else 0
        window_limit = 2 * policy.max_segment_events
        window = await self.store.read(thread, after_seq=start, limit=window_limit)
        if len(window) < window_limit:
            # All un-summarised history is in the window.
            shown = _amended_by_seq(window)
            costs = [self._cost(shown.get(e.seq)) for e in window]
            if sum(costs) < policy.threshold_tokens:
                return CompactionOutcome.BELOW_THRESHOLD, latest, 0
            keep_from = self._keep_from(window, costs)
        else:
            # More than the window: past the threshold by definition; find what to keep raw
            # at the thread's end.
            tail = await self.store.read_tail(thread, window_limit)
            shown = _amended_by_seq(window, tail)
            keep_from = self._keep_from(tail, [self._cost(shown.get(e.seq)) for e in tail])
        end = self._segment_end(window, keep_from)
        if end == 0:
            return CompactionOutcome.BELOW_THRESHOLD, latest, 0
        segment = window[:end]
        previous_checksum = None
        if latest is not None:
            if not trusted and not await self._verifies(thread, latest):
                logger.warning("checkpoint chain of a thread does not verify: not extended")
                return CompactionOutcome.CHAIN_BROKEN, latest, 0
            previous_checksum = latest.checksum
        summary = await self.summarizer.summarize(
            SummaryRequest(
                previous=latest.summary if latest is not None else None,
                events=[shown[e.seq] for e in segment if e.seq in shown],
                language=language,
                max_tokens=policy.max_summary_tokens,
            )
        )
        checkpoint = NewCheckpoint(
            from_seq=segment[0].seq,
            to_seq=segment[-1].seq,
            summary=summary.text[:MAX_SUMMARY_CHARS],
            checksum=source_checksum(segment, previous_checksum),
            previous_checksum=previous_checksum,
            summarizer=summary.summarizer,
        )
        try:
            stored = await self.checkpoints.put(thread, checkpoint)
        except CheckpointConflict:
            return CompactionOutcome.RACED, await self.checkpoints.latest(thread), 0
        return CompactionOutcome.COMPACTED, stored, len(segment)

    def _cost(self, event: JournalEvent | None) -> int:
        """Tokens ``event`` takes in the history (None: a hidden one takes none)."""
        line = None if event is None else event_line(event, None)
        return 0 if line is None else self.counter.count(line) + 1

    def _keep_from(self, events: Sequence[JournalEvent], costs: Sequence[int]) -> int:
        """The seq from which the newest ``keep_recent_tokens`` of ``events`` start."""
        kept = 0
        index = len(events)
        while index > 0 and kept + costs[index - 1] <= self.policy.keep_recent_tokens:
            index -= 1
            kept += costs[index]
        return events[index].seq if index < len(events) else events[-1].seq + 1

    def _segment_end(self, window: Sequence[JournalEvent], keep_from: int) -> int:
        """How many of ``window``'s first events to summarise (0: none can be, safely)."""
        end = sum(1 for e in window if e.seq < keep_from)
        end = min(end, self.policy.max_segment_events)
        # Prefer a turn boundary: the raw part starts with a user input.
        for i in range(end, end // 2, -1):
            if i < len(window) and window[i].kind is EventKind.USER_INPUT:
                end = i
                break
        # Never separate a tool call from its results: cut before the earliest call whose
        # result lies after the cut (repeat, since moving the cut can split another pair).
        while end > 0:
            calls = {
                str(e.payload.get("call_id")): i
                for i, e in enumerate(window[:end])
                if e.kind is EventKind.TOOL_CALL
            }
            split = [
                calls[str(e.payload.get("call_id"))]
                for e in window[end:]
                if e.kind is EventKind.TOOL_RESULT and str(e.payload.get("call_id")) in calls
            ]
            if not split:
                break
            end = min(split)
        return end

    async def _verifies(self, thread: ThreadRef, checkpoint: Checkpoint) -> bool:
        length = checkpoint.to_seq - checkpoint.from_seq + 1
        if length > 4 * self.policy.max_segment_events:
            return False
        segment = await self.store.read(thread, after_seq=checkpoint.from_seq - 1, limit=length)
        return checkpoint.verifies(segment)


def _amended_by_seq(*reads: Sequence[JournalEvent]) -> dict[int, JournalEvent]:
    """The events of ``reads`` (stretches of one thread, possibly overlapping) that the history
    still shows, amended, by seq (``journal/amendments.py``)."""
    merged = {e.seq: e for read in reads for e in read}
    return {e.seq: e for e in apply_amendments(merged[seq] for seq in sorted(merged))}
