"""The turn coordinator's vocabulary: the commands it gives the engine, and the settings it runs by.

``pipeline/turns.py`` (its rules: states, end of turn, barge-in, generations, the microphone)
decides; these are its outputs — each a frozen value the engine executes
(``pipeline/engine.py``'s ``_run``) — and ``TurnSettings``, its timing rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class UserSpeechStarted:
    at: float
    turn_id: int
    adopt: bool = False
    """The tentative utterance recorded during a hold (Rule 3) becomes this turn."""


@dataclass(frozen=True, slots=True)
class UserSpeechStopped:
    """The user paused; the engine may start speculative ASR and the endpointing model."""

    at: float
    turn_id: int


@dataclass(frozen=True, slots=True)
class UserSpeechResumed:
    """Speech resumed within the endpoint window: speculative work for the pause is stale."""

    at: float
    turn_id: int


@dataclass(frozen=True, slots=True)
class DropUtterance:
    turn_id: int


@dataclass(frozen=True, slots=True)
class CommitUserTurn:
    """The user's turn ended: answer it as ``generation`` (the new current generation)."""

    turn_id: int
    reason: str  # "endpoint" | "commit" | "text"
    text: str | None = None  # typed text; None = transcribe the utterance audio
    generation: int = 0


@dataclass(frozen=True, slots=True)
class Interrupt:
    generation: int
    reason: str  # "barge_in" | "text_input" | "cancel"


@dataclass(frozen=True, slots=True)
class PauseResponse:
    """Hold ``generation``'s output: sound during the answer may be a false interruption.
    Record the candidate from ``at`` as a tentative utterance of ``turn_id`` (Rule 3)."""

    generation: int
    at: float
    turn_id: int


@dataclass(frozen=True, slots=True)
class JudgeInterruption:
    """Transcribe the tentative utterance of ``turn_id`` and answer
    ``on_interruption_verdict``; ``speech_end`` is when its sound stopped (None: still
    sounding at the hold's timeout)."""

    turn_id: int
    speech_end: float | None


@dataclass(frozen=True, slots=True)
class ResumeResponse:
    """The held ``generation`` goes on where it paused; drop the tentative utterance (keep it
    with ``keep_recording``: the verdict is still to come)."""

    generation: int
    turn_id: int
    keep_recording: bool = False


Command = (
    UserSpeechStarted
    | UserSpeechStopped
    | UserSpeechResumed
    | DropUtterance
    | CommitUserTurn
    | Interrupt
    | PauseResponse
    | JudgeInterruption
    | ResumeResponse
)


TurnEagerness = Literal["low", "medium", "high"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    """Timing rules, in seconds. ``auto_commit=False`` is push-to-talk: only an explicit commit
    (or typed text) ends a turn."""

    silence_delay: float = 0.8
    complete_delay: float = 0.3
    incomplete_delay: float = 2.5
    min_interrupt: float = 0.4
    max_voice_gap: float = 0.12
    burst_join: float = 1.0
    auto_commit: bool = True
    false_interruption_timeout: float | None = 1.5
    """Longest hold of an answer for a candidate interruption (Rule 3); None: interrupt at
    ``min_interrupt`` without holding."""
    eagerness: TurnEagerness = "medium"
    """How readily a pause ends the turn (Rule 2): which signals must agree before the wait is
    shortened, and the scale of every delay (``pipeline.endpoint_cues``). The delays above are
    the unscaled ones."""
    transcript_cues: bool = True
    """Let the speculative transcript's cue move the endpoint deadline (off: it is NEUTRAL)."""

    def __post_init__(self) -> None:
        for name in ("silence_delay", "complete_delay", "incomplete_delay", "min_interrupt"):
            if getattr(self, name) < 0:
                raise ValueError(f"TurnSettings.{name} must be >= 0")
        hold = self.false_interruption_timeout
        if hold is not None and hold <= 0:
            raise ValueError("TurnSettings.false_interruption_timeout must be > 0 or None")
        if self.eagerness not in ("low", "medium", "high"):
            raise ValueError(
                f"TurnSettings.eagerness must be 'low', 'medium' or 'high', not {self.eagerness!r}"
            )


__all__ = [
    "Command",
    "CommitUserTurn",
    "DropUtterance",
    "Interrupt",
    "JudgeInterruption",
    "PauseResponse",
    "ResumeResponse",
    "TurnEagerness",
    "TurnSettings",
    "UserSpeechResumed",
    "UserSpeechStarted",
    "UserSpeechStopped",
]
