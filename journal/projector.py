"""Budgeted projection (SPEC J-3, J-5): the conversation context one turn gets from the journal.

Theory of operation
-------------------
A turn's ``ContextBudget`` (``journal/budget.py``) reserves the output, tool schemas,
instructions, current input and a safety margin out of the model's context window; what is
left, ``history``, is the conversation context's budget. The projector fills it from the
journal events *before* the current input:

Rule 1 — newest first. Events are taken from the newest backwards while they fit, and rendered
    oldest → newest, one line each (``journal/projection.py``); the result holds the same
    events as turns too (``history``, what a brain reads), in the same order. A user input or
    assistant output that does not fit ends the walk: everything older is dropped, so the
    context is a contiguous recent stretch.
Rule 2 — whole events only. An event is in (its whole line) or out; nothing is cut in half.
Rule 3 — tool calls and their results are one unit: kept together or dropped together. A unit
    that does not fit is dropped and the walk goes on past it (a long tool result should not
    cost the whole history); a call without its result, or a result whose call is out of reach,
    is dropped.
Rule 4 — an interrupted assistant output projects only its heard prefix (``heard_text``).
Rule 5 — a verified summary stands in for the events it covers. The thread's latest checkpoint
    (``journal/checkpoints.py``) summarises events ``1 … to_seq``; if it verifies — its digest
    matches and its segment's events still hash to its checksum — its line goes first and the
    walk stops at ``to_seq``. Its cost is reserved before the walk, but only up to
    ``max_summary_share`` of the budget. A checkpoint that does not verify is ignored: the walk
    goes on through the raw events instead (``summary_rejected`` in the result).
Rule 6 — the budget is never exceeded: every line is charged its tokens plus its line break
    (``journal/tokens.py`` counts are additive over lines), and ``tokens`` in the result is the
    rendered context's exact count.
Rule 7 — amendments are folded in as the walk goes (``journal/amendments.py``): a deleted item
    is not history (nor, for a tool call or result, the rest of its exchange), a truncated
    assistant output projects its new heard prefix (rule 4), and the amendment events render
    to nothing. Walking newest first, every amendment of an event is met before the event.
    An amendment of an event a verified summary covers changes nothing: the summary stays.

Cost (J-5): one probe for the latest checkpoint, one bounded read of its segment to verify it
(remembered per process: a verified checkpoint is not re-read while it stays in a bounded LRU
cache), then pages read backwards by seq from the current input — ``read_tail`` /
``read(after_seq=…, limit=…)``, both walks of the primary-key index — sized from the budget and
the tokens per event seen so far, and never more than ``max_scan_events`` rows in all. Nothing
here reads the thread from its start; ``ProjectedContext.rows_read`` reports what was read.

``project`` is the pure core (events in, context out); ``project_thread`` is the per-turn entry
point that does the reading.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from journal.amendments import AmendmentFold
from journal.budget import ContextBudget
from journal.checkpoints import Checkpoint, CheckpointStore
from journal.events import EventKind, JournalEvent, ThreadRef
from journal.projection import event_turn, summary_turn, turn_line
from journal.store import JournalStore
from journal.tokens import EstimatingTokenCounter, TokenCounter
from plugins.contracts import HistoryTurn

__all__ = [
    "BudgetedConversationContextProjector",
    "ContextBudget",
    "ProjectedContext",
    "project_conversation_context",
]

NEWLINE_TOKENS = 1
"""What the line break between two context lines costs (``count("a\\nb") == 3``)."""


@dataclass(frozen=True, slots=True)
class ProjectedContext:
    """A turn's ``conversation_context`` and how it was made."""

    conversation_context: str
    history: tuple[HistoryTurn, ...]
    """The turns of ``conversation_context``, one a line, in its order."""
    tokens: int
    """Tokens of ``conversation_context`` (the projector's counter); never above ``budget``."""
    budget: int
    events_total: int
    """Events before the current input."""
    events_included: int
    """Events whose line is in the context (or that project to nothing, e.g. nothing heard)."""
    events_summarized: int
    """Events the summary stands in for (``1 … summary_to_seq``)."""
    events_dropped: int
    """The rest: too old for the budget, tool units that did not fit, orphans, deleted items and
    the amendment events themselves (rule 7)."""
    summary_used: bool
    summary_to_seq: int | None
    summary_rejected: bool
    """A checkpoint was found but did not verify (or did not fit), so raw events were used."""
    first_seq: int | None
    last_seq: int | None
    rows_read: int
    """Journal rows read to make this projection (checkpoint verification included)."""


class _Walk:
    """Rules 1–4, 6 and 7 over events fed newest first (sans-I/O: the caller does the reading)."""

    def __init__(self, budget: int, counter: TokenCounter, language: str | None) -> None:
        self.remaining = budget
        self.counter = counter
        self.language = language
        self.kept: list[tuple[int, HistoryTurn, str]] = []
        self.included = 0
        self.charged = 0
        self.stopped = False
        self._pending: dict[str, list[tuple[JournalEvent, HistoryTurn | None]]] = {}
        self._amendments = AmendmentFold()
        self.first_seq: int | None = None
        self.last_seq: int | None = None

    def cost(self, line: str | None) -> int:
        return 0 if line is None else self.counter.count(line) + NEWLINE_TOKENS

    def line(self, turn: HistoryTurn | None) -> str | None:
        return None if turn is None else turn_line(turn, self.language)

    def feed(self, event: JournalEvent) -> None:
        if self.stopped:
            return
        shown = self._amendments.feed(event)
        if shown is None:
            # Deleted, or an amendment (rule 7). A deleted call's results, already pending,
            # are dropped with it: a call that is not fed has no unit (rule 3).
            return
        event = shown
        kind = event.kind
        if kind is EventKind.TOOL_RESULT:
            call_id = event.payload.get("call_id")
            if isinstance(call_id, str):
                self._pending.setdefault(call_id, []).append((event, event_turn(event)))
            return
        if kind is EventKind.TOOL_CALL:
            call_id = event.payload.get("call_id")
            results = self._pending.pop(call_id, None) if isinstance(call_id, str) else None
            if not results:
                return  # a call without a result: dropped (rule 3)
            unit = [
                (member, turn, self.line(turn))
                for member, turn in [(event, event_turn(event)), *reversed(results)]
            ]
            cost = sum(self.cost(line) for _, _, line in unit)
            if cost <= self.remaining:
                for member, turn, line in unit:
                    self._keep(member, turn, line, self.cost(line))
                self.remaining -= cost
            return  # a unit that does not fit is skipped, not the end of the walk (rule 3)
        if kind in (EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT):
            turn = event_turn(event)
            line = self.line(turn)
            cost = self.cost(line)
            if cost > self.remaining:
                self.stopped = True
                return
            self._keep(event, turn, line, cost)
            self.remaining -= cost
        # Anything else (a summary event written into the journal, an unknown kind) is not
        # trusted as context and is dropped.

    def _keep(
        self, event: JournalEvent, turn: HistoryTurn | None, line: str | None, cost: int
    ) -> None:
        self.included += 1
        self.charged += cost
        if self.last_seq is None or event.seq > self.last_seq:
            self.last_seq = event.seq
        if self.first_seq is None or event.seq < self.first_seq:
            self.first_seq = event.seq
        if turn is not None and line is not None:
            self.kept.append((event.seq, turn, line))

    def rendered(self) -> list[tuple[HistoryTurn, str]]:
        """The kept turns and their lines, oldest first."""
        return [(turn, line) for _, turn, line in sorted(self.kept, key=lambda kept: kept[0])]


class BudgetedConversationContextProjector:
    """Renders a turn's conversation context within a token budget (see the module docstring).

    Settings (keyword-only): ``counter`` (default ``EstimatingTokenCounter()``);
    ``max_summary_share`` of the budget a summary may take (0.5); ``max_scan_events`` rows a
    projection reads at most, checkpoint verification aside (4096); ``max_verify_events`` the
    longest checkpoint segment it will read to verify (2048; compaction keeps segments shorter);
    ``verified_cache_size`` checkpoints remembered as verified (4096; 0 re-verifies every turn);
    ``min_page``/``max_page`` bound each read (16 / 1024 rows).
    """

    def __init__(
        self,
        *,
        counter: TokenCounter | None = None,
        max_summary_share: float = 0.5,
        max_scan_events: int = 4096,
        max_verify_events: int = 2048,
        verified_cache_size: int = 4096,
        min_page: int = 16,
        max_page: int = 1024,
    ) -> None:
        if not 0 <= max_summary_share <= 1:
            raise ValueError("max_summary_share must be within [0, 1]")
        if min_page < 1 or max_page < min_page or max_scan_events < 1:
            raise ValueError("page sizes and max_scan_events must be positive")
        self.counter = counter or EstimatingTokenCounter()
        self.max_summary_share = max_summary_share
        self.max_scan_events = max_scan_events
        self.max_verify_events = max_verify_events
        self.verified_cache_size = verified_cache_size
        self.min_page = min_page
        self.max_page = max_page
        self._verified: OrderedDict[tuple[ThreadRef, int, int, str, str], None] = OrderedDict()

    # ------------------------------------------------------------------ the pure core

    def project(
        self,
        events: Sequence[JournalEvent],
        *,
        budget: int | ContextBudget,
        language: str | None,
        summary: Checkpoint | None = None,
    ) -> ProjectedContext:
        """Project ``events`` (the thread's events before the current input, oldest first).

        ``summary`` must already be verified (``project_thread`` does that); events it covers
        are ignored. Reads nothing.
        """
        history = budget.history if isinstance(budget, ContextBudget) else budget
        walk, summary_entry, summary_charge = self._start(history, language, summary)
        floor = summary.to_seq if summary_entry is not None and summary is not None else 0
        for event in reversed(events):
            if event.seq <= floor or walk.stopped:
                break
            walk.feed(event)
        total = events[-1].seq if events else 0
        return self._result(
            walk,
            history,
            summary_entry,
            summary_charge,
            summary if summary_entry is not None else None,
            rejected=summary is not None and summary_entry is None,
            events_total=total,
            rows_read=0,
        )

    def _start(
        self, history: int, language: str | None, summary: Checkpoint | None
    ) -> tuple[_Walk, HistoryTurn | None, int]:
        walk = _Walk(0, self.counter, language)
        turn = summary_turn(summary.summary) if summary is not None else None
        charge = walk.cost(walk.line(turn))
        if turn is None or charge > self.max_summary_share * history or charge > history + 1:
            turn, charge = None, 0
        # +1: every line is charged its line break, but the last line has none.
        walk.remaining = history + NEWLINE_TOKENS - charge if history > 0 else 0
        return walk, turn, charge

    def _result(
        self,
        walk: _Walk,
        history: int,
        summary_entry: HistoryTurn | None,
        summary_charge: int,
        summary: Checkpoint | None,
        *,
        rejected: bool,
        events_total: int,
        rows_read: int,
    ) -> ProjectedContext:
        kept = walk.rendered()
        if summary_entry is not None:
            kept.insert(0, (summary_entry, turn_line(summary_entry, walk.language)))
        rendered = "\n".join(line for _, line in kept)
        # Counts are additive over lines: the charges minus the last line's (absent) break.
        tokens = walk.charged + summary_charge - NEWLINE_TOKENS if kept else 0
        summarized = summary.to_seq if summary is not None else 0
        return ProjectedContext(
            conversation_context=rendered,
            history=tuple(turn for turn, _ in kept),
            tokens=tokens,
            budget=history,
            events_total=events_total,
            events_included=walk.included,
            events_summarized=summarized,
            events_dropped=max(0, events_total - walk.included - summarized),
            summary_used=summary is not None,
            summary_to_seq=summary.to_seq if summary is not None else None,
            summary_rejected=rejected,
            first_seq=walk.first_seq,
            last_seq=walk.last_seq,
            rows_read=rows_read,
        )

    # ------------------------------------------------------------------ reading the journal

    async def project_thread(
        self,
        store: JournalStore,
        thread: ThreadRef,
        *,
        budget: int | ContextBudget,
        language: str | None,
        checkpoints: CheckpointStore | None = None,
        before_seq: int | None = None,
    ) -> ProjectedContext:
        """The per-turn entry point: project ``thread``'s events with ``seq < before_seq``.

        Pass the current input's seq as ``before_seq`` (``append`` returns it); with None the
        whole thread so far is history (the current input is not in the journal yet).
        """
        history = budget.history if isinstance(budget, ContextBudget) else budget
        verify_rows = rows = 0  # rows read to verify the checkpoint / to walk the tail
        summary: Checkpoint | None = None
        rejected = False
        if checkpoints is not None:
            found = await checkpoints.latest(thread, before_seq=before_seq)
            if found is not None:
                verified, read = await self._verify(store, thread, found)
                verify_rows = read
                if verified:
                    summary = found
                else:
                    rejected = True
        walk, summary_entry, summary_charge = self._start(history, language, summary)
        if summary is not None and summary_entry is None:
            summary, rejected = None, True  # verified, but larger than its share of the budget
        floor = summary.to_seq if summary is not None else 0

        if before_seq is None:
            first_page = self._first_page(history)
            page = []
            if floor:
                # Compaction keeps the stretch after a checkpoint short: usually one forward
                # read from the checkpoint gets all of it, and nothing before it.
                page = await store.read(thread, after_seq=floor, limit=first_page + 1)
                rows += len(page)
            if not floor or len(page) > first_page:
                page = await store.read_tail(thread, first_page)
                rows += len(page)
            # An empty read: nothing after the checkpoint (or an empty thread).
            upper = page[-1].seq + 1 if page else floor + 1
            lowest = page[0].seq if page else floor + 1
            self._feed(walk, page, floor)
        else:
            upper = lowest = max(before_seq, 1)
        while not walk.stopped and lowest - 1 > floor and rows < self.max_scan_events:
            size = min(self._next_page(walk, history), self.max_scan_events - rows)
            after = max(floor, lowest - 1 - size)
            page = await store.read(thread, after_seq=after, limit=lowest - 1 - after)
            rows += len(page)
            if not page:
                break
            self._feed(walk, page, floor)
            lowest = page[0].seq
        return self._result(
            walk,
            history,
            summary_entry,
            summary_charge,
            summary,
            rejected=rejected,
            events_total=upper - 1,
            rows_read=verify_rows + rows,
        )

    @staticmethod
    def _feed(walk: _Walk, page: Sequence[JournalEvent], floor: int) -> None:
        for event in reversed(page):
            if event.seq <= floor or walk.stopped:
                return
            walk.feed(event)

    def _first_page(self, history: int) -> int:
        # A conversational line is rarely under ~20 tokens: enough rows for the budget in one
        # read most of the time, without reading far more than it needs (the next pages are
        # sized from what the first one held).
        return max(self.min_page, min(self.max_page, history // 20 + 1))

    def _next_page(self, walk: _Walk, history: int) -> int:
        used = history - walk.remaining
        per_event = used / walk.included if walk.included and used > 0 else 20.0
        wanted = int(walk.remaining / max(per_event, 1.0) * 1.25) + 4
        return max(self.min_page, min(self.max_page, wanted))

    async def _verify(
        self, store: JournalStore, thread: ThreadRef, checkpoint: Checkpoint
    ) -> tuple[bool, int]:
        """Whether ``checkpoint`` verifies against the stored events; rows read to find out."""
        key = (
            thread,
            checkpoint.from_seq,
            checkpoint.to_seq,
            checkpoint.checksum,
            checkpoint.digest,
        )
        if key in self._verified:
            self._verified.move_to_end(key)
            return True, 0
        length = checkpoint.to_seq - checkpoint.from_seq + 1
        if not checkpoint.intact() or length > self.max_verify_events:
            return False, 0
        segment = await store.read(thread, after_seq=checkpoint.from_seq - 1, limit=length)
        if not checkpoint.verifies(segment):
            return False, len(segment)
        if self.verified_cache_size > 0:
            self._verified[key] = None
            while len(self._verified) > self.verified_cache_size:
                self._verified.popitem(last=False)
        return True, len(segment)


_DEFAULT_PROJECTOR = BudgetedConversationContextProjector()


async def project_conversation_context(
    store: JournalStore,
    thread: ThreadRef,
    *,
    budget: int | ContextBudget,
    language: str | None,
    checkpoints: CheckpointStore | None = None,
    before_seq: int | None = None,
    projector: BudgetedConversationContextProjector | None = None,
) -> ProjectedContext:
    """One call per turn: ``projector.project_thread(...)`` (a shared default projector)."""
    return await (projector or _DEFAULT_PROJECTOR).project_thread(
        store,
        thread,
        budget=budget,
        language=language,
        checkpoints=checkpoints,
        before_seq=before_seq,
    )
