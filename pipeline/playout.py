"""Playout tracking: which part of a response the user actually heard.

The server knows what it sent; the client reports how much it played (``played_ms`` per
generation). ``PlayoutTracker`` lays the response's sentences on one audio timeline. Given a
played duration it returns the heard prefix: whole sentences that finished playing, plus, for the
sentence cut off, the words whose audio had finished (TTS word timings) or — without timings — a
share of its characters proportional to the audio played, cut back to a word boundary.

When the client has not reported, the estimate is real-time playback from the first audio sent,
capped at what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.audio import WordTiming


@dataclass(slots=True)
class _Sentence:
    text: str
    start_ms: float
    duration_ms: float = 0.0
    words: list[WordTiming] = field(default_factory=list)


def _is_cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\u3000" <= ch <= "\u303f" or "\uff00" <= ch <= "\uffef"


def join_text(left: str, right: str) -> str:
    if not left:
        return right
    if not right:
        return left
    if _is_cjk(left[-1]) or _is_cjk(right[0]):
        return left + right
    return left + " " + right


class PlayoutTracker:
    def __init__(self) -> None:
        self._sentences: list[_Sentence] = []
        self.sent_ms = 0.0
        self.first_sent_at: float | None = None
        self.client_played_ms: float | None = None

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
        self.sent_ms += duration_ms

    def on_client_played(self, played_ms: float) -> None:
        if self.client_played_ms is None or played_ms > self.client_played_ms:
            self.client_played_ms = min(played_ms, self.sent_ms)

    def played_ms(self, now: float) -> float:
        if self.client_played_ms is not None:
            return self.client_played_ms
        if self.first_sent_at is None:
            return 0.0
        return min(self.sent_ms, (now - self.first_sent_at) * 1000.0)

    def playout_end(self) -> float | None:
        """When real-time playback of everything sent so far ends (server's estimate)."""
        if self.first_sent_at is None:
            return None
        return self.first_sent_at + self.sent_ms / 1000.0

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
    if chars < len(sentence.text) and not _is_cjk(sentence.text[chars - 1 : chars] or "a"):
        # Do not report half a word as heard.
        cut = prefix.rfind(" ")
        prefix = prefix[:cut] if cut >= 0 else ""
    return prefix.rstrip()
