"""The engine's event loop: its one clock and its tasks.

Theory of operation
-------------------
Rule 1. One clock. Every time the engine and its rooms read (``loop_time`` unless a clock is
        passed in) and every wait — the coordinator's timer, the pacer's sleeps, the
        brain/TTS/ASR watchdogs, the idle timer — is the event loop's, so a
        ``tests.virtual_time.VirtualTimeLoop`` runs whole conversations in virtual time. A clock
        passed in must be that loop's clock (tests pass ``loop.time``).
Rule 2. A timer (``LoopTimer``) is one ``call_later`` handle: armed again, it replaces the
        last; armed for the deadline it already has, it is left as it is.
Rule 3. A session's background work (a response, a transcription, a memory read, a verdict)
        runs in tasks of its ``TaskSet``: each named, kept until it ends, all cancelled and
        awaited at the session's close. A task's failure is logged by kind — a fenced writer
        (the session continued in another process) is expected, a provider's failure is
        reported by the turn that needed it, anything else is a bug with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from journal.errors import WriterFenced
from plugins.errors import PluginError

log = logging.getLogger(__name__)

_UVLOOP: type | None
try:
    from uvloop import Loop as _UVLOOP
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    _UVLOOP = None


def loop_time() -> float:
    """The running event loop's clock: the engine's one clock (Rule 1).

    uvloop's ``time()`` counts whole milliseconds, read once per loop iteration: a turn's
    marks taken with it were rounded to the millisecond (a 2.4 ms turn read 2 or 3) and late
    by the iteration's work. Its clock is ``CLOCK_MONOTONIC``, as ``time.monotonic`` is, so on
    uvloop the engine reads that directly (timers still fire on the loop's own reading, at most
    a millisecond behind). Any other loop — the virtual-time loop of the tests — is read as it
    is."""
    loop = asyncio.get_running_loop()
    if type(loop) is _UVLOOP:
        return time.monotonic()
    return loop.time()


class LoopTimer:
    """One armed callback at a time (Rule 2)."""

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        """The loop time it fires at (None: not armed)."""

    def arm(self, deadline: float | None, now: float, callback: Callable[[], None]) -> None:
        """Fire ``callback`` at ``deadline`` (engine time read ``now``); None: disarm."""
        if deadline == self.deadline:
            return
        self.cancel()
        self.deadline = deadline
        if deadline is not None:
            loop = asyncio.get_running_loop()
            self._handle = loop.call_later(max(0.0, deadline - now), self._fire, callback)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self.deadline = None

    def _fire(self, callback: Callable[[], None]) -> None:
        self._handle = self.deadline = None
        callback()


def retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback for a future nobody may await (its awaiter was cancelled): its failure
    is retrieved here, not reported as "never retrieved" when it is collected."""
    if not future.cancelled():
        future.exception()


class TaskSet:
    """A session's tasks (Rule 3)."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    async def cancel_all(self) -> None:
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, WriterFenced):
            # Another process continued this session: this copy stops (the journal buffer
            # fences it), nothing it wrote after the fence was kept. Expected, not a bug.
            log.info("engine task %s stopped: the session was continued elsewhere", task.get_name())
        elif isinstance(error, PluginError):
            # A provider's failure (a speculative transcript, an endpoint judgement): the turn
            # that needs the result reports it (``Responder``'s failure); not a bug of ours.
            log.warning("engine task %s failed: %s", task.get_name(), error.code)
        elif error is not None:
            log.error("engine task %s failed", task.get_name(), exc_info=error)


__all__ = ["LoopTimer", "TaskSet", "loop_time", "retrieved"]
