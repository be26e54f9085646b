"""The account store on PostgreSQL (``accounts/migrations``): the rules of ``accounts/store.py``.

Revocations are announced with ``pg_notify`` in the statement that makes them, so every process
``watch``-ing (on its own LISTEN connection) hears them when they commit — also when the CLI
revoked, with the server running. asyncpg's failures to reach the database become
``AccountsUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from accounts.errors import (
    AccountsUnavailable,
    InvalidAccount,
    LastOwner,
    TokenNotFound,
    UserExists,
    UserNotFound,
)
from accounts.model import (
    ClientSecretInfo,
    IssuedClientSecret,
    IssuedToken,
    Membership,
    MembershipRole,
    Principal,
    Revocation,
    TokenInfo,
    check_client_secret,
    check_id,
    check_role,
    check_scopes,
    check_token_name,
    hash_token,
    is_client_secret,
    new_client_secret,
    new_client_secret_id,
    new_token,
    new_token_id,
)
from accounts.store import (
    LAST_USED_RESOLUTION,
    MAX_ACTIVE_TOKENS_PER_USER,
    MAX_LISTED,
    MAX_LIVE_CLIENT_SECRETS_PER_USER,
    RevocationCallback,
    checked_expiry,
)

log = logging.getLogger(__name__)

_TIMEOUT = 10.0
REVOKED_CHANNEL = "openrealtime_revoked"
_TOKEN_COLUMNS = (
    "id, tenant, user_id, name, scopes, created_at, expires_at, last_used_at, revoked_at"
)
_SECRET_COLUMNS = "id, tenant, user_id, role_id, token_id, created_at, expires_at"
_UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
)


@contextlib.contextmanager
def _mapped() -> Any:
    try:
        yield
    except _UNREACHABLE as e:
        raise AccountsUnavailable(f"accounts store unreachable: {type(e).__name__}") from e


def _membership(row: asyncpg.Record) -> Membership:
    return Membership(
        row["tenant"], row["user_id"], row["role"], row["disabled_at"] is not None,
        row["created_at"],
    )  # fmt: skip


def _token(row: asyncpg.Record) -> TokenInfo:
    return TokenInfo(
        id=row["id"],
        tenant=row["tenant"],
        user=row["user_id"],
        name=row["name"],
        scopes=tuple(row["scopes"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        last_used_at=row["last_used_at"],
        revoked_at=row["revoked_at"],
    )


def _client_secret(row: asyncpg.Record) -> ClientSecretInfo:
    return ClientSecretInfo(
        id=row["id"],
        tenant=row["tenant"],
        user=row["user_id"],
        role_id=row["role_id"],
        token_id=row["token_id"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


def _payload(revocation: Revocation) -> str:
    return json.dumps([revocation.tenant, revocation.user, revocation.token_id])


class PostgresAccountStore:
    def __init__(self, pool: asyncpg.Pool, *, url: str | None = None) -> None:
        self.pool = pool
        self.url = url
        """The database's URL: ``watch`` LISTENs on a connection of its own (None: no watch)."""
        self._watcher: asyncio.Task[None] | None = None
        self.watch_retry_s = 1.0

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        with _mapped():
            async with self.pool.acquire(timeout=_TIMEOUT) as conn, conn.transaction():
                yield conn

    async def add_user(self, tenant: str, user: str, *, role: MembershipRole) -> Membership:
        check_id("tenant", tenant)
        check_id("user", user)
        check_role(role)
        async with self._transaction() as conn:
            row = await self._insert_member(conn, tenant, user, role)
        if row is None:
            raise UserExists(f"{user!r} already belongs to {tenant!r}")
        return _membership(row)

    async def _insert_member(
        self, conn: asyncpg.Connection, tenant: str, user: str, role: str
    ) -> asyncpg.Record | None:
        await conn.execute(
            "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT DO NOTHING", tenant, timeout=_TIMEOUT
        )
        await conn.execute(
            "INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", user, timeout=_TIMEOUT
        )
        return await conn.fetchrow(
            """INSERT INTO memberships (tenant, user_id, role) VALUES ($1, $2, $3)
               ON CONFLICT DO NOTHING RETURNING *""",
            tenant, user, role,
            timeout=_TIMEOUT,
        )  # fmt: skip

    async def membership(self, tenant: str, user: str) -> Membership | None:
        with _mapped():
            row = await self.pool.fetchrow(
                "SELECT * FROM memberships WHERE tenant = $1 AND user_id = $2",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
        return None if row is None else _membership(row)

    async def list_users(self, tenant: str) -> list[Membership]:
        with _mapped():
            rows = await self.pool.fetch(
                "SELECT * FROM memberships WHERE tenant = $1 ORDER BY created_at, user_id "
                "LIMIT $2",
                tenant, MAX_LISTED,
                timeout=_TIMEOUT,
            )  # fmt: skip
        return [_membership(r) for r in rows]

    async def _locked_member(
        self, conn: asyncpg.Connection, tenant: str, user: str
    ) -> asyncpg.Record:
        # Lock the tenant's owners too, so two demotions at once cannot both pass rule 5.
        rows = await conn.fetch(
            """SELECT * FROM memberships WHERE tenant = $1 AND (user_id = $2 OR role = 'owner')
               ORDER BY user_id FOR UPDATE""",
            tenant, user,
            timeout=_TIMEOUT,
        )  # fmt: skip
        member = next((r for r in rows if r["user_id"] == user), None)
        if member is None:
            raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
        if member["role"] == "owner" and member["disabled_at"] is None:
            owners = [r for r in rows if r["role"] == "owner" and r["disabled_at"] is None]
            if len(owners) <= 1:
                raise LastOwner(f"{user!r} is the last enabled owner of {tenant!r}")
        return member

    async def set_role(self, tenant: str, user: str, role: MembershipRole) -> Membership:
        check_role(role)
        async with self._transaction() as conn:
            if role != "owner":
                await self._locked_member(conn, tenant, user)
            row = await conn.fetchrow(
                "UPDATE memberships SET role = $3 WHERE tenant = $1 AND user_id = $2 RETURNING *",
                tenant, user, role,
                timeout=_TIMEOUT,
            )  # fmt: skip
        if row is None:
            raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
        return _membership(row)

    async def disable_user(self, tenant: str, user: str) -> Membership:
        async with self._transaction() as conn:
            current = await conn.fetchrow(
                "SELECT * FROM memberships WHERE tenant = $1 AND user_id = $2",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if current is None:
                raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
            if current["disabled_at"] is not None:
                return _membership(current)
            await self._locked_member(conn, tenant, user)
            row = await conn.fetchrow(
                """UPDATE memberships SET disabled_at = now()
                   WHERE tenant = $1 AND user_id = $2 RETURNING *""",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            await conn.execute(
                "SELECT pg_notify($1, $2)", REVOKED_CHANNEL, _payload(Revocation(tenant, user)),
                timeout=_TIMEOUT,
            )  # fmt: skip
        assert row is not None
        return _membership(row)

    async def issue_token(
        self,
        tenant: str,
        user: str,
        *,
        name: str,
        scopes: tuple[str, ...] | None = None,
        expires_at: datetime | None = None,
        secret: str | None = None,
    ) -> IssuedToken:
        name, scopes = check_token_name(name), check_scopes(scopes)
        expires_at = checked_expiry(expires_at, datetime.now(UTC))
        secret = secret or new_token()
        async with self._transaction() as conn:
            member = await conn.fetchrow(
                """SELECT disabled_at FROM memberships WHERE tenant = $1 AND user_id = $2
                   FOR UPDATE""",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if member is None:
                raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
            if member["disabled_at"] is not None:
                raise InvalidAccount(f"{user!r} is disabled in {tenant!r}")
            live = await conn.fetchval(
                """SELECT count(*) FROM access_tokens
                   WHERE tenant = $1 AND user_id = $2 AND revoked_at IS NULL""",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if live >= MAX_ACTIVE_TOKENS_PER_USER:
                raise InvalidAccount(f"{user!r} already has {MAX_ACTIVE_TOKENS_PER_USER} tokens")
            row = await conn.fetchrow(
                f"""INSERT INTO access_tokens
                        (id, token_hash, tenant, user_id, name, scopes, expires_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7)
                    ON CONFLICT (token_hash) DO NOTHING RETURNING {_TOKEN_COLUMNS}""",
                new_token_id(), hash_token(secret), tenant, user, name, list(scopes), expires_at,
                timeout=_TIMEOUT,
            )  # fmt: skip
        if row is None:
            raise InvalidAccount("that token is already in use")
        return IssuedToken(_token(row), secret)

    async def list_tokens(self, tenant: str, user: str | None = None) -> list[TokenInfo]:
        with _mapped():
            rows = await self.pool.fetch(
                f"""SELECT {_TOKEN_COLUMNS} FROM access_tokens
                    WHERE tenant = $1 AND ($2::text IS NULL OR user_id = $2)
                    ORDER BY created_at, id LIMIT $3""",
                tenant, user, MAX_LISTED,
                timeout=_TIMEOUT,
            )  # fmt: skip
        return [_token(r) for r in rows]

    async def get_token(self, tenant: str, token_id: str) -> TokenInfo | None:
        with _mapped():
            row = await self.pool.fetchrow(
                f"SELECT {_TOKEN_COLUMNS} FROM access_tokens WHERE tenant = $1 AND id = $2",
                tenant, token_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        return None if row is None else _token(row)

    async def lookup_token(self, token_id: str) -> TokenInfo | None:
        with _mapped():
            row = await self.pool.fetchrow(
                f"SELECT {_TOKEN_COLUMNS} FROM access_tokens WHERE id = $1",
                token_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
        return None if row is None else _token(row)

    async def revoke_token(self, tenant: str, token_id: str) -> TokenInfo:
        async with self._transaction() as conn:
            row = await conn.fetchrow(
                f"""UPDATE access_tokens SET revoked_at = coalesce(revoked_at, now())
                    WHERE tenant = $1 AND id = $2 RETURNING {_TOKEN_COLUMNS}""",
                tenant, token_id,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if row is None:
                raise TokenNotFound(f"no token {token_id}")
            info = _token(row)
            await conn.execute(
                "SELECT pg_notify($1, $2)",
                REVOKED_CHANNEL, _payload(Revocation(info.tenant, info.user, info.id)),
                timeout=_TIMEOUT,
            )  # fmt: skip
        return info

    async def authenticate(self, token: str) -> Principal | None:
        if is_client_secret(token):
            return None
        with _mapped():
            row = await self.pool.fetchrow(
                """SELECT t.id, t.tenant, t.user_id, t.scopes, m.role,
                          t.last_used_at IS NULL OR t.last_used_at < now() - $2::interval AS stale
                     FROM access_tokens t
                     JOIN memberships m ON (m.tenant, m.user_id) = (t.tenant, t.user_id)
                    WHERE t.token_hash = $1 AND t.revoked_at IS NULL
                      AND (t.expires_at IS NULL OR t.expires_at > now())
                      AND m.disabled_at IS NULL""",
                hash_token(token), LAST_USED_RESOLUTION,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if row is None:
                return None
            if row["stale"]:
                await self.pool.execute(
                    "UPDATE access_tokens SET last_used_at = now() WHERE id = $1",
                    row["id"],
                    timeout=_TIMEOUT,
                )
        return Principal(
            row["tenant"], row["user_id"], row["role"], row["id"], frozenset(row["scopes"])
        )

    async def issue_client_secret(
        self, principal: Principal, *, role_id: str, ttl: timedelta
    ) -> IssuedClientSecret:
        token_id, role_id, ttl = check_client_secret(principal, role_id, ttl)
        tenant, user = principal.tenant, principal.user
        secret = new_client_secret()
        async with self._transaction() as conn:
            # The membership's row lock orders concurrent mints, so the bound holds.
            member = await conn.fetchrow(
                """SELECT disabled_at FROM memberships WHERE tenant = $1 AND user_id = $2
                   FOR UPDATE""",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if member is None:
                raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
            if member["disabled_at"] is not None:
                raise InvalidAccount(f"{user!r} is disabled in {tenant!r}")
            minting = await conn.fetchval(
                """SELECT true FROM access_tokens
                    WHERE id = $1 AND tenant = $2 AND user_id = $3 AND revoked_at IS NULL
                      AND (expires_at IS NULL OR expires_at > now())""",
                token_id, tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if minting is None:
                raise InvalidAccount("the minting token is not an active token of this user")
            await conn.execute(
                """DELETE FROM client_secrets
                    WHERE tenant = $1 AND user_id = $2 AND expires_at <= now()""",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            live = await conn.fetchval(
                "SELECT count(*) FROM client_secrets WHERE tenant = $1 AND user_id = $2",
                tenant, user,
                timeout=_TIMEOUT,
            )  # fmt: skip
            if live >= MAX_LIVE_CLIENT_SECRETS_PER_USER:
                raise InvalidAccount(
                    f"{user!r} already has {MAX_LIVE_CLIENT_SECRETS_PER_USER} live client secrets"
                )
            row = await conn.fetchrow(
                f"""INSERT INTO client_secrets
                        (id, secret_hash, tenant, user_id, role_id, token_id, expires_at)
                    VALUES ($1, $2, $3, $4, $5, $6, now() + $7::interval)
                    RETURNING {_SECRET_COLUMNS}""",
                new_client_secret_id(), hash_token(secret), tenant, user, role_id, token_id, ttl,
                timeout=_TIMEOUT,
            )  # fmt: skip
        assert row is not None
        return IssuedClientSecret(_client_secret(row), secret)

    async def authenticate_client_secret(self, secret: str) -> Principal | None:
        if not is_client_secret(secret):
            return None
        with _mapped():
            row = await self.pool.fetchrow(
                """SELECT s.tenant, s.user_id, s.role_id, s.token_id, m.role
                     FROM client_secrets s
                     JOIN memberships m ON (m.tenant, m.user_id) = (s.tenant, s.user_id)
                     JOIN access_tokens t ON t.id = s.token_id
                    WHERE s.secret_hash = $1 AND s.expires_at > now()
                      AND m.disabled_at IS NULL AND t.revoked_at IS NULL
                      AND (t.expires_at IS NULL OR t.expires_at > now())""",
                hash_token(secret),
                timeout=_TIMEOUT,
            )  # fmt: skip
        if row is None:
            return None
        return Principal(
            row["tenant"], row["user_id"], row["role"], row["token_id"], frozenset(),
            row["role_id"],
        )  # fmt: skip

    async def add_token(
        self, principal: Principal, token: str, *, scopes: tuple[str, ...] | None = None
    ) -> None:
        check_id("tenant", principal.tenant)
        check_id("user", principal.user)
        async with self._transaction() as conn:
            await self._insert_member(
                conn, principal.tenant, principal.user, check_role(principal.role)
            )
            await conn.execute(
                """INSERT INTO access_tokens (id, token_hash, tenant, user_id, name, scopes)
                   VALUES ($1, $2, $3, $4, 'added', $5) ON CONFLICT (token_hash) DO NOTHING""",
                new_token_id(), hash_token(token), principal.tenant, principal.user,
                list(check_scopes(scopes)),
                timeout=_TIMEOUT,
            )  # fmt: skip

    async def watch(self, on_revoked: RevocationCallback) -> None:
        if self.url is None or self._watcher is not None:
            return
        listening = asyncio.Event()
        self._watcher = asyncio.create_task(
            self._watch(on_revoked, listening), name="accounts-revocation-watch"
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening.wait(), _TIMEOUT)

    async def _watch(self, on_revoked: RevocationCallback, listening: asyncio.Event) -> None:
        """LISTEN on a dedicated connection, reconnecting when it is lost. A revocation missed
        while reconnecting still holds for every new request and session (rule 4)."""
        assert self.url is not None

        def notified(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            try:
                tenant, user, token_id = json.loads(payload)
            except (ValueError, TypeError):
                return
            on_revoked(Revocation(str(tenant), str(user), token_id))

        while True:
            try:
                conn = await asyncpg.connect(self.url, timeout=_TIMEOUT)
            except (OSError, asyncpg.PostgresError, TimeoutError) as e:
                log.warning("revocation watch: cannot listen (%s); retrying", type(e).__name__)
                await asyncio.sleep(self.watch_retry_s)
                continue
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _c, lost=lost: lost.set())
            try:
                await conn.add_listener(REVOKED_CHANNEL, notified)
                listening.set()
                await lost.wait()
                log.warning("revocation watch: listening connection lost; reconnecting")
            except (OSError, asyncpg.PostgresError) as e:
                log.warning("revocation watch: %s; reconnecting", type(e).__name__)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), _TIMEOUT)
            await asyncio.sleep(self.watch_retry_s)

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
