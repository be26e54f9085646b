"""The account store: its rules, its contract and the in-memory implementation.

Theory of operation
-------------------
1. A user belongs to a tenant through a *membership* with one role (owner, admin, member).
   Everything is scoped by (tenant, user): the same user id in two tenants is two accounts.
2. Tokens are random (256 bits, prefixed ``ort_``) and stored only as SHA-256 hashes; the
   secret is returned once, by ``issue_token``, and never again.
3. ``authenticate`` answers None for an unknown, revoked or expired token and for a token whose
   membership is disabled or gone. It records the token's last use, at most once per
   ``LAST_USED_RESOLUTION`` (so a busy token does not write on every request).
4. Revoking a token or disabling a user takes effect on the next ``authenticate``, in every
   process sharing the store, and is announced to ``watch``-ers as a ``Revocation`` (servers
   close the live voice sessions it covers).
5. A tenant never loses its last enabled owner: disabling or demoting it is ``LastOwner``.
6. Bounded: at most ``MAX_ACTIVE_TOKENS_PER_USER`` unrevoked tokens per membership; lists
   return at most ``MAX_LISTED`` rows.
7. Client secrets (``ek_…``, ``issue_client_secret``) are minted by a token for its own
   (tenant, user), bound to one agent role, and live at most ``MAX_CLIENT_SECRET_TTL``. Like
   tokens they are random (256 bits), stored only as SHA-256 hashes and shown once. They may be
   used again and again until they expire (as OpenAI's are). ``authenticate_client_secret``
   answers None for an unknown or expired secret, for a disabled or gone membership and for a
   revoked or expired minting token — so disabling the user or revoking the token ends its
   secrets at once (rule 4's ``Revocation`` covers the sessions they opened: same user, same
   ``token_id``). ``authenticate`` never accepts a client secret. Bounded: at most
   ``MAX_LIVE_CLIENT_SECRETS_PER_USER`` unexpired secrets per membership; minting drops the
   membership's expired ones.

``lookup_token`` finds a token by id in any tenant: only the operator's CLI uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from accounts.errors import InvalidAccount, LastOwner, TokenNotFound, UserExists, UserNotFound
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

LAST_USED_RESOLUTION = timedelta(seconds=60)
MAX_ACTIVE_TOKENS_PER_USER = 100
MAX_LISTED = 1000
MAX_LIVE_CLIENT_SECRETS_PER_USER = 1000

RevocationCallback = Callable[[Revocation], None]


class AccountStore(Protocol):
    async def add_user(self, tenant: str, user: str, *, role: MembershipRole) -> Membership:
        """A new membership; ``UserExists`` if the user already belongs to the tenant."""
        ...

    async def membership(self, tenant: str, user: str) -> Membership | None: ...

    async def list_users(self, tenant: str) -> list[Membership]: ...

    async def set_role(self, tenant: str, user: str, role: MembershipRole) -> Membership: ...

    async def disable_user(self, tenant: str, user: str) -> Membership:
        """Disable the membership (its tokens stop working at once); rule 5."""
        ...

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
        """A new token for an enabled membership (``secret``: keep a given one, e.g. the local
        token kept in the data directory)."""
        ...

    async def list_tokens(self, tenant: str, user: str | None = None) -> list[TokenInfo]: ...

    async def get_token(self, tenant: str, token_id: str) -> TokenInfo | None: ...

    async def lookup_token(self, token_id: str) -> TokenInfo | None: ...

    async def revoke_token(self, tenant: str, token_id: str) -> TokenInfo: ...

    async def authenticate(self, token: str) -> Principal | None:
        """The principal a token proves (rule 3); None for a client secret (rule 7)."""
        ...

    async def issue_client_secret(
        self, principal: Principal, *, role_id: str, ttl: timedelta
    ) -> IssuedClientSecret:
        """A client secret for ``principal``'s (tenant, user), minted by its token, bound to
        agent role ``role_id`` (the caller resolved it), expiring ``ttl`` from now (rule 7).
        ``InvalidAccount`` for a principal proved by a client secret or without a token, a
        disabled membership, a bad lifetime or too many live secrets; ``UserNotFound``."""
        ...

    async def authenticate_client_secret(self, secret: str) -> Principal | None:
        """The principal a client secret proves, with ``bound_role_id`` set (rule 7)."""
        ...

    async def add_token(
        self, principal: Principal, token: str, *, scopes: tuple[str, ...] | None = None
    ) -> None:
        """Let ``token`` authenticate as ``principal`` (the membership is made with
        ``principal.role`` when missing). For tests, demos and the local token; issuing goes
        through ``issue_token``."""
        ...

    async def watch(self, on_revoked: RevocationCallback) -> None: ...

    async def close(self) -> None: ...


def checked_expiry(expires_at: datetime | None, now: datetime) -> datetime | None:
    if expires_at is not None and expires_at <= now:
        raise InvalidAccount("a token's expiry must be in the future")
    return expires_at


class InMemoryAccountStore:
    """One process, no database: the same rules; watchers are called synchronously."""

    def __init__(self, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        self._members: dict[tuple[str, str], Membership] = {}
        self._tokens: dict[str, TokenInfo] = {}
        self._by_hash: dict[str, str] = {}
        self._secrets: dict[str, ClientSecretInfo] = {}
        """Client secrets by the hash of their secret."""
        self._watchers: list[RevocationCallback] = []

    def _tell(self, revocation: Revocation) -> None:
        for watcher in list(self._watchers):
            watcher(revocation)

    def _member(self, tenant: str, user: str) -> Membership:
        found = self._members.get((tenant, user))
        if found is None:
            raise UserNotFound(f"no user {user!r} in tenant {tenant!r}")
        return found

    def _keep_an_owner(self, member: Membership) -> None:
        if member.role != "owner" or member.disabled:
            return
        owners = [
            m for m in self._members.values()
            if m.tenant == member.tenant and m.role == "owner" and not m.disabled
        ]  # fmt: skip
        if len(owners) <= 1:
            raise LastOwner(f"{member.user!r} is the last enabled owner of {member.tenant!r}")

    async def add_user(self, tenant: str, user: str, *, role: MembershipRole) -> Membership:
        key = (check_id("tenant", tenant), check_id("user", user))
        if key in self._members:
            raise UserExists(f"{user!r} already belongs to {tenant!r}")
        member = Membership(tenant, user, check_role(role), False, self._clock())
        self._members[key] = member
        return member

    async def membership(self, tenant: str, user: str) -> Membership | None:
        return self._members.get((tenant, user))

    async def list_users(self, tenant: str) -> list[Membership]:
        found = [m for m in self._members.values() if m.tenant == tenant]
        return sorted(found, key=lambda m: (m.created_at, m.user))[:MAX_LISTED]

    async def set_role(self, tenant: str, user: str, role: MembershipRole) -> Membership:
        member = self._member(tenant, user)
        if check_role(role) != "owner":
            self._keep_an_owner(member)
        updated = replace(member, role=role)
        self._members[(tenant, user)] = updated
        return updated

    async def disable_user(self, tenant: str, user: str) -> Membership:
        member = self._member(tenant, user)
        if member.disabled:
            return member
        self._keep_an_owner(member)
        updated = replace(member, disabled=True)
        self._members[(tenant, user)] = updated
        self._tell(Revocation(tenant, user))
        return updated

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
        member = self._member(tenant, user)
        if member.disabled:
            raise InvalidAccount(f"{user!r} is disabled in {tenant!r}")
        now = self._clock()
        live = [
            t for t in self._tokens.values()
            if (t.tenant, t.user) == (tenant, user) and t.revoked_at is None
        ]  # fmt: skip
        if len(live) >= MAX_ACTIVE_TOKENS_PER_USER:
            raise InvalidAccount(f"{user!r} already has {MAX_ACTIVE_TOKENS_PER_USER} tokens")
        secret = secret or new_token()
        digest = hash_token(secret)
        if digest in self._by_hash:
            raise InvalidAccount("that token is already in use")
        info = TokenInfo(
            id=new_token_id(),
            tenant=tenant,
            user=user,
            name=check_token_name(name),
            scopes=check_scopes(scopes),
            created_at=now,
            expires_at=checked_expiry(expires_at, now),
            last_used_at=None,
            revoked_at=None,
        )
        self._tokens[info.id] = info
        self._by_hash[digest] = info.id
        return IssuedToken(info, secret)

    async def list_tokens(self, tenant: str, user: str | None = None) -> list[TokenInfo]:
        found = [
            t for t in self._tokens.values()
            if t.tenant == tenant and (user is None or t.user == user)
        ]  # fmt: skip
        return sorted(found, key=lambda t: (t.created_at, t.id))[:MAX_LISTED]

    async def get_token(self, tenant: str, token_id: str) -> TokenInfo | None:
        found = self._tokens.get(token_id)
        return found if found is not None and found.tenant == tenant else None

    async def lookup_token(self, token_id: str) -> TokenInfo | None:
        return self._tokens.get(token_id)

    async def revoke_token(self, tenant: str, token_id: str) -> TokenInfo:
        found = await self.get_token(tenant, token_id)
        if found is None:
            raise TokenNotFound(f"no token {token_id}")
        if found.revoked_at is not None:
            return found
        revoked = replace(found, revoked_at=self._clock())
        self._tokens[token_id] = revoked
        self._tell(Revocation(found.tenant, found.user, found.id))
        return revoked

    async def authenticate(self, token: str) -> Principal | None:
        if is_client_secret(token):
            return None
        token_id = self._by_hash.get(hash_token(token))
        info = None if token_id is None else self._tokens.get(token_id)
        now = self._clock()
        if info is None or not info.active(now):
            return None
        member = self._members.get((info.tenant, info.user))
        if member is None or member.disabled:
            return None
        if info.last_used_at is None or now - info.last_used_at >= LAST_USED_RESOLUTION:
            self._tokens[info.id] = replace(info, last_used_at=now)
        return Principal(info.tenant, info.user, member.role, info.id, frozenset(info.scopes))

    async def issue_client_secret(
        self, principal: Principal, *, role_id: str, ttl: timedelta
    ) -> IssuedClientSecret:
        token_id, role_id, ttl = check_client_secret(principal, role_id, ttl)
        tenant, user = principal.tenant, principal.user
        member = self._member(tenant, user)
        if member.disabled:
            raise InvalidAccount(f"{user!r} is disabled in {tenant!r}")
        token = self._tokens.get(token_id)
        now = self._clock()
        if token is None or (token.tenant, token.user) != (tenant, user) or not token.active(now):
            raise InvalidAccount("the minting token is not an active token of this user")
        expired = [
            h for h, s in self._secrets.items()
            if (s.tenant, s.user) == (tenant, user) and not s.active(now)
        ]  # fmt: skip
        for digest in expired:
            del self._secrets[digest]
        live = sum(1 for s in self._secrets.values() if (s.tenant, s.user) == (tenant, user))
        if live >= MAX_LIVE_CLIENT_SECRETS_PER_USER:
            raise InvalidAccount(
                f"{user!r} already has {MAX_LIVE_CLIENT_SECRETS_PER_USER} live client secrets"
            )
        secret = new_client_secret()
        info = ClientSecretInfo(
            id=new_client_secret_id(),
            tenant=tenant,
            user=user,
            role_id=role_id,
            token_id=token_id,
            created_at=now,
            expires_at=now + ttl,
        )
        self._secrets[hash_token(secret)] = info
        return IssuedClientSecret(info, secret)

    async def authenticate_client_secret(self, secret: str) -> Principal | None:
        if not is_client_secret(secret):
            return None
        info = self._secrets.get(hash_token(secret))
        now = self._clock()
        if info is None or not info.active(now):
            return None
        token = self._tokens.get(info.token_id)
        member = self._members.get((info.tenant, info.user))
        if token is None or not token.active(now) or member is None or member.disabled:
            return None
        return Principal(
            info.tenant, info.user, member.role, info.token_id, frozenset(), info.role_id
        )

    async def add_token(
        self, principal: Principal, token: str, *, scopes: tuple[str, ...] | None = None
    ) -> None:
        if (principal.tenant, principal.user) not in self._members:
            await self.add_user(principal.tenant, principal.user, role=principal.role)
        if hash_token(token) not in self._by_hash:
            await self.issue_token(
                principal.tenant, principal.user, name="added", scopes=scopes, secret=token
            )

    async def watch(self, on_revoked: RevocationCallback) -> None:
        self._watchers.append(on_revoked)

    async def close(self) -> None:
        self._watchers.clear()
