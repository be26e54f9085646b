"""A response's tool calls and results as the conversation shows them and the journal keeps
them. One room of the engine (``pipeline/engine.py`` hands it each call and result of the
brain's tool loop).

Theory of operation
-------------------
Rule 1. Three kinds of call, shown three ways: a client's function is an output item of the
        response (``function_call``: the client runs it and sends its output); an MCP server's
        tool is an ``mcp_call`` output item open until it answers (one the person was asked
        about shows as the approval request instead); a server tool (knowledge search) is shown
        as conversation items only, so a client never tries to run it.
Rule 2. Every call and result of a response that joins the conversation is journaled with its
        item id and the tool gate's decision fields (who allowed it, the question asked); an
        out-of-band response's are shown and not kept.
Rule 3. An MCP call that was approved and ran before the response (the person answered the
        gate's question) is the response's first output item, with the approval it ran on.
Rule 4. A private tool's call and result (``ToolSpec.private``: ``confide``) are journaled
        without what it was given and what it answered — ``arguments`` ``{}``, ``content``
        ``""`` and ``private: true`` — because the tool keeps them itself, sealed: nothing at
        rest holds them in plaintext. The live client is still shown them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from journal.events import EventKind, JournalEvent
from pipeline import events as ev
from pipeline.items import ConversationItems
from pipeline.response import Continuation, Response, ToolGateHook
from plugins.contracts import BrainDelta, ToolCall, ToolResult

Append = Callable[[str, EventKind, dict[str, Any]], Awaitable[list[JournalEvent]]]
"""The engine's journal write: (event id, kind, payload)."""


class ToolRecord:
    """Shows and journals a response's tool calls and results (module rules)."""

    def __init__(
        self,
        *,
        items: ConversationItems,
        send: Callable[[ev.ServerEvent], None],
        send_all: Callable[[list[ev.ServerEvent]], None],
        append: Append,
        new_item_id: Callable[[], str],
        gate: ToolGateHook | None,
        private: frozenset[str] = frozenset(),
    ) -> None:
        self.items = items
        self.private = private
        """The private tools' names (Rule 4)."""
        self.send = send
        self.send_all = send_all
        self.append = append
        self.new_item_id = new_item_id
        self.gate = gate

    async def record(self, response: Response, delta: BrainDelta, prefix: str) -> ToolCall | None:
        """One call or result of ``response`` (Rules 1 and 2); returns a call the client runs
        (its function), else None. ``prefix``: the response's journal event ids."""
        in_conversation = response.options.in_conversation
        if delta.tool_result is not None and delta.tool_result.call_id in response.mcp_calls:
            await self._mcp_result(response, delta.tool_result, prefix)
            return None
        client_call: ToolCall | None = None
        if delta.tool_call is not None:
            call = delta.tool_call
            item_id = self.new_item_id()
            gate = self.gate
            client = any(t.name == call.name for t in response.client_tools) and (
                gate is None or gate.runs_on_client(call.call_id)
            )
            label = gate.mcp_server_of(call.name) if gate else None
            if label is not None and "confirmation" not in self.decision_fields(call.call_id):
                response.mcp_calls[call.call_id] = item_id
                self.send_all(response.events.mcp_call(item_id, call.name, label, call.arguments))
            elif client:
                self.send_all(
                    response.events.function_call(item_id, call.call_id, call.name, call.arguments)
                )
                client_call = call
            else:
                item = ev.FunctionCallItem(
                    item_id, call.call_id, call.name, _arguments_json(call.arguments)
                )
                if in_conversation:
                    previous = self.items.last_id
                    self.send(ev.ItemAdded(item, previous))
                    self.send(ev.ItemDone(item, previous))
            if in_conversation:
                await self.append(
                    f"{prefix}:tool_call:{call.call_id}",
                    EventKind.TOOL_CALL,
                    {"call_id": call.call_id, "name": call.name, "item_id": item_id,
                     **self._kept(call.name, "arguments", call.arguments, {}),
                     **self.decision_fields(call.call_id)},
                )  # fmt: skip
        elif delta.tool_result is not None and in_conversation:
            result = delta.tool_result
            item_id = self.new_item_id()
            output = ev.FunctionCallOutputItem(item_id, result.call_id, result.content)
            previous = self.items.last_id
            self.send(ev.ItemAdded(output, previous))
            await self._journal_result(result, prefix, item_id)
            self.send(ev.ItemDone(output, previous))
        return client_call

    def show_settled_mcp(self, response: Response, settled: Continuation) -> None:
        """Rule 3."""
        result = settled.result
        label = self.gate.mcp_server_of(settled.call.name) if self.gate else None
        if label is None or result is None or not settled.ran:
            return
        asked = self.decision_fields(settled.call.call_id).get("confirmation")
        item_id = self.new_item_id()
        call = settled.call
        events = response.events
        self.send_all(
            events.mcp_call(item_id, call.name, label, call.arguments,
                            approval_request_id=asked if isinstance(asked, str) else None)
        )  # fmt: skip
        self.send_all(events.mcp_call_done(item_id, **self._mcp_outcome(result)))

    def decision_fields(self, call_id: str) -> dict[str, Any]:
        """The tool gate's decision on a call, as the journal keeps it (none without a gate)."""
        return self.gate.journal_fields(call_id) if self.gate is not None else {}

    async def _journal_result(self, result: ToolResult, prefix: str, item_id: str) -> None:
        await self.append(
            f"{prefix}:tool_result:{result.call_id}",
            EventKind.TOOL_RESULT,
            {"call_id": result.call_id, "name": result.name, "is_error": result.is_error,
             "item_id": item_id, **self._kept(result.name, "content", result.content, "")},
        )  # fmt: skip

    def _kept(self, tool: str, key: str, value: Any, empty: Any) -> dict[str, Any]:
        """What the journal keeps of a call's arguments or a result's content: ``empty`` for a
        private tool's (Rule 4)."""
        return {key: value} if tool not in self.private else {key: empty, "private": True}

    async def _mcp_result(self, response: Response, result: ToolResult, prefix: str) -> None:
        """An MCP call answered: its output item is done with the output or the error."""
        item_id = response.mcp_calls.pop(result.call_id)
        self.send_all(response.events.mcp_call_done(item_id, **self._mcp_outcome(result)))
        if response.options.in_conversation:
            await self._journal_result(result, prefix, item_id)

    def _mcp_outcome(self, result: ToolResult) -> dict[str, Any]:
        """An MCP call's ``output``, or its ``error`` as the gate knows it (a refusal or a
        timeout of the tool loop is the tool's execution error)."""
        if not result.is_error:
            return {"output": result.content}
        known = self.gate.mcp_error(result.call_id) if self.gate else None
        return {"error": known or ev.McpError("tool_execution_error", result.content)}


def _arguments_json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), ensure_ascii=False)


__all__ = ["ToolRecord"]
