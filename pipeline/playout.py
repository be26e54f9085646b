"""Playout tracking: which part of a response the user actually heard.

The server knows what it sent; the client reports how much it played (``played_ms`` per
generation). ``PlayoutTracker`` lays the response's sentences on one audio timeline. Given a
played duration it returns the heard prefix: whole sentences that finished playing, plus, for the
sentence cut off, the words whose audio had finished (TTS word timings) or — without timings — a
share of its characters proportional to the audio played, cut back to a word boundary.

When the client has not reported, the estimate is real-time playback from the first audio sent,
capped at what was sent. A held answer (a candidate interruption, ``pipeline.turns`` Rule 3)
pauses the estimate where the client pauses its playback (``pause(now, client_pauses=True)``:
the client was told to) or lets it run on over what was already sent (a client that knows no
pause plays out its buffer); ``resume`` re-anchors the estimate at the position then, so a
client that ran dry restarts from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.audio import WordTiming
from plugins.language import joins_without_space


@dataclass(slots=True)
class _Sentence:
    text: str
    start_ms: float
    duration_ms: float = 0.0
    words: list[WordTiming] = field(default_factory=list)


def join_text(left: str, right: str) -> str:
    if not left:
        return right
    if not right:
        return left
    if joins_without_space(left[-1]) or joins_without_space(right[0]):
        return left + right
    return left + " " + right


class PlayoutTracker:
    def __init__(self) -> None:
        self._sentences: list[_Sentence] = []
        self.sent_ms = 0.0
        self.first_sent_at: float | None = None
        self.client_played_ms: float | None = None
        self._anchor: float | None = None
        """When position 0 would have played, at real-time playback (moved by ``resume``)."""
        self._frozen_ms: float | None = None
        """The estimate while paused on a client that pauses with us."""

    @property
    def text(self) -> str:
        out = ""
        for s in self._sentences:
            out = join_text(out, s.text)
        return out

    @property
    def total_ms(self) -> float:
        return sum(s.duration_ms for s in self._sentences)

    def add_sentence(self, text: str) -> None:
        self._sentences.append(_Sentence(text=text, start_ms=self.total_ms))

    def add_audio(self, duration_ms: float, words: tuple[WordTiming, ...] = ()) -> None:
        """Audio for the latest sentence; word timings are relative to this piece of audio."""
        sentence = self._sentences[-1]
        offset = sentence.duration_ms
        sentence.words.extend(
            WordTiming(w.text_start, w.text_end, w.start_ms + offset, w.end_ms + offset)
            for w in words
        )
        sentence.duration_ms += duration_ms

    def on_sent(self, duration_ms: float, now: float) -> None:
        if self.first_sent_at is None:
            self.first_sent_at = now
        if self._anchor is None:
            self._anchor = now - self.sent_ms / 1000.0
        self.sent_ms += duration_ms

    def pause(self, now: float, *, client_pauses: bool) -> None:
        if client_pauses and self._frozen_ms is None:
            self._frozen_ms = self._estimate(now)

    def resume(self, now: float) -> None:
        if self._anchor is not None:
            self._anchor = now - self._estimate(now) / 1000.0
        self._frozen_ms = None

    def ahead_ms(self, now: float) -> float | None:
        """How far what was sent runs ahead of the playback estimate (None before any)."""
        if self._anchor is None:
            return None
        if self._frozen_ms is not None:
            return self.sent_ms - self._frozen_ms
        return self.sent_ms - (now - self._anchor) * 1000.0

    def _estimate(self, now: float) -> float:
        if self._frozen_ms is not None:
            return self._frozen_ms
        if self._anchor is None:
            return 0.0
        return max(0.0, min(self.sent_ms, (now - self._anchor) * 1000.0))

    def on_client_played(self, played_ms: float) -> None:
        if self.client_played_ms is None or played_ms > self.client_played_ms:
            self.client_played_ms = min(played_ms, self.sent_ms)

    def played_ms(self, now: float) -> float:
        if self.client_played_ms is not None:
            return self.client_played_ms
        return self._estimate(now)

    def playout_end(self) -> float | None:
        """When real-time playback of everything sent so far ends (server's estimate)."""
        if self._anchor is None:
            return None
        return self._anchor + self.sent_ms / 1000.0

    def heard_text(self, played_ms: float) -> str:
        out = ""
        for s in self._sentences:
            end = s.start_ms + s.duration_ms
            if played_ms >= end and s.duration_ms > 0:
                out = join_text(out, s.text)
                continue
            if played_ms > s.start_ms and s.duration_ms > 0:
                out = join_text(out, _partial(s, played_ms - s.start_ms))
            break
        return out


def _partial(sentence: _Sentence, played: float) -> str:
    if sentence.words:
        ends = [w.text_end for w in sentence.words if w.end_ms <= played]
        return sentence.text[: max(ends)].rstrip() if ends else ""
    chars = int(len(sentence.text) * played / sentence.duration_ms)
    prefix = sentence.text[:chars]
    if chars < len(sentence.text) and not joins_without_space(
        sentence.text[chars - 1 : chars] or "a"
    ):
        # Do not report half a word as heard.
        cut = prefix.rfind(" ")
        prefix = prefix[:cut] if cut >= 0 else ""
    return prefix.rstrip()
