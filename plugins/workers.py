"""Bounded worker pools for blocking model calls.

Model inference (Whisper, Piper, Smart Turn, Silero) releases the GIL in native code but must
never run on the event loop. Each stage gets its own small pool so a busy stage cannot starve
another; within a stage, calls queue in FIFO order and are bounded by ``max_pending`` so one
session cannot pile up unbounded work.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from plugins.errors import PluginError

P = ParamSpec("P")
T = TypeVar("T")


class WorkerPoolBusy(PluginError):
    code = "worker_pool_busy"

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(f"{name}: more than {limit} calls waiting", retryable=True)


class WorkerPool:
    """A named thread pool with a bound on calls in flight (running + waiting)."""

    def __init__(self, name: str, *, max_workers: int = 2, max_pending: int = 64) -> None:
        self.name = name
        self.max_pending = max_pending
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)
        self._in_flight = 0

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        if self._in_flight >= self.max_pending:
            raise WorkerPoolBusy(self.name, self.max_pending)
        self._in_flight += 1
        try:
            loop = asyncio.get_running_loop()
            call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
            return await loop.run_in_executor(self._executor, call)
        finally:
            self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
