"""Waiting on a condition that no event announces (what a speaker has played, what a task
has written): polled, bounded by a timeout that only a broken run reaches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], timeout: float = 10.0, step: float = 0.02) -> None:
    """Return once ``condition()`` holds; ``TimeoutError`` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 (polls state of other tasks and threads)
            await asyncio.sleep(step)
