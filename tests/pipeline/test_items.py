from __future__ import annotations

import pytest

from pipeline import events as ev
from pipeline.items import ConversationItems, ItemNotFound


def message(item_id: str, text: str = "hi") -> ev.MessageItem:
    return ev.MessageItem(item_id, "user", (ev.ContentPart("input_text", text=text),))


def test_items_are_kept_as_announced_and_replaced_by_their_final_form() -> None:
    items = ConversationItems()
    items.note(ev.ItemAdded(message("a", "")))
    items.note(ev.SpeechStarted(0, "b"))  # not an item event: ignored
    items.note(ev.ItemDone(message("a", "final")))
    assert items.get("a") == message("a", "final")
    assert items.last_id == "a"


def test_the_oldest_items_go_first_and_a_forgotten_one_is_not_found() -> None:
    items = ConversationItems(limit=2)
    for name in ("a", "b", "c"):
        items.note(ev.ItemAdded(message(name)))
    with pytest.raises(ItemNotFound):
        items.get("a")
    items.forget("c")
    assert items.last_id == "b"
    with pytest.raises(ItemNotFound):
        items.get("c")
