"""The events of one response, in the order the GA protocol gives them.

Theory of operation
-------------------
``ResponseEvents`` is sans-I/O: each method returns the events to send for one step of a
response, and keeps the bookkeeping the protocol needs (output indexes, the open message item,
the text so far). The engine calls it and hands the values to its sink.

Rule 1. ``created()`` first: ``response.created`` with status ``in_progress``.
Rule 2. Output items are numbered in the order they open (``output_index``). A function call is
        one item, sent whole (added, arguments delta and done, item done) when the brain makes
        it. An MCP call opens the same way (added, arguments, in progress) and is done when the
        server's tool answered (completed or failed, item done with its output or error); one
        still open when the response ends is failed then. The spoken answer is one message
        item with one content part (``audio`` with a transcript, or ``text`` for a text-only
        response); it opens at the first text or audio.
Rule 3. ``audio_done()`` once the last audio was sent (the client may still be playing it);
        ``done(...)`` closes what is still open, innermost first (audio done if not yet,
        transcript done, part done, item done, conversation item done), then ``response.done``
        with the status, the items and the usage. An interrupted answer's item is
        ``incomplete`` and its transcript is what the person heard.
Rule 4. ``conversation.item.added/done`` accompany each output item only when the response
        belongs to the conversation (``conversation: "none"`` is out of band).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.events import (
    ContentPart,
    ContentPartAdded,
    ContentPartDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    FunctionCallItem,
    Item,
    ItemAdded,
    ItemDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpCallItem,
    McpError,
    MessageItem,
    OutputAudioDelta,
    OutputAudioDone,
    OutputAudioTranscriptDelta,
    OutputAudioTranscriptDone,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    Response,
    ResponseCreated,
    ResponseDone,
    ResponsePart,
    ServerEvent,
    StatusDetails,
    Usage,
)


@dataclass(slots=True)
class ResponseEvents:
    response_id: str
    item_id: str
    """The id the spoken answer's message item gets."""
    generation: int
    audio: bool = True
    """False: a text-only response (``output_modalities: ["text"]``)."""
    in_conversation: bool = True
    previous_item_id: str | None = None
    conversation_id: str | None = None
    _items: list[Item] = field(default_factory=list)
    _message_index: int | None = None
    _text: list[str] = field(default_factory=list)
    _audio_done: bool = False

    @property
    def modalities(self) -> tuple[str, ...]:
        return ("audio",) if self.audio else ("text",)

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def message_open(self) -> bool:
        return self._message_index is not None

    def created(self) -> list[ServerEvent]:
        return [ResponseCreated(self._response("in_progress"))]

    def function_call(
        self, item_id: str, call_id: str, name: str, arguments: Mapping[str, Any]
    ) -> list[ServerEvent]:
        args = json.dumps(dict(arguments), ensure_ascii=False)
        index = len(self._items)
        started = FunctionCallItem(item_id, call_id, name, "", status="in_progress")
        item = FunctionCallItem(item_id, call_id, name, args)
        self._items.append(item)
        events: list[ServerEvent] = [OutputItemAdded(self.response_id, index, started)]
        if self.in_conversation:
            events.append(ItemAdded(started, self._previous()))
        events += [
            FunctionCallArgumentsDelta(self.response_id, item_id, index, call_id, args),
            FunctionCallArgumentsDone(self.response_id, item_id, index, call_id, name, args),
            OutputItemDone(self.response_id, index, item),
        ]
        if self.in_conversation:
            events.append(ItemDone(item, self._previous(before=index)))
        return events

    def mcp_call(
        self,
        item_id: str,
        name: str,
        server_label: str,
        arguments: Mapping[str, Any],
        approval_request_id: str | None = None,
    ) -> list[ServerEvent]:
        """An MCP server's tool call opens (Rule 2): it runs on the server, so the item stays
        open until ``mcp_call_done``."""
        args = json.dumps(dict(arguments), ensure_ascii=False)
        index = len(self._items)
        started = McpCallItem(item_id, name, server_label, "",
                              approval_request_id=approval_request_id)  # fmt: skip
        self._items.append(dataclasses.replace(started, arguments=args))
        events: list[ServerEvent] = [OutputItemAdded(self.response_id, index, started)]
        if self.in_conversation:
            events.append(ItemAdded(started, self._previous()))
        return events + [
            McpCallArgumentsDelta(self.response_id, item_id, index, args),
            McpCallArgumentsDone(self.response_id, item_id, index, args),
            McpCallInProgress(item_id, index),
        ]

    def mcp_call_done(
        self, item_id: str, *, output: str | None = None, error: McpError | None = None
    ) -> list[ServerEvent]:
        """The MCP call ``item_id`` ended with ``output`` or ``error`` (none when it is not an
        open MCP call of this response)."""
        index = next(
            (i for i, item in enumerate(self._items)
             if isinstance(item, McpCallItem) and item.id == item_id),
            None,
        )  # fmt: skip
        if index is None:
            return []
        call = self._items[index]
        assert isinstance(call, McpCallItem)
        item = self._items[index] = dataclasses.replace(call, output=output, error=error)
        ended = (
            McpCallFailed(item_id, index) if error is not None else McpCallCompleted(item_id, index)
        )
        events: list[ServerEvent] = [ended, OutputItemDone(self.response_id, index, item)]
        if self.in_conversation:
            events.append(ItemDone(item, self._previous(before=index)))
        return events

    def text_delta(self, delta: str) -> list[ServerEvent]:
        events = self._open_message()
        self._text.append(delta)
        index = self._index()
        kind = OutputAudioTranscriptDelta if self.audio else OutputTextDelta
        events.append(kind(self.response_id, self.item_id, index, 0, delta))
        return events

    def audio_delta(self, pcm: bytes) -> list[ServerEvent]:
        events = self._open_message()
        events.append(
            OutputAudioDelta(
                self.response_id, self.item_id, self._index(), 0, pcm, generation=self.generation
            )
        )
        return events

    def audio_done(self) -> list[ServerEvent]:
        """All of the answer's audio was sent (it may still be playing): ``output_audio.done``
        now, the rest when the response ends (Rule 3)."""
        if self._message_index is None or not self.audio or self._audio_done:
            return []
        self._audio_done = True
        return [OutputAudioDone(self.response_id, self.item_id, self._message_index, 0)]

    def done(
        self,
        status: str,
        *,
        reason: str | None = None,
        heard: str | None = None,
        text: str | None = None,
        error: Mapping[str, str] | None = None,
        usage: Usage | None = None,
    ) -> list[ServerEvent]:
        """Close the response (Rule 3). ``heard``: the transcript of an interrupted answer."""
        events: list[ServerEvent] = []
        for item in list(self._items):
            if isinstance(item, McpCallItem) and item.output is None and item.error is None:
                unfinished = McpError("tool_execution_error", "the response ended first")
                events += self.mcp_call_done(item.id, error=unfinished)
        if self._message_index is not None:
            index = self._message_index
            interrupted = status == "cancelled"
            transcript = heard if (interrupted and heard is not None) else self.text
            item = self._message(
                transcript, "incomplete" if status in ("cancelled", "incomplete") else "completed"
            )
            self._items[index] = item
            rid, iid = self.response_id, self.item_id
            if self.audio:
                events += self.audio_done()
                events.append(OutputAudioTranscriptDone(rid, iid, index, 0, transcript))
                part = ResponsePart("audio", transcript=transcript)
            else:
                events.append(OutputTextDone(rid, iid, index, 0, transcript))
                part = ResponsePart("text", text=transcript)
            events += [ContentPartDone(rid, iid, index, 0, part), OutputItemDone(rid, index, item)]
            if self.in_conversation:
                events.append(ItemDone(item, self._previous(before=index)))
        details = None
        if status != "completed":
            details = StatusDetails(type=status, reason=reason, error=error)
        response = dataclasses.replace(
            self._response(status, details=details, usage=usage or Usage()),
            output_text=self.text if text is None else text,
            heard_text=heard if heard is not None else (self.text if text is None else text),
            interrupted=status == "cancelled",
        )
        events.append(ResponseDone(response))
        return events

    # ------------------------------------------------------------ helpers

    def _response(
        self, status: str, *, details: StatusDetails | None = None, usage: Usage | None = None
    ) -> Response:
        return Response(
            id=self.response_id,
            status=status,
            output=tuple(self._items),
            output_modalities=self.modalities,
            status_details=details,
            usage=usage,
            conversation_id=self.conversation_id if self.in_conversation else None,
            generation=self.generation,
        )

    def _open_message(self) -> list[ServerEvent]:
        if self._message_index is not None:
            return []
        index = self._message_index = len(self._items)
        started = self._message("", "in_progress")
        self._items.append(started)
        events: list[ServerEvent] = [OutputItemAdded(self.response_id, index, started)]
        if self.in_conversation:
            events.append(ItemAdded(started, self._previous(before=index)))
        part = ResponsePart("audio", transcript="") if self.audio else ResponsePart("text", text="")
        events.append(ContentPartAdded(self.response_id, self.item_id, index, 0, part))
        return events

    def _message(self, text: str, status: str) -> MessageItem:
        part = (
            ContentPart("output_audio", transcript=text)
            if self.audio
            else ContentPart("output_text", text=text)
        )
        return MessageItem(self.item_id, "assistant", (part,), status=status)

    def _index(self) -> int:
        assert self._message_index is not None
        return self._message_index

    def _previous(self, before: int | None = None) -> str | None:
        """The item before output ``before`` (or before the newest), else the conversation's
        last item before this response."""
        position = len(self._items) - 1 if before is None else before
        if position > 0:
            return self._items[position - 1].id
        return self.previous_item_id


__all__ = ["ResponseEvents"]
