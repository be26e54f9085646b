"""PoolLock (memory/pool_lock.py): shared readers, exclusive writers, no starvation."""

from __future__ import annotations

import asyncio

import pytest

from memory.pool_lock import PoolLock


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def hold(lock: PoolLock, kind: str, log: list[str], name: str, gate: asyncio.Event) -> None:
    ctx = lock.read() if kind == "r" else lock.write()
    async with ctx:
        log.append(f"+{name}")
        await gate.wait()
        log.append(f"-{name}")


async def test_readers_hold_the_lock_together() -> None:
    lock = PoolLock()
    gate = asyncio.Event()
    log: list[str] = []
    tasks = [asyncio.create_task(hold(lock, "r", log, f"r{i}", gate)) for i in range(3)]
    await settle()
    assert lock.readers == 3 and log == ["+r0", "+r1", "+r2"]
    gate.set()
    await asyncio.gather(*tasks)
    assert lock.readers == 0


async def test_a_writer_waits_for_readers_and_excludes_them() -> None:
    lock = PoolLock()
    reader_gate, writer_gate = asyncio.Event(), asyncio.Event()
    log: list[str] = []
    reader = asyncio.create_task(hold(lock, "r", log, "r", reader_gate))
    await settle()
    writer = asyncio.create_task(hold(lock, "w", log, "w", writer_gate))
    await settle()
    assert log == ["+r"] and not lock.writing
    reader_gate.set()
    await settle()
    assert log == ["+r", "-r", "+w"] and lock.writing and lock.readers == 0
    late = asyncio.create_task(hold(lock, "r", log, "late", reader_gate))
    await settle()
    assert "+late" not in log
    writer_gate.set()
    await asyncio.gather(reader, writer, late)
    assert log == ["+r", "-r", "+w", "-w", "+late", "-late"]


async def test_a_waiting_writer_is_not_starved_by_new_readers() -> None:
    lock = PoolLock()
    first, writer_gate, later = asyncio.Event(), asyncio.Event(), asyncio.Event()
    log: list[str] = []
    r1 = asyncio.create_task(hold(lock, "r", log, "r1", first))
    await settle()
    w = asyncio.create_task(hold(lock, "w", log, "w", writer_gate))
    await settle()
    r2 = asyncio.create_task(hold(lock, "r", log, "r2", later))
    await settle()
    assert log == ["+r1"] and lock.waiting == 2  # r2 queues behind the writer
    first.set()
    await settle()
    assert log == ["+r1", "-r1", "+w"]
    writer_gate.set()
    later.set()
    await asyncio.gather(r1, w, r2)
    assert log.index("-w") < log.index("+r2")


async def test_readers_queued_behind_a_writer_go_in_together_before_the_next_writer() -> None:
    lock = PoolLock()
    gates = {name: asyncio.Event() for name in ("w1", "ra", "rb", "w2")}
    log: list[str] = []
    tasks = []
    for name in ("w1", "ra", "rb", "w2"):
        kind = "w" if name.startswith("w") else "r"
        tasks.append(asyncio.create_task(hold(lock, kind, log, name, gates[name])))
        await settle()
    assert log == ["+w1"]
    gates["w1"].set()
    await settle()
    assert log == ["+w1", "-w1", "+ra", "+rb"] and lock.readers == 2
    gates["ra"].set()
    await settle()
    assert "+w2" not in log  # rb still reads
    gates["rb"].set()
    gates["w2"].set()
    await asyncio.gather(*tasks)
    assert log[-2:] == ["+w2", "-w2"]


async def test_a_cancelled_waiting_writer_lets_the_readers_behind_it_in() -> None:
    lock = PoolLock()
    gate = asyncio.Event()
    log: list[str] = []
    r1 = asyncio.create_task(hold(lock, "r", log, "r1", gate))
    await settle()
    w = asyncio.create_task(hold(lock, "w", log, "w", gate))
    await settle()
    r2 = asyncio.create_task(hold(lock, "r", log, "r2", gate))
    await settle()
    assert log == ["+r1"]
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    await settle()
    assert log == ["+r1", "+r2"] and lock.waiting == 0
    gate.set()
    await asyncio.gather(r1, r2)
    assert lock.readers == 0 and not lock.writing


async def test_a_writer_cancelled_after_being_granted_gives_the_lock_back() -> None:
    lock = PoolLock()
    gate = asyncio.Event()
    log: list[str] = []
    r = asyncio.create_task(hold(lock, "r", log, "r", gate))
    await settle()
    w = asyncio.create_task(hold(lock, "w", log, "w", gate))
    await settle()
    gate.set()
    await asyncio.sleep(0)  # r leaves and grants w; cancel w before it runs
    assert lock.writing and "+w" not in log
    w.cancel()
    await asyncio.gather(r, w, return_exceptions=True)
    await settle()
    assert not lock.writing and lock.readers == 0
    async with lock.write():
        pass


async def test_an_error_inside_releases_the_lock() -> None:
    lock = PoolLock()
    with pytest.raises(RuntimeError):
        async with lock.write():
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        async with lock.read():
            raise RuntimeError("boom")
    assert not lock.writing and lock.readers == 0
    async with lock.write():
        assert lock.writing


async def test_many_mixed_waiters_never_overlap_a_writer() -> None:
    lock = PoolLock()
    inside = {"r": 0, "w": 0}
    violations: list[str] = []

    async def worker(kind: str, rounds: int) -> None:
        for _ in range(rounds):
            ctx = lock.read() if kind == "r" else lock.write()
            async with ctx:
                inside[kind] += 1
                if inside["w"] > 1 or (inside["w"] and inside["r"]):
                    violations.append(kind)
                await asyncio.sleep(0)
                inside[kind] -= 1
            await asyncio.sleep(0)

    await asyncio.gather(*(worker("r" if i % 3 else "w", 20) for i in range(12)))
    assert violations == [] and lock.readers == 0 and not lock.writing
