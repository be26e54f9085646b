"""Resume tokens (SPEC RES-1): who may pick up a dropped voice session.

Rules every store keeps (one contract suite, ``tests/runtime/resume_contract.py``, checks both):

1. A token is 256 random bits, handed out once and stored only as its SHA-256 hash.
2. It is bound to one voice session *and* its (tenant, user): presenting it for another session
   or as another user fails exactly like a wrong token.
3. It expires ``ttl`` seconds after it was issued or last extended (``extend`` runs when the
   connection drops, so "a few minutes after disconnect").
4. ``redeem`` is atomic and rotates: the presented token is replaced by a new one; the old one
   never works again, and of two concurrent redeems of one token at most one succeeds.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, replace
from typing import Protocol

import asyncpg

from runtime.accounts import Principal, hash_token

_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class VoiceSessionRecord:
    session_id: str
    tenant: str
    user: str
    thread_id: str
    role_id: str


def new_resume_token() -> str:
    return secrets.token_urlsafe(32)


class ResumeTokenStore(Protocol):
    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        """Register the session (or replace its token) and return a fresh token."""
        ...

    async def extend(self, session_id: str, *, ttl_s: float) -> None:
        """Let the current token live ``ttl_s`` from now (called when the connection drops)."""
        ...

    async def redeem(
        self, principal: Principal, session_id: str, token: str, *, ttl_s: float
    ) -> tuple[VoiceSessionRecord, str] | None:
        """The session and a new token if ``token`` is valid for this user and session;
        None otherwise (no reason is given: wrong, rotated, expired and foreign look alike)."""
        ...


@dataclass
class _Entry:
    record: VoiceSessionRecord
    token_hash: str
    expires_at: float


class InMemoryResumeTokenStore:
    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._lock = asyncio.Lock()

    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        token = new_resume_token()
        self._sessions[record.session_id] = _Entry(
            record, hash_token(token), time.monotonic() + ttl_s
        )
        return token

    async def extend(self, session_id: str, *, ttl_s: float) -> None:
        entry = self._sessions.get(session_id)
        if entry is not None:
            entry.expires_at = time.monotonic() + ttl_s

    async def redeem(
        self, principal: Principal, session_id: str, token: str, *, ttl_s: float
    ) -> tuple[VoiceSessionRecord, str] | None:
        async with self._lock:
            entry = self._sessions.get(session_id)
            if (
                entry is None
                or entry.record.tenant != principal.tenant
                or entry.record.user != principal.user
                or not secrets.compare_digest(entry.token_hash, hash_token(token))
                or entry.expires_at <= time.monotonic()
            ):
                return None
            fresh = new_resume_token()
            self._sessions[session_id] = replace(
                entry, token_hash=hash_token(fresh), expires_at=time.monotonic() + ttl_s
            )
            return entry.record, fresh


class PostgresResumeTokenStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        token = new_resume_token()
        await self.pool.execute(
            """INSERT INTO voice_sessions
                   (session_id, tenant, user_id, thread_id, role_id, token_hash, expires_at)
               VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
               ON CONFLICT (session_id) DO UPDATE
                   SET token_hash = EXCLUDED.token_hash, expires_at = EXCLUDED.expires_at
                   WHERE voice_sessions.tenant = EXCLUDED.tenant
                     AND voice_sessions.user_id = EXCLUDED.user_id""",
            record.session_id, record.tenant, record.user, record.thread_id, record.role_id,
            hash_token(token), ttl_s,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return token

    async def extend(self, session_id: str, *, ttl_s: float) -> None:
        await self.pool.execute(
            """UPDATE voice_sessions SET expires_at = now() + make_interval(secs => $2)
               WHERE session_id = $1""",
            session_id,
            ttl_s,
            timeout=_TIMEOUT,
        )

    async def redeem(
        self, principal: Principal, session_id: str, token: str, *, ttl_s: float
    ) -> tuple[VoiceSessionRecord, str] | None:
        fresh = new_resume_token()
        # One statement: check and rotate atomically, so a token works at most once.
        row = await self.pool.fetchrow(
            """UPDATE voice_sessions
                  SET token_hash = $5, expires_at = now() + make_interval(secs => $6)
                WHERE session_id = $1 AND tenant = $2 AND user_id = $3 AND token_hash = $4
                  AND expires_at > now()
            RETURNING session_id, tenant, user_id, thread_id, role_id""",
            session_id, principal.tenant, principal.user, hash_token(token),
            hash_token(fresh), ttl_s,
            timeout=_TIMEOUT,
        )  # fmt: skip
        if row is None:
            return None
        record = VoiceSessionRecord(
            row["session_id"], row["tenant"], row["user_id"], row["thread_id"], row["role_id"]
        )
        return record, fresh
