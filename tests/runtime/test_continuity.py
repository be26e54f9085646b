"""Reconcile items from the journal (rule 5 of ``runtime/continuity.py``): what a client shows
of a session after a resume that could not be replayed — amended items included."""

from __future__ import annotations

from journal.amendments import item_deleted, item_truncated
from journal.events import NewEvent
from journal.store import InMemoryJournalStore
from runtime.continuity import reconcile_from_journal
from tests.journal.builders import THREAD, answered, said


def in_session(event: NewEvent, session: str) -> NewEvent:
    return NewEvent(event.event_id, event.kind, event.payload, session)


async def test_reconcile_hides_deleted_items_and_shows_truncated_ones_as_heard() -> None:
    journal = InMemoryJournalStore()
    events = [
        said("u1", "Please forget this: my PIN is 9731.", item_id="item_u1"),
        answered("a1", "Forgotten.", item_id="item_a1"),
        said("u2", "Opening hours?", item_id="item_u2"),
        answered("a2", "We open at nine and close at six.", item_id="item_a2"),
        item_deleted("d1", "item_u1"),
        item_truncated("t1", "item_a2", "We open at nine"),
    ]
    await journal.append(THREAD, [in_session(e, "vs1") for e in events])
    # An amendment by a later session of the thread counts too.
    await journal.append(THREAD, [in_session(item_deleted("d2", "item_a1"), "vs2")])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 10, None)
    assert reconcile["items"] == [
        {"journal_seq": 3, "role": "user", "text": "Opening hours?"},
        {"journal_seq": 4, "role": "assistant", "text": "We open at nine", "interrupted": True},
    ]
    assert reconcile["complete"] is True


async def test_reconcile_of_events_without_item_ids_is_unchanged() -> None:
    journal = InMemoryJournalStore()
    events = [said("u1", "Hi."), answered("a1", "Hello.", heard="Hel"), item_deleted("d1", "u1")]
    await journal.append(THREAD, [in_session(e, "vs1") for e in events])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 1, 5)
    assert reconcile["items"] == [
        {"journal_seq": 1, "role": "user", "text": "Hi."},
        {"journal_seq": 2, "role": "assistant", "text": "Hel", "interrupted": True},
    ]
