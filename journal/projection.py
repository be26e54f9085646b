"""Rendering journal events as the conversation context a model reads.

Each user input becomes ``用户:…``/``User: …`` and each assistant output ``助手:…``/
``Assistant: …``; an interrupted assistant output contributes only its heard prefix.
"""

from __future__ import annotations

from collections.abc import Iterable

from journal.events import EventKind, JournalEvent

_SPEAKERS = {"zh": ("用户:", "助手:"), "en": ("User: ", "Assistant: ")}


def speakers_for(language: str | None) -> tuple[str, str]:
    return _SPEAKERS["zh" if (language or "").startswith("zh") else "en"]


def event_line(event: JournalEvent, language: str | None) -> str | None:
    """One event as a line of context, or None if it contributes nothing."""
    user, assistant = speakers_for(language)
    if event.kind is EventKind.USER_INPUT:
        text = str(event.payload.get("text", "")).strip()
        return f"{user}{text}" if text else None
    if event.kind is EventKind.ASSISTANT_OUTPUT:
        interrupted = bool(event.payload.get("interrupted"))
        key = "heard_text" if interrupted else "text"
        text = str(event.payload.get(key, "")).strip()
        if not text:
            return None
        return f"{assistant}{text}" + (" …" if interrupted else "")
    if event.kind is EventKind.SUMMARY:
        text = str(event.payload.get("text", "")).strip()
        return text or None
    return None


def render_context(events: Iterable[JournalEvent], language: str | None) -> str:
    lines = (event_line(e, language) for e in events)
    return "\n".join(line for line in lines if line)
