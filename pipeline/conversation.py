"""The session's conversation as the client sees it (GA items) and the journal keeps it. One
room of the engine (``pipeline/engine.py`` decides when; this room says what is shown and
written, and how it is named).

Theory of operation
-------------------
Rule 1. Names. A spoken turn's user item is ``<item prefix>_<turn id>`` (known before its
        words are); every other item gets a fresh ``<item prefix>_<12 hex>``. Journal event
        ids are ``<event prefix>:<parts>`` — stable for the same turn, so a retried append is
        the same append. A session continued after a resume (its incarnation) has its own
        prefixes: it numbers its turns from 1 again.
Rule 2. The person's words. A typed item is shown (added, done) at once and journaled in the
        background (``PendingInput.write``: the response that answers it waits for it); a
        spoken turn's item is shown ``in_progress`` at the commit and ``completed`` with its
        transcript. Each is journaled as ``user_input`` with its source (``text``/``voice``)
        and item id, and then handed to long-term memory (``TurnMemory.on_user_final``) with
        its journal position.
Rule 3. The journal is append-only: a deleted item is a tombstone (``item_deleted``), an
        answer truncated after it ended an amendment (``item_truncated`` with the heard text);
        the answer itself (``assistant_output``: text, heard text, interrupted) and a client's
        function output (``tool_result``) are written here too. A write that fails raises
        (``JournalError``): the engine decides what that means for the turn.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from journal.events import EventKind, JournalEvent, NewEvent, ThreadRef
from journal.store import JournalStore
from pipeline import events as ev
from pipeline.engine_config import TurnMemory
from pipeline.items import ConversationItems
from pipeline.response import PendingInput
from plugins.contracts import ToolCall, ToolResult

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]
"""The engine's task spawner (the task is owned, cancelled at close, its failure logged)."""


class Conversation:
    """What the session shows and journals of its conversation (module rules)."""

    def __init__(
        self,
        *,
        journal: JournalStore,
        thread: ThreadRef,
        voice_session_id: str,
        incarnation: int,
        send: Callable[[ev.ServerEvent], None],
        spawn: Spawn,
        memory: TurnMemory | None,
    ) -> None:
        self.journal = journal
        self.thread = thread
        self.voice_session_id = voice_session_id
        self.send = send
        self.spawn = spawn
        self.memory = memory
        self.items = ConversationItems()
        """This session's items as announced (``retrieve``/``delete``/``truncate``): every
        event sent is noted (``pipeline.items``)."""
        # Rule 1: a continued session (its incarnation) keeps its ids distinct.
        suffix = f".{incarnation}" if incarnation else ""
        self.event_prefix = voice_session_id + suffix
        # The whole session id: item ids stay unique across every session of a thread.
        self.item_prefix = f"item_{voice_session_id.removeprefix('vs_')}{suffix}"

    # ------------------------------------------------------------ names (Rule 1)

    def new_item_id(self) -> str:
        return f"{self.item_prefix}_{uuid.uuid4().hex[:12]}"

    def item_id(self, turn_id: int) -> str:
        """A spoken turn's user item."""
        return f"{self.item_prefix}_{turn_id}"

    def event_id(self, *parts: object) -> str:
        return ":".join((self.event_prefix, *(str(p) for p in parts)))

    async def append(
        self, event_id: str, kind: EventKind, payload: dict[str, Any]
    ) -> list[JournalEvent]:
        return await self.journal.append(
            self.thread, [NewEvent(event_id, kind, payload, self.voice_session_id)]
        )

    # ------------------------------------------------------------ the person's words (Rule 2)

    def add_text(self, text: str, item_id: str | None) -> tuple[ev.MessageItem, PendingInput]:
        """A typed user item: shown now, journaled in the background."""
        previous = self.items.last_id
        item_id = item_id or self.new_item_id()
        item = ev.MessageItem(item_id, "user", (ev.ContentPart("input_text", text=text),))
        self.send(ev.ItemAdded(item, previous))
        write = self.spawn(
            self.append(
                self.event_id(item_id, "user"),
                EventKind.USER_INPUT,
                {"text": text, "source": "text", "item_id": item_id},
            ),
            "user-item",
        )
        self.send(ev.ItemDone(item, previous))
        return item, PendingInput(text, item_id, write)

    async def typed(self, pending: list[PendingInput]) -> tuple[str, int | None]:
        """The text items added since the last response (already being journaled) and the
        seq of the first, so the history before it is what the model sees as context."""
        written = [await item.write for item in pending]
        for item, stored in zip(pending, written, strict=True):
            self.remember(item.text, stored)
        return "\n".join(item.text for item in pending), _seq(written[0]) if written else None

    def spoken_item(self, turn_id: int, transcript: str | None, status: str) -> ev.MessageItem:
        part = ev.ContentPart("input_audio", transcript=transcript)
        return ev.MessageItem(self.item_id(turn_id), "user", (part,), status=status)

    def transcribed(self, turn_id: int, text: str, seconds: float) -> list[ev.ServerEvent]:
        """The events of a spoken turn's transcript: its transcription and its item done."""
        usage = ev.DurationUsage(round(seconds, 3))
        return [
            ev.TranscriptionCompleted(self.item_id(turn_id), text, usage),
            ev.ItemDone(self.spoken_item(turn_id, text, "completed")),
        ]

    async def record_spoken(self, turn_id: int, text: str, *, voice: bool) -> int | None:
        """Journal a turn's words (``voice``: said, else typed as the turn); their seq, None
        while the journal is unreachable (the event waits in the session's buffer)."""
        stored = await self.append(
            self.event_id(turn_id, "user"),
            EventKind.USER_INPUT,
            {
                "text": text,
                "source": "voice" if voice else "text",
                "item_id": self.item_id(turn_id),
            },
        )
        self.remember(text, stored)
        return _seq(stored)

    def remember(self, text: str, stored: list[JournalEvent]) -> None:
        """Long-term memory reads the person's journaled words (in the background)."""
        if self.memory is not None and stored:
            self.spawn(
                self.memory.on_user_final(
                    text,
                    thread_id=self.thread.thread_id,
                    seq=_seq(stored),
                    at=stored[-1].created_at,
                ),
                "memory-extract",
            )

    # ------------------------------------------------------------ everything else (Rule 3)

    def function_output(self, call: ToolCall, output: str, item_id: str | None) -> ToolResult:
        """The client's output for ``call``: shown now, journaled in the background."""
        previous = self.items.last_id
        item_id = item_id or self.new_item_id()
        item = ev.FunctionCallOutputItem(item_id, call.call_id, output)
        self.send(ev.ItemAdded(item, previous))
        self.spawn(
            self.append(
                self.event_id(item_id, "tool_result"),
                EventKind.TOOL_RESULT,
                {"call_id": call.call_id, "name": call.name, "content": output,
                 "is_error": False, "item_id": item_id},
            ),
            "function-output",
        )  # fmt: skip
        self.send(ev.ItemDone(item, previous))
        return ToolResult(call_id=call.call_id, name=call.name, content=output)

    async def delete(self, item_id: str) -> None:
        """``conversation.item.delete``: the item leaves the model's history (a tombstone in the
        journal; the journal itself is append-only)."""
        self.items.get(item_id)
        await self.append(
            self.event_id(item_id, "deleted"), EventKind.ITEM_DELETED, {"item_id": item_id}
        )
        self.items.forget(item_id)
        self.send(ev.ItemDeleted(item_id))

    async def truncated(self, item_id: str, heard: str, audio_end_ms: int) -> None:
        """An ended answer's amendment: the person heard ``heard``."""
        await self.append(
            self.event_id(item_id, "truncated", audio_end_ms),
            EventKind.ITEM_TRUNCATED,
            {"item_id": item_id, "heard_text": heard},
        )

    async def answered(
        self,
        turn_id: int,
        generation: int,
        item_id: str,
        *,
        text: str,
        heard: str,
        interrupted: bool,
    ) -> None:
        """An answer that joined the conversation: what was said and what was heard."""
        await self.append(
            self.event_id(turn_id, "assistant", generation),
            EventKind.ASSISTANT_OUTPUT,
            {"text": text, "heard_text": heard, "interrupted": interrupted,
             "generation": generation, "item_id": item_id},
        )  # fmt: skip


def _seq(stored: list[JournalEvent]) -> int | None:
    """The journal position of what was just written; None while it waits in the session's
    buffer (the journal unreachable: seq 0)."""
    return stored[-1].seq if stored and stored[-1].seq > 0 else None


__all__ = ["Conversation"]
