"""Turn coordination: who has the floor, when a user turn ends, when the assistant is interrupted.

Theory of operation
-------------------
``TurnCoordinator`` is sans-I/O: every input is a method call that carries ``now`` (seconds on
one monotonic clock chosen by the caller), every output is a command appended to a list the
caller drains with ``commands()`` (``pipeline/turn_commands.py``, with the settings). It never
awaits, reads a clock or touches a socket. The caller (the engine) also asks ``next_deadline()``
and calls ``on_tick(now)`` when it passes.

Rule 1 — states. LISTENING (nobody talks), USER_SPEAKING, ENDPOINTING (the user paused; a timer
runs), THINKING (a response was started, no audio out yet), SPEAKING (response audio is playing
on the client). The legal moves are the table ``TRANSITIONS`` below; any other move is a bug and
raises ``TurnStateError``.

Rule 2 — end of turn. A pause is judged by two signals besides the silence itself: the
end-of-turn model's verdict on the audio and the cue of the speculative transcript (a trailing
"and", a number being dictated, a "thanks."). Both start PENDING when speech ends — the verdict
is "no opinion" at once without an end-of-turn model (``end_of_turn_model``), the cue NEUTRAL
when ``transcript_cues`` is off — and the deadline is ``speech end + endpoint_delay(verdict,
cue, eagerness)`` (``pipeline.endpoint_cues``: its table and the eagerness scaling). Each signal
that arrives (``on_endpoint_verdict``, ``on_transcript_cue``) moves the deadline to ``speech end
+ the new delay``; a deadline already passed commits at once. So the wait starts as the silence
delay, a finished verdict or cue shortens it to the complete delay (never against the other
signal), an unfinished one lengthens it to the incomplete delay. Without cues at medium
eagerness this is the rule before cues: the silence delay, moved by the verdict to the complete
or the incomplete delay. Voiced frames during the pause hold the commit (the VAD needs a moment
to confirm a resumption). Speech resuming before the deadline cancels it; the next pause starts
both signals again. An explicit commit or typed text ends the turn at once.

Rule 3 — barge-in. While THINKING or SPEAKING, user speech is a *candidate* interruption. It
counts only when it has lasted ``min_interrupt`` and is still voiced (the last voiced frame is
within ``max_voice_gap``): shorter noises and backchannels are ignored. Then, with
``false_interruption_timeout`` set (the default), the answer is first *held*
(``PauseResponse``: playback pauses where it is, the engine starts recording the candidate as a
tentative utterance) and the candidate is judged (``JudgeInterruption``) as soon as its sound
stops (``max_voice_gap`` without a voiced frame, or the VAD's end of speech) — or, for a sound
that goes on, once the hold has lasted the timeout. The engine transcribes what was heard and
answers ``on_interruption_verdict``:

- *real* (words that are not a backchannel): ``Interrupt`` as below, and the tentative
  utterance is adopted as the next user turn (``UserSpeechStarted(adopt=True)``; when its
  speech already ended, ``UserSpeechStopped`` follows and the endpoint rule runs);
- *not real* (no words, a backchannel, noise): ``ResumeResponse`` — playback continues where it
  paused, the tentative utterance is dropped, no user turn and no interruption exist. A verdict
  of "not real" while the candidate is still voiced keeps the hold (the next stop is judged
  again) until the timeout; at the timeout a candidate still undecided is judged on what was
  heard so far, and "not real" then resumes even over continuing noise.

Without ``false_interruption_timeout`` (None) a candidate interrupts at ``min_interrupt``. An
interruption (``Interrupt``) makes the engine cancel the generation and clear playback; the
candidate speech becomes the next user turn. A response that ends while held (a text answer,
which has no playback to pause) ends the hold: the candidate becomes the next user turn.

Rule 4 — generations. Every response gets a new, increasing generation number. Only the current
generation may produce output; ``is_current(g)`` is the fence the engine applies to everything it
sends.

Rule 5 — microphone pause. While paused, voice input is ignored and an unfinished user utterance
is dropped; typed text still works and the assistant may finish speaking.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from pipeline.endpoint_cues import PENDING, Cue, CueState, Verdict, endpoint_delay
from pipeline.turn_commands import (
    Command,
    CommitUserTurn,
    DropUtterance,
    Interrupt,
    JudgeInterruption,
    PauseResponse,
    ResumeResponse,
    TurnSettings,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)


class TurnState(enum.Enum):
    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    ENDPOINTING = "endpointing"
    THINKING = "thinking"
    SPEAKING = "speaking"


class Trigger(enum.Enum):
    SPEECH_START = "speech_start"
    SPEECH_END = "speech_end"
    ENDPOINT_DUE = "endpoint_due"
    COMMIT = "commit"
    TEXT_INPUT = "text_input"
    BARGE_IN = "barge_in"
    AUDIO_STARTED = "audio_started"
    RESPONSE_DONE = "response_done"
    RESPONSE_DONE_USER_TALKING = "response_done_user_talking"
    CANCEL = "cancel"
    PAUSE = "pause"


S, T = TurnState, Trigger
TRANSITIONS: dict[tuple[TurnState, Trigger], TurnState] = {
    (S.LISTENING, T.SPEECH_START): S.USER_SPEAKING,
    (S.LISTENING, T.TEXT_INPUT): S.THINKING,
    (S.USER_SPEAKING, T.SPEECH_END): S.ENDPOINTING,
    (S.USER_SPEAKING, T.COMMIT): S.THINKING,
    (S.USER_SPEAKING, T.TEXT_INPUT): S.THINKING,
    (S.USER_SPEAKING, T.PAUSE): S.LISTENING,
    (S.ENDPOINTING, T.SPEECH_START): S.USER_SPEAKING,
    (S.ENDPOINTING, T.ENDPOINT_DUE): S.THINKING,
    (S.ENDPOINTING, T.COMMIT): S.THINKING,
    (S.ENDPOINTING, T.TEXT_INPUT): S.THINKING,
    (S.ENDPOINTING, T.PAUSE): S.LISTENING,
    (S.THINKING, T.AUDIO_STARTED): S.SPEAKING,
    (S.THINKING, T.RESPONSE_DONE): S.LISTENING,
    (S.THINKING, T.RESPONSE_DONE_USER_TALKING): S.USER_SPEAKING,
    (S.THINKING, T.BARGE_IN): S.USER_SPEAKING,
    (S.THINKING, T.TEXT_INPUT): S.THINKING,
    (S.THINKING, T.CANCEL): S.LISTENING,
    (S.SPEAKING, T.RESPONSE_DONE): S.LISTENING,
    (S.SPEAKING, T.RESPONSE_DONE_USER_TALKING): S.USER_SPEAKING,
    (S.SPEAKING, T.BARGE_IN): S.USER_SPEAKING,
    (S.SPEAKING, T.TEXT_INPUT): S.THINKING,
    (S.SPEAKING, T.CANCEL): S.LISTENING,
}
del S, T


class TurnStateError(RuntimeError):
    """An input arrived that the state table does not allow: a bug in the caller."""


_NO_COMMANDS: list[Command] = []


@dataclass(slots=True)
class _Candidate:
    """User speech heard while the assistant has the floor."""

    started: float
    last_voiced: float
    utterance_start: float
    """Where the user's utterance begins if this interrupts (an earlier short burst)."""
    speech_end: float | None = None
    """The VAD's end of this candidate's speech (while held: it is judged then)."""


@dataclass(slots=True)
class _Hold:
    """An answer paused for a candidate interruption (Rule 3)."""

    generation: int
    turn_id: int
    since: float
    judging: bool = False
    judged_end: float | None = None
    """The sound stop the verdict in flight judges (None: judged at the timeout)."""
    resumed: bool = False
    """The timeout passed while the verdict was still being made: the answer plays on, and
    words still interrupt it when the verdict comes."""


@dataclass
class TurnCoordinator:
    settings: TurnSettings = field(default_factory=TurnSettings)
    state: TurnState = TurnState.LISTENING
    generation: int = 0
    """The newest generation started; 0 before the first response."""
    turn_id: int = 0
    """The current (or last) user turn."""
    mic_paused: bool = False
    end_of_turn_model: bool = False
    """An end-of-turn model judges every pause (its verdict starts PENDING); without one the
    verdict is "no opinion" from the start."""
    _verdict: Verdict = PENDING
    _cue: CueState = PENDING

    _commands: list[Command] = field(default_factory=list)
    _speech_end: float | None = None
    _endpoint_deadline: float | None = None
    _candidate: _Candidate | None = None
    _voiced_in_pause: float | None = None
    _burst: tuple[float, float] | None = None
    """(start, end) of the last candidate that ended too short to interrupt."""
    _response_active: bool = False
    _hold: _Hold | None = None

    # ------------------------------------------------------------ queries

    def commands(self) -> list[Command]:
        """Take the commands produced since the last call."""
        if not self._commands:
            return _NO_COMMANDS
        out, self._commands = self._commands, []
        return out

    def is_current(self, generation: int) -> bool:
        return self._response_active and generation == self.generation

    @property
    def held(self) -> bool:
        """An answer is paused for a candidate interruption (Rule 3)."""
        return self._hold is not None

    def next_deadline(self) -> float | None:
        deadlines: list[float] = []
        endpoint = self._endpoint_deadline
        if endpoint is not None and self._voiced_in_pause is not None:
            endpoint = max(endpoint, self._voiced_in_pause + self.settings.max_voice_gap + 1e-6)
        if endpoint is not None:
            deadlines.append(endpoint)
        c, hold = self._candidate, self._hold
        if c is not None and hold is None:
            # Only while it may still qualify: a candidate that went quiet first waits for
            # its next voiced frame (a deadline nobody can meet would fire again and again).
            barge_in = c.started + self.settings.min_interrupt
            if barge_in <= c.last_voiced + self.settings.max_voice_gap:
                deadlines.append(barge_in)
        if hold is not None and not hold.resumed:
            timeout = self.settings.false_interruption_timeout or 0.0
            deadlines.append(hold.since + timeout)
        if hold is not None and not hold.judging:
            if c is not None and c.speech_end is None and c.last_voiced != hold.judged_end:
                deadlines.append(c.last_voiced + self.settings.max_voice_gap)
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------ voice input

    def on_speech_start(self, now: float, *, at: float | None = None) -> None:
        """The VAD decided speech started; ``at`` is when it began (≤ now)."""
        if self.mic_paused:
            return
        at = now if at is None else at
        if self.state is TurnState.LISTENING:
            self.turn_id += 1
            self._move(Trigger.SPEECH_START)
            self._emit(UserSpeechStarted(at, self.turn_id))
        elif self.state is TurnState.ENDPOINTING:
            self._endpoint_deadline = None
            self._speech_end = None
            self._move(Trigger.SPEECH_START)
            self._emit(UserSpeechResumed(at, self.turn_id))
        elif self.state in (TurnState.THINKING, TurnState.SPEAKING):
            if self._hold is not None and self._candidate is not None:
                # More sound while held: the same candidate goes on (judged at its next stop).
                self._candidate.speech_end = None
                self._candidate.last_voiced = now
                return
            burst = self._burst
            joined = burst is not None and at - burst[1] <= self.settings.burst_join
            start = burst[0] if joined and burst is not None else at
            self._candidate = _Candidate(started=at, last_voiced=now, utterance_start=start)
            self._check_barge_in(now)

    def on_voice(self, now: float) -> None:
        """A frame the VAD judged voiced (before its hysteresis). Feeds the barge-in rule and
        holds the endpoint timer while the user may be resuming."""
        if self.state is TurnState.ENDPOINTING:
            self._voiced_in_pause = now
        c = self._candidate
        if c is not None and not self.mic_paused:
            c.last_voiced = now
            self._check_barge_in(now)

    def on_speech_end(self, now: float, *, at: float | None = None) -> None:
        """The VAD decided speech ended; ``at`` is when it ended (≤ now)."""
        if self.mic_paused:
            return
        at = now if at is None else at
        if self.state is TurnState.USER_SPEAKING:
            self._move(Trigger.SPEECH_END)
            self._speech_end = at
            self._verdict = PENDING if self.end_of_turn_model else None
            self._cue = PENDING if self.settings.transcript_cues else Cue.NEUTRAL
            if self.settings.auto_commit:
                self._endpoint_deadline = at + self._endpoint_delay()
            self._emit(UserSpeechStopped(at, self.turn_id))
            self._maybe_endpoint(now)
        elif self._candidate is not None and self._hold is not None:
            self._candidate.speech_end = at
            self._maybe_judge(now)
        elif self._candidate is not None:
            # Noise or a backchannel shorter than the interruption threshold.
            self._burst = (self._candidate.utterance_start, at)
            self._candidate = None

    def on_endpoint_verdict(self, turn_id: int, complete: bool | None, now: float) -> None:
        """The endpointing model judged the utterance of ``turn_id`` that ended at the pause:
        finished (True), unfinished (False) or no opinion (None)."""
        if self._judging(turn_id):
            self._verdict = complete
            self._rearm(now)

    def on_transcript_cue(self, turn_id: int, cue: Cue, now: float) -> None:
        """The speculative transcript of the pause of ``turn_id`` is ready and says ``cue``
        (NEUTRAL when the transcription failed). Ignored when ``transcript_cues`` is off."""
        if self._judging(turn_id) and self.settings.transcript_cues:
            self._cue = cue
            self._rearm(now)

    def on_interruption_verdict(self, turn_id: int, real: bool, now: float) -> None:
        """The engine judged the held candidate of ``turn_id`` (Rule 3): ``real`` when it
        heard words that are not a backchannel."""
        hold, c = self._hold, self._candidate
        if hold is None or c is None or turn_id != hold.turn_id or not hold.judging:
            return
        hold.judging = False
        if real:
            self._adopt()
            if c.speech_end is not None:
                self.on_speech_end(now, at=c.speech_end)
            return
        if hold.resumed:  # the answer already plays on: just forget the sound
            self._hold = self._candidate = self._burst = None
            self._emit(DropUtterance(hold.turn_id))
            return
        timeout = self.settings.false_interruption_timeout or 0.0
        sounding = c.speech_end is None and not self._quiet(c, now)
        if sounding and now - hold.since + 1e-9 < timeout:
            return  # still sounding: judged again at its next stop (or the timeout)
        self._resume()

    def on_tick(self, now: float) -> None:
        self._maybe_endpoint(now)
        if self._hold is not None:
            self._maybe_judge(now)
        elif self._candidate is not None:
            self._check_barge_in(now)

    # ------------------------------------------------------------ explicit input

    def commit(self, now: float) -> bool:
        """Explicit end of the user's turn. False if there is no utterance to commit. Over a
        held answer it ends the sound's turn: the answer is interrupted, the sound committed."""
        if self._hold is not None and self._candidate is not None:
            self._adopt()
        if self.state not in (TurnState.USER_SPEAKING, TurnState.ENDPOINTING):
            return False
        self._commit(Trigger.COMMIT, "commit", None)
        return True

    def on_text_input(self, text: str, now: float) -> None:
        """Typed text is a complete user turn; it interrupts any response in progress and
        replaces an unfinished spoken utterance."""
        if self.state in (TurnState.THINKING, TurnState.SPEAKING):
            self._interrupt("text_input")
        elif self.state in (TurnState.USER_SPEAKING, TurnState.ENDPOINTING):
            self._emit(DropUtterance(self.turn_id))
        self._candidate = None
        self.turn_id += 1
        self._commit(Trigger.TEXT_INPUT, "text", text)

    def cancel_response(self, now: float) -> bool:
        """The client asked to cancel the response in progress."""
        if self.state not in (TurnState.THINKING, TurnState.SPEAKING):
            return False
        self._interrupt("cancel")
        self._candidate = None
        self._move(Trigger.CANCEL)
        return True

    def pause_microphone(self, now: float) -> None:
        if self.mic_paused:
            return
        self.mic_paused = True
        if self._hold is not None:
            self._resume()
        self._candidate = None
        if self.state in (TurnState.USER_SPEAKING, TurnState.ENDPOINTING):
            self._endpoint_deadline = None
            self._speech_end = None
            self._emit(DropUtterance(self.turn_id))
            self._move(Trigger.PAUSE)

    def resume_microphone(self, now: float) -> None:
        self.mic_paused = False

    # ------------------------------------------------------------ response progress

    def on_audio_started(self, generation: int, now: float) -> None:
        if self.is_current(generation) and self.state is TurnState.THINKING:
            self._move(Trigger.AUDIO_STARTED)

    def on_response_done(self, generation: int, now: float) -> None:
        """The response finished: its audio has played out (or it produced none)."""
        if not self.is_current(generation):
            return
        self._response_active = False
        c, self._candidate = self._candidate, None
        hold, self._hold = self._hold, None
        self._burst = None
        if c is not None and not self.mic_paused:
            self.turn_id = hold.turn_id if hold is not None else self.turn_id + 1
            self._move(Trigger.RESPONSE_DONE_USER_TALKING)
            self._emit(UserSpeechStarted(c.utterance_start, self.turn_id, adopt=hold is not None))
            if c.speech_end is not None:
                self.on_speech_end(now, at=c.speech_end)
        else:
            self._move(Trigger.RESPONSE_DONE)

    # ------------------------------------------------------------ internals

    def _judging(self, turn_id: int) -> bool:
        """A signal for ``turn_id`` still counts: its pause is the one running."""
        return (
            turn_id == self.turn_id
            and self.state is TurnState.ENDPOINTING
            and self._speech_end is not None
            and self.settings.auto_commit
        )

    def _endpoint_delay(self) -> float:
        settings = self.settings
        return endpoint_delay(
            self._verdict, self._cue, eagerness=settings.eagerness, delays=settings
        )

    def _rearm(self, now: float) -> None:
        assert self._speech_end is not None
        self._endpoint_deadline = self._speech_end + self._endpoint_delay()
        self._maybe_endpoint(now)

    def _maybe_endpoint(self, now: float) -> None:
        voiced = self._voiced_in_pause
        if voiced is not None and now - voiced <= self.settings.max_voice_gap:
            return  # sound again: the VAD may be about to confirm that speech resumed
        if self._endpoint_deadline is not None and now + 1e-9 >= self._endpoint_deadline:
            self._commit(Trigger.ENDPOINT_DUE, "endpoint", None)

    def _check_barge_in(self, now: float) -> None:
        c = self._candidate
        if c is None or self._hold is not None:
            return
        if now - c.last_voiced > self.settings.max_voice_gap:
            return
        if now - c.started + 1e-9 < self.settings.min_interrupt:
            return
        if self.settings.false_interruption_timeout is not None:
            self._hold = _Hold(self.generation, self.turn_id + 1, since=now)
            self._emit(PauseResponse(self.generation, c.utterance_start, self.turn_id + 1))
            return
        self._candidate = None
        self._burst = None
        self._interrupt("barge_in")
        self._move(Trigger.BARGE_IN)
        self.turn_id += 1
        self._emit(UserSpeechStarted(c.utterance_start, self.turn_id))

    def _maybe_judge(self, now: float) -> None:
        """Ask for the held candidate's verdict once its sound stopped, or at the timeout."""
        hold, c = self._hold, self._candidate
        if hold is None or c is None:
            return
        timeout = self.settings.false_interruption_timeout or 0.0
        if hold.judging:
            if not hold.resumed and now - hold.since + 1e-9 >= timeout:
                # The verdict is late (a slow ASR): play on; words still interrupt when it comes.
                hold.resumed = True
                self._emit(ResumeResponse(hold.generation, hold.turn_id, keep_recording=True))
            return
        stopped = c.speech_end
        if stopped is None and self._quiet(c, now):
            stopped = c.last_voiced
        if stopped is None and now - hold.since + 1e-9 < timeout:
            return
        if stopped is not None and stopped == hold.judged_end:
            if now - hold.since + 1e-9 < timeout:
                return  # this stop was judged already ("not real" while still sounding)
            stopped = None
        hold.judging = True
        hold.judged_end = stopped
        self._emit(JudgeInterruption(hold.turn_id, stopped))

    def _quiet(self, c: _Candidate, now: float) -> bool:
        """The candidate's sound has stopped: ``max_voice_gap`` without a voiced frame."""
        return now - c.last_voiced + 1e-9 >= self.settings.max_voice_gap

    def _adopt(self) -> None:
        """The held candidate is a real turn: interrupt, and it becomes the user's turn."""
        hold, c = self._hold, self._candidate
        assert hold is not None and c is not None
        self._hold = self._candidate = self._burst = None
        self._interrupt("barge_in")
        self._move(Trigger.BARGE_IN)
        self.turn_id = hold.turn_id
        self._emit(UserSpeechStarted(c.utterance_start, hold.turn_id, adopt=True))

    def _resume(self) -> None:
        hold, self._hold = self._hold, None
        self._candidate = None
        self._burst = None
        if hold is not None:
            self._emit(ResumeResponse(hold.generation, hold.turn_id))

    def _interrupt(self, reason: str) -> None:
        hold, self._hold = self._hold, None
        if hold is not None:
            self._emit(DropUtterance(hold.turn_id))
        if self._response_active:
            self._response_active = False
            self._emit(Interrupt(self.generation, reason))

    def _commit(self, trigger: Trigger, reason: str, text: str | None) -> None:
        self._move(trigger)
        self._burst = None
        self._endpoint_deadline = None
        self._speech_end = None
        self.generation += 1
        self._response_active = True
        self._emit(CommitUserTurn(self.turn_id, reason, text, self.generation))

    def _move(self, trigger: Trigger) -> None:
        target = TRANSITIONS.get((self.state, trigger))
        if target is None:
            raise TurnStateError(f"{trigger.value} is not allowed in {self.state.value}")
        self.state = target
        self._voiced_in_pause = None

    def _emit(self, command: Command) -> None:
        self._commands.append(command)
