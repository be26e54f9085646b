"""runtime.loop: the serving process's collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runtime.loop import (
    GC_OLDER_THRESHOLDS,
    GC_YOUNG_THRESHOLD,
    FullCollectionDeadline,
    tune_gc,
    untune_gc,
)


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        untune_gc()
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_tune_gc_sets_the_serving_thresholds_and_freezes_start_up_objects() -> None:
    marker = {"alive": "at start-up"}
    tune_gc()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)
    assert GC_YOUNG_THRESHOLD > 700  # larger than CPython's default young generation
    assert gc.get_freeze_count() > 0
    # Frozen objects are out of every scan; objects made afterwards are collected as usual.
    assert not any(o is marker for o in gc.get_objects())
    later: list[object] = []
    later.append(later)
    assert any(o is later for o in gc.get_objects())


def test_the_oldest_generation_is_collected_next_once_its_deadline_passed() -> None:
    deadline = FullCollectionDeadline(now=100.0, every_s=30.0)
    usual = GC_OLDER_THRESHOLDS[-1]
    assert deadline.oldest_threshold(0, now=110.0) == usual
    assert deadline.oldest_threshold(1, now=129.9) == usual
    assert deadline.oldest_threshold(0, now=130.0) == 0  # overdue: the next one is full
    assert deadline.oldest_threshold(1, now=131.0) == 0
    assert deadline.oldest_threshold(2, now=131.5) == usual  # done: a new deadline
    assert deadline.oldest_threshold(0, now=161.0) == usual
    assert deadline.oldest_threshold(0, now=161.5) == 0


@pytest.mark.usefixtures("restore_gc")
def test_a_tuned_process_collects_its_cycles_within_the_deadline() -> None:
    """With the deadline passed, the next collection the thresholds trigger is a full one."""
    tune_gc()
    import runtime.loop as loop

    assert loop._deadline is not None
    loop._deadline.last_full -= loop._deadline.every_s  # the deadline passed
    full = gc.get_stats()[-1]["collections"]
    gc.collect(0)  # any collection: the threshold of the oldest generation drops to 0
    assert gc.get_threshold()[-1] == 0
    kept: list[object] = []  # survivors reach the oldest generation, as a server's do
    for _ in range(1_000_000):
        if gc.get_stats()[-1]["collections"] > full:
            break
        cycle: list[object] = []
        cycle.append(cycle)
        kept.append(cycle)
    else:
        raise AssertionError("no full collection came")
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)
