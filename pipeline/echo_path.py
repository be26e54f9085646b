"""The echo path of one session: the guard and the gate (``pipeline/echo.py``) kept in line with
the microphone stream and the answer's audio, for the engine.

Theory of operation
-------------------
Sans-I/O, like the guard: every input carries ``now`` (the engine's clock).

Rule 1 — the guard's timeline is the microphone's. ``judge`` sees every microphone frame,
those of a paused microphone too. The stream (re)starts after a gap of ``ECHO_STREAM_GAP_S``
(push-to-talk, a stalled network): the audio after it is measured against real time from there.

Rule 2 — audio much faster than real time is no microphone. When the stream has delivered
``ECHO_AHEAD_S`` more audio than real time since it (re)started — a file, a client catching up
on a backlog — the guard's timeline no longer lines up with the playback: every frame is judged
near-end (``no_reference``) until the stream is real-time again or pauses, and then the guard
starts afresh (``reset``). Less than that is the network's jitter (frames that were late arrive
together), which the guard's delay search covers.

Rule 3 — the gate decides only while an answer may be heard. ``sent`` moves the end of the
answer's audio (at real-time playback); until ``ECHO_TAIL_S`` after it, and for speech that
began then (``EchoGate.holding``) after it too, the VAD's events and voiced flag are the gate's;
otherwise the VAD's own. ``played_out`` says the client has played the answer (its end may come
before real time has passed).

Rule 4 — the answer's playback, as the client was told: ``stop`` (cleared), ``pause`` and
``resume`` (a held answer, when the client pauses its playback with us).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.echo import EchoGuard
from pipeline.echo_gate import EchoGate
from pipeline.echo_values import EchoJudgement, EchoSettings, no_reference
from plugins.contracts import VADEvent

ECHO_STREAM_GAP_S = 0.25
"""A pause in the microphone stream this long misaligns the echo guard's timeline."""
ECHO_AHEAD_S = 0.5
"""Microphone audio that came this much faster than real time since the stream's last pause is
no microphone beside a speaker (a file, a client catching up on a backlog): the guard stands
aside. Less is the network's jitter — frames that were late arrive together — and the guard's
delay search covers it."""
ECHO_TAIL_S = 0.3
"""After the answer's audio has played out (plus the client's buffer and the room), the
microphone's sound is the person's: the echo gate is bypassed."""


def echo_guard(output_rate: int) -> EchoGuard:
    """An echo guard for output at ``output_rate`` (G.711's 8 kHz: bands up to 3.6 kHz)."""
    high = min(EchoSettings().high_hz, 0.45 * output_rate)
    return EchoGuard(EchoSettings(output_sample_rate=output_rate, high_hz=high))


class EchoPath:
    """One session's guard and gate, in line with its streams (module rules); ``guard`` None
    when the echo guard is off (every decision is then the VAD's)."""

    def __init__(self, output_rate: int, *, enabled: bool = True) -> None:
        self.guard = echo_guard(output_rate) if enabled else None
        self.gate = EchoGate()
        self._last_frame_at: float | None = None
        self.misaligned = False
        """Rule 2: the microphone runs ahead of real time; its frames are judged near-end."""
        self._anchor = 0.0  # when the stream (re)started (Rule 1)
        self._heard_s = 0.0  # its audio since then
        self._until = -1e9
        """When the answer audio sent so far ends playing, at real-time playback."""

    def judge(self, pcm: PCM, now: float) -> EchoJudgement | None:
        """The guard's judgement of a microphone frame (None: no guard); Rules 1 and 2."""
        guard = self.guard
        if guard is None:
            return None
        last, self._last_frame_at = self._last_frame_at, now
        seconds = pcm.size / INPUT_SAMPLE_RATE
        gap = last is not None and now - last > ECHO_STREAM_GAP_S
        if last is None or gap:
            self._anchor, self._heard_s = now, 0.0
        self._heard_s += seconds
        ahead = self._heard_s - (now - self._anchor) - seconds
        if ahead > ECHO_AHEAD_S:
            self.misaligned = True
        elif self.misaligned or gap:
            # Real time again, or after a pause in the stream (push-to-talk): afresh.
            self.misaligned = False
            guard.reset()
            self._anchor, self._heard_s = now, seconds
        return no_reference(pcm.size) if self.misaligned else guard.judge(pcm, now)

    def gated(
        self,
        events: Sequence[VADEvent],
        voiced: bool,
        judgement: EchoJudgement | None,
        now: float,
    ) -> tuple[Sequence[VADEvent], bool]:
        """The VAD's events and voiced flag for a frame, the answer's echo taken out (Rule 3).
        The gate sees every frame the VAD processes."""
        if judgement is None:
            return events, voiced
        gate = self.gate
        held = gate.holding
        gated = gate.feed(events, voiced, judgement)
        if held or now <= self._until + ECHO_TAIL_S:
            return gated, gate.voiced
        return events, voiced

    def reset_gate(self) -> None:
        """The VAD was reset: the gate forgets its speech state."""
        self.gate.reset()

    def sent(self, pcm: PCM, now: float, output_rate: int) -> None:
        """A response's audio went to the client at ``output_rate`` (the guard's reference)."""
        if self.guard is None:
            return
        self._until = max(self._until, now) + pcm.size / output_rate
        if self.guard.settings.output_sample_rate != output_rate:
            self.guard = echo_guard(output_rate)  # a session.update changed the format
        self.guard.played(pcm, now)

    def played_out(self, now: float) -> None:
        """The answer has played out (the client may say so before real time has passed)."""
        self._until = min(self._until, now)

    def stop(self, now: float) -> None:
        """The client clears its playback (an interruption)."""
        if self.guard is not None:
            self.guard.stop(now)

    def pause(self, now: float) -> None:
        """The client pauses its playback, keeping its buffer (a held answer)."""
        if self.guard is not None:
            self.guard.pause(now)

    def resume(self, now: float) -> None:
        """The client plays on from where it paused."""
        if self.guard is not None:
            self.guard.resume(now)


__all__ = ["ECHO_AHEAD_S", "ECHO_STREAM_GAP_S", "ECHO_TAIL_S", "EchoPath", "echo_guard"]
