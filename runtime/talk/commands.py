"""What ``TalkConversation`` asks the runner to do, in order (runtime/talk/conversation.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Send:
    event: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Play:
    generation: int
    pcm: bytes
    """PCM16 at the session's output rate."""


@dataclass(frozen=True, slots=True)
class EndAudio:
    """The generation's audio is all here: flush what the resampler holds."""

    generation: int


@dataclass(frozen=True, slots=True)
class StopPlayback:
    """Drop what is queued now; report what ``generation`` played (None: report nothing)."""

    generation: int | None


@dataclass(frozen=True, slots=True)
class PausePlayback:
    pass


@dataclass(frozen=True, slots=True)
class ResumePlayback:
    pass


@dataclass(frozen=True, slots=True)
class ForgetPlayback:
    generation: int


@dataclass(frozen=True, slots=True)
class Show:
    """A transcript line: ``key`` names the turn, so a partial line is replaced by its final."""

    key: str
    speaker: str
    text: str
    final: bool


@dataclass(frozen=True, slots=True)
class Notice:
    text: str
    error: bool = False


Command = (
    Send
    | Play
    | EndAudio
    | StopPlayback
    | PausePlayback
    | ResumePlayback
    | ForgetPlayback
    | Show
    | Notice
)
