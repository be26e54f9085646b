"""The virtual-time loop of ``tests/virtual_time.py``: timers keep their order and spacing in
virtual seconds and take no real time; a stuck loop and a leaked task fail the test."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.virtual_time import (
    VirtualTimeDeadlock,
    VirtualTimeLoop,
    VirtualTimeSpin,
    in_virtual_time,
)


@in_virtual_time
async def test_timers_fire_in_order_at_their_virtual_times_in_no_real_time() -> None:
    loop = asyncio.get_running_loop()
    fired: list[tuple[str, float]] = []

    async def sleeper(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        fired.append((name, loop.time()))

    real_start = time.monotonic()
    async with asyncio.TaskGroup() as group:
        group.create_task(sleeper("hour", 3600.0))
        group.create_task(sleeper("second", 1.0))
        loop.call_later(0.25, lambda: fired.append(("callback", loop.time())))
    assert fired == [("callback", 0.25), ("second", 1.0), ("hour", 3600.0)]
    assert time.monotonic() - real_start < 0.5


@in_virtual_time
async def test_a_timeout_expires_at_its_virtual_deadline() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(30.0):
            await asyncio.Event().wait()
    assert loop.time() == 30.0


def test_a_loop_where_nothing_can_happen_raises_instead_of_hanging() -> None:
    loop = VirtualTimeLoop()
    loop.stuck_after_s = 0.01

    async def stuck() -> None:
        await asyncio.Event().wait()

    with asyncio.Runner(loop_factory=lambda: loop) as runner, pytest.raises(VirtualTimeDeadlock):
        runner.run(stuck())


def test_a_timer_re_armed_at_a_past_deadline_forever_raises_instead_of_spinning() -> None:
    loop = VirtualTimeLoop()
    loop.spin_limit = 1_000
    spinning = True

    def fire() -> None:
        if spinning:
            loop.call_later(0.0, fire)  # "not yet": re-armed at once, time never moves

    async def wait_for_the_timer() -> None:
        loop.call_later(0.0, fire)
        await asyncio.sleep(1.0)

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        with pytest.raises(VirtualTimeSpin):
            runner.run(wait_for_the_timer())
        spinning = False  # so that the runner can close the loop


def test_a_test_that_leaves_a_task_running_fails() -> None:
    async def leaky() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(10.0), name="forgotten")

    with pytest.raises(AssertionError, match="leaked 1 asyncio task.*forgotten"):
        in_virtual_time(leaky)()
