"""Resume tokens (SPEC RES-1, RES-4): who may pick up a dropped voice session, and where.

Rules every store keeps (one contract suite, ``tests/runtime/test_resume_tokens.py``, checks
both):

1. A token is 256 bits, handed out once and stored only as its SHA-256 hash. The first token of
   a session is random; each rotated one is ``HMAC(secret, old token)`` with a secret only the
   server holds (PostgreSQL: one per database, shared by its processes), so it is just as
   unguessable without the old token *and* the secret.
2. It is bound to one voice session *and* its (tenant, user): presenting it for another session
   or as another user fails exactly like a wrong token.
3. It expires ``ttl`` seconds after it was issued or last extended (``extend`` runs when the
   connection drops, so "a few minutes after disconnect"; ``extend(ttl_s=0)`` revokes).
4. ``redeem`` is atomic and rotates: the presented token is replaced by the new one. Grace for a
   lost answer: until the new token has been redeemed once, redeeming the *previous* token again
   returns the same new token (it is derived, not drawn) — a client whose ``session.resumed``
   never arrived is not locked out. The grace lasts until the new token is used or the token
   expires (rule 3), whichever comes first; once the new token was used, the old one never
   works again, and the grace never reaches further back than one rotation.
   Concurrent redeems of one token all get the same new token (never two different ones).
5. ``claim`` moves the session to the next ``epoch`` (compare-and-set): a resume that lands on a
   process where the session is not live continues it from the journal under a new epoch, and
   every process watching (``watch``) is told, so one still holding the old epoch fences it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import asyncpg

from runtime.accounts import Principal, hash_token

log = logging.getLogger(__name__)

_TIMEOUT = 10.0
FENCE_CHANNEL = "openrealtime_session_fence"
"""PostgreSQL NOTIFY channel: payload ``"<session_id> <epoch>"`` after every ``claim``."""

FenceCallback = Callable[[str, int], None]
"""Called with (session_id, epoch) when a session moved to ``epoch``; it may be called for
sessions this process does not hold, and more than once."""


@dataclass(frozen=True, slots=True)
class VoiceSessionRecord:
    session_id: str
    tenant: str
    user: str
    thread_id: str
    role_id: str
    epoch: int = 0
    """Incremented each time the session is continued from the journal (``claim``)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """How the session was started (``output_sample_rate``, ``turn_detection``), so another
    process serves it the same way."""


def new_resume_token() -> str:
    return secrets.token_urlsafe(32)


def rotated_token(secret: bytes, session_id: str, token: str) -> str:
    """The token that replaces ``token``: deterministic, so a retried redeem gets it again."""
    digest = hmac.new(secret, f"{session_id}\n{token}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class ResumeTokenStore(Protocol):
    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        """Register the session (or replace its token) and return a fresh token."""
        ...

    async def extend(self, session_id: str, *, ttl_s: float) -> None:
        """Let the current token live ``ttl_s`` from now (called when the connection drops;
        0 revokes it)."""
        ...

    async def redeem(
        self, principal: Principal, session_id: str, token: str, *, ttl_s: float
    ) -> tuple[VoiceSessionRecord, str] | None:
        """The session and its new token if ``token`` is valid for this user and session (rule
        4); None otherwise (no reason is given: wrong, rotated, expired and foreign look
        alike)."""
        ...

    async def claim(self, record: VoiceSessionRecord) -> VoiceSessionRecord | None:
        """Move the session from ``record.epoch`` to the next epoch and tell the watchers; None
        if it is no longer at ``record.epoch`` (someone else claimed it first)."""
        ...

    async def watch(self, on_fenced: FenceCallback) -> None:
        """Call ``on_fenced`` for every claim from now on (any process on the same store)."""
        ...

    async def close(self) -> None:
        """Stop watching."""
        ...


@dataclass
class _Entry:
    record: VoiceSessionRecord
    token_hash: str
    previous_hash: str | None
    expires_at: float


class InMemoryResumeTokenStore:
    """One process, no database: same rules; watchers are called synchronously."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._lock = asyncio.Lock()
        self._secret = secrets.token_bytes(32)
        self._watchers: list[FenceCallback] = []

    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        token = new_resume_token()
        self._sessions[record.session_id] = _Entry(
            record, hash_token(token), None, time.monotonic() + ttl_s
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
                or entry.expires_at <= time.monotonic()
            ):
                return None
            presented = hash_token(token)
            fresh = rotated_token(self._secret, session_id, token)
            fresh_hash = hash_token(fresh)
            current = secrets.compare_digest(entry.token_hash, presented)
            retried = (
                entry.previous_hash is not None
                and secrets.compare_digest(entry.previous_hash, presented)
                and secrets.compare_digest(entry.token_hash, fresh_hash)
            )
            if not (current or retried):
                return None
            entry.previous_hash, entry.token_hash = presented, fresh_hash
            entry.expires_at = time.monotonic() + ttl_s
            return entry.record, fresh

    async def claim(self, record: VoiceSessionRecord) -> VoiceSessionRecord | None:
        async with self._lock:
            entry = self._sessions.get(record.session_id)
            if entry is None or entry.record.epoch != record.epoch:
                return None
            entry.record = replace(entry.record, epoch=record.epoch + 1)
            claimed = entry.record
        for watcher in list(self._watchers):
            watcher(claimed.session_id, claimed.epoch)
        return claimed

    async def watch(self, on_fenced: FenceCallback) -> None:
        self._watchers.append(on_fenced)

    async def close(self) -> None:
        self._watchers.clear()


_RECORD_COLUMNS = "session_id, tenant, user_id, thread_id, role_id, epoch, options::text"


def _record(row: asyncpg.Record) -> VoiceSessionRecord:
    return VoiceSessionRecord(
        row["session_id"], row["tenant"], row["user_id"], row["thread_id"], row["role_id"],
        row["epoch"], json.loads(row["options"]),
    )  # fmt: skip


class PostgresResumeTokenStore:
    """Tokens in ``voice_sessions`` (migrations 0002, 0004), so a resume can land on any
    process sharing the database. ``url`` (the database's) lets ``watch`` LISTEN on its own
    connection; without it ``watch`` does nothing."""

    def __init__(self, pool: asyncpg.Pool, *, url: str | None = None) -> None:
        self.pool = pool
        self.url = url
        self._secret: bytes | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.watch_retry_s = 1.0
        self.listen_application_name = "openrealtime-session-fence"
        """The LISTEN connection's ``application_name`` (what ``pg_stat_activity`` shows)."""

    async def _get_secret(self) -> bytes:
        """The database's rotation secret, made by whichever process needs it first."""
        while self._secret is None:
            key = await self.pool.fetchval(
                """WITH made AS (INSERT INTO resume_secret (key) VALUES ($1)
                                 ON CONFLICT (id) DO NOTHING RETURNING key)
                   SELECT key FROM made UNION ALL SELECT key FROM resume_secret LIMIT 1""",
                secrets.token_bytes(32),
                timeout=_TIMEOUT,
            )
            # None: another process inserted it after this statement's snapshot; read again.
            if key is not None:
                self._secret = bytes(key)
        return self._secret

    async def issue(self, record: VoiceSessionRecord, *, ttl_s: float) -> str:
        token = new_resume_token()
        await self.pool.execute(
            """INSERT INTO voice_sessions
                   (session_id, tenant, user_id, thread_id, role_id, token_hash, expires_at,
                    options)
               VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7), $8::jsonb)
               ON CONFLICT (session_id) DO UPDATE
                   SET token_hash = EXCLUDED.token_hash, expires_at = EXCLUDED.expires_at,
                       previous_hash = NULL
                   WHERE voice_sessions.tenant = EXCLUDED.tenant
                     AND voice_sessions.user_id = EXCLUDED.user_id""",
            record.session_id, record.tenant, record.user, record.thread_id, record.role_id,
            hash_token(token), ttl_s, json.dumps(dict(record.options)),
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
        fresh = rotated_token(await self._get_secret(), session_id, token)
        # One statement: check and rotate atomically. The presented token is either the
        # current one, or the previous one while its successor (the same ``fresh``) is unused.
        row = await self.pool.fetchrow(
            f"""UPDATE voice_sessions
                  SET previous_hash = $4, token_hash = $5,
                      expires_at = now() + make_interval(secs => $6)
                WHERE session_id = $1 AND tenant = $2 AND user_id = $3 AND expires_at > now()
                  AND (token_hash = $4 OR (previous_hash = $4 AND token_hash = $5))
            RETURNING {_RECORD_COLUMNS}""",
            session_id, principal.tenant, principal.user, hash_token(token),
            hash_token(fresh), ttl_s,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return None if row is None else (_record(row), fresh)

    async def claim(self, record: VoiceSessionRecord) -> VoiceSessionRecord | None:
        # The notification is sent when the update commits, to every listening process.
        row = await self.pool.fetchrow(
            f"""WITH claimed AS (
                    UPDATE voice_sessions SET epoch = epoch + 1
                     WHERE session_id = $1 AND tenant = $2 AND user_id = $3 AND epoch = $4
                 RETURNING {_RECORD_COLUMNS})
                SELECT claimed.*,
                       pg_notify('{FENCE_CHANNEL}', session_id || ' ' || epoch) AS notified
                  FROM claimed""",
            record.session_id, record.tenant, record.user, record.epoch,
            timeout=_TIMEOUT,
        )  # fmt: skip
        return None if row is None else _record(row)

    async def watch(self, on_fenced: FenceCallback) -> None:
        if self.url is None or self._watcher is not None:
            return
        connected = asyncio.Event()
        self._watcher = asyncio.create_task(
            self._watch(on_fenced, connected), name="resume-fence-watch"
        )
        # Wait (briefly) for the first LISTEN, so claims made right after start are seen.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(connected.wait(), _TIMEOUT)

    async def _watch(self, on_fenced: FenceCallback, connected: asyncio.Event) -> None:
        """LISTEN on a dedicated connection; if it is lost, reconnect and meanwhile claims may
        have been missed, so every session this process was told about is re-checked."""
        assert self.url is not None

        def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            session_id, _, epoch = payload.rpartition(" ")
            with contextlib.suppress(ValueError):
                on_fenced(session_id, int(epoch))

        while True:
            try:
                conn = await asyncpg.connect(
                    self.url,
                    timeout=_TIMEOUT,
                    server_settings={"application_name": self.listen_application_name},
                )
            except (OSError, asyncpg.PostgresError, TimeoutError) as e:
                log.warning("resume fence: cannot listen (%s); retrying", e)
                await asyncio.sleep(self.watch_retry_s)
                continue
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            try:
                await conn.add_listener(FENCE_CHANNEL, notified)
                if connected.is_set():
                    await self._recheck(conn, on_fenced)
                connected.set()
                await lost.wait()
                log.warning("resume fence: listening connection lost; reconnecting")
            except (OSError, asyncpg.PostgresError) as e:
                log.warning("resume fence: %s; reconnecting", e)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), _TIMEOUT)
            await asyncio.sleep(self.watch_retry_s)

    async def _recheck(self, conn: asyncpg.Connection, on_fenced: FenceCallback) -> None:
        # Sessions claimed in the last ttl window: the callback ignores those not held here.
        rows = await conn.fetch(
            "SELECT session_id, epoch FROM voice_sessions WHERE epoch > 0 AND expires_at > now()",
            timeout=_TIMEOUT,
        )
        for row in rows:
            on_fenced(row["session_id"], row["epoch"])

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
