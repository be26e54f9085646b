"""Item amendments (SPEC J-1, OAI-1, OAI-3): deleted and truncated realtime items in the journal.

Theory of operation
-------------------
The journal is append-only, so a GA client's ``conversation.item.delete`` and
``conversation.item.truncate`` do not edit stored events: each is an event of its own that
names the item it amends (``item_deleted``, ``item_truncated``; payloads in
``journal.events.NewEvent``). Whoever shows the thread — the model's history, a summary, the
items a client reconciles with — folds them in through this module, by these rules:

Rule 1 — items. A ``user_input``, ``assistant_output``, ``tool_call`` or ``tool_result`` event
    whose payload has a (non-empty string) ``"item_id"`` is the realtime item of that id. An
    event without one (older journals) is never amended.
Rule 2 — an amendment looks back. It applies to the events with its ``item_id`` that come before
    it in the journal; an event journaled later under the same id is not touched.
Rule 3 — a deleted item is gone: it leaves the model's history and every view of the thread.
    Deletion is final: it wins over any truncation of the item, before or after it.
Rule 4 — a tool exchange goes whole. Deleting a ``tool_call`` item also hides every
    ``tool_result`` with its ``call_id``, and deleting a ``tool_result`` hides its call and the
    call's other results: a model history holding half a tool exchange is invalid.
Rule 5 — a truncated assistant output keeps what was heard. ``item_truncated`` of an
    ``assistant_output`` item sets its ``heard_text`` to the given prefix and marks it
    ``interrupted`` (the newest truncation wins). Truncating any other kind, an unknown item or
    a deleted one changes nothing.
Rule 6 — amendments are not history: ``item_deleted`` and ``item_truncated`` events themselves
    render to nothing and are never shown.
Rule 7 — summaries stay as written. Compaction summarises the amended events it reads
    (``journal/compaction.py``), so a summary leaves out the items deleted before it was written
    (all of them, unless a backlog longer than compaction's window had built up; see there). An
    amendment journaled after its item was folded into a checkpoint does not change that
    summary: the summary stays (and still verifies — checksums cover the stored events, which
    never change); views of the raw events (a reconcile, a projection without that checkpoint)
    drop or cut the item.

``AmendmentFold`` is the sans-I/O core: it is fed events newest first — the order the projector
walks the journal in — so every amendment of an item has been seen by the time the item is.
The one thing it cannot do in that order is rule 4 for results newer than a deleted call: they
have passed by the time the call is seen. A caller that streams (the projector) holds tool
results until their call anyway and drops them with a hidden call; ``apply_amendments`` does
the whole fold over a list, rule 4 included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from journal.events import EventKind, JournalEvent, NewEvent

__all__ = ["AmendmentFold", "apply_amendments", "item_deleted", "item_truncated"]

ITEM_KINDS = frozenset(
    {EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT, EventKind.TOOL_CALL, EventKind.TOOL_RESULT}
)
"""The kinds that can be realtime items (rule 1)."""
_TOOL_KINDS = frozenset({EventKind.TOOL_CALL, EventKind.TOOL_RESULT})


def item_deleted(event_id: str, item_id: str, *, voice_session_id: str | None = None) -> NewEvent:
    """The event that deletes item ``item_id`` (``conversation.item.delete``)."""
    return NewEvent(event_id, EventKind.ITEM_DELETED, {"item_id": item_id}, voice_session_id)


def item_truncated(
    event_id: str, item_id: str, heard_text: str, *, voice_session_id: str | None = None
) -> NewEvent:
    """The event that cuts assistant item ``item_id`` to what was heard
    (``conversation.item.truncate``; the caller turns ``audio_end_ms`` into ``heard_text``)."""
    return NewEvent(
        event_id,
        EventKind.ITEM_TRUNCATED,
        {"item_id": item_id, "heard_text": heard_text},
        voice_session_id,
    )


def _item_id(event: JournalEvent) -> str | None:
    value = event.payload.get("item_id")
    return value if isinstance(value, str) and value else None


def _call_id(event: JournalEvent) -> str | None:
    value = event.payload.get("call_id")
    return value if isinstance(value, str) else None


class AmendmentFold:
    """Rules 1–6 over events fed newest first (see the module docstring)."""

    def __init__(self) -> None:
        self._deleted: set[str] = set()
        self._heard: dict[str, str] = {}
        self._deleted_calls: set[str] = set()

    def feed(self, event: JournalEvent) -> JournalEvent | None:
        """``event`` as the thread shows it now — amended, unchanged — or None when it is
        hidden (a deleted item, or an amendment). Feed each event once, newest first."""
        kind = event.kind
        if kind is EventKind.ITEM_DELETED or kind is EventKind.ITEM_TRUNCATED:
            item_id = _item_id(event)
            heard = event.payload.get("heard_text")
            if item_id is not None and kind is EventKind.ITEM_DELETED:
                self._deleted.add(item_id)
            elif item_id is not None and isinstance(heard, str):
                self._heard.setdefault(item_id, heard)  # newest first: the first seen wins
            return None  # rule 6
        if kind not in ITEM_KINDS:
            return event
        item_id = _item_id(event)
        if item_id is not None and item_id in self._deleted:
            call_id = _call_id(event)
            if kind in _TOOL_KINDS and call_id is not None:
                self._deleted_calls.add(call_id)
            return None
        if self.hides_exchange(event):
            return None
        if kind is EventKind.ASSISTANT_OUTPUT and item_id is not None and item_id in self._heard:
            payload = {**event.payload, "heard_text": self._heard[item_id], "interrupted": True}
            return dataclasses.replace(event, payload=payload)
        return event

    def hides_exchange(self, event: JournalEvent) -> bool:
        """Whether ``event`` belongs to a tool exchange a deletion fed so far hides (rule 4)."""
        call_id = _call_id(event) if event.kind in _TOOL_KINDS else None
        return call_id is not None and call_id in self._deleted_calls


def apply_amendments(events: Iterable[JournalEvent]) -> list[JournalEvent]:
    """``events`` (oldest first, as the store reads them; any stretch of a thread) with every
    amendment among them folded in: deleted items and the amendments themselves left out,
    truncated assistant outputs cut to their heard prefix and marked interrupted.

    Amendments of events outside ``events`` are not known here: pass the stretch that holds
    both (an amendment always comes after its item)."""
    fold = AmendmentFold()
    shown = [amended for e in reversed(list(events)) if (amended := fold.feed(e)) is not None]
    shown.reverse()
    return [e for e in shown if not fold.hides_exchange(e)]
