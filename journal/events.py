"""Journal events (SPEC J-1): what the model's history of a thread is made of.

A thread's journal is an append-only sequence of semantic events, numbered per thread from 1
with no gaps. Every event carries a client-chosen ``event_id`` that makes appends idempotent.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class EventKind(enum.StrEnum):
    USER_INPUT = "user_input"
    ASSISTANT_OUTPUT = "assistant_output"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    SUMMARY = "summary"
    ITEM_DELETED = "item_deleted"
    ITEM_TRUNCATED = "item_truncated"
    MEMORY_NOTE = "memory_note"


@dataclass(frozen=True, slots=True)
class ThreadRef:
    """Who owns a thread. Every journal read and write is scoped by all three."""

    tenant: str
    user: str
    thread_id: str


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. ``payload`` must be JSON-serialisable.

    Payloads by kind:
    - user_input: ``{"text", "source": "voice"|"text"}``
    - assistant_output: ``{"text", "heard_text", "interrupted", "generation"}``
    - tool_call: ``{"call_id", "name", "arguments"}``
    - tool_result: ``{"call_id", "name", "content"}``
    - summary: ``{"text", "from_seq", "to_seq", "checksum"}``
    - item_deleted: ``{"item_id"}`` — the item leaves the thread's history
    - item_truncated: ``{"item_id", "heard_text"}`` — an assistant item was heard only up to
      ``heard_text`` (it becomes interrupted)
    - memory_note: ``{"op": "remember"|"forget", "key", "content"?, "kind"?}`` — a person changed
      the thread's memory (``runtime/thread_memory.py`` rule 2); the fact cites this event. It
      is not conversation: the model's history and transcripts leave it out.

    The four conversational kinds (user_input, assistant_output, tool_call, tool_result) may
    also carry ``"item_id"``: the realtime (OpenAI GA) item the event is, which
    ``item_deleted``/``item_truncated`` name. It is optional — older events have none, and an
    event without one is never amended. The journal stays append-only: amendments are events
    of their own, folded in by whoever shows the thread (``journal/amendments.py``).
    """

    event_id: str
    kind: EventKind
    payload: dict[str, Any]
    voice_session_id: str | None = None

    def fingerprint(self) -> str:
        """What must match for a retried append to count as the same append."""
        return canonical_digest(
            {"kind": self.kind.value, "payload": self.payload, "session": self.voice_session_id}
        )


@dataclass(frozen=True, slots=True)
class JournalEvent:
    thread: ThreadRef
    seq: int
    event_id: str
    kind: EventKind
    payload: dict[str, Any]
    voice_session_id: str | None
    created_at: datetime = field(compare=False)

    def fingerprint(self) -> str:
        return NewEvent(self.event_id, self.kind, self.payload, self.voice_session_id).fingerprint()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical_digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
