"""The terminal conversation without I/O: server messages, key presses and playback progress go
in as method calls (with ``now``); commands come out for the runner (``runtime/talk/runner.py``)
to carry out in order.

Theory of operation — it behaves like the browser's talk page (``web/talk.js``):

Rule 1. Audio of a generation is played unless that generation was interrupted or is over.
        ``openrealtime.response.interrupted`` (or our own cancel) stops playback *at once*
        (``StopPlayback``); the runner answers with what the speaker had played
        (``stopped``), and that goes to the server as the final ``openrealtime.playback``
        report, so the server journals the prefix the person heard.
Rule 2. While an answer plays, progress is reported every ``report_every_ms``; once its audio
        is all sent (``response.output_audio.done``) and the speaker has played it out, a final
        report says so (the server closes a completed answer after it).
Rule 3. ``openrealtime.output_audio.paused`` / ``.resumed`` (the ``pause_playback`` extension)
        pause and resume the speaker where it is.
Rule 4. The microphone's state decides whether a frame goes to the server; its transitions are
        the ``MIC_TRANSITIONS`` table. Full duplex always sends (the device's echo cancellation
        or headphones keep the assistant out of the microphone; speaking over it barges in).
        Half duplex holds the microphone while the assistant is audible and ``tail_ms`` after,
        and tells the server (``openrealtime.input.pause`` / ``.resume``). Push-to-talk sends
        only between two presses of Enter; the second press commits the turn and asks for the
        answer (``input_audio_buffer.commit`` + ``response.create``); the first one cuts an
        answer that is playing (``response.cancel``).
Rule 5. A typed line is a user turn in every mode; an empty line outside push-to-talk cuts the
        answer that is playing.
Rule 6. The transcript is one line per turn: the user's words as they are recognised (partial,
        then final), the assistant's as they stream; the final assistant line is what was heard
        when the answer was interrupted.
Rule 7. Bounded: answers are forgotten at ``response.done``, or once played out if the server's
        real-time estimate ended them first; partial lines at their final; the report log
        keeps the last ``REPORT_LOG`` reports.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runtime.client import Received
from runtime.talk.commands import (
    Command,
    EndAudio,
    ForgetPlayback,
    Notice,
    PausePlayback,
    Play,
    ResumePlayback,
    Send,
    Show,
    StopPlayback,
)

REPORT_LOG = 64

# ---------------------------------------------------------------- the microphone


class TalkMode(enum.StrEnum):
    FULL_DUPLEX = "full-duplex"
    HALF_DUPLEX = "half-duplex"
    PUSH_TO_TALK = "push-to-talk"


class MicState(enum.Enum):
    OPEN = "open"  # full duplex
    LISTENING = "listening"  # half duplex, the assistant is quiet
    HELD = "held"  # half duplex, the assistant is audible
    TAIL = "tail"  # half duplex, the assistant just went quiet
    IDLE = "idle"  # push-to-talk, not talking
    TALKING = "talking"  # push-to-talk, between the two presses


class MicEvent(enum.Enum):
    ASSISTANT_AUDIBLE = "assistant_audible"
    ASSISTANT_QUIET = "assistant_quiet"
    TAIL_ELAPSED = "tail_elapsed"
    KEY = "key"


MIC_TRANSITIONS: dict[tuple[MicState, MicEvent], MicState] = {
    (MicState.LISTENING, MicEvent.ASSISTANT_AUDIBLE): MicState.HELD,
    (MicState.HELD, MicEvent.ASSISTANT_QUIET): MicState.TAIL,
    (MicState.TAIL, MicEvent.ASSISTANT_AUDIBLE): MicState.HELD,
    (MicState.TAIL, MicEvent.TAIL_ELAPSED): MicState.LISTENING,
    (MicState.IDLE, MicEvent.KEY): MicState.TALKING,
    (MicState.TALKING, MicEvent.KEY): MicState.IDLE,
}
"""Any other (state, event) leaves the state as it is."""

SENDING = frozenset({MicState.OPEN, MicState.LISTENING, MicState.TALKING})

INITIAL_MIC = {
    TalkMode.FULL_DUPLEX: MicState.OPEN,
    TalkMode.HALF_DUPLEX: MicState.LISTENING,
    TalkMode.PUSH_TO_TALK: MicState.IDLE,
}

# ---------------------------------------------------------------- answers


class AnswerPhase(enum.Enum):
    WAITING = "waiting"  # created, no audio yet
    PLAYING = "playing"  # audio arriving and playing
    PLAYING_OUT = "playing_out"  # all audio sent; the speaker plays the rest
    PLAYED = "played"  # played out, final report sent
    INTERRUPTED = "interrupted"  # cut: nothing more is played


class AnswerEvent(enum.Enum):
    AUDIO = "audio"
    AUDIO_DONE = "audio_done"
    DRAINED = "drained"
    INTERRUPT = "interrupt"


ANSWER_TRANSITIONS: dict[tuple[AnswerPhase, AnswerEvent], AnswerPhase] = {
    (AnswerPhase.WAITING, AnswerEvent.AUDIO): AnswerPhase.PLAYING,
    (AnswerPhase.WAITING, AnswerEvent.AUDIO_DONE): AnswerPhase.PLAYED,
    (AnswerPhase.PLAYING, AnswerEvent.AUDIO_DONE): AnswerPhase.PLAYING_OUT,
    (AnswerPhase.PLAYING_OUT, AnswerEvent.DRAINED): AnswerPhase.PLAYED,
    (AnswerPhase.WAITING, AnswerEvent.INTERRUPT): AnswerPhase.INTERRUPTED,
    (AnswerPhase.PLAYING, AnswerEvent.INTERRUPT): AnswerPhase.INTERRUPTED,
    (AnswerPhase.PLAYING_OUT, AnswerEvent.INTERRUPT): AnswerPhase.INTERRUPTED,
    (AnswerPhase.PLAYED, AnswerEvent.INTERRUPT): AnswerPhase.INTERRUPTED,
}

AUDIBLE = frozenset({AnswerPhase.PLAYING, AnswerPhase.PLAYING_OUT})
CUTTABLE = frozenset({AnswerPhase.WAITING, AnswerPhase.PLAYING, AnswerPhase.PLAYING_OUT})


@dataclass(slots=True)
class Answer:
    generation: int
    response_id: str = ""
    phase: AnswerPhase = AnswerPhase.WAITING
    text: str = ""
    reported_ms: float = -1.0
    over: bool = False
    """``response.done`` came (the server's real-time estimate may run ahead of the speaker)."""


@dataclass(frozen=True, slots=True)
class PlaybackReport:
    generation: int
    played_ms: float
    final: bool


class TalkConversation:
    """One terminal conversation's state (see the module docstring)."""

    def __init__(
        self,
        mode: TalkMode = TalkMode.FULL_DUPLEX,
        *,
        report_every_ms: float = 250.0,
        tail_ms: float = 300.0,
    ) -> None:
        self.mode = mode
        self.report_every_ms = report_every_ms
        self.tail_ms = tail_ms
        self.mic = INITIAL_MIC[mode]
        self.answers: dict[int, Answer] = {}
        self._by_response: dict[str, int] = {}
        self._retired = -1  # generations up to here are over: their audio is stale
        self._quiet_at = 0.0
        self._last_report_at = float("-inf")
        self._user_partials: set[str] = set()
        self.reports: collections.deque[PlaybackReport] = collections.deque(maxlen=REPORT_LOG)

    # ------------------------------------------------------------ queries

    def sending(self) -> bool:
        """Whether a microphone frame goes to the server now."""
        return self.mic in SENDING

    def audible(self) -> bool:
        return any(a.phase in AUDIBLE for a in self.answers.values())

    def playing(self) -> list[int]:
        """Generations whose audio plays (their progress is reported)."""
        return [g for g, a in self.answers.items() if a.phase in AUDIBLE]

    # ------------------------------------------------------------ inputs

    def receive(self, message: Received, now: float) -> list[Command]:
        if message.audio is not None:
            return self._audio(message.generation, message.audio, now)
        assert message.event is not None
        return self.event(message.event, now)

    def event(self, event: dict[str, Any], now: float) -> list[Command]:
        kind = event.get("type")
        handler = self._handlers.get(str(kind))
        return handler(self, event, now) if handler is not None else []

    def key(self, line: str, now: float) -> list[Command]:
        """A line typed on the keyboard (Enter alone is an empty line)."""
        text = line.strip()
        if text:  # Rule 5: a typed turn
            item = {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }
            return [
                Show(f"typed:{now}", "you", text, final=True),
                Send({"type": "conversation.item.create", "item": item}),
                Send({"type": "response.create"}),
            ]
        if self.mode is not TalkMode.PUSH_TO_TALK:
            return self._cut()
        before = self.mic
        commands = self._mic(MicEvent.KEY, now)
        if before is MicState.IDLE:
            return [*self._cut(), *commands, Notice("talking… press Enter to send")]
        return [
            *commands,
            Send({"type": "input_audio_buffer.commit"}),
            Send({"type": "response.create"}),
            Notice("sent; press Enter to talk again"),
        ]

    def tick(
        self, now: float, played_ms: Callable[[int], float], queued_ms: float
    ) -> list[Command]:
        """Playback progress: reports (Rule 2) and the half-duplex microphone (Rule 4)."""
        commands: list[Command] = []
        for answer in list(self.answers.values()):
            if answer.phase is AnswerPhase.PLAYING_OUT and queued_ms <= 0:
                answer.phase = ANSWER_TRANSITIONS[(answer.phase, AnswerEvent.DRAINED)]
                commands += self._report(answer, played_ms(answer.generation), final=True)
                if answer.over:
                    commands += self._forget(answer.generation)
        if now - self._last_report_at >= self.report_every_ms / 1000:
            self._last_report_at = now
            for answer in self.answers.values():
                played = played_ms(answer.generation)
                if answer.phase in AUDIBLE and played != answer.reported_ms:
                    commands += self._report(answer, played, final=False)
        if self.audible() or queued_ms > 0:
            commands += self._mic(MicEvent.ASSISTANT_AUDIBLE, now)
        else:
            commands += self._mic(MicEvent.ASSISTANT_QUIET, now)
            if now - self._quiet_at >= self.tail_ms / 1000:
                commands += self._mic(MicEvent.TAIL_ELAPSED, now)
        return commands

    def stopped(self, generation: int, played_ms: float) -> list[Command]:
        """The runner carried out ``StopPlayback(generation)``: the speaker had played this."""
        answer = self.answers.get(generation)
        if answer is None:
            return []
        return self._report(answer, played_ms, final=True)

    def resumed(self, resumed: dict[str, Any]) -> list[Command]:
        """After a reconnect: when the server could not replay everything, drop what plays and
        show its account of the session instead (docs/protocol.md, *Resuming*)."""
        account = resumed.get("reconcile")
        if not account:
            return [Notice("reconnected")]
        commands: list[Command] = [StopPlayback(None)]
        commands += [ForgetPlayback(g) for g in self.answers]
        self.answers.clear()
        self._by_response.clear()
        self._retired = -1  # a continued session may number its generations afresh
        commands.append(Notice("reconnected; the server's record of this session:"))
        for item in account.get("items", []):
            speaker = "you" if item.get("role") == "user" else "assistant"
            if item.get("interrupted"):
                speaker += " (interrupted)"
            commands.append(Show(f"journal:{item.get('journal_seq')}", speaker, item["text"], True))
        return commands

    # ------------------------------------------------------------ internals

    def _mic(self, event: MicEvent, now: float) -> list[Command]:
        before = self.mic
        after = MIC_TRANSITIONS.get((before, event), before)
        if event is MicEvent.ASSISTANT_QUIET and before is MicState.HELD:
            self._quiet_at = now
        if after is before:
            return []
        self.mic = after
        if before is MicState.LISTENING and after is MicState.HELD:
            return [Send({"type": "openrealtime.input.pause"})]
        if before is MicState.TAIL and after is MicState.LISTENING:
            return [Send({"type": "openrealtime.input.resume"})]
        return []

    def _audio(self, generation: int, pcm: bytes, now: float) -> list[Command]:
        answer = self.answers.get(generation)
        if answer is None:
            if generation <= self._retired:
                return []  # Rule 1: a generation that is over
            answer = self.answers[generation] = Answer(generation)  # its start was given up
        step = ANSWER_TRANSITIONS.get((answer.phase, AnswerEvent.AUDIO))
        if step is not None:
            answer.phase = step
        if answer.phase not in AUDIBLE:
            return []
        # Hold the microphone before the first sample plays, not at the next tick.
        return [*self._mic(MicEvent.ASSISTANT_AUDIBLE, now), Play(generation, pcm)]

    def _cut(self) -> list[Command]:
        """Stop the answer that is playing and ask the server to cancel it."""
        live = [a for a in self.answers.values() if a.phase in CUTTABLE]
        if not live:
            return []
        commands: list[Command] = [Send({"type": "response.cancel"})]
        for answer in live:
            commands += self._interrupt(answer)
        return commands

    def _interrupt(self, answer: Answer) -> list[Command]:
        was = answer.phase
        answer.phase = ANSWER_TRANSITIONS.get((was, AnswerEvent.INTERRUPT), was)
        if was is AnswerPhase.INTERRUPTED:
            return []
        return [StopPlayback(answer.generation)]

    def _forget(self, generation: int) -> list[Command]:
        self.answers.pop(generation, None)
        return [ForgetPlayback(generation)]

    def _report(self, answer: Answer, played_ms: float, *, final: bool) -> list[Command]:
        answer.reported_ms = played_ms
        self.reports.append(PlaybackReport(answer.generation, played_ms, final))
        event = {
            "type": "openrealtime.playback",
            "generation": answer.generation,
            "played_ms": round(played_ms, 1),
        }
        return [Send(event)]

    # ------------------------------------------------------------ server events

    def _on_speech_started(self, event: dict[str, Any], now: float) -> list[Command]:
        key = f"user:{event.get('item_id')}"
        self._user_partials.add(key)
        return [Show(key, "you", "…", final=False)]

    def _on_user_partial(self, event: dict[str, Any], now: float) -> list[Command]:
        key = f"user:{event.get('item_id')}"
        text = str(event.get("transcript") or "").strip()
        if not text or key not in self._user_partials:
            return []
        return [Show(key, "you", f"{text} …", final=False)]

    def _on_user_final(self, event: dict[str, Any], now: float) -> list[Command]:
        key = f"user:{event.get('item_id')}"
        self._user_partials.discard(key)
        text = str(event.get("transcript") or "").strip()
        return [Show(key, "you", text, final=True)]  # an empty final removes the partial

    def _on_input_paused(self, event: dict[str, Any], now: float) -> list[Command]:
        # The server dropped speech it had not committed: it will never be transcribed.
        commands: list[Command] = [Show(k, "you", "", True) for k in sorted(self._user_partials)]
        self._user_partials.clear()
        return commands

    def _on_response_created(self, event: dict[str, Any], now: float) -> list[Command]:
        response = event.get("response") or {}
        generation = int(response.get("generation", -1))
        self._by_response[str(response.get("id"))] = generation
        answer = self.answers.setdefault(generation, Answer(generation))
        answer.response_id = str(response.get("id"))
        return []

    def _on_answer_text(self, event: dict[str, Any], now: float) -> list[Command]:
        generation = self._by_response.get(str(event.get("response_id")))
        answer = self.answers.get(generation) if generation is not None else None
        if answer is None:
            return []  # its start was in a range the server gave up
        answer.text += str(event.get("delta") or "")
        if answer.phase is AnswerPhase.INTERRUPTED:
            return []
        return [Show(f"assistant:{answer.generation}", "assistant", answer.text, final=False)]

    def _on_audio_done(self, event: dict[str, Any], now: float) -> list[Command]:
        generation = self._by_response.get(str(event.get("response_id")))
        answer = self.answers.get(generation) if generation is not None else None
        if answer is None:
            return []
        step = ANSWER_TRANSITIONS.get((answer.phase, AnswerEvent.AUDIO_DONE))
        if step is None:
            return []
        answer.phase = step
        return [EndAudio(answer.generation)]

    def _on_interrupted(self, event: dict[str, Any], now: float) -> list[Command]:
        generation = int(event.get("generation", -1))
        if generation not in self.answers and generation <= self._retired:
            return []
        answer = self.answers.setdefault(generation, Answer(generation))
        return self._interrupt(answer)

    def _on_response_done(self, event: dict[str, Any], now: float) -> list[Command]:
        response = event.get("response") or {}
        generation = int(response.get("generation", -1))
        self._by_response.pop(str(response.get("id")), None)
        self._retired = max(self._retired, generation)
        answer = self.answers.get(generation)
        commands: list[Command] = []
        if answer is not None and answer.phase in AUDIBLE:
            answer.over = True  # forgotten once the speaker has played it out
        else:
            commands += self._forget(generation)
        key = f"assistant:{generation}"
        if response.get("interrupted"):
            heard = str(response.get("heard_text") or "").strip()
            commands.append(Show(key, "assistant (interrupted)", heard or "(nothing heard)", True))
        else:
            text = str(response.get("output_text") or "").strip()
            commands.append(Show(key, "assistant", text, final=True))
        if response.get("status") == "failed":
            error = (response.get("status_details") or {}).get("error") or {}
            message = error.get("message") or "the answer failed"
            commands.append(Notice(f"{message}; try again", error=True))
        return commands

    def _on_output_paused(self, event: dict[str, Any], now: float) -> list[Command]:
        return [PausePlayback()]

    def _on_output_resumed(self, event: dict[str, Any], now: float) -> list[Command]:
        return [ResumePlayback()]

    def _on_error(self, event: dict[str, Any], now: float) -> list[Command]:
        error = event.get("error") or {}
        code = error.get("code")
        if code == "input_audio_buffer_commit_empty":
            return [Notice("nothing was heard in that turn; press Enter and speak", error=True)]
        if code == "response_cancel_not_active":
            return []  # the answer ended as we cut it
        return [Notice(f"{error.get('message', 'error')} ({code})", error=True)]

    def _on_journal_recovered(self, event: dict[str, Any], now: float) -> list[Command]:
        return [Notice("the server's journal is reachable again")]

    _handlers: dict[str, Callable[[TalkConversation, dict[str, Any], float], list[Command]]] = {
        "input_audio_buffer.speech_started": _on_speech_started,
        "conversation.item.input_audio_transcription.delta": _on_user_partial,
        "conversation.item.input_audio_transcription.completed": _on_user_final,
        "openrealtime.input.paused": _on_input_paused,
        "response.created": _on_response_created,
        "response.output_audio_transcript.delta": _on_answer_text,
        "response.output_text.delta": _on_answer_text,
        "response.output_audio.done": _on_audio_done,
        "openrealtime.response.interrupted": _on_interrupted,
        "response.done": _on_response_done,
        "openrealtime.output_audio.paused": _on_output_paused,
        "openrealtime.output_audio.resumed": _on_output_resumed,
        "error": _on_error,
        "openrealtime.journal.recovered": _on_journal_recovered,
    }
