"""The conversation's items as this session announced them, for ``retrieve``, ``delete`` and
``truncate`` (GA ``conversation.item.*``).

Theory of operation
-------------------
Rule 1. An item is kept when it is announced (``conversation.item.added``) and replaced by its
        final form (``conversation.item.done``); ``note`` sees every event the engine sends and
        picks those two out, so nothing else has to remember to register an item.
Rule 2. ``last_id`` is the newest item added: the ``previous_item_id`` of the next one.
Rule 3. Bounded: at most ``limit`` items (the oldest go first); items of earlier sessions of the
        thread are not here (the journal has them; they cannot be retrieved by id).
"""

from __future__ import annotations

from pipeline import events as ev

MAX_ITEMS_KEPT = 512


class ItemNotFound(LookupError):
    """A client named an item this session does not hold (``item_not_found``)."""


class TruncatedBeyondAudio(ValueError):
    """``conversation.item.truncate`` past the audio the item has (``invalid_value`` on
    ``audio_end_ms``)."""


class ConversationItems:
    def __init__(self, *, limit: int = MAX_ITEMS_KEPT) -> None:
        self.limit = limit
        self.last_id: str | None = None
        self._items: dict[str, ev.Item] = {}

    def note(self, event: ev.ServerEvent) -> None:
        """Rule 1: keep the item an ``added``/``done`` event carries."""
        if not isinstance(event, ev.ItemAdded | ev.ItemDone):
            return
        item = event.item
        self._items[item.id] = item
        if isinstance(event, ev.ItemAdded):
            self.last_id = item.id
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]

    def get(self, item_id: str) -> ev.Item:
        found = self._items.get(item_id)
        if found is None:
            raise ItemNotFound(f"no item {item_id[:64]!r} in this session")
        return found

    def forget(self, item_id: str) -> None:
        self._items.pop(item_id, None)
        if self.last_id == item_id:
            self.last_id = next(reversed(self._items), None)


__all__ = ["MAX_ITEMS_KEPT", "ConversationItems", "ItemNotFound"]
