"""Virtual time for code that sleeps and times out through its event loop.

``VirtualTimeLoop`` is a selector event loop whose clock (``loop.time()``) moves only when the
loop would otherwise wait: with nothing ready to run it jumps straight to the next timer. So
``asyncio.sleep``, ``asyncio.timeout``, ``wait_for`` and ``call_later`` keep their order and
their spacing in virtual seconds while the test takes no real time. Ready I/O is still polled
(without blocking). A loop with nothing ready and no timer can only be woken from outside; if
nothing comes within ``stuck_after_s`` of real time it raises ``VirtualTimeDeadlock`` instead
of hanging the test. A loop that keeps finding work without its clock ever moving (a timer
re-armed at a deadline already past, round and round) is stuck too: after ``spin_limit``
rounds at one virtual instant it raises ``VirtualTimeSpin``.

``in_virtual_time`` turns an ``async def`` test into one that runs on a fresh loop of that kind
and fails if it leaves tasks running (what the ``no_leaked_tasks`` fixture does for the loop
pytest-asyncio provides).
"""

from __future__ import annotations

import asyncio
import inspect
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class VirtualTimeDeadlock(RuntimeError):
    """Every task waits and no timer is set: nothing will ever happen."""


class VirtualTimeSpin(VirtualTimeDeadlock):
    """The loop keeps running callbacks but virtual time never moves: a busy loop."""


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    stuck_after_s = 1.0
    """Real seconds a loop with no timer and nothing ready waits for outside I/O, then fails."""
    spin_limit = 100_000
    """Rounds of the loop at one virtual instant before it counts as a busy loop and fails."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0
        self._rounds_at_instant = 0
        selector: selectors.BaseSelector = self._selector  # type: ignore[attr-defined]
        real_select = selector.select

        def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if timeout is None:
                events = real_select(self.stuck_after_s)
                if not events:
                    raise VirtualTimeDeadlock(
                        f"no task can run and no timer is set (at virtual {self._virtual_now}s)"
                    )
                self._rounds_at_instant = 0
                return events
            if timeout > 0:  # the wait, taken at once: to the next timer's own time
                scheduled = self._scheduled  # type: ignore[attr-defined]
                self._virtual_now = (
                    scheduled[0].when() if scheduled else self._virtual_now + timeout
                )
                self._rounds_at_instant = 0
            else:
                self._rounds_at_instant += 1
                if self._rounds_at_instant > self.spin_limit:
                    self._rounds_at_instant = 0
                    raise VirtualTimeSpin(
                        f"{self.spin_limit} rounds of the loop at virtual {self._virtual_now}s"
                        " without time moving"
                    )
            return real_select(0)

        selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._virtual_now


def in_virtual_time(
    test: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., None]:
    """Run the ``async def`` test on a fresh ``VirtualTimeLoop`` (parametrize works)."""

    def run(*args: Any, **kwargs: Any) -> None:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(_without_leaks(test(*args, **kwargs), test.__name__))

    run.__name__ = test.__name__
    run.__qualname__ = test.__qualname__
    run.__doc__ = test.__doc__
    run.__module__ = test.__module__
    run.__signature__ = inspect.signature(test)  # type: ignore[attr-defined]
    run.pytestmark = getattr(test, "pytestmark", [])  # type: ignore[attr-defined]
    return run


async def _without_leaks(body: Coroutine[Any, Any, None], name: str) -> None:
    await body
    me = asyncio.current_task()
    for _ in range(10):  # let tasks that are finishing (cancelled just now) end
        leaked = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not leaked:
            return
        await asyncio.sleep(0)
    for task in leaked:
        task.cancel()
    await asyncio.gather(*leaked, return_exceptions=True)
    names = ", ".join(sorted(t.get_name() for t in leaked))
    raise AssertionError(f"{name} leaked {len(leaked)} asyncio task(s): {names}")
