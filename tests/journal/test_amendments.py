"""Item amendments (SPEC OAI-1, OAI-3): rules 1–6 of ``journal/amendments.py``."""

from __future__ import annotations

from journal.amendments import AmendmentFold, apply_amendments, item_deleted, item_truncated
from journal.events import EventKind, JournalEvent, NewEvent
from journal.projection import render_context
from plugins.contracts import HistoryTurn
from tests.journal.builders import answered, numbered, said, tool_call, tool_result


def ids(events: list[JournalEvent]) -> list[str]:
    return [e.event_id for e in events]


def test_deleting_a_user_item_removes_it() -> None:
    events = numbered(
        [
            said("u1", "My card number is 4111 1111.", item_id="item_u1"),
            answered("a1", "Please don't share that.", item_id="item_a1"),
            item_deleted("d1", "item_u1"),
        ]
    )
    assert ids(apply_amendments(events)) == ["a1"]
    assert "4111" not in render_context(events, "en").text


def test_deleting_an_assistant_item_removes_it() -> None:
    events = numbered(
        [
            said("u1", "Hello?", item_id="item_u1"),
            answered("a1", "A wrong answer.", item_id="item_a1"),
            item_deleted("d1", "item_a1"),
        ]
    )
    assert ids(apply_amendments(events)) == ["u1"]
    assert render_context(events, "en").text == "User: Hello?"


def test_a_truncation_sets_the_heard_prefix_and_marks_it_interrupted() -> None:
    events = numbered(
        [
            said("u1", "Opening hours?", item_id="item_u1"),
            answered("a1", "We open at nine and close at six.", item_id="item_a1"),
            item_truncated("t1", "item_a1", "We open at nine"),
        ]
    )
    shown = apply_amendments(events)
    assert ids(shown) == ["u1", "a1"]
    payload = shown[1].payload
    assert payload["heard_text"] == "We open at nine" and payload["interrupted"] is True
    assert payload["text"] == "We open at nine and close at six."  # what was said stays
    context = render_context(events, "en")
    assert context.text == "User: Opening hours?\nAssistant: We open at nine …"
    assert context.history[1] == HistoryTurn("assistant", "We open at nine", interrupted=True)
    # The stored event is not changed: amendments are events of their own.
    assert events[1].payload["interrupted"] is False


def test_the_newest_truncation_wins() -> None:
    events = numbered(
        [
            answered("a1", "One two three four.", item_id="item_a1"),
            item_truncated("t1", "item_a1", "One two three"),
            item_truncated("t2", "item_a1", "One"),
        ]
    )
    assert apply_amendments(events)[0].payload["heard_text"] == "One"


def test_a_truncation_after_a_delete_changes_nothing() -> None:
    events = numbered(
        [
            said("u1", "Hi.", item_id="item_u1"),
            answered("a1", "Hello there, how can I help?", item_id="item_a1"),
            item_deleted("d1", "item_a1"),
            item_truncated("t1", "item_a1", "Hello"),
        ]
    )
    assert ids(apply_amendments(events)) == ["u1"]


def test_a_delete_after_a_truncation_still_deletes() -> None:
    events = numbered(
        [
            answered("a1", "Hello there.", item_id="item_a1"),
            item_truncated("t1", "item_a1", "Hello"),
            item_deleted("d1", "item_a1"),
        ]
    )
    assert apply_amendments(events) == []


def test_truncating_an_unknown_item_or_another_kind_changes_nothing() -> None:
    events = numbered(
        [
            said("u1", "Hi there.", item_id="item_u1"),
            answered("a1", "Hello.", item_id="item_a1"),
            item_truncated("t1", "item_u1", "Hi"),
            item_truncated("t2", "item_nobody", "x"),
            item_deleted("d1", "item_nobody"),
        ]
    )
    shown = apply_amendments(events)
    assert shown == events[:2]


def test_deleting_a_tool_call_hides_its_result() -> None:
    events = numbered(
        [
            said("u1", "Check my order.", item_id="item_u1"),
            tool_call("c1", "call-1", order="48213", item_id="item_c1"),
            tool_result("r1", "call-1", {"status": "shipped"}, item_id="item_r1"),
            tool_call("c2", "call-2", order="1", item_id="item_c2"),
            tool_result("r2", "call-2", {"status": "lost"}, item_id="item_r2"),
            answered("a1", "It has shipped.", item_id="item_a1"),
            item_deleted("d1", "item_c1"),
        ]
    )
    assert ids(apply_amendments(events)) == ["u1", "c2", "r2", "a1"]


def test_deleting_a_tool_result_hides_its_call_and_the_calls_other_results() -> None:
    events = numbered(
        [
            tool_call("c1", "call-1", item_id="item_c1"),
            tool_result("r1", "call-1", "part one", item_id="item_r1"),
            tool_result("r1b", "call-1", "part two", item_id="item_r1b"),
            said("u1", "Thanks.", item_id="item_u1"),
            item_deleted("d1", "item_r1"),
        ]
    )
    assert ids(apply_amendments(events)) == ["u1"]


def test_events_without_item_ids_are_never_amended() -> None:
    plain = [
        said("u1", "Old turn."),
        answered("a1", "Old answer."),
        tool_call("c1", "call-1", q="x"),
        tool_result("r1", "call-1", "x"),
    ]
    events = numbered([*plain, item_deleted("d1", ""), item_truncated("t1", "a1", "Old")])
    assert apply_amendments(events) == events[:4]


def test_an_amendment_only_looks_back() -> None:
    events = numbered(
        [
            said("u1", "First.", item_id="item_x"),
            item_deleted("d1", "item_x"),
            said("u2", "Same id, journaled later.", item_id="item_x"),
        ]
    )
    assert ids(apply_amendments(events)) == ["u2"]


def test_amendment_events_are_never_shown_and_other_kinds_pass() -> None:
    summary = NewEvent("s1", EventKind.SUMMARY, {"text": "x"})
    events = numbered([summary, item_deleted("d1", "item_x"), item_truncated("t1", "item_x", "")])
    assert ids(apply_amendments(events)) == ["s1"]


def test_the_fold_fed_newest_first_is_the_list_fold() -> None:
    events = numbered(
        [
            said("u1", "One.", item_id="i1"),
            answered("a1", "Two three.", item_id="i2"),
            said("u2", "Four.", item_id="i3"),
            item_truncated("t1", "i2", "Two"),
            item_deleted("d1", "i3"),
        ]
    )
    fold = AmendmentFold()
    streamed = [s for e in reversed(events) if (s := fold.feed(e)) is not None]
    assert list(reversed(streamed)) == apply_amendments(events)


def test_amendment_events_carry_their_payloads() -> None:
    deleted = item_deleted("d1", "item_1", voice_session_id="vs1")
    truncated = item_truncated("t1", "item_2", "heard", voice_session_id="vs1")
    assert deleted.kind is EventKind.ITEM_DELETED and deleted.payload == {"item_id": "item_1"}
    assert truncated.kind is EventKind.ITEM_TRUNCATED
    assert truncated.payload == {"item_id": "item_2", "heard_text": "heard"}
    assert deleted.voice_session_id == truncated.voice_session_id == "vs1"
