"""What was said when in a recording (SPEC REC-3): the transcript on the recording's clock, for
playback beside the audio.

Theory of operation
-------------------
Rule 1. One segment per utterance: the person's (their speech's start and end as the VAD put
        them, and what the ASR heard) and the agent's (from where its first sample plays to
        where its last does, and the transcript of what was sent). Times are milliseconds on
        the recording's clock (``records.recorder`` Rule 1). A segment with no words (a
        cough, an answer that never played) is left out.
Rule 2. An interrupted answer ends where the person cut in: ``interrupted`` is set, ``end_ms``
        is the cut, and the words that would have played after it are marked unheard.
Rule 3. Words get times by sharing their segment's span in proportion to their length (a CJK
        character is a word): ``word_timing`` says ``estimated``. Neither side's engine
        reports when each word was heard, so a word is within its segment, in order, never
        exact.
Rule 4. A timeline is bounded: past ``MAX_CHARS`` of text no segment is added and
        ``truncated`` says so. It is sealed like the audio before it rests
        (``records.recordings``: the row's ``timeline``), and is deleted with the row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from memory.crypto import Keyring, Sealed, row_context

MAX_CHARS = 200_000
"""Text a timeline keeps (Rule 4): about five hours of talk."""

NOT_PLAYING = -1
"""An answer whose transcript came before its audio (or that had none) starts here."""

_CJK = "\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


@dataclass(slots=True)
class Segment:
    side: Literal["person", "agent"]
    item_id: str
    start_ms: int
    end_ms: int
    text: str = ""
    interrupted: bool = False
    sent_ms: int = 0
    """An answer's audio as sent (it may run past the cut: Rule 2)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "item_id": self.item_id,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "text": self.text,
            "interrupted": self.interrupted,
            "words": self.words(),
        }

    def words(self) -> list[dict[str, Any]]:
        """Rule 3 (and Rule 2's unheard words: those the cut came before)."""
        found = list(_WORD.finditer(self.text))
        if not found:
            return []
        weights = [len(m.group()) for m in found]
        total = sum(weights)
        span = max(0, self.end_ms - self.start_ms)
        heard_until = self.end_ms
        if self.interrupted and self.text:
            # Spread over the whole answer as sent; the cut keeps what came before it.
            span = max(span, self.sent_ms)
        out, at = [], float(self.start_ms)
        for m, weight in zip(found, weights, strict=True):
            end = at + span * weight / total
            word: dict[str, Any] = {"text": m.group(), "start_ms": round(at), "end_ms": round(end)}
            if self.interrupted and round(at) >= heard_until:
                word["heard"] = False
            out.append(word)
            at = end
        return out


class Timeline:
    """Rules 1, 2 and 4 for one recording."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self._open: dict[str, Segment] = {}
        self.chars = 0
        self.truncated = False

    def _segment(self, side: Literal["person", "agent"], item_id: str, at_ms: int) -> Segment:
        found = self._open.get(item_id)
        if found is None:
            found = self._open[item_id] = Segment(side, item_id, at_ms, at_ms)
            if not self.truncated:
                self.segments.append(found)
        return found

    def person_started(self, item_id: str, at_ms: int) -> None:
        self._segment("person", item_id, at_ms)

    def person_stopped(self, item_id: str, at_ms: int) -> None:
        segment = self._segment("person", item_id, at_ms)
        segment.end_ms = max(segment.start_ms, at_ms)

    def person_said(self, item_id: str, text: str) -> None:
        segment = self._open.get(item_id)
        if segment is not None:
            self._text(segment, text)

    def agent_audio(self, item_id: str, start_ms: int, end_ms: int) -> None:
        """Audio of answer ``item_id`` plays from ``start_ms`` to ``end_ms``."""
        segment = self._segment("agent", item_id, start_ms)
        if segment.start_ms < 0:  # its transcript came first
            segment.start_ms = start_ms
        segment.end_ms = max(segment.end_ms, end_ms)
        segment.sent_ms = max(segment.sent_ms, segment.end_ms - segment.start_ms)

    def agent_said(self, item_id: str, text: str, *, more: bool = False) -> None:
        """The answer's transcript: ``more`` adds a delta, else ``text`` is all of it (an
        interrupted answer keeps what was sent)."""
        segment = self._segment("agent", item_id, NOT_PLAYING)
        if segment.side != "agent":
            return
        if more:
            self._text(segment, segment.text + text)
        elif not segment.interrupted:
            self._text(segment, text)

    def agent_cut(self, at_ms: int) -> None:
        """Rule 2: the answer playing at ``at_ms`` (if any) was interrupted there."""
        for segment in reversed(self.segments):
            if segment.side == "agent":
                if segment.start_ms <= at_ms < segment.end_ms:
                    segment.interrupted = True
                    segment.end_ms = at_ms
                return

    def _text(self, segment: Segment, text: str) -> None:
        grown = len(text) - len(segment.text)
        if self.chars + grown > MAX_CHARS:
            self.truncated = True
            return
        self.chars += grown
        segment.text = text

    def to_json(self) -> dict[str, Any]:
        return {
            "segments": [
                s.to_json()
                for s in sorted(self.segments, key=lambda s: s.start_ms)
                if s.text and s.start_ms != NOT_PLAYING
            ],
            "word_timing": "estimated",
            "truncated": self.truncated,
        }


def timeline_context(tenant: str, recording_id: str) -> bytes:
    return row_context("recordings", "timeline", tenant, recording_id)


def seal_timeline(keyring: Keyring, tenant: str, recording_id: str, timeline: Timeline) -> Sealed:
    data = json.dumps(timeline.to_json(), ensure_ascii=False, separators=(",", ":"))
    return keyring.seal_bytes(data.encode(), context=timeline_context(tenant, recording_id))


def open_timeline(keyring: Keyring, tenant: str, recording_id: str, sealed: Sealed) -> Any:
    return json.loads(keyring.open_bytes(sealed, context=timeline_context(tenant, recording_id)))
