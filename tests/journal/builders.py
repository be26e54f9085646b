"""Events for projection and compaction tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef

THREAD = ThreadRef("acme", "alice", "t1")


def _item(payload: dict[str, Any], item_id: str | None) -> dict[str, Any]:
    return payload if item_id is None else {**payload, "item_id": item_id}


def said(event_id: str, text: str, *, item_id: str | None = None) -> NewEvent:
    payload = _item({"text": text, "source": "voice"}, item_id)
    return NewEvent(event_id, EventKind.USER_INPUT, payload)


def answered(
    event_id: str,
    text: str,
    *,
    heard: str | None = None,
    generation: int = 1,
    item_id: str | None = None,
) -> NewEvent:
    payload: dict[str, Any] = {
        "text": text,
        "heard_text": text if heard is None else heard,
        "interrupted": heard is not None,
        "generation": generation,
    }
    return NewEvent(event_id, EventKind.ASSISTANT_OUTPUT, _item(payload, item_id))


def tool_call(
    event_id: str,
    call_id: str,
    name: str = "lookup",
    *,
    item_id: str | None = None,
    **arguments: Any,
) -> NewEvent:
    payload = _item({"call_id": call_id, "name": name, "arguments": arguments}, item_id)
    return NewEvent(event_id, EventKind.TOOL_CALL, payload)


def tool_result(
    event_id: str, call_id: str, content: Any, name: str = "lookup", *, item_id: str | None = None
) -> NewEvent:
    payload = _item({"call_id": call_id, "name": name, "content": content}, item_id)
    return NewEvent(event_id, EventKind.TOOL_RESULT, payload)


def numbered(events: list[NewEvent], thread: ThreadRef = THREAD) -> list[JournalEvent]:
    """``events`` as stored events with seqs 1…n (for the pure projector)."""
    now = datetime.now(UTC)
    return [
        JournalEvent(thread, i, e.event_id, e.kind, e.payload, e.voice_session_id, now)
        for i, e in enumerate(events, start=1)
    ]


def conversation(turns: int, *, language: str = "en", prefix: str = "") -> list[NewEvent]:
    """``turns`` user/assistant exchanges with distinct, realistic-length texts."""
    out: list[NewEvent] = []
    for i in range(turns):
        if language == "zh":
            out.append(said(f"{prefix}u{i}", f"第{i}个问题:星河商店的退货期限是多少?"))
            out.append(answered(f"{prefix}a{i}", f"第{i}个回答:资料规定签收后 7 天内可以退货。"))
        else:
            out.append(said(f"{prefix}u{i}", f"Question {i}: how long do I have to return it?"))
            out.append(answered(f"{prefix}a{i}", f"Answer {i}: within 7 days of delivery, unused."))
    return out


async def append_all(store: Any, thread: ThreadRef, events: list[NewEvent]) -> None:
    for start in range(0, len(events), 1000):
        await store.append(thread, events[start : start + 1000])
