"""Consolidation (SPEC TM-4): after a turn, the turn's model reads the new items and proposes
changes to the thread's memory.

Theory of operation
-------------------
The caller (the runtime, after each finished turn when ``generate`` is on, and for a Refresh
command) hands the ``Consolidator`` the thread's journal events that are not yet processed
(``unprocessed``), the current memory and a lane; it gets a ``ConsolidationResult`` back and
saves it with ``save_consolidation``. The rules:

1. Only conversational events are items (user_input, assistant_output — what was heard when
   it was interrupted —, tool_call, tool_result); every event handed in is marked processed
   when consolidation succeeds, the others too (there is nothing in them to learn).
2. The prompt is small (the local model has a 4k context): the rules, the active facts (at
   most ``fact_chars``, newest first) and the new items, each with its id, newest last, each
   cut to ``max_item_chars``, the oldest left out past ``item_chars`` with a note saying how
   many. Left-out items are marked processed without being read (``skipped``): memory is a
   short list, not an archive, and a backlog must not grow every turn.
3. The model is asked for constrained JSON (``change_schema``: at most ``max_changes``
   changes whose ``sources`` are drawn from the shown ids and come last, after the content),
   with ``max_tokens`` and within ``timeout_s``. Each item is shown as ``speaker: text (id
   …)``: with the id after the text, the local 0.5B model cites the item that says the fact
   (with the id first it cited the first item). The answer is parsed defensively: an answer
   cut by ``max_tokens`` keeps its complete changes (``_salvage``); a change that is not an
   object with the expected fields is dropped and counted (``malformed``); the rest go
   through ``thread_memory.check_changes`` (accepted, or refused with a reason code).
4. A model failure never raises to the caller's turn: an exception, a timeout or an answer
   that is not a JSON object with a ``changes`` list gives a result with ``failure`` set
   (``model_error``, ``model_timeout``, ``unparsable``) and nothing processed, so the same
   items are read again next turn; ``save_consolidation`` records the failure in
   ``last_failure``. Cancellation is not a failure: it propagates.
5. ``ConsolidationResult.apply`` applies to the *latest* memory: it checks the accepted
   changes again against it (a person's Forget meanwhile makes a change ``retracted``; items a
   concurrent consolidation already processed make it ``cites_processed``), so a person's
   concurrent edit survives. ``save_consolidation`` loads, applies and saves with
   compare-and-set, re-applying on ``RevisionConflict`` up to ``attempts`` times.
6. A turn in which no model ran (a turn that only ran an app action) changes nothing: the
   caller does not call the consolidator for it, and its items stay unprocessed until a turn
   with a model reads them. The consolidator itself never runs without a model: with no
   conversational item it calls nothing and only marks the events processed.

Logs carry reason codes and counts, never contents (STYLE 12).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from journal.events import EventKind, JournalEvent
from memory.errors import RevisionConflict
from memory.injection import escape_block_text
from memory.thread_memory import (
    FACT_KINDS,
    MAX_FACT_CHARS,
    MAX_KEY_CHARS,
    FactChange,
    ItemKind,
    RefusalReason,
    ThreadItem,
    ThreadMemory,
    apply_changes,
    check_changes,
    record_failure,
)
from memory.thread_store import ThreadMemoryStore
from plugins.brain.model_queue import BACKGROUND_WAIT_S, bound_runs

log = logging.getLogger(__name__)

Failure = Literal["model_error", "model_timeout", "unparsable"]


class JsonModel(Protocol):
    """A model that answers one chat with JSON constrained by ``schema`` (the text returned).
    ``lane``: whose request it is (the local model's fair queue); ``background``: nobody waits
    for it — it runs in the pauses and yields to a person's turn (SPEC RT-11)."""

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsolidationLimits:
    item_chars: int = 3_000
    """Characters of new items shown (after each is cut to ``max_item_chars``)."""
    max_item_chars: int = 500
    fact_chars: int = 1_500
    """Characters of current facts shown."""
    max_changes: int = 4
    max_tokens: int = 320
    timeout_s: float = 20.0
    background: bool = True
    """The model call is background work (SPEC RT-11): it may wait up to ``queue_s`` for a
    pause, then has ``timeout_s`` to run; a person's Refresh is not background."""
    queue_s: float = BACKGROUND_WAIT_S


@dataclass(frozen=True, slots=True)
class ConsolidationResult:
    items: tuple[ThreadItem, ...]
    """The items shown to the model (what changes may cite)."""
    accepted: tuple[FactChange, ...] = ()
    refused: tuple[tuple[FactChange, RefusalReason], ...] = ()
    processed: frozenset[str] = frozenset()
    """Event ids marked processed when the result is applied (none on failure)."""
    failure: Failure | None = None
    skipped: int = 0
    """Items left out of the prompt (rule 2)."""
    malformed: int = 0

    def apply(self, latest: ThreadMemory, now: datetime) -> ThreadMemory:
        """``latest`` with this result applied (rule 5); ``latest`` itself when nothing
        changes."""
        if self.failure is not None:
            return record_failure(latest, self.failure)
        accepted, _ = check_changes(self.accepted, self.items, latest)
        return apply_changes(latest, accepted, self.processed, now)


SYSTEM_PROMPT = """\
You keep the memory of one conversation: facts worth keeping for later turns, such as \
budgets, dates, names, places, numbers, decisions and what the person clearly prefers.
Read the new items and list every such fact as a change in JSON. Each change has:
- "op": "upsert" to add or update a fact, "retract" when the person takes a fact back.
- "key": a short snake_case name. Reuse the key of a known fact for the same fact.
- "content": the fact as one short sentence, taken from those items.
- "kind": fact, decision, preference, procedure or hypothesis. Use preference only for what \
the person clearly said they like or prefer.
- "sources": the ids of the new items that state the fact.
Never keep passwords, keys, tokens or links. Greetings and questions are not facts.
Example. New items:
assistant: What is your name? (id x-1)
user: My name is Ana and I moved to Porto last year. (id x-2)
Answer: {"changes": [{"op": "upsert", "key": "name", "content": "The person is called Ana.", \
"kind": "fact", "sources": ["x-2"]}, {"op": "upsert", "key": "home_city", "content": \
"Ana lives in Porto.", "kind": "fact", "sources": ["x-2"]}]}"""


def change_schema(ids: Sequence[str], *, max_changes: int) -> dict[str, Any]:
    """The JSON schema of an answer: changes whose sources are drawn from ``ids``."""
    return {
        "type": "object",
        "properties": {
            "changes": {
                "type": "array",
                "maxItems": max_changes,
                "items": {
                    "type": "object",
                    # Sources last: a model that has written the fact picks the item that
                    # says it (constrained decoding keeps this order).
                    "properties": {
                        "op": {"type": "string", "enum": ["upsert", "retract"]},
                        "key": {"type": "string", "maxLength": MAX_KEY_CHARS},
                        "content": {"type": "string", "maxLength": MAX_FACT_CHARS},
                        "kind": {"type": "string", "enum": list(FACT_KINDS)},
                        "sources": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 2,
                            "items": {"type": "string", "enum": list(ids)},
                        },
                    },
                    "required": ["op", "key", "content", "kind", "sources"],
                },
            }
        },
        "required": ["changes"],
    }


_ITEM_KINDS: dict[EventKind, ItemKind] = {
    EventKind.USER_INPUT: "user_input",
    EventKind.ASSISTANT_OUTPUT: "assistant_output",
    EventKind.TOOL_CALL: "tool_call",
    EventKind.TOOL_RESULT: "tool_result",
}
_SPEAKER: dict[ItemKind, str] = {
    "user_input": "user",
    "assistant_output": "assistant",
    "tool_call": "tool call",
    "tool_result": "tool result",
}


def item_of(event: JournalEvent) -> ThreadItem | None:
    """The item an event is (rule 1), or None for the other kinds."""
    kind = _ITEM_KINDS.get(event.kind)
    if kind is None:
        return None
    payload = event.payload
    if kind == "assistant_output" and payload.get("interrupted") and "heard_text" in payload:
        text = str(payload["heard_text"])
    elif kind == "tool_call":
        arguments = json.dumps(payload.get("arguments", {}), ensure_ascii=False, sort_keys=True)
        text = f"{payload.get('name', '')}({arguments})"
    elif kind == "tool_result":
        text = f"{payload.get('name', '')}: {payload.get('content', '')}"
    else:
        text = str(payload.get("text", ""))
    return ThreadItem(event.event_id, kind, text)


def unprocessed(events: Sequence[JournalEvent], memory: ThreadMemory) -> list[JournalEvent]:
    """The events of ``events`` that ``memory`` has not read yet."""
    return [e for e in events if e.event_id not in memory.processed]


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def build_prompt(
    items: Sequence[ThreadItem], memory: ThreadMemory, limits: ConsolidationLimits
) -> tuple[list[dict[str, str]], tuple[ThreadItem, ...]]:
    """The messages (rule 2) and the items they show (newest last)."""
    fact_lines: list[str] = []
    used = 0
    for fact in memory.active():
        line = f"- {fact.key} ({fact.kind}): {escape_block_text(_cut(fact.content, 200))}"
        if used + len(line) + 1 > limits.fact_chars:
            break
        fact_lines.append(line)
        used += len(line) + 1
    shown: list[tuple[ThreadItem, str]] = []
    used = 0
    for item in reversed(items):
        line = f"{_SPEAKER[item.kind]}: {_cut(item.text, limits.max_item_chars)} (id {item.id})"
        if shown and used + len(line) + 1 > limits.item_chars:
            break
        shown.append((item, line))
        used += len(line) + 1
    shown.reverse()
    left_out = len(items) - len(shown)
    parts = ["Known facts:", *(fact_lines or ["(none)"]), "", "New items:"]
    if left_out:
        parts.append(f"({left_out} older items left out)")
    parts += [line for _, line in shown]
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(parts)},
    ]
    return messages, tuple(item for item, _ in shown)


def parse_changes(text: str, *, max_changes: int) -> tuple[list[FactChange], int] | None:
    """The changes of an answer and how many were malformed; None when the answer is not a
    JSON object with a ``changes`` list (rule 3)."""
    answer = _loads(text)
    if answer is None:
        answer = _salvage(text)
    if not isinstance(answer, dict) or not isinstance(answer.get("changes"), list):
        return None
    changes: list[FactChange] = []
    malformed = 0
    for raw in answer["changes"][:max_changes]:
        change = _change_of(raw)
        if change is None:
            malformed += 1
        else:
            changes.append(change)
    malformed += max(0, len(answer["changes"]) - max_changes)
    return changes, malformed


def _loads(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


_SALVAGE_ATTEMPTS = 16


def _salvage(text: str) -> object:
    """The complete changes of an answer cut by ``max_tokens``: the longest prefix ending
    after a change object that parses once the list and the object are closed."""
    end = len(text)
    for _ in range(_SALVAGE_ATTEMPTS):
        end = text.rfind("}", 0, end)
        if end < 0:
            return None
        answer = _loads(text[: end + 1] + "]}")
        if answer is not None:
            return answer
    return None


def _change_of(raw: object) -> FactChange | None:
    if not isinstance(raw, dict):
        return None
    op, key, content, kind = (raw.get(f) for f in ("op", "key", "content", "kind"))
    sources = raw.get("sources")
    if op not in ("upsert", "retract") or not isinstance(key, str):
        return None
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        return None
    if op == "upsert" and (not isinstance(content, str) or kind not in FACT_KINDS):
        return None
    return FactChange(
        op=op,
        key=key,
        content=content if isinstance(content, str) else "",
        kind=kind if kind in FACT_KINDS else "fact",
        sources=tuple(sources),
    )


class Consolidator:
    """Reads a thread's new items with a ``JsonModel`` and proposes checked changes."""

    def __init__(self, model: JsonModel, *, limits: ConsolidationLimits | None = None) -> None:
        self.model = model
        self.limits = limits or ConsolidationLimits()

    async def consolidate(
        self, events: Sequence[JournalEvent], current: ThreadMemory, *, lane: str
    ) -> ConsolidationResult:
        """The result of reading ``events`` (the unprocessed ones; others are ignored) for
        ``current``. Never raises for a model failure (rule 4)."""
        fresh = unprocessed(events, current)
        ids = frozenset(e.event_id for e in fresh)
        items = [item for item in map(item_of, fresh) if item is not None]
        if not items:
            return ConsolidationResult((), processed=ids)
        messages, shown = build_prompt(items, current, self.limits)
        schema = change_schema([item.id for item in shown], max_changes=self.limits.max_changes)
        try:
            limits = self.limits
            wait = limits.queue_s if limits.background else 0.0
            async with asyncio.timeout(wait + limits.timeout_s) as bound:
                with bound_runs(bound, limits.timeout_s):  # timeout_s of running (queue Rule 8)
                    text = await self.model.complete_json(
                        messages,
                        schema,
                        max_tokens=limits.max_tokens,
                        lane=lane,
                        background=limits.background,
                    )
        except TimeoutError:
            return self._failed(shown, "model_timeout", None)
        except Exception as e:  # any model failure: recorded, retried next turn (rule 4)
            return self._failed(shown, "model_error", e)
        parsed = parse_changes(text, max_changes=self.limits.max_changes)
        if parsed is None:
            return self._failed(shown, "unparsable", None)
        proposed, malformed = parsed
        accepted, refused = check_changes(proposed, shown, current)
        log.info(
            "thread memory consolidation: %d items (%d left out), %d accepted, %d refused (%s),"
            " %d malformed",
            len(shown),
            len(items) - len(shown),
            len(accepted),
            len(refused),
            ",".join(reason for _, reason in refused) or "-",
            malformed,
        )
        return ConsolidationResult(
            shown,
            tuple(accepted),
            tuple(refused),
            processed=ids,
            skipped=len(items) - len(shown),
            malformed=malformed,
        )

    @staticmethod
    def _failed(
        shown: tuple[ThreadItem, ...], failure: Failure, error: Exception | None
    ) -> ConsolidationResult:
        log.warning(
            "thread memory consolidation failed: %s%s",
            failure,
            f" ({type(error).__name__})" if error is not None else "",
        )
        return ConsolidationResult(shown, failure=failure)


async def save_consolidation(
    store: ThreadMemoryStore,
    tenant: str,
    user: str,
    thread_id: str,
    result: ConsolidationResult,
    *,
    now: datetime,
    attempts: int = 3,
) -> ThreadMemory:
    """Apply ``result`` to the latest memory and save it (rule 5); the memory saved (or the
    latest, when nothing changed). ``RevisionConflict`` after ``attempts`` lost races."""
    latest = await store.load(tenant, user, thread_id)
    conflict: RevisionConflict | None = None
    for _ in range(attempts):
        new = result.apply(latest, now)
        if new.revision == latest.revision:
            return latest
        try:
            return await store.save(tenant, user, thread_id, new, latest.revision)
        except RevisionConflict as e:
            conflict = e
            latest = e.current
    assert conflict is not None
    raise conflict
