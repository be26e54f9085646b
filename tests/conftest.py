"""Session-wide test fixtures.

``no_leaked_tasks`` is autouse: a test that leaves asyncio tasks running on its loop fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    # Give tasks that are finishing (cancelled, closing sockets) a moment to end.
    for _ in range(50):
        leaked = [t for t in asyncio.all_tasks() - before if not t.done()]
        leaked = [t for t in leaked if t is not asyncio.current_task()]
        if not leaked:
            return
        await asyncio.sleep(0.01)
    names = ", ".join(sorted(t.get_name() + ":" + repr(t.get_coro()) for t in leaked))
    for task in leaked:
        task.cancel()
    pytest.fail(f"test leaked {len(leaked)} asyncio task(s): {names}")
