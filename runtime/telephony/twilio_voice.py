"""The agent's voice on a Twilio call (``runtime.telephony.twilio_stream`` rules 3 and 6).

``TwilioVoice`` is the stream's ``MediaOut``: the outbox hands it every server event first. It
takes the answer's audio (PCM16 at 8 kHz, the session's ``audio/pcmu`` output) and sends it as
``media`` in pieces of at most ``MARK_EVERY_MS``, each followed by a mark naming the answer's
generation and the milliseconds played by its end; Twilio echoes a mark once its audio has
played (``on_mark``), which is what the engine learns as playback — the heard prefix. An
interruption sends ``clear`` and a fence mark (the marks Twilio flushes come back before the
fence and are not counted); a pause (``openrealtime.output_audio.paused``) clears too and keeps
what was not heard, sent again on ``resumed``. ``hang_up`` (``runtime.telephony.phone`` rule 3)
is told whenever every piece sent has been heard.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import events as ev
from pipeline.audio_formats import ulaw_encode
from runtime.telephony.phone import PHONE_RATE, HangUp, dtmf_tones
from runtime.telephony.twilio_protocol import (
    MARK_EVERY_MS,
    audio_mark,
    clear_message,
    mark_message,
    media_message,
    read_audio_mark,
)

if TYPE_CHECKING:
    from runtime.realtime.session import VoiceSession

_PIECE_BYTES = PHONE_RATE * MARK_EVERY_MS // 1000


class TwilioVoice:
    """The agent's voice on the call (rule 3): ``take``s answer audio, sends it with marks."""

    def __init__(
        self, stream_sid: str, send: Any, *, transfer_targets: tuple[str, ...] = ()
    ) -> None:
        self.stream_sid = stream_sid
        self._send = send
        self._session: VoiceSession | None = None
        self._generation: int | None = None
        self._sent_ms = 0.0
        self.heard_ms = 0.0
        self._unheard: deque[tuple[float, bytes]] = deque()
        """Pieces sent and not yet heard (end ms, μ-law), oldest first."""
        self._held: deque[tuple[float, bytes]] = deque()
        self._paused = False
        self._fence: str | None = None
        self._fences = itertools.count(1)
        self.hang_up = HangUp(transfer_targets)

    def bind(self, session: VoiceSession) -> None:
        self._session = session

    def detach(self) -> None:
        self._session = None
        self._reset(None)

    def _reset(self, generation: int | None) -> None:
        self._generation = generation
        self._sent_ms = self.heard_ms = 0.0
        self._unheard.clear()
        self._held.clear()
        self._paused = False

    # ------------------------------------------------------------ the outbox's side

    def take(self, event: ev.ServerEvent) -> bool:
        if isinstance(event, ev.OutputAudioDelta):
            self._audio(event)
            return True
        if isinstance(event, ev.OutputAudioPaused):
            if event.generation == self._generation and not self._paused:
                self._paused = True
                if self._unheard:
                    self._clear()
                    self._held.extendleft(reversed(self._unheard))
                    self._unheard.clear()
        elif isinstance(event, ev.OutputAudioResumed):
            if event.generation == self._generation and self._paused:
                self._paused = False
                while self._held:
                    self._piece(*self._held.popleft())
        elif isinstance(event, ev.ResponseInterrupted):
            if event.generation == self._generation:
                self.clear()
                self._reset(None)
        elif self.hang_up.note(event):
            self._maybe_end()
        return False

    def _maybe_end(self) -> None:
        if not self._unheard and not self._held:
            self.hang_up.heard_all()

    def clear(self) -> None:
        """Drop what Twilio still holds of the answer (``clear``, then a fence: rule 3)."""
        if self._unheard:
            self._clear()
            self._unheard.clear()
        self._held.clear()

    def _audio(self, event: ev.OutputAudioDelta) -> None:
        session = self._session
        if session is None or not session.outbox.is_current(event.generation):
            return
        if event.generation != self._generation:
            self._reset(event.generation)
        pcm = np.frombuffer(event.delta[: len(event.delta) - len(event.delta) % 2], np.int16)
        mulaw = ulaw_encode(pcm)
        for start in range(0, len(mulaw), _PIECE_BYTES):
            piece = mulaw[start : start + _PIECE_BYTES]
            self._sent_ms += len(piece) * 1000 / PHONE_RATE
            if self._paused:
                self._held.append((self._sent_ms, piece))
            else:
                self._piece(self._sent_ms, piece)

    def _piece(self, end_ms: float, mulaw: bytes) -> None:
        assert self._generation is not None
        self._send(media_message(self.stream_sid, mulaw))
        self._send(mark_message(self.stream_sid, audio_mark(self._generation, end_ms)))
        self._unheard.append((end_ms, mulaw))

    def send_tones(self, digits: str) -> None:
        """Keypad tones to the far end, in-band (``send_dtmf``; phone rule 4)."""
        mulaw = ulaw_encode(dtmf_tones(digits))
        for start in range(0, len(mulaw), _PIECE_BYTES):
            self._send(media_message(self.stream_sid, mulaw[start : start + _PIECE_BYTES]))

    def _clear(self) -> None:
        self._send(clear_message(self.stream_sid))
        self._fence = f"c{next(self._fences)}"
        self._send(mark_message(self.stream_sid, self._fence))

    # ------------------------------------------------------------ Twilio's side

    def on_mark(self, name: str) -> None:
        """Twilio played up to a mark (rule 3): the heard prefix moves on."""
        if self._fence is not None:
            if name == self._fence:
                self._fence = None
            return  # queued marks a clear flushed: not heard
        mark = read_audio_mark(name)
        if mark is None or mark[0] != self._generation:
            return
        generation, ms = mark
        self.heard_ms = max(self.heard_ms, ms)
        while self._unheard and self._unheard[0][0] <= ms:
            self._unheard.popleft()
        self._maybe_end()
        session = self._session
        if session is not None and session.engine is not None:
            session.engine.on_playback(generation, ms)
