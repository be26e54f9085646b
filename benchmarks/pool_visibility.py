"""The role pool's visibility read (SPEC RM-2, issue 18): ``visible_ids`` over a large pool.

``python -m benchmarks.pool_visibility`` prints one JSON object::

    {"visible_ids_ms": {"10000": {"p50", "p99"}, "1000": {"p50", "p99"}}, "details": {…}}

- Data: one role's pool, one tenant, every entry ``for:role``: 40 % facts (one thread source
  each, with its access record), then observations in three levels (30 %, 20 %, 10 %), each
  citing three entries below it — one of the level just below, so chains are three deep.
- ``visible_ids_ms``: ``visible_ids(reader, pool)`` for a user of the role who was present for
  every source, on the same pool mapping each time (what a store that keeps its pool between
  reads does). Target at 10,000 entries: p50 ≤ 5 ms.
- ``details.partial_reader_ms``: the same for a user missing from the access records of one
  fact in ten, so part of the pool — and what depends on it — is hidden from them.
- ``details.cold_ms``: a pool mapping seen for the first time (its ``PoolIndex`` built in the
  call); ``details.index_build_ms``: building ``PoolIndex`` alone.

Pure computation: no store, no database, no content.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from benchmarks.common import emit, p50_p99
from memory import pool as pool_module
from memory.pool import (
    EntryMeta,
    EntrySource,
    Reader,
    ThreadAccess,
    ThreadSource,
    visible_ids,
)

NOW = datetime(2026, 5, 1, tzinfo=UTC)
ROLE = "role-1"
TAGS = frozenset({"for:role", "tenant:t1", "from:u0", "topic-travel"})
USERS = frozenset({"u0", "u1", "u2", "u3"})
FULL_READER = Reader("u0", "t1", frozenset({ROLE}))
PARTIAL_READER = Reader("u3", "t1", frozenset({ROLE}))
"""Missing from the access records of every tenth fact."""
LEVEL_SHARES = (4, 3, 2, 1)
"""Tenths of the pool: facts, then observation levels 1, 2 and 3."""


def build_pool(entries: int, *, seed: int = 18) -> dict[str, EntryMeta]:
    rng = random.Random(seed)
    pool: dict[str, EntryMeta] = {}
    levels: list[list[str]] = [[]]
    for n in range(entries * LEVEL_SHARES[0] // 10):
        eid = f"f{n}"
        source = ThreadSource(f"th{n % 50}", f"item-{n}")
        users = USERS - {"u3"} if n % 10 == 0 else USERS
        pool[eid] = EntryMeta(
            id=eid, role_id=ROLE, layer="fact", tags=TAGS, sources=(source,), created_at=NOW,
            access=(ThreadAccess(source.thread_id, source.item_id, users),),
        )  # fmt: skip
        levels[0].append(eid)
    below = list(levels[0])
    for level, share in enumerate(LEVEL_SHARES[1:], start=1):
        made: list[str] = []
        for n in range(entries * share // 10):
            eid = f"o{level}.{n}"
            deps = [rng.choice(levels[level - 1])]
            while len(deps) < 3:
                dep = rng.choice(below)
                if dep not in deps:
                    deps.append(dep)
            pool[eid] = EntryMeta(
                id=eid, role_id=ROLE, layer="observation", tags=TAGS,
                sources=tuple(EntrySource(d) for d in deps), created_at=NOW, confidence=0.8,
            )  # fmt: skip
            made.append(eid)
        levels.append(made)
        below += made
    return pool


def timed_ms(call: Callable[[], object], samples: int) -> list[float]:
    call()  # warm up (and, for a kept pool, build its index)
    gc.collect()
    values = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        call()
        values.append((time.perf_counter_ns() - start) / 1e6)
    return values


def measure(entries: int, samples: int) -> dict[str, Any]:
    pool = build_pool(entries)
    shown = visible_ids(FULL_READER, pool)
    partial = visible_ids(PARTIAL_READER, pool)
    result: dict[str, Any] = {
        "visible_ids_ms": p50_p99(timed_ms(lambda: visible_ids(FULL_READER, pool), samples)),
        "partial_reader_ms": p50_p99(timed_ms(lambda: visible_ids(PARTIAL_READER, pool), samples)),
        "visible": len(shown),
        "visible_partial": len(partial),
    }
    index = getattr(pool_module, "PoolIndex", None)
    if index is not None:
        cold_samples = max(samples // 10, 5)
        result["index_build_ms"] = p50_p99(timed_ms(lambda: index(pool), cold_samples))
        result["cold_ms"] = p50_p99(
            timed_ms(lambda: visible_ids(FULL_READER, index(pool)), cold_samples)
        )
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = (10_000, 1_000)
    measured = {size: measure(size, args.samples) for size in sizes}
    return {
        "visible_ids_ms": {str(size): m.pop("visible_ids_ms") for size, m in measured.items()},
        "details": {
            "levels": len(LEVEL_SHARES) - 1,
            "sources_per_observation": 3,
            "samples": args.samples,
            **{str(size): m for size, m in measured.items()},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="reads per pool size")
    emit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
