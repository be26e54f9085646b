"""The terminal side of ``openrealtime talk``: the transcript on stdout, notices on stderr, and
lines typed on stdin.

On a terminal, partial lines are redrawn in place on the last line; piped (a log, a test), only
final lines are written, one per turn, so the output reads as a transcript. Notices and errors go
to stderr. Nothing here ever writes the token.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import AsyncIterator
from typing import TextIO

from runtime.talk.commands import Notice, Show

_CLEAR_LINE = "\r\x1b[K"
MAX_PARTIALS = 8


class TranscriptPrinter:
    def __init__(self, out: TextIO, err: TextIO, *, live: bool | None = None) -> None:
        self.out = out
        self.err = err
        self.live = out.isatty() if live is None else live
        self._partials: dict[str, Show] = {}  # insertion order: the newest is drawn
        self._drawn = False

    def show(self, line: Show) -> None:
        self._partials.pop(line.key, None)
        if not line.final:
            self._partials[line.key] = line
            while len(self._partials) > MAX_PARTIALS:
                del self._partials[next(iter(self._partials))]
        if not self.live:
            if line.final and line.text:
                self._write(self.out, f"{line.speaker}: {line.text}\n")
            return
        self._undraw()
        if line.final and line.text:
            self.out.write(f"{line.speaker}: {line.text}\n")
        self._draw()

    def notice(self, notice: Notice) -> None:
        self._undraw()
        prefix = "error: " if notice.error else ""
        self._write(self.err, f"{prefix}{notice.text}\n")
        self._draw()

    def _undraw(self) -> None:
        if self.live and self._drawn:
            self.out.write(_CLEAR_LINE)
            self._drawn = False

    def _draw(self) -> None:
        if self.live and self._partials:
            line = next(reversed(self._partials.values()))
            self.out.write(f"{line.speaker}: {line.text}")
            self._drawn = True
        self.out.flush()

    @staticmethod
    def _write(stream: TextIO, text: str) -> None:
        stream.write(text)
        stream.flush()


async def stdin_lines(stream: TextIO | None = None) -> AsyncIterator[str]:
    """Lines typed on stdin, without their newline, until end of input.

    A daemon thread reads (works in any terminal, on any platform; a blocked read never holds
    up the exit) and hands each line to the event loop."""
    source = stream or sys.stdin
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue(64)

    def deliver(line: str | None) -> None:
        if not queue.full():  # nobody types 64 lines ahead of the loop; drop if they do
            queue.put_nowait(line)

    def read() -> None:
        try:
            for line in source:
                loop.call_soon_threadsafe(deliver, line.rstrip("\r\n"))
        except (OSError, ValueError, RuntimeError):  # closed stdin, or the loop went away
            pass
        try:
            loop.call_soon_threadsafe(deliver, None)
        except RuntimeError:
            pass

    threading.Thread(target=read, name="talk-keyboard", daemon=True).start()
    while (line := await queue.get()) is not None:
        yield line
