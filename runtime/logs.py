"""The server's log lines: structured JSON, one object per line, never conversation content.

Theory of operation
-------------------
Rule 1. ``OPENREALTIME_LOG_FORMAT`` picks the format of ``serve``'s logs: ``json`` — one object
        per line with ``time`` (UTC, ISO 8601, ms), ``level``, ``logger``, ``message`` and the
        safe fields below — or ``text`` for a person; ``auto`` (the default) is text when
        stderr is a terminal and JSON otherwise (a container, a service manager, a pipe), so
        ``make run`` stays readable and a deployment gets JSON without a setting.
Rule 2. Safe fields only. A record's ``extra`` fields are written when their name is in
        ``SAFE_FIELDS`` (ids, codes, counts, durations) and their value a number, a bool or a
        string of at most ``MAX_FIELD_CHARS``; anything else is dropped, never stringified.
Rule 3. Logs never carry conversation content — transcripts, prompts, answers, memories
        (STYLE.md 12): the runtime's own log calls say what happened with ids, codes and
        sizes; ``tests/runtime/test_logs.py`` holds a whole conversation to that at the
        default level. ``OPENREALTIME_LOG_CONTENT`` (off) is the only door content may ever
        use, at DEBUG; nothing uses it today.
Rule 4. Bounded: a message is cut at ``MAX_MESSAGE_CHARS``, an exception's text (type,
        message, frames) at ``MAX_EXCEPTION_CHARS``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

SAFE_FIELDS = frozenset(
    {
        "session_id",
        "connection_id",
        "call_id",
        "response_id",
        "generation",
        "turn_id",
        "code",
        "close_code",
        "status",
        "stage",
        "count",
        "duration_ms",
        "bytes",
        "thread_id",
        "waited_ms",
        "elapsed_ms",
    }
)
"""``extra`` fields a log line may carry (rule 2)."""

MAX_FIELD_CHARS = 200
MAX_MESSAGE_CHARS = 4_000
MAX_EXCEPTION_CHARS = 8_000

_PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLogFormatter(logging.Formatter):
    """One JSON object per record (rules 1, 2, 4)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _cut(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        for name in SAFE_FIELDS:
            field = record.__dict__.get(name)
            if isinstance(field, bool | int | float):
                out[name] = field
            elif isinstance(field, str) and len(field) <= MAX_FIELD_CHARS:
                out[name] = field
        if record.exc_info and record.exc_info[0] is not None:
            kind, error, tb = record.exc_info
            out["exception"] = kind.__name__
            text = "".join(traceback.format_exception(kind, error, tb))
            out["traceback"] = _cut(text, MAX_EXCEPTION_CHARS)
        return json.dumps(out, ensure_ascii=False, default=str)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def chosen_format(
    setting: Literal["auto", "json", "text"], stream: TextIO
) -> Literal["json", "text"]:
    """Rule 1: ``auto`` is text on a terminal, JSON otherwise."""
    if setting != "auto":
        return setting
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(
    *,
    format: Literal["auto", "json", "text"],
    level: str,
    stream: TextIO | None = None,
    replace: bool = True,
) -> logging.Handler:
    """Send the root logger's records to ``stream`` (stderr) in the chosen format — instead
    of any handler it had, unless not ``replace`` (tests keep pytest's) — and returns the
    handler."""
    target = stream or sys.stderr
    handler = logging.StreamHandler(target)
    if chosen_format(format, target) == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(logging.Formatter(_PLAIN_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers) if replace else ():
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
