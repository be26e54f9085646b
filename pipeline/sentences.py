"""Streaming sentence/clause splitter for brain output (English and Chinese).

The brain streams tokens; TTS wants whole sentences so it can start speaking before the brain has
finished. ``SentenceSplitter.feed`` returns every sentence completed by the new text;
``flush`` returns the rest. A Latin terminator (``. ! ?``) ends a sentence only when followed by
whitespace (so ``3.5`` and ``e.g.`` inside a word stay whole); CJK terminators end one at once.
A long sentence is also cut at a clause mark (``, ; :`` and their CJK forms) once it is long enough,
with a lower bar for the first piece of a response so the first audio comes sooner.
"""

from __future__ import annotations

_LATIN_END = ".!?"
_CJK_END = "。！？…\n"
_CLAUSE = ",;:，；：、"
_ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "e.g.", "i.e.", "etc.", "vs."})


class SentenceSplitter:
    def __init__(self, *, first_clause_chars: int = 24, clause_chars: int = 80) -> None:
        self._buffer = ""
        self._emitted = 0
        self.first_clause_chars = first_clause_chars
        self.clause_chars = clause_chars

    def feed(self, text: str) -> list[str]:
        self._buffer += text
        out: list[str] = []
        start = 0
        i = 0
        buf = self._buffer
        while i < len(buf):
            ch = buf[i]
            cut: int | None = None
            if ch in _CJK_END:
                cut = i + 1
            elif ch in _LATIN_END:
                if i + 1 < len(buf) and buf[i + 1].isspace() and not self._abbreviation(buf, i):
                    cut = i + 1
            elif ch in _CLAUSE and (i + 1 < len(buf) and (buf[i + 1].isspace() or ch > "\u2e80")):
                bar = self.first_clause_chars if self._emitted == 0 else self.clause_chars
                if i + 1 - start >= bar:
                    cut = i + 1
            if cut is not None:
                piece = buf[start:cut].strip()
                if piece:
                    out.append(piece)
                    self._emitted += 1
                start = cut
            i += 1
        self._buffer = buf[start:]
        return out

    def cut(self) -> list[str]:
        """The text not yet emitted, as a piece of its own now (the brain's opening words,
        ``BrainDelta.speak_now``); the next piece still has the first piece's lower bar."""
        rest, self._buffer = self._buffer.strip(), ""
        return [rest] if rest else []

    def flush(self) -> list[str]:
        rest, self._buffer = self._buffer.strip(), ""
        if rest:
            self._emitted += 1
            return [rest]
        return []

    @staticmethod
    def _abbreviation(buf: str, dot: int) -> bool:
        begin = dot
        while begin > 0 and not buf[begin - 1].isspace():
            begin -= 1
        return buf[begin : dot + 1].lower() in _ABBREVIATIONS
