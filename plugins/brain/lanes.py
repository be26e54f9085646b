"""Foreground first for a remote model (SPEC RT-11): the rule of the local model's queue,
for the ``openai`` brain's concurrency.

Theory of operation
-------------------
A remote model serves requests side by side, so nothing waits *behind* another request the
way the one local model does; what runs out is the provider's concurrency. ``ProviderLanes``
bounds it:

Rule 1. At most ``max_concurrent`` requests are in flight at once; more wait (first come,
        first served within a class).
Rule 2. Background requests (memory consolidation, learning) take at most ``max_background``
        of those places, so ``max_concurrent - max_background`` places are always a person's:
        a foreground request never waits behind background work.
Rule 3. A waiting foreground request is let in before any waiting background one; a background
        request waits while any foreground request does.

Plain asyncio on one event loop; every wait is the caller's to bound (its own timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from plugins.brain.model_queue import model_run_started


class ProviderLanes:
    """Places for requests to a remote model, foreground first (see the module's rules)."""

    def __init__(self, *, max_concurrent: int = 8, max_background: int = 2) -> None:
        if max_concurrent < 2 or not 0 < max_background < max_concurrent:
            raise ValueError("need max_concurrent >= 2 and 0 < max_background < max_concurrent")
        self.max_concurrent = max_concurrent
        self.max_background = max_background
        self.running = 0
        self.running_background = 0
        self.foreground_waiting = 0
        self._changed: asyncio.Condition | None = None

    def _free(self, background: bool) -> bool:
        if self.running >= self.max_concurrent:
            return False
        if background:
            return not self.foreground_waiting and self.running_background < self.max_background
        return True

    @asynccontextmanager
    async def slot(self, *, background: bool = False) -> AsyncIterator[None]:
        """Hold one place for a request while the block runs."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        changed = self._changed
        async with changed:
            if not background:
                self.foreground_waiting += 1
            try:
                await changed.wait_for(lambda: self._free(background))
            finally:
                if not background:
                    self.foreground_waiting -= 1
            self.running += 1
            self.running_background += background
        model_run_started()  # the owner's run bound starts now (model queue Rule 8)
        try:
            yield
        finally:
            async with changed:
                self.running -= 1
                self.running_background -= background
                changed.notify_all()
