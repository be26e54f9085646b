"""runtime.loop: the serving process's collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runtime.loop import GC_OLDER_THRESHOLDS, GC_YOUNG_THRESHOLD, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
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
