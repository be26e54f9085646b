"""ProviderLanes: a remote model's places, foreground first (SPEC RT-11)."""

from __future__ import annotations

import asyncio

import pytest

from plugins.brain.lanes import ProviderLanes


async def test_background_never_takes_the_places_kept_for_foreground() -> None:
    lanes = ProviderLanes(max_concurrent=3, max_background=1)
    release = asyncio.Event()
    entered: list[str] = []

    async def use(name: str, background: bool) -> None:
        async with lanes.slot(background=background):
            entered.append(name)
            await release.wait()

    tasks = [asyncio.create_task(use(f"bg{i}", True)) for i in range(3)]
    tasks += [asyncio.create_task(use(f"fg{i}", False)) for i in range(2)]
    for _ in range(100):  # let every task that can enter do so
        await asyncio.sleep(0)
    assert sorted(entered) == ["bg0", "fg0", "fg1"]  # one background place, two for people
    release.set()
    await asyncio.gather(*tasks)
    assert lanes.running == lanes.running_background == 0


async def test_a_waiting_foreground_request_goes_before_waiting_background_ones() -> None:
    lanes = ProviderLanes(max_concurrent=2, max_background=1)
    order: list[str] = []
    gate = asyncio.Event()

    async def use(name: str, background: bool) -> None:
        async with lanes.slot(background=background):
            order.append(name)
            if name.startswith("fg-") and name != "fg-third":
                await gate.wait()

    first = asyncio.create_task(use("fg-first", False))
    second = asyncio.create_task(use("fg-second", False))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(use("bg", True)), asyncio.create_task(use("fg-third", False))]
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(first, second, *waiting)
    assert order.index("fg-third") < order.index("bg")


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        ProviderLanes(max_concurrent=2, max_background=2)
