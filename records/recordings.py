"""What is known of each recording (SPEC REC-2): its session, thread and owner, its length and
size, the key its audio is sealed under, how long it is kept and whether it is protected. One
contract, two stores (in memory; PostgreSQL, ``records/migrations``). Every read names the
tenant; an owner's reads name the owner too."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from storage.postgres import PooledCalls


class RecordingsUnavailable(Exception):
    code = "recordings_unavailable"


@dataclass(frozen=True, slots=True)
class Recording:
    tenant: str
    id: str
    owner: str
    session_id: str
    thread_id: str
    role_id: str
    store: str
    key_id: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_ms: int = 0
    size_bytes: int = 0
    retain_until: datetime | None = None
    protected: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "thread_id": self.thread_id,
            "role_id": self.role_id,
            "started_at": self.started_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "duration_ms": self.duration_ms,
            "size_bytes": self.size_bytes,
            "retain_until": None if self.retain_until is None else self.retain_until.isoformat(),
            "protected": self.protected,
        }


class RecordingIndex(Protocol):
    async def add(self, recording: Recording) -> None: ...

    async def progress(
        self,
        tenant: str,
        recording_id: str,
        *,
        duration_ms: int,
        size_bytes: int,
        key_id: str,
        ended_at: datetime | None = None,
    ) -> None:
        """How far the recording got (while it runs, and once when it ends)."""
        ...

    async def get(self, tenant: str, recording_id: str) -> Recording | None: ...

    async def of_thread(self, tenant: str, owner: str | None, thread_id: str) -> list[Recording]:
        """The thread's recordings, oldest first; ``owner`` None: any owner's (an admin)."""
        ...


class InMemoryRecordingIndex:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], Recording] = {}

    async def add(self, recording: Recording) -> None:
        self._rows[(recording.tenant, recording.id)] = recording

    async def progress(
        self,
        tenant: str,
        recording_id: str,
        *,
        duration_ms: int,
        size_bytes: int,
        key_id: str,
        ended_at: datetime | None = None,
    ) -> None:
        row = self._rows.get((tenant, recording_id))
        if row is not None:
            self._rows[(tenant, recording_id)] = dataclasses.replace(
                row,
                duration_ms=duration_ms,
                size_bytes=size_bytes,
                key_id=key_id,
                ended_at=ended_at or row.ended_at,
            )

    async def get(self, tenant: str, recording_id: str) -> Recording | None:
        return self._rows.get((tenant, recording_id))

    async def of_thread(self, tenant: str, owner: str | None, thread_id: str) -> list[Recording]:
        rows = [
            r
            for (t, _), r in self._rows.items()
            if t == tenant and r.thread_id == thread_id and owner in (None, r.owner)
        ]
        return sorted(rows, key=lambda r: r.started_at)


_TIMEOUT = 10.0


class PostgresRecordingIndex:
    def __init__(self, pool: Any) -> None:
        self._call = PooledCalls(
            pool, acquire_timeout=_TIMEOUT, unavailable=RecordingsUnavailable, what="recordings"
        )

    async def add(self, recording: Recording) -> None:
        r = recording
        await self._call(
            lambda conn: conn.execute(
                """INSERT INTO recordings (tenant, recording_id, user_id, session_id, thread_id,
                       role_id, store, key_id, started_at, ended_at, duration_ms, size_bytes,
                       retain_until, protected)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)""",
                r.tenant,
                r.id,
                r.owner,
                r.session_id,
                r.thread_id,
                r.role_id,
                r.store,
                r.key_id,
                r.started_at,
                r.ended_at,
                r.duration_ms,
                r.size_bytes,
                r.retain_until,
                r.protected,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )

    async def progress(
        self,
        tenant: str,
        recording_id: str,
        *,
        duration_ms: int,
        size_bytes: int,
        key_id: str,
        ended_at: datetime | None = None,
    ) -> None:
        await self._call(
            lambda conn: conn.execute(
                """UPDATE recordings SET duration_ms = $3, size_bytes = $4, key_id = $5,
                       ended_at = COALESCE($6, ended_at)
                   WHERE tenant = $1 AND recording_id = $2""",
                tenant,
                recording_id,
                duration_ms,
                size_bytes,
                key_id,
                ended_at,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )

    async def get(self, tenant: str, recording_id: str) -> Recording | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                "SELECT * FROM recordings WHERE tenant = $1 AND recording_id = $2",
                tenant,
                recording_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return None if row is None else _recording(row)

    async def of_thread(self, tenant: str, owner: str | None, thread_id: str) -> list[Recording]:
        rows = await self._call(
            lambda conn: conn.fetch(
                """SELECT * FROM recordings WHERE tenant = $1 AND thread_id = $3
                       AND ($2::text IS NULL OR user_id = $2)
                   ORDER BY started_at""",
                tenant,
                owner,
                thread_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return [_recording(row) for row in rows]


def _recording(row: Any) -> Recording:
    return Recording(
        row["tenant"], row["recording_id"], row["user_id"], row["session_id"], row["thread_id"],
        row["role_id"], row["store"], row["key_id"], row["started_at"], row["ended_at"],
        row["duration_ms"], row["size_bytes"], row["retain_until"], row["protected"],
    )  # fmt: skip
