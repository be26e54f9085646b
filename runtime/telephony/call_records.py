"""Phone calls in the records (SPEC TEL-5): what the history page lists.

Rules
-----
1. A call's record is written when its session opens and again when it ends (``keep``):
   provider, the caller's and called numbers, role, thread, start, end, who ended it and the
   transfer target. A failed write is logged and never ends the call.
2. Scoped: a record belongs to the line's owner (the user calls run as); members list their
   own, admins their tenant's. Reads always name the tenant.
3. At rest the numbers and the transfer target are sealed with the memory keyring (AES-GCM;
   the tenant and call id are the context, so a row copied to another call does not open);
   logs see ``tel_<hash>`` only.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

import asyncpg

from memory.crypto import Keyring, Sealed

if TYPE_CHECKING:
    from accounts.model import Principal
    from runtime.services import Services
    from runtime.telephony.calls import PhoneCall

log = logging.getLogger(__name__)

Provider = Literal["twilio", "sip"]
MAX_LISTED = 200
_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class CallRecord:
    tenant: str
    user: str
    call_id: str
    provider: str
    caller: str
    called: str
    role_id: str
    thread_id: str | None
    started_at: datetime
    ended_at: datetime | None = None
    ended_by: str | None = None
    transfer_target: str | None = None

    @property
    def id(self) -> str:
        """The record's id in the API: the provider's call id (a SIP Call-ID may hold any
        character) digested."""
        return record_id(self.call_id)

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return round((self.ended_at - self.started_at).total_seconds(), 1)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "call_id": self.call_id, "provider": self.provider,
            "caller": self.caller,
            "called": self.called, "role_id": self.role_id, "thread_id": self.thread_id,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "duration_s": self.duration_s, "ended_by": self.ended_by,
            "transfer_target": self.transfer_target, "user": self.user,
        }  # fmt: skip


class CallRecordStore(Protocol):
    async def save(self, record: CallRecord) -> None:
        """Insert or replace the record of ``(tenant, call_id)``."""
        ...

    async def list(
        self, tenant: str, user: str | None, limit: int = MAX_LISTED
    ) -> list[CallRecord]:
        """Newest first; ``user`` None: the tenant's (rule 2)."""
        ...

    async def get(self, tenant: str, record_id: str) -> CallRecord | None:
        """By ``CallRecord.id``."""
        ...


class InMemoryCallRecords:
    def __init__(self) -> None:
        self._records: dict[tuple[str, str], CallRecord] = {}

    async def save(self, record: CallRecord) -> None:
        self._records[(record.tenant, record.call_id)] = record

    async def list(
        self, tenant: str, user: str | None, limit: int = MAX_LISTED
    ) -> list[CallRecord]:
        found = [r for (t, _), r in self._records.items()
                 if t == tenant and (user is None or r.user == user)]  # fmt: skip
        return sorted(found, key=lambda r: r.started_at, reverse=True)[:limit]

    async def get(self, tenant: str, record_id: str) -> CallRecord | None:
        return next(
            (r for (t, _), r in self._records.items() if t == tenant and r.id == record_id), None
        )


def record_id(call_id: str) -> str:
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:24]


def _context(tenant: str, call_id: str) -> bytes:
    return f"phone-call\x00{tenant}\x00{call_id}".encode()


class PostgresCallRecords:
    """Rule 3: ``numbers_sealed`` holds caller, called and transfer target as sealed JSON."""

    def __init__(self, pool: asyncpg.Pool, *, keyring: Keyring) -> None:
        self.pool = pool
        self.keyring = keyring

    async def save(self, record: CallRecord) -> None:
        numbers = json.dumps([record.caller, record.called, record.transfer_target])
        sealed = self.keyring.seal(numbers, context=_context(record.tenant, record.call_id))
        await self.pool.execute(
            """INSERT INTO phone_calls (tenant, user_id, call_id, provider, role_id, thread_id,
                   key_id, numbers_sealed, started_at, ended_at, ended_by, record_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
               ON CONFLICT (tenant, call_id) DO UPDATE SET thread_id = EXCLUDED.thread_id,
                   key_id = EXCLUDED.key_id, numbers_sealed = EXCLUDED.numbers_sealed,
                   ended_at = EXCLUDED.ended_at, ended_by = EXCLUDED.ended_by""",
            record.tenant, record.user, record.call_id, record.provider, record.role_id,
            record.thread_id, sealed.key_id, sealed.blob, record.started_at, record.ended_at,
            record.ended_by, record.id, timeout=_TIMEOUT,
        )  # fmt: skip

    async def list(
        self, tenant: str, user: str | None, limit: int = MAX_LISTED
    ) -> list[CallRecord]:
        rows = await self.pool.fetch(
            """SELECT * FROM phone_calls WHERE tenant = $1 AND ($2::text IS NULL OR user_id = $2)
               ORDER BY started_at DESC LIMIT $3""",
            tenant, user, limit, timeout=_TIMEOUT,
        )  # fmt: skip
        return [self._record(row) for row in rows]

    async def get(self, tenant: str, record_id: str) -> CallRecord | None:
        row = await self.pool.fetchrow(
            "SELECT * FROM phone_calls WHERE tenant = $1 AND record_id = $2",
            tenant, record_id, timeout=_TIMEOUT,
        )  # fmt: skip
        return None if row is None else self._record(row)

    def _record(self, row: asyncpg.Record) -> CallRecord:
        sealed = Sealed(row["key_id"], bytes(row["numbers_sealed"]))
        caller, called, target = json.loads(
            self.keyring.open(sealed, context=_context(row["tenant"], row["call_id"]))
        )
        return CallRecord(
            row["tenant"], row["user_id"], row["call_id"], row["provider"], caller, called,
            row["role_id"], row["thread_id"], row["started_at"], row["ended_at"],
            row["ended_by"], target,
        )  # fmt: skip


async def keep(
    services: Services, principal: Principal, call: PhoneCall, provider: Provider
) -> None:
    """Write ``call``'s record as it is now (rule 1)."""
    started = datetime.fromtimestamp(call.started_at, UTC)
    ended = datetime.fromtimestamp(call.ended_at, UTC) if call.ended_at is not None else None
    record = CallRecord(
        principal.tenant, principal.user, call.call_sid, provider, call.caller, call.called,
        call.role_id, call.thread_id, started, ended, call.ended, call.transfer_target,
    )  # fmt: skip
    try:
        await services.call_records.save(record)
    except Exception:
        log.exception("phone call %s: its record was not written", call.call_sid[:16])
