"""A scripted learning procedure and memory model for the learning-run tests (and the worker).

The journal is synthetic: a thread's items are the seqs ``1 … up_to_seq``. ``learn`` makes two
model steps (``extract`` then ``consolidate``) whose requests depend only on the evidence, so a
recovered run sends the same requests. ``apply`` records each evidence seq: in PostgreSQL as rows
of ``learning_test_applied`` written on the finishing transaction, in memory in ``applied``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from memory.learning_runs import LearningRun

APPLIED_TABLE = """
CREATE TABLE IF NOT EXISTS learning_test_applied (run_id text NOT NULL, seq bigint NOT NULL)
"""


class SyntheticProcedure:
    def __init__(self) -> None:
        self.applied: list[tuple[str, int]] = []

    async def read_evidence(self, run: LearningRun, after_seq: int) -> Sequence[int]:
        return list(range(after_seq + 1, run.up_to_seq + 1))

    async def learn(
        self, run: LearningRun, evidence: Sequence[int], step: Callable[[str], Awaitable[str]]
    ) -> str:
        facts = await step(f"extract {run.thread_id} {list(evidence)}")
        return await step(f"consolidate {run.thread_id} {facts}")

    async def apply(self, tx: Any, run: LearningRun, evidence: Sequence[int], result: str) -> None:
        if hasattr(tx, "executemany"):  # an asyncpg connection inside the finish transaction
            await tx.executemany(
                "INSERT INTO learning_test_applied (run_id, seq) VALUES ($1, $2)",
                [(run.id, seq) for seq in evidence],
            )
        self.applied.extend((run.id, seq) for seq in evidence)


class ScriptedModel:
    """Answers at once unless told to block; counts calls by request kind."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.block: Callable[[str], bool] = lambda request: False
        self.release = asyncio.Event()
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: str) -> str:
        self.calls.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.block(request):
                await self.release.wait()
            return "facts of " + request.split(" ", 1)[1]
        finally:
            self.in_flight -= 1

    def count(self, kind: str) -> int:
        return sum(1 for c in self.calls if c.startswith(kind + " "))
