"""Audio in: what one microphone frame tells the turn coordinator. One room of the engine
(``pipeline/engine.py`` builds it, feeds it every frame and drives the coordinator with what it
hears).

Theory of operation
-------------------
Rule 1. Two clocks of audio. ``stream_ms`` counts every frame received (the GA protocol's
        ``audio_start_ms``/``audio_end_ms`` are positions on it: ``position_ms``); ``vad_ms``
        counts what the VAD heard — frames of a paused microphone are not fed to it — and the
        VAD's event times are on that clock, so ``hear`` turns them into the engine's time.
Rule 2. The echo path sees every frame, a paused microphone's included (its timeline is the
        microphone's: ``pipeline/echo_path.py`` Rule 1); the VAD and the pre-roll (the
        capture's ``remember``) only the frames of a microphone that listens.
Rule 3. The VAD's speech events and voiced flag reach the coordinator with the answer's echo
        taken out (the echo path's gate, Rule 3 there: TT-4).
Rule 4. ``reset`` (a commit, a cleared or paused microphone) forgets the VAD's speech state and
        the gate's; ``clear`` also drops the pre-roll. Positions keep counting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, duration_ms
from pipeline.capture import SpeechCapture
from pipeline.echo_path import EchoPath
from plugins.contracts import VADEventKind, VADStream


@dataclass(frozen=True, slots=True)
class Heard:
    """What a frame told the coordinator (Rule 3): the speech starts and ends it brought, each
    at its time on the engine's clock, and whether the frame was a voice; read at ``now``."""

    now: float
    events: tuple[tuple[VADEventKind, float], ...]
    voiced: bool


class Listening:
    """The microphone's way to the coordinator (module rules)."""

    def __init__(
        self,
        vad: VADStream,
        echo_path: EchoPath,
        capture: SpeechCapture,
        *,
        clock: Callable[[], float],
        preroll_floor_ms: float,
    ) -> None:
        self.vad = vad
        self.echo_path = echo_path
        self.capture = capture
        self.clock = clock
        self.preroll_floor_ms = preroll_floor_ms
        self.stream_ms = 0.0
        self.vad_ms = 0.0

    async def hear(self, pcm: PCM, *, mic_paused: bool) -> Heard | None:
        """One frame of 16 kHz microphone audio; None while the microphone is paused."""
        now = self.clock()
        length = duration_ms(pcm.size, INPUT_SAMPLE_RATE)
        self.stream_ms += length
        judgement = self.echo_path.judge(pcm, now)
        if mic_paused:
            return None
        self.vad_ms += length
        self.capture.remember(pcm)
        events = await self.vad.process(pcm)
        events, voiced = self.echo_path.gated(events, self.vad.voiced, judgement, now)
        now = self.clock()
        if not events:  # the usual frame
            return Heard(now, (), voiced)
        at = tuple((e.kind, now - (self.vad_ms - e.at_ms) / 1000.0) for e in events)
        return Heard(now, at, voiced)

    def position_ms(self, at: float, now: float) -> int:
        """Where engine time ``at`` falls on the stream (Rule 1), read at ``now``."""
        return max(0, round(self.stream_ms - (now - at) * 1000.0))

    def reset(self) -> None:
        """Rule 4: the VAD and the gate forget their speech state."""
        self.vad.reset()
        self.echo_path.reset_gate()

    def clear(self) -> None:
        """Rule 4, and the pre-roll is dropped as well."""
        self.reset()
        self.capture.clear_preroll()

    def tune(self, *, threshold: float | None, prefix_padding_ms: int | None) -> bool:
        """Per-session VAD threshold and pre-roll (GA ``server_vad`` fields). False when the
        VAD has no adjustable threshold (the energy VAD), so it was left as it is."""
        if prefix_padding_ms is not None:
            self.capture.preroll_ms = max(float(prefix_padding_ms), self.preroll_floor_ms)
        if threshold is None:
            return True
        if not hasattr(self.vad, "threshold"):
            return False
        self.vad.threshold = min(max(threshold, 0.01), 0.99)
        return True


__all__ = ["Heard", "Listening"]
