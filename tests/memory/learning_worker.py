"""A learner process for the SIGKILL test: ``python -m tests.memory.learning_worker URL MODE``.

Every model call is recorded in ``learning_test_model_calls`` (pid, request), committed at once.

- ``block``: enqueue a run of thread ``th`` up to seq 3 and run it; the model answers the first
  step and blocks forever on the second, after printing ``blocked`` (step 1 is stored by then).
- ``finish``: recover the killed process's run once its lease ran out, run it, print ``done``.
"""

from __future__ import annotations

import asyncio
import os
import sys

import asyncpg

from memory.learner import Learner
from memory.postgres_learning_runs import PostgresLearningRunStore
from tests.memory.learning_fakes import SyntheticProcedure

LEASE = 1.0


async def main(url: str, mode: str) -> None:
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    try:

        async def model(request: str) -> str:
            await pool.execute(
                "INSERT INTO learning_test_model_calls (pid, request) VALUES ($1, $2)",
                os.getpid(),
                request,
            )
            if mode == "block" and request.startswith("consolidate"):
                print("blocked", flush=True)
                await asyncio.Event().wait()
            return "facts of " + request.split(" ", 1)[1]

        store = PostgresLearningRunStore(pool)
        learner: Learner[int, str] = Learner(store, SyntheticProcedure(), model, lease=LEASE)
        if mode == "block":
            await learner.enqueue("t", "r", "th", "u", 3)
            await learner.drain()
            return
        for _ in range(200):  # the killed process's lease runs out within LEASE seconds
            if await learner.recover():
                break
            await asyncio.sleep(0.1)
        else:
            raise SystemExit("nothing to recover")
        await learner.drain()
        print("done", flush=True)
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
