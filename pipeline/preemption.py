"""Preemptive response (TT-2): the brain starts on the speculative transcript before the turn ends.

Theory of operation
-------------------
Rule 1. At a pause the capture transcribes the utterance so far (its *speculation*, which the
        commit reuses as the final transcript when speech does not resume). While the endpoint
        wait runs, the engine starts a ``Preemption`` on that transcript: the turn content a
        commit would build (the thread before the turn, long-term memory, instructions) and the
        brain through the shared tool loop. Its deltas are kept here; nothing is sent and
        nothing is journaled.
Rule 2. Only read-only tools (``ToolSpec.read_only``: the knowledge search) run preemptively.
        Their calls and results stay in the buffer and are journaled with the response when it
        is reused, so a reused search is not repeated. A call to any other tool stops the
        preemption before the tool runs; it can no longer be reused.
Rule 3. At the commit a preemption is reused when it was made for the committed turn, was not
        stopped, and the final transcript equals its own (compared without case, spaces and
        punctuation); the response then streams the buffer and whatever the brain adds. Any
        other preemption is cancelled and discarded. Speech resuming, a dropped utterance, typed
        input, an interruption and the session's end cancel it too.
Rule 4. At most one preemption per session (``Preempter``): a new pause's replaces the old,
        and it starts only where the session answers by itself (``preemptive`` settings, auto
        response) and the turn is still ending when the content is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from journal.errors import JournalError
from pipeline.content import TurnContent
from plugins.contracts import BrainDelta, Transcript

log = logging.getLogger(__name__)

_UNSPOKEN = re.compile(r"[\W_]+", re.UNICODE)


def same_words(a: str, b: str) -> bool:
    """The two transcripts say the same (case, spacing and punctuation aside)."""
    return _UNSPOKEN.sub("", a.casefold()) == _UNSPOKEN.sub("", b.casefold())


@dataclass
class Preemption:
    turn_id: int
    text: str
    """The speculative transcript it answers."""
    content: TurnContent
    deltas: list[BrainDelta] = field(default_factory=list)
    stopped: bool = False
    """A tool with effects was called: not reusable (Rule 2)."""
    finished: bool = False
    error: BaseException | None = None
    task: asyncio.Task[None] | None = None
    _grew: asyncio.Event = field(default_factory=asyncio.Event)

    def start(
        self,
        stream: AsyncIterator[BrainDelta],
        read_only: frozenset[str],
        spawn: Callable[[Awaitable[None], str], asyncio.Task[None]],
    ) -> None:
        self.task = spawn(self._collect(stream, read_only), "preemption")

    def reusable_for(self, turn_id: int, final_text: str) -> bool:
        return (
            turn_id == self.turn_id
            and not self.stopped
            and self.error is None
            and not (self.task is not None and self.task.cancelled())
            and same_words(final_text, self.text)
        )

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def stream(self) -> AsyncIterator[BrainDelta]:
        """What the brain said so far, then the rest as it comes (a failure re-raised)."""
        index = 0
        while True:
            while index < len(self.deltas):
                yield self.deltas[index]
                index += 1
            if self.error is not None:
                raise self.error
            if self.finished:
                return
            self._grew.clear()
            await self._grew.wait()

    async def _collect(self, stream: AsyncIterator[BrainDelta], read_only: frozenset[str]) -> None:
        try:
            async for delta in stream:
                call = delta.tool_call
                if call is not None and call.name not in read_only:
                    self.stopped = True
                    break
                self.deltas.append(delta)
                self._grew.set()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - handed to whoever streams it
            self.error = error
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
            self.finished = True
            self._grew.set()


class Preempter:
    """A session's one preemption (Rule 4): started at a pause, taken by the commit."""

    def __init__(
        self,
        *,
        content: Callable[[str, asyncio.Task[str | None] | None], Awaitable[TurnContent]],
        brain: Callable[[TurnContent], AsyncIterator[BrainDelta]],
        read_memory: Callable[[], Awaitable[str | None]] | None,
        endpointing: Callable[[int], bool],
        read_only: frozenset[str],
        spawn: Callable[[Awaitable[Any], str], asyncio.Task[Any]],
    ) -> None:
        self._content = content
        """The turn content for a transcript (the thread before it, memory read beside)."""
        self._brain = brain
        self._read_memory = read_memory
        self._endpointing = endpointing
        self._read_only = read_only
        self._spawn = spawn
        self._current: Preemption | None = None

    def at_pause(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        """Rule 1: answer the pause's speculative transcript (Rule 4: replacing any other)."""
        self.drop()
        self._spawn(self._start(turn_id, speculation), "preempt")

    def take(self, turn_id: int | None = None) -> Preemption | None:
        """Rule 3: the preemption made for the committed turn ``turn_id`` (None: a typed one),
        any other cancelled."""
        preemption, self._current = self._current, None
        if preemption is not None and preemption.turn_id != turn_id:
            preemption.cancel()
            return None
        return preemption

    def drop(self) -> None:
        self.take()

    async def _start(self, turn_id: int, speculation: asyncio.Task[Transcript]) -> None:
        await asyncio.wait({speculation})
        if speculation.cancelled() or speculation.exception() is not None:
            return
        text = speculation.result().text.strip()
        if not text or not self._endpointing(turn_id):
            return
        memory = self._spawn(self._read_memory(), "memory-read") if self._read_memory else None
        try:
            content = await self._content(text, memory)
        except JournalError as e:
            log.info("no preemptive answer: %s", e)
            return
        finally:
            if memory is not None and not memory.done():
                memory.cancel()
        if not self._endpointing(turn_id) or self._current is not None:
            return
        preemption = Preemption(turn_id, text, content)
        preemption.start(self._brain(content), self._read_only, self._spawn)
        self._current = preemption


__all__ = ["Preempter", "Preemption", "same_words"]
