"""The lock of one role's memory pool (SPEC RM-2): reads shared, changes exclusive.

Theory of operation
-------------------
Reading a pool (the visibility checks, then decrypting what is shown) holds the lock shared;
changing it (applying learning, Remember, Forget, purge) holds it exclusively, so a reader never
mixes old permissions with new content. Model calls never run under the lock: read, release,
call the model, then take the write lock and re-check against the latest pool.

Rules:

1. Any number of readers hold the lock together; a writer holds it alone.
2. Writer-preferring: once a writer waits, readers that arrive after it wait behind it, so a
   stream of readers cannot starve a writer.
3. Fair: waiters are served in arrival order. When the lock frees, the first waiter goes in — a
   writer alone, or a reader together with every reader queued right behind it up to the next
   writer — so writers cannot starve readers either.
4. A waiter that is cancelled leaves the queue (and may let the waiters behind it in); one that
   is cancelled after it was granted the lock gives it back. Nothing is held after the context
   manager exits, however it exits.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PoolLock:
    """A fair, writer-preferring readers–writer lock for one event loop."""

    def __init__(self) -> None:
        self._readers = 0
        self._writer = False
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()

    @property
    def readers(self) -> int:
        """Readers holding the lock now."""
        return self._readers

    @property
    def writing(self) -> bool:
        """A writer holds the lock now."""
        return self._writer

    @property
    def waiting(self) -> int:
        """Waiters not yet granted."""
        return sum(1 for _, future in self._waiters if not future.done())

    @asynccontextmanager
    async def read(self) -> AsyncIterator[None]:
        """Hold the lock shared."""
        await self._acquire(write=False)
        try:
            yield
        finally:
            self._release(write=False)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        """Hold the lock exclusively."""
        await self._acquire(write=True)
        try:
            yield
        finally:
            self._release(write=True)

    async def _acquire(self, *, write: bool) -> None:
        if not self._waiters and self._free_for(write):
            self._grant(write)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (write, future)
        self._waiters.append(waiter)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(write=write)  # granted, then cancelled: give it back
            else:
                if waiter in self._waiters:  # a wake may have dropped it already
                    self._waiters.remove(waiter)
                self._wake()
            raise

    def _free_for(self, write: bool) -> bool:
        return not self._writer and (not write or self._readers == 0)

    def _grant(self, write: bool) -> None:
        if write:
            self._writer = True
        else:
            self._readers += 1

    def _release(self, *, write: bool) -> None:
        if write:
            self._writer = False
        else:
            self._readers -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            write, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._free_for(write):
                return
            self._waiters.popleft()
            self._grant(write)
            future.set_result(None)
            if write:
                return
