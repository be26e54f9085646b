"""The person's utterance between the VAD and the coordinator: how it is heard, its verdicts.

One room of the engine (``pipeline/engine.py`` hands it the coordinator's speech commands);
``pipeline/listening.py`` is the room before it (audio in, VAD), the ``TurnCoordinator`` the
one it informs.

Theory of operation
-------------------
Rule 1. Speech events. An utterance's start, its pauses and its resumption are announced as GA
        ``speech_started``/``speech_stopped`` with their positions on the stream
        (``Listening.position_ms``) and the item the turn will be; the utterance's audio and
        transcripts are the ``SpeechCapture``'s (begun, paused, resumed, dropped here).
Rule 2. The endpoint's evidence. At a pause the capture transcribes the utterance so far (its
        speculation; a preemptive answer may start on it — the ``preempt`` port); the
        end-of-turn model (when there is one) judges the audio, and the speculation's cue
        (``pipeline/endpoint_cues.py``) is read when it is ready. Both go to the coordinator
        (``on_endpoint_verdict``, ``on_transcript_cue``; a model that failed has no opinion, a
        transcript that failed says NEUTRAL), then ``drive`` runs its commands.
Rule 3. A held sound (a candidate interruption, TT-1) is recorded from its start and
        transcribed once it goes quiet for ``HOLD_SPECULATE_MS``; at the coordinator's
        ``JudgeInterruption`` the transcript (made at the quiet, else of all that was heard)
        decides whether it is a real turn (``pipeline/backchannel.py``); a failed
        transcription is none: the answer resumes.
Rule 4. Partial transcripts: GA deltas only add text, so a hypothesis that rewrote earlier
        words adds nothing for a GA client; the ``transcript`` extension field has it all.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pipeline import events as ev
from pipeline.audio import PCM
from pipeline.backchannel import is_real_turn
from pipeline.capture import SpeechCapture
from pipeline.conversation import Conversation
from pipeline.endpoint_cues import Cue, transcript_cue
from pipeline.listening import Listening
from pipeline.turn_commands import (
    JudgeInterruption,
    PauseResponse,
    ResumeResponse,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from pipeline.turns import TurnCoordinator
from plugins.contracts import Endpointer, Transcript
from plugins.errors import PluginError

log = logging.getLogger(__name__)

HOLD_SPECULATE_MS = 40.0
"""Quiet after which a held sound is transcribed (two frames: sooner than a turn's pause)."""


class Hearing:
    """The utterance's room (module rules)."""

    def __init__(
        self,
        *,
        coordinator: TurnCoordinator,
        drive: Callable[[], None],
        capture: SpeechCapture,
        listening: Listening,
        conversation: Conversation,
        endpointer: Endpointer | None,
        send: Callable[[ev.ServerEvent], None],
        spawn: Callable[[Awaitable[Any], str], asyncio.Task[Any]],
        preempt: Callable[[int, asyncio.Task[Transcript]], None],
        clock: Callable[[], float],
    ) -> None:
        self.coordinator = coordinator
        self._drive = drive
        """Run the coordinator's commands (the engine's ``_run``)."""
        self.capture = capture
        self.listening = listening
        self.conversation = conversation
        self.endpointer = endpointer
        self._send = send
        self._spawn = spawn
        self._preempt = preempt
        self.clock = clock
        self._partials: dict[int, str] = {}
        self.closed = False

    # ------------------------------------------------------------ speech events (Rule 1)

    def started(self, command: UserSpeechStarted) -> None:
        now = self.clock()
        held = self.capture.utterance
        if not (command.adopt and held is not None and held.turn_id == command.turn_id):
            self.capture.begin(command.turn_id, command.at, now)
        self._send(
            ev.SpeechStarted(
                audio_start_ms=self.listening.position_ms(command.at, now),
                item_id=self.conversation.item_id(command.turn_id),
            )
        )

    def paused(self, command: UserSpeechStopped) -> None:
        """Rule 2."""
        self._send(
            ev.SpeechStopped(
                audio_end_ms=self.listening.position_ms(command.at, self.clock()),
                item_id=self.conversation.item_id(command.turn_id),
            )
        )
        audio = self.capture.pause(command.at)
        utterance = self.capture.utterance
        if utterance is None:
            return
        speculation = utterance.speculation
        if speculation is not None:
            self._preempt(command.turn_id, speculation)
        if audio is None:
            return
        if self.endpointer is not None:
            utterance.endpoint_task = self._spawn(
                self._judge_endpoint(self.endpointer, command.turn_id, audio), "endpointer"
            )
        # The cue is read from the transcript the capture is already making of this pause
        # (the one the commit uses): no second transcription.
        if speculation is not None:
            speculation.add_done_callback(functools.partial(self._read_cue, command.turn_id))

    def resumed(self, command: UserSpeechResumed) -> None:
        self.capture.resume()
        self._send(
            ev.SpeechStarted(
                round(self.listening.stream_ms), self.conversation.item_id(command.turn_id)
            )
        )

    def dropped(self) -> None:
        self.capture.drop()

    # ------------------------------------------------------------ the endpoint (Rule 2)

    def _read_cue(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        """The speculative transcript of the pause is ready: its cue goes to the coordinator
        (a failed transcription says nothing: NEUTRAL)."""
        utterance = self.capture.utterance
        if (
            self.closed
            or speculation.cancelled()
            or utterance is None
            or utterance.speculation is not speculation
        ):
            return  # speech resumed or the turn was committed: this pause is over
        if speculation.exception() is not None:
            cue = Cue.NEUTRAL
        else:
            transcript = speculation.result()
            cue = transcript_cue(transcript.text, self.capture.language or transcript.language)
        self.coordinator.on_transcript_cue(turn_id, cue, self.clock())
        self._drive()

    async def _judge_endpoint(self, endpointer: Endpointer, turn_id: int, audio: PCM) -> None:
        complete: bool | None
        try:
            complete = (await endpointer.predict(audio)).complete
        except PluginError as e:
            log.warning("endpointer failed: %s", e)
            complete = None  # a model that failed has no opinion
        self.coordinator.on_endpoint_verdict(turn_id, complete, self.clock())
        self._drive()

    # ------------------------------------------------------------ a held sound (Rule 3)

    def held(self, command: PauseResponse, now: float) -> None:
        """Sound over the answer: record it. It is transcribed as soon as it goes quiet: the
        verdict at its stop (a voice gap later) then usually finds the transcript made or well
        under way."""
        self.capture.begin(command.turn_id, command.at, now, speculate_after_ms=HOLD_SPECULATE_MS)

    def released(self, command: ResumeResponse) -> None:
        """No real turn followed: the sound is forgotten (unless the coordinator keeps it)."""
        held = self.capture.utterance
        if held is not None and held.turn_id == command.turn_id and not command.keep_recording:
            self.capture.drop()

    async def judge_interruption(self, command: JudgeInterruption) -> None:
        """Transcribe the held sound and tell the coordinator whether it is a real turn."""
        held = self.capture.utterance
        real = False
        if held is not None and held.turn_id == command.turn_id:
            # The speculation made at the quiet covers the sound up to its stop (voice coming
            # back cancels it); at the timeout, or without one, all that was heard.
            ready = held.speculation if command.speech_end is not None else None
            if ready is not None:
                await asyncio.wait({ready})  # voice coming back cancels it: then transcribe anew
            try:
                if ready is not None and not ready.cancelled():
                    transcript = ready.result()
                else:
                    transcript = await self.capture.transcribe(held.audio())
            except PluginError as e:
                log.warning("transcribing a possible interruption failed: %s", e)
            else:
                real = is_real_turn(transcript.text)
        self.coordinator.on_interruption_verdict(command.turn_id, real, self.clock())
        self._drive()

    # ------------------------------------------------------------ partials (Rule 4)

    def partial(self, turn_id: int, text: str) -> None:
        sent = self._partials.get(turn_id, "")
        delta = text[len(sent) :] if text.startswith(sent) else ""
        if delta:
            self._partials = {turn_id: text}
        self._send(
            ev.TranscriptionDelta(self.conversation.item_id(turn_id), delta, transcript=text)
        )


__all__ = ["HOLD_SPECULATE_MS", "Hearing"]
