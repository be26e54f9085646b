"""A failed turn, as the operator and the person meet it (SPEC RT-11).

Theory of operation
-------------------
Rule 1. A failure is described by its ids, the stage it happened in, a stable code, whether a
        retry may help, and its timings (how long the stage had run; how long since the
        commit) — never by content. A provider's or the journal's error keeps its own code and
        message; anything else is ``internal_error`` with a fixed message (no exception text
        reaches the client).
Rule 2. One log line per failure (WARNING; with the traceback only for our own faults), its
        fields as structured ``extra``.
Rule 3. The apology a spoken turn gets instead of silence: the role's ``failure_message`` (empty:
        none), else the default in the turn's language.
"""

from __future__ import annotations

import logging

from journal.errors import JournalError
from pipeline.engine_config import FAILURE_MESSAGES, Persona, TurnFailure
from pipeline.response import Response
from plugins.errors import PluginError
from plugins.language import detect_language

log = logging.getLogger(__name__)


def describe(response: Response, error: Exception, now: float) -> tuple[TurnFailure, str]:
    """Rule 1: the failure and the message the client is sent."""
    if isinstance(error, PluginError | JournalError):
        code, retryable, message = error.code, error.retryable, str(error)
    else:
        code, retryable, message = "internal_error", False, "the server failed this turn"
    failure = TurnFailure(
        turn_id=response.turn_id,
        generation=response.generation,
        response_id=response.response_id,
        stage=response.failed_stage or response.stage,
        code=code,
        retryable=retryable,
        waited_ms=round((now - response.stage_at) * 1000.0, 1),
        elapsed_ms=round((now - response.marks.get("committed", now)) * 1000.0, 1),
    )
    return failure, message


def log_failure(failure: TurnFailure, error: Exception, *, session_id: str, thread_id: str) -> None:
    """Rule 2."""
    log.warning(
        "turn failed at %s: %s",
        failure.stage,
        failure.code,
        exc_info=None if isinstance(error, PluginError | JournalError) else error,
        extra={
            "session_id": session_id,
            "thread_id": thread_id,
            "turn_id": failure.turn_id,
            "generation": failure.generation,
            "response_id": failure.response_id,
            "stage": failure.stage,
            "code": failure.code,
            "waited_ms": failure.waited_ms,
            "elapsed_ms": failure.elapsed_ms,
        },
    )


def apology(persona: Persona, last_input: str) -> str:
    """Rule 3 (empty: say nothing)."""
    if persona.failure_message is not None:
        return persona.failure_message
    language = persona.language or detect_language(last_input)
    return FAILURE_MESSAGES["zh" if language == "zh" else "en"]


__all__ = ["apology", "describe", "log_failure"]
