"""Learning runs on PostgreSQL: the contract of ``memory/learning_runs.py`` for many processes.

Theory of operation
-------------------
Tables ``learning_runs``, ``learning_run_steps`` and ``learning_positions``
(``memory/migrations/0005_learning_runs.sql``). Times of leases are the server's
``clock_timestamp()``, so processes on different machines agree on them.

1. Enqueue runs in one transaction holding an advisory lock on the thread
   (``pg_advisory_xact_lock(LRN, hashtext(tenant, role, thread))``), so two enqueues of one
   thread see each other's runs and the store's rule 2 holds across processes.
2. Claim is one ``UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) AND state =
   'queued'``: a claimer skips rows another is claiming, and the outer ``state`` test, which
   PostgreSQL re-checks on the newest row version, refuses a row claimed and committed since the
   statement's snapshot. A fresh ``claim_token`` fences the claim.
3. Steps, renewals, fails and releases are single statements that name ``claim_token``.
4. Finish is one transaction on one connection: the run row ``FOR UPDATE`` (claim checked),
   the position row created if missing and locked ``FOR UPDATE``, then ``apply(conn)``, the
   position and the run's end. Concurrent finishes of one thread queue on the position row; an
   exception anywhere rolls all of it back.

Connection failures and timeouts become ``MemoryUnavailable``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any, TypeVar

from memory.errors import MemoryUnavailable
from memory.learning_runs import (
    Apply,
    FinishOutcome,
    LearningRun,
    LostClaim,
    PositionMoved,
    RunState,
    RunStep,
    StepState,
    UnknownRun,
    new_run_id,
)
from storage.postgres import PooledCalls

T = TypeVar("T")

_LOCK_CLASS = 0x4C524E  # "LRN": the advisory lock namespace of learning runs
_RUN_COLUMNS = (
    "id, tenant, role_id, thread_id, user_id, up_to_seq, state, attempts, error_code,"
    " created_at, updated_at, claim_token"
)
_THREAD = "tenant = $1 AND role_id = $2 AND thread_id = $3"
_HOLDS = "id = $1 AND state = 'running' AND claim_token = $2"
_CLAIM = f"""
UPDATE learning_runs SET
    state = 'running', attempts = attempts + 1, claim_token = $1,
    lease_expires_at = clock_timestamp() + make_interval(secs => $2),
    updated_at = clock_timestamp()
WHERE state = 'queued' AND id = (
    SELECT id FROM learning_runs
    WHERE state = 'queued' AND NOT (tenant || chr(31) || role_id = ANY($3::text[]))
    ORDER BY created_at, id
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
RETURNING {_RUN_COLUMNS}
"""
_RECOVER = """
UPDATE learning_runs SET
    state = CASE WHEN attempts >= $1 THEN 'failed' ELSE 'queued' END,
    error_code = CASE WHEN attempts >= $1 THEN 'run_attempts_exhausted' ELSE error_code END,
    claim_token = NULL, lease_expires_at = NULL, updated_at = clock_timestamp()
WHERE state = 'running' AND lease_expires_at < clock_timestamp()
"""
_SAVE_STEP = f"""
INSERT INTO learning_run_steps (run_id, step, request_digest, response, attempts, state)
SELECT $1, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM learning_runs WHERE {_HOLDS})
ON CONFLICT (run_id, step) DO UPDATE SET
    request_digest = EXCLUDED.request_digest, response = EXCLUDED.response,
    attempts = EXCLUDED.attempts, state = EXCLUDED.state, updated_at = clock_timestamp()
"""


def _run(row: Any) -> LearningRun:
    return LearningRun(
        id=row["id"],
        tenant=row["tenant"],
        role_id=row["role_id"],
        thread_id=row["thread_id"],
        user=row["user_id"],
        up_to_seq=row["up_to_seq"],
        state=RunState(row["state"]),
        attempts=row["attempts"],
        error_code=row["error_code"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        claim_token=row["claim_token"],
    )


def _changed(status: str) -> bool:
    """Whether an asyncpg command status (``UPDATE 1``, ``INSERT 0 1``) touched a row."""
    return not status.endswith(" 0")


class PostgresLearningRunStore:
    """``LearningRunStore`` on an asyncpg pool whose database has the memory migrations.

    ``query_timeout`` bounds each statement, ``acquire_timeout`` the wait for a connection.
    ``apply`` in ``finish`` runs on the same connection and is bounded by its own statements.
    """

    def __init__(
        self, pool: Any, *, query_timeout: float = 5.0, acquire_timeout: float = 5.0
    ) -> None:
        self.pool = pool
        self.query_timeout = query_timeout
        self.acquire_timeout = acquire_timeout
        self._call = PooledCalls(
            pool,
            acquire_timeout=acquire_timeout,
            unavailable=MemoryUnavailable,
            what="learning runs",
        )

    async def enqueue(
        self, *, tenant: str, role_id: str, thread_id: str, user: str, up_to_seq: int
    ) -> LearningRun:
        t = self.query_timeout

        async def work(conn: Any) -> LearningRun:
            await conn.execute(
                "SELECT pg_advisory_xact_lock($1::int,"
                " hashtext($2 || chr(31) || $3 || chr(31) || $4))",
                _LOCK_CLASS, tenant, role_id, thread_id, timeout=t,
            )  # fmt: skip
            same = await conn.fetchrow(
                f"SELECT {_RUN_COLUMNS} FROM learning_runs WHERE {_THREAD}"
                " AND up_to_seq = $4 AND state <> 'failed' ORDER BY created_at LIMIT 1",
                tenant, role_id, thread_id, up_to_seq, timeout=t,
            )  # fmt: skip
            if same is not None:
                return _run(same)
            covering = await conn.fetchrow(
                f"SELECT {_RUN_COLUMNS} FROM learning_runs WHERE {_THREAD}"
                " AND up_to_seq >= $4 AND state IN ('queued', 'running', 'done')"
                " ORDER BY up_to_seq, created_at LIMIT 1",
                tenant, role_id, thread_id, up_to_seq, timeout=t,
            )  # fmt: skip
            if covering is not None:
                return _run(covering)
            await conn.execute(
                "UPDATE learning_runs SET state = 'superseded', updated_at = clock_timestamp()"
                f" WHERE {_THREAD} AND state = 'queued'",
                tenant, role_id, thread_id, timeout=t,
            )  # fmt: skip
            row = await conn.fetchrow(
                "INSERT INTO learning_runs"
                " (id, tenant, role_id, thread_id, user_id, up_to_seq, state)"
                f" VALUES ($1, $2, $3, $4, $5, $6, 'queued') RETURNING {_RUN_COLUMNS}",
                new_run_id(), tenant, role_id, thread_id, user, up_to_seq, timeout=t,
            )  # fmt: skip
            return _run(row)

        return await self._call(work, transaction=True)

    async def get(self, run_id: str) -> LearningRun:
        row = await self._call(
            lambda conn: conn.fetchrow(
                f"SELECT {_RUN_COLUMNS} FROM learning_runs WHERE id = $1",
                run_id,
                timeout=self.query_timeout,
            ),
            transaction=False,
        )
        if row is None:
            raise UnknownRun(run_id)
        return _run(row)

    async def claim(
        self, *, exclude_roles: Collection[tuple[str, str]], lease: float
    ) -> LearningRun | None:
        excluded = [f"{tenant}\x1f{role}" for tenant, role in exclude_roles]
        for _ in range(3):  # a row claimed since the snapshot is refused (rule 2); look again
            row = await self._call(
                lambda conn: conn.fetchrow(
                    _CLAIM, uuid.uuid4().hex, float(lease), excluded, timeout=self.query_timeout
                ),
                transaction=False,
            )
            if row is not None:
                return _run(row)
            more = await self._call(
                lambda conn: conn.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM learning_runs WHERE state = 'queued'"
                    " AND NOT (tenant || chr(31) || role_id = ANY($1::text[])))",
                    excluded,
                    timeout=self.query_timeout,
                ),
                transaction=False,
            )
            if not more:
                return None
        return None

    async def renew(self, run: LearningRun, *, lease: float) -> bool:
        status = await self._call(
            lambda conn: conn.execute(
                "UPDATE learning_runs SET lease_expires_at ="
                f" clock_timestamp() + make_interval(secs => $3) WHERE {_HOLDS}",
                run.id,
                run.claim_token,
                float(lease),
                timeout=self.query_timeout,
            ),  # fmt: skip
            transaction=False,
        )
        return _changed(status)

    async def recover(self, *, max_attempts: int) -> int:
        status = await self._call(
            lambda conn: conn.execute(_RECOVER, max_attempts, timeout=self.query_timeout),
            transaction=False,
        )
        return int(status.rsplit(" ", 1)[1])

    async def release(self, run: LearningRun) -> None:
        await self._call(
            lambda conn: conn.execute(
                "UPDATE learning_runs SET state = 'queued', claim_token = NULL,"
                f" lease_expires_at = NULL, updated_at = clock_timestamp() WHERE {_HOLDS}",
                run.id,
                run.claim_token,
                timeout=self.query_timeout,
            ),  # fmt: skip
            transaction=False,
        )

    async def position(self, tenant: str, role_id: str, thread_id: str) -> int:
        value = await self._call(
            lambda conn: conn.fetchval(
                f"SELECT learned_up_to_seq FROM learning_positions WHERE {_THREAD}",
                tenant,
                role_id,
                thread_id,
                timeout=self.query_timeout,
            ),  # fmt: skip
            transaction=False,
        )
        return 0 if value is None else int(value)

    async def steps(self, run_id: str) -> dict[int, RunStep]:
        rows = await self._call(
            lambda conn: conn.fetch(
                "SELECT step, request_digest, response, attempts, state"
                " FROM learning_run_steps WHERE run_id = $1",
                run_id,
                timeout=self.query_timeout,
            ),
            transaction=False,
        )
        return {
            r["step"]: RunStep(
                run_id=run_id,
                step=r["step"],
                request_digest=r["request_digest"],
                response=None if r["response"] is None else bytes(r["response"]),
                attempts=r["attempts"],
                state=StepState(r["state"]),
            )
            for r in rows
        }

    async def save_step(self, run: LearningRun, step: RunStep) -> None:
        status = await self._call(
            lambda conn: conn.execute(
                _SAVE_STEP,
                run.id,
                run.claim_token,
                step.step,
                step.request_digest,
                step.response,
                step.attempts,
                step.state.value,
                timeout=self.query_timeout,
            ),  # fmt: skip
            transaction=False,
        )
        if not _changed(status):
            raise LostClaim(run.id)

    async def fail(self, run: LearningRun, code: str) -> None:
        status = await self._call(
            lambda conn: conn.execute(
                "UPDATE learning_runs SET state = 'failed', error_code = $3, claim_token = NULL,"
                f" lease_expires_at = NULL, updated_at = clock_timestamp() WHERE {_HOLDS}",
                run.id,
                run.claim_token,
                code,
                timeout=self.query_timeout,
            ),  # fmt: skip
            transaction=False,
        )
        if not _changed(status):
            raise LostClaim(run.id)

    async def finish(
        self, run: LearningRun, *, expected_position: int, apply: Apply
    ) -> FinishOutcome:
        t = self.query_timeout
        thread = (run.tenant, run.role_id, run.thread_id)

        async def done(conn: Any) -> None:
            await conn.execute(
                "UPDATE learning_runs SET state = 'done', claim_token = NULL,"
                " lease_expires_at = NULL, updated_at = clock_timestamp() WHERE id = $1",
                run.id,
                timeout=t,
            )

        async def work(conn: Any) -> FinishOutcome:
            held = await conn.fetchval(
                f"SELECT true FROM learning_runs WHERE {_HOLDS} FOR UPDATE",
                run.id, run.claim_token, timeout=t,
            )  # fmt: skip
            if not held:
                raise LostClaim(run.id)
            await conn.execute(
                "INSERT INTO learning_positions (tenant, role_id, thread_id, learned_up_to_seq)"
                " VALUES ($1, $2, $3, 0) ON CONFLICT DO NOTHING",
                *thread, timeout=t,
            )  # fmt: skip
            position = await conn.fetchval(
                f"SELECT learned_up_to_seq FROM learning_positions WHERE {_THREAD} FOR UPDATE",
                *thread, timeout=t,
            )  # fmt: skip
            if position >= run.up_to_seq:
                await done(conn)
                return FinishOutcome.COVERED
            if position != expected_position:
                raise PositionMoved(run.id)
            await apply(conn)
            await conn.execute(
                "UPDATE learning_positions SET learned_up_to_seq = $4,"
                f" updated_at = clock_timestamp() WHERE {_THREAD}",
                *thread, run.up_to_seq, timeout=t,
            )  # fmt: skip
            await done(conn)
            return FinishOutcome.APPLIED

        return await self._call(work, transaction=True)
