"""Echo gate: the VAD's decisions with the assistant's echo taken out, for the coordinator
(``pipeline/echo.py`` judges each microphone frame; this gate acts on the judgements).

Theory of operation
-------------------
Rule 1. The gate follows the VAD's own speech state and is in one of three states
(``GATE_TRANSITIONS``): QUIET (the VAD hears no speech), ECHO (the VAD hears speech that was
held back as echo), OPEN (speech was passed on). A frame is *near* when the VAD calls it voiced
and the guard calls it near-end. The VAD's SPEECH_START passes (OPEN) when no frame since the
speech began had output audible, or when the near frames since then add up to ``confirm_ms``;
otherwise it is held (ECHO). In ECHO, near frames adding up to ``confirm_ms`` within
``confirm_window_ms`` start speech at the first of them (OPEN). The VAD's SPEECH_END closes
(QUIET; passed on only from OPEN). In OPEN with output audible, ``release_ms`` without a near
frame ends the speech at the last near frame (back to ECHO). The voiced flag the coordinator sees
is the near flag: echo frames never hold a barge-in candidate alive.

The gate is sans-I/O: ``feed`` is called once for every frame the VAD processes, with the VAD's
events and voiced flag for it and the guard's judgement of it; positions count the VAD's samples.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.echo_values import EchoJudgement
from plugins.audio import INPUT_SAMPLE_RATE
from plugins.contracts import VADEvent, VADEventKind


class GateState(enum.Enum):
    QUIET = "quiet"
    ECHO = "echo"
    OPEN = "open"


class GateTrigger(enum.Enum):
    VAD_START_NEAR = "vad_start_near"
    VAD_START_ECHO = "vad_start_echo"
    CONFIRMED = "confirmed"
    RELEASED = "released"
    VAD_END = "vad_end"


_S, _T = GateState, GateTrigger
GATE_TRANSITIONS: dict[tuple[GateState, GateTrigger], GateState] = {
    (_S.QUIET, _T.VAD_START_NEAR): _S.OPEN,
    (_S.QUIET, _T.VAD_START_ECHO): _S.ECHO,
    (_S.ECHO, _T.CONFIRMED): _S.OPEN,
    (_S.ECHO, _T.VAD_END): _S.QUIET,
    (_S.OPEN, _T.RELEASED): _S.ECHO,
    (_S.OPEN, _T.VAD_END): _S.QUIET,
}
del _S, _T


@dataclass(frozen=True, slots=True)
class _Frame:
    start: int
    samples: int
    near: bool
    reference: bool


class EchoGate:
    """VAD decisions with the echo taken out, for the coordinator (Rule 1).

    Positions are the VAD's (samples fed to it, counting on through its resets): ``feed`` must be
    called once for every frame the VAD processes, with that frame's judgement.
    """

    def __init__(
        self,
        *,
        confirm_ms: float = 120.0,
        confirm_window_ms: float = 200.0,
        release_ms: float = 400.0,
    ) -> None:
        self.confirm_ms = confirm_ms
        self.confirm_window_ms = confirm_window_ms
        self.release_ms = release_ms
        self._position = 0
        self._history: deque[_Frame] = deque()
        self._history_ms = max(confirm_window_ms, 2_000.0)
        self.state = GateState.QUIET
        self._speech_at = 0  # where the VAD's current speech began
        self._last_near_end: int | None = None
        self.voiced = False
        """The voiced flag for the coordinator: the VAD's, on near-end frames only."""

    @property
    def holding(self) -> bool:
        """The VAD's current speech began as possible echo and is not confirmed yet."""
        return self.state is GateState.ECHO

    def reset(self) -> None:
        """The VAD was reset: its speech state is gone (positions keep counting)."""
        self.state = GateState.QUIET
        self._history.clear()
        self._last_near_end = None
        self.voiced = False

    def feed(
        self, events: Sequence[VADEvent], voiced: bool, judgement: EchoJudgement
    ) -> list[VADEvent]:
        """One frame: the VAD's events and voiced flag for it, and the guard's judgement of it.
        Returns the events the coordinator should see."""
        start = self._position
        samples = judgement.samples
        self._position += samples
        near = voiced and judgement.near_end
        self.voiced = near
        self._remember(_Frame(start, samples, near, judgement.reference))
        out: list[VADEvent] = []
        if near:
            self._last_near_end = self._position
        for event in events:
            at = round(event.at_ms * INPUT_SAMPLE_RATE / 1000.0)
            if event.kind is VADEventKind.SPEECH_START:
                if self.state is not GateState.QUIET:
                    continue  # cannot happen with a VAD that alternates; ignore
                self._speech_at = at
                if self._passes(at):
                    self._move(GateTrigger.VAD_START_NEAR)
                    out.append(event)
                else:
                    self._move(GateTrigger.VAD_START_ECHO)
            elif self.state is not GateState.QUIET:
                opened = self.state is GateState.OPEN
                self._move(GateTrigger.VAD_END)
                if opened:
                    out.append(event)
        if self.state is GateState.ECHO:
            first = self._confirmed()
            if first is not None:
                self._move(GateTrigger.CONFIRMED)
                out.append(VADEvent(VADEventKind.SPEECH_START, _ms(first)))
        elif self.state is GateState.OPEN and judgement.reference:
            last = self._last_near_end
            if last is None or _ms(self._position - last) >= self.release_ms:
                self._move(GateTrigger.RELEASED)
                end = last if last is not None else start
                out.append(VADEvent(VADEventKind.SPEECH_END, _ms(end)))
        return out

    def _remember(self, frame: _Frame) -> None:
        history = self._history
        history.append(frame)
        horizon = frame.start + frame.samples - self._history_ms * INPUT_SAMPLE_RATE / 1000.0
        while history and history[0].start + history[0].samples < horizon:
            history.popleft()

    def _passes(self, at: int) -> bool:
        """A VAD speech start at ``at`` is near-end speech: echo-free, or confirmed."""
        since = [f for f in self._history if f.start + f.samples > at]
        if not any(f.reference for f in since):
            return True
        return _ms(sum(f.samples for f in since if f.near)) >= self.confirm_ms

    def _confirmed(self) -> int | None:
        """Start of the first near frame, if near frames within the confirmation window (and
        inside the VAD's speech) add up to ``confirm_ms``."""
        window_start = self._position - self.confirm_window_ms * INPUT_SAMPLE_RATE / 1000.0
        near = [
            f
            for f in self._history
            if f.near and f.start >= window_start and f.start + f.samples > self._speech_at
        ]
        if _ms(sum(f.samples for f in near)) < self.confirm_ms:
            return None
        return max(near[0].start, self._speech_at)

    def _move(self, trigger: GateTrigger) -> None:
        target = GATE_TRANSITIONS.get((self.state, trigger))
        if target is None:
            raise RuntimeError(f"echo gate: {trigger.value} is not allowed in {self.state.value}")
        self.state = target
        if trigger in (GateTrigger.CONFIRMED, GateTrigger.VAD_START_NEAR):
            self._last_near_end = self._position


def _ms(samples: float) -> float:
    return samples * 1000.0 / INPUT_SAMPLE_RATE


__all__ = ["GATE_TRANSITIONS", "EchoGate", "GateState", "GateTrigger"]
