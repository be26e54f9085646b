"""Rendering journal events as the conversation context a model reads (the seed's format).

An event is one turn of history (``plugins.contracts.HistoryTurn``, what a brain reads) and
one line of text (what a prompt shows), in the thread's language:

- user input: ``用户:…`` / ``User: …``
- assistant output: ``助手:…`` / ``Assistant: …``; an interrupted output contributes only the
  prefix the user heard, marked with `` …``
- tool call: ``工具调用:name {arguments}`` / ``Tool call: name {arguments}``
- tool result: ``工具结果(name):content`` / ``Tool result (name): content``
- a private tool's call and result (``private: true``, kept without their text: ``confide``)
  are not rendered
- a verified summary (from a checkpoint, see ``journal/checkpoints.py``):
  ``早前对话摘要:…`` / ``Summary of earlier conversation: …``

A line is its turn rendered (``turn_line``), so the two never disagree. Whitespace inside an
event (line breaks included) is collapsed to single spaces, so an event never spans two lines
and readers can tell speakers apart by the line prefix. ``summary`` events found in the journal
itself are not rendered: a summary is only trusted through a checkpoint whose checksum
verifies. Nor are ``item_deleted``/``item_truncated`` events: ``render_context`` folds them into
the events they amend (``journal/amendments.py``), while ``event_line`` renders one event as it
is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from journal.amendments import apply_amendments
from journal.events import EventKind, JournalEvent, canonical_json
from plugins.contracts import HistoryTurn
from plugins.language import zh_or_en

_SPEAKERS = {"zh": ("用户:", "助手:"), "en": ("User: ", "Assistant: ")}
_TOOL_CALL = {"zh": "工具调用:", "en": "Tool call: "}
_TOOL_RESULT = {"zh": "工具结果({}):", "en": "Tool result ({}): "}
_SUMMARY = {"zh": "早前对话摘要:", "en": "Summary of earlier conversation: "}

_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class RenderedContext:
    """A conversation context twice: ``text``, one line per turn, and the ``history`` turns."""

    text: str
    history: tuple[HistoryTurn, ...]


def speakers_for(language: str | None) -> tuple[str, str]:
    return _SPEAKERS[zh_or_en(language)]


def one_line(text: str) -> str:
    """``text`` with every whitespace run (line breaks included) as one space, stripped."""
    return _WHITESPACE.sub(" ", text).strip()


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def event_turn(event: JournalEvent) -> HistoryTurn | None:
    """One event as a turn of history, or None if it contributes nothing."""
    payload = event.payload
    if event.kind is EventKind.USER_INPUT:
        text = one_line(str(payload.get("text", "")))
        return HistoryTurn("user", text) if text else None
    if event.kind is EventKind.ASSISTANT_OUTPUT:
        interrupted = bool(payload.get("interrupted"))
        text = one_line(str(payload.get("heard_text" if interrupted else "text", "")))
        return HistoryTurn("assistant", text, interrupted=interrupted) if text else None
    if payload.get("private") is True:
        return None  # a private tool's call or result: kept without its text, shown as nothing
    if event.kind is EventKind.TOOL_CALL:
        name = one_line(str(payload.get("name", "")))
        arguments = one_line(_as_text(payload.get("arguments", {})))
        return HistoryTurn("tool_call", arguments, tool=name)
    if event.kind is EventKind.TOOL_RESULT:
        name = one_line(str(payload.get("name", "")))
        content = one_line(_as_text(payload.get("content", "")))
        return HistoryTurn("tool_result", content, tool=name)
    return None


def turn_line(turn: HistoryTurn, language: str | None) -> str:
    """A turn as its line of context."""
    key = zh_or_en(language)
    if turn.role == "user":
        return f"{_SPEAKERS[key][0]}{turn.text}"
    if turn.role == "assistant":
        return f"{_SPEAKERS[key][1]}{turn.line_text}"
    if turn.role == "tool_call":
        return f"{_TOOL_CALL[key]}{turn.tool} {turn.text}".rstrip()
    if turn.role == "tool_result":
        return f"{_TOOL_RESULT[key].format(turn.tool)}{turn.text}"
    return f"{_SUMMARY[key]}{turn.text}"


def event_line(event: JournalEvent, language: str | None) -> str | None:
    """One event as a line of context, or None if it contributes nothing."""
    turn = event_turn(event)
    return None if turn is None else turn_line(turn, language)


def summary_turn(text: str) -> HistoryTurn | None:
    """A checkpoint's summary as a turn of history, or None when it is empty."""
    body = one_line(text)
    return HistoryTurn("summary", body) if body else None


def summary_line(text: str, language: str | None) -> str | None:
    """A checkpoint's summary as a line of context, or None when it is empty."""
    turn = summary_turn(text)
    return None if turn is None else turn_line(turn, language)


def render_context(events: Iterable[JournalEvent], language: str | None) -> RenderedContext:
    """Every event's turn and line, oldest first, with no budget (see ``journal/projector.py``),
    after the amendments among ``events`` are folded in (deleted items left out, truncations
    applied)."""
    turns = tuple(t for t in map(event_turn, apply_amendments(events)) if t is not None)
    return RenderedContext("\n".join(turn_line(t, language) for t in turns), turns)
