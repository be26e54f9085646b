"""What is known of each recording (SPEC REC-2): its session, thread and owner, its length and
size, the key its audio is sealed under, how long it is kept and whether it is protected. One
contract, two stores (in memory; PostgreSQL, ``records/migrations``). Every read names the
tenant; an owner's reads name the owner too."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from memory.crypto import Sealed
from storage.postgres import PooledCalls


class RecordingsUnavailable(Exception):
    code = "recordings_unavailable"


class RecordingBeingDeleted(Exception):
    """A hold cannot be put on a recording whose deletion has begun (its audio may be gone)."""

    code = "recording_being_deleted"


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
    deleting_since: datetime | None = None
    """Its deletion has begun (``records.expiry``): no hold any more, audio perhaps gone."""
    deletion_reason: str | None = None
    """``requested``: its owner asked for it to go (``schedule_deletion``); None: it goes when
    its retention runs out."""

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


@dataclass(frozen=True, slots=True)
class DeletionReceipt:
    """What is left of a recording deleted for good (SPEC REC-4): never its audio."""

    tenant: str
    recording_id: str
    owner: str
    session_id: str
    thread_id: str
    duration_ms: int
    size_bytes: int
    reason: str
    deleted_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "recording_id": self.recording_id,
            "session_id": self.session_id,
            "thread_id": self.thread_id,
            "duration_ms": self.duration_ms,
            "size_bytes": self.size_bytes,
            "reason": self.reason,
            "deleted_at": self.deleted_at.isoformat(),
        }


def retained(recording: Recording, days: int | None) -> datetime | None:
    """Until when a recording is kept under a retention of ``days`` (None: until deleted)."""
    return None if days is None else recording.started_at + timedelta(days=days)


def receipt_for(recording: Recording, reason: str, at: datetime) -> DeletionReceipt:
    r = recording
    return DeletionReceipt(
        r.tenant, r.id, r.owner, r.session_id, r.thread_id, r.duration_ms, r.size_bytes, reason, at
    )


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
        timeline: Sealed | None = None,
    ) -> None:
        """How far the recording got (while it runs, and once when it ends), with its
        timeline so far (``records.timeline``)."""
        ...

    async def timeline(self, tenant: str, recording_id: str) -> Sealed | None:
        """The recording's sealed timeline (None: none kept, or no such recording)."""
        ...

    async def get(self, tenant: str, recording_id: str) -> Recording | None: ...

    async def of_thread(self, tenant: str, owner: str | None, thread_id: str) -> list[Recording]:
        """The thread's recordings, oldest first; ``owner`` None: any owner's (an admin)."""
        ...

    async def set_protected(
        self, tenant: str, recording_id: str, protected: bool
    ) -> Recording | None:
        """A legal hold put on or lifted (admins); None: no such recording;
        ``RecordingBeingDeleted`` for a hold on one whose deletion has begun."""
        ...

    async def claim_expired(self, now: datetime, limit: int) -> list[Recording]:
        """Recordings past ``retain_until`` and not protected, the longest expired first,
        marked as being deleted (``deleting_since``; those marked before come again)."""
        ...

    async def remove(
        self, tenant: str, recording_id: str, *, reason: str, at: datetime
    ) -> DeletionReceipt | None:
        """A claimed row deleted and its receipt written, in one step; None when it is gone
        already."""
        ...

    async def receipt(self, tenant: str, recording_id: str) -> DeletionReceipt | None: ...

    async def retention_days(self, tenant: str) -> int | None:
        """The tenant's own retention period (None: the deployment's)."""
        ...

    async def set_retention_days(
        self, tenant: str, days: int | None, *, effective: int | None, at: datetime
    ) -> int:
        """The tenant's period set (None: back to the deployment's), and every recording of
        the tenant not already being or scheduled to be deleted kept ``effective`` days from
        its start (None: until deleted). Returns how many recordings that moved."""
        ...

    async def schedule_deletion(
        self, tenant: str, recording_id: str, *, at: datetime, reason: str
    ) -> bool:
        """Have the expiry delete it from ``at`` on (its ``retain_until`` brought forward);
        False for a protected recording or none."""
        ...


class InMemoryRecordingIndex:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], Recording] = {}
        self._receipts: dict[tuple[str, str], DeletionReceipt] = {}
        self._timelines: dict[tuple[str, str], Sealed] = {}
        self._retention: dict[str, int] = {}

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
        timeline: Sealed | None = None,
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
            if timeline is not None:
                self._timelines[(tenant, recording_id)] = timeline

    async def timeline(self, tenant: str, recording_id: str) -> Sealed | None:
        if (tenant, recording_id) not in self._rows:
            return None
        return self._timelines.get((tenant, recording_id))

    async def get(self, tenant: str, recording_id: str) -> Recording | None:
        return self._rows.get((tenant, recording_id))

    async def of_thread(self, tenant: str, owner: str | None, thread_id: str) -> list[Recording]:
        rows = [
            r
            for (t, _), r in self._rows.items()
            if t == tenant and r.thread_id == thread_id and owner in (None, r.owner)
        ]
        return sorted(rows, key=lambda r: r.started_at)

    async def set_protected(
        self, tenant: str, recording_id: str, protected: bool
    ) -> Recording | None:
        row = self._rows.get((tenant, recording_id))
        if row is None:
            return None
        if protected and row.deleting_since is not None:
            raise RecordingBeingDeleted(recording_id)
        row = self._rows[(tenant, recording_id)] = dataclasses.replace(row, protected=protected)
        return row

    async def claim_expired(self, now: datetime, limit: int) -> list[Recording]:
        due = [
            r
            for r in self._rows.values()
            if r.retain_until is not None and r.retain_until <= now and not r.protected
        ]
        claimed = []
        for r in sorted(due, key=lambda r: r.retain_until or now)[:limit]:
            claimed.append(dataclasses.replace(r, deleting_since=r.deleting_since or now))
            self._rows[(r.tenant, r.id)] = claimed[-1]
        return claimed

    async def remove(
        self, tenant: str, recording_id: str, *, reason: str, at: datetime
    ) -> DeletionReceipt | None:
        row = self._rows.get((tenant, recording_id))
        if row is None or row.deleting_since is None:
            return None
        del self._rows[(tenant, recording_id)]
        self._timelines.pop((tenant, recording_id), None)
        receipt = self._receipts[(tenant, recording_id)] = receipt_for(row, reason, at)
        return receipt

    async def receipt(self, tenant: str, recording_id: str) -> DeletionReceipt | None:
        return self._receipts.get((tenant, recording_id))

    async def retention_days(self, tenant: str) -> int | None:
        return self._retention.get(tenant)

    async def set_retention_days(
        self, tenant: str, days: int | None, *, effective: int | None, at: datetime
    ) -> int:
        if days is None:
            self._retention.pop(tenant, None)
        else:
            self._retention[tenant] = days
        moved = 0
        for key, row in list(self._rows.items()):
            if row.tenant == tenant and row.deleting_since is None and row.deletion_reason is None:
                self._rows[key] = dataclasses.replace(row, retain_until=retained(row, effective))
                moved += 1
        return moved

    async def schedule_deletion(
        self, tenant: str, recording_id: str, *, at: datetime, reason: str
    ) -> bool:
        row = self._rows.get((tenant, recording_id))
        if row is None or row.protected:
            return False
        until = at if row.retain_until is None else min(row.retain_until, at)
        self._rows[(tenant, recording_id)] = dataclasses.replace(
            row, retain_until=until, deletion_reason=reason
        )
        return True


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
        timeline: Sealed | None = None,
    ) -> None:
        await self._call(
            lambda conn: conn.execute(
                """UPDATE recordings SET duration_ms = $3, size_bytes = $4, key_id = $5,
                       ended_at = COALESCE($6, ended_at),
                       timeline_key_id = COALESCE($7, timeline_key_id),
                       timeline = COALESCE($8, timeline)
                   WHERE tenant = $1 AND recording_id = $2""",
                tenant,
                recording_id,
                duration_ms,
                size_bytes,
                key_id,
                ended_at,
                None if timeline is None else timeline.key_id,
                None if timeline is None else timeline.blob,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )

    async def timeline(self, tenant: str, recording_id: str) -> Sealed | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                """SELECT timeline_key_id, timeline FROM recordings
                   WHERE tenant = $1 AND recording_id = $2 AND timeline IS NOT NULL""",
                tenant,
                recording_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return None if row is None else Sealed(row["timeline_key_id"], bytes(row["timeline"]))

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

    async def set_protected(
        self, tenant: str, recording_id: str, protected: bool
    ) -> Recording | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                """UPDATE recordings SET protected = $3 WHERE tenant = $1 AND recording_id = $2
                       AND (NOT $3 OR deleting_since IS NULL)
                   RETURNING *""",
                tenant,
                recording_id,
                protected,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        if row is None:
            if await self.get(tenant, recording_id) is not None:
                raise RecordingBeingDeleted(recording_id)
            return None
        return _recording(row)

    async def claim_expired(self, now: datetime, limit: int) -> list[Recording]:
        rows = await self._call(
            lambda conn: conn.fetch(
                """UPDATE recordings SET deleting_since = COALESCE(deleting_since, $1)
                   WHERE (tenant, recording_id) IN (
                       SELECT tenant, recording_id FROM recordings
                       WHERE retain_until <= $1 AND NOT protected
                       ORDER BY retain_until LIMIT $2 FOR UPDATE)
                   RETURNING *""",
                now,
                limit,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return sorted((_recording(row) for row in rows), key=lambda r: r.retain_until or now)

    async def remove(
        self, tenant: str, recording_id: str, *, reason: str, at: datetime
    ) -> DeletionReceipt | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                """WITH gone AS (
                       DELETE FROM recordings
                       WHERE tenant = $1 AND recording_id = $2 AND deleting_since IS NOT NULL
                       RETURNING *)
                   INSERT INTO recording_deletions (tenant, recording_id, user_id, session_id,
                       thread_id, duration_ms, size_bytes, reason, deleted_at)
                   SELECT tenant, recording_id, user_id, session_id, thread_id, duration_ms,
                       size_bytes, $3, $4 FROM gone
                   RETURNING *""",
                tenant,
                recording_id,
                reason,
                at,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return None if row is None else _receipt(row)

    async def receipt(self, tenant: str, recording_id: str) -> DeletionReceipt | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                "SELECT * FROM recording_deletions WHERE tenant = $1 AND recording_id = $2",
                tenant,
                recording_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return None if row is None else _receipt(row)

    async def retention_days(self, tenant: str) -> int | None:
        days = await self._call(
            lambda conn: conn.fetchval(
                "SELECT retention_days FROM recording_policies WHERE tenant = $1",
                tenant,
                timeout=_TIMEOUT,
            )  # fmt: skip
        )
        return None if days is None else int(days)

    async def set_retention_days(
        self, tenant: str, days: int | None, *, effective: int | None, at: datetime
    ) -> int:
        async def run(conn: Any) -> int:
            await conn.execute(
                """INSERT INTO recording_policies (tenant, retention_days, updated_at)
                   VALUES ($1, $2, $3)
                   ON CONFLICT (tenant) DO UPDATE
                   SET retention_days = EXCLUDED.retention_days,
                       updated_at = EXCLUDED.updated_at""",
                tenant, days, at, timeout=_TIMEOUT,
            )  # fmt: skip
            status = await conn.execute(
                """UPDATE recordings SET retain_until =
                       CASE WHEN $2::integer IS NULL THEN NULL
                            ELSE started_at + make_interval(days => $2::integer) END
                   WHERE tenant = $1 AND deleting_since IS NULL AND deletion_reason IS NULL""",
                tenant, effective, timeout=_TIMEOUT,
            )  # fmt: skip
            return int(str(status).rsplit(" ", 1)[-1])

        return await self._call(run, transaction=True)

    async def schedule_deletion(
        self, tenant: str, recording_id: str, *, at: datetime, reason: str
    ) -> bool:
        return await _schedule(self._call, tenant, recording_id, at, reason)


async def _schedule(
    call: PooledCalls, tenant: str, recording_id: str, at: datetime, reason: str
) -> bool:
    status = await call(
        lambda conn: conn.execute(
            """UPDATE recordings SET retain_until = LEAST(COALESCE(retain_until, $3), $3),
                   deletion_reason = $4
               WHERE tenant = $1 AND recording_id = $2 AND NOT protected""",
            tenant,
            recording_id,
            at,
            reason,
            timeout=_TIMEOUT,
        )  # fmt: skip
    )
    return str(status).endswith(" 1")


def _receipt(row: Any) -> DeletionReceipt:
    return DeletionReceipt(
        row["tenant"], row["recording_id"], row["user_id"], row["session_id"], row["thread_id"],
        row["duration_ms"], row["size_bytes"], row["reason"], row["deleted_at"],
    )  # fmt: skip


def _recording(row: Any) -> Recording:
    return Recording(
        row["tenant"], row["recording_id"], row["user_id"], row["session_id"], row["thread_id"],
        row["role_id"], row["store"], row["key_id"], row["started_at"], row["ended_at"],
        row["duration_ms"], row["size_bytes"], row["retain_until"], row["protected"],
        row["deleting_since"], row["deletion_reason"],
    )  # fmt: skip
