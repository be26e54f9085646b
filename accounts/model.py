"""The values of the accounts package: who a caller is, memberships, tokens, client secrets."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, get_args

from accounts.errors import InvalidAccount

MembershipRole = Literal["owner", "admin", "member"]
"""A user's right in a tenant: owners ⊃ admins ⊃ members."""

MEMBERSHIP_ROLES: tuple[MembershipRole, ...] = get_args(MembershipRole)
_RANK: dict[str, int] = {"member": 0, "admin": 1, "owner": 2}

Scope = Literal["api", "metrics"]
"""What a token may be used for: ``api`` (HTTP API, voice sessions), ``metrics`` (``/metrics``)."""

SCOPES: tuple[Scope, ...] = get_args(Scope)
DEFAULT_SCOPES: tuple[Scope, ...] = ("api",)

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
"""Tenant and user ids: 1–128 of ``A–Z a–z 0–9 _ . @ -``, starting alphanumeric."""
MAX_TOKEN_NAME_CHARS = 100
MAX_EXPIRY_DAYS = 3650
TOKEN_PREFIX = "ort_"
"""Issued tokens start with this, so a leaked one is easy to recognise (and to scan for)."""
CLIENT_SECRET_PREFIX = "ek_"
"""Client secrets (short-lived keys for one page's realtime sessions) start with this, like
OpenAI's ephemeral keys."""
MAX_CLIENT_SECRET_TTL = timedelta(seconds=7200)
"""The longest a client secret lives (OpenAI's cap: 2 hours)."""


def at_least(role: str, needed: MembershipRole) -> bool:
    """Whether membership ``role`` holds the rights of ``needed``."""
    return _RANK.get(role, -1) >= _RANK[needed]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: always derived from authentication, never from message fields.

    Two principals are equal when tenant and user are (the token that proved them is not part
    of who they are).

    A principal proved by a client secret (``ek_…``) has ``bound_role_id`` set: the agent role
    its realtime sessions must use. It has no scopes: it opens realtime sessions of that role
    and does nothing else (no HTTP API, no ``/metrics``, no further secrets). Its ``token_id``
    is the token that minted the secret, so revoking that token also ends the secret and the
    sessions it opened."""

    tenant: str
    user: str
    role: MembershipRole = field(default="member", compare=False)
    token_id: str | None = field(default=None, compare=False)
    scopes: frozenset[str] = field(default=frozenset(DEFAULT_SCOPES), compare=False)
    bound_role_id: str | None = field(default=None, compare=False)
    """Set only for a client secret: the one agent role it may open sessions with."""

    def can(self, needed: MembershipRole) -> bool:
        return at_least(self.role, needed)

    @property
    def is_client_secret(self) -> bool:
        return self.bound_role_id is not None

    def may_use_role(self, role_id: str) -> bool:
        """Whether a voice session of agent role ``role_id`` may serve this principal."""
        return self.bound_role_id is None or role_id == self.bound_role_id


@dataclass(frozen=True, slots=True)
class Membership:
    tenant: str
    user: str
    role: MembershipRole
    disabled: bool
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as lists show it: never its secret, never its hash."""

    id: str
    tenant: str
    user: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    def active(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A token just issued: ``secret`` is shown once and never stored."""

    info: TokenInfo
    secret: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ClientSecretInfo:
    """A client secret as the store keeps it: never the secret, only who and what it is for.

    ``token_id`` is the token that minted it; ``role_id`` the agent role it is bound to."""

    id: str
    tenant: str
    user: str
    role_id: str
    token_id: str
    created_at: datetime
    expires_at: datetime

    def active(self, now: datetime) -> bool:
        return self.expires_at > now


@dataclass(frozen=True, slots=True)
class IssuedClientSecret:
    """A client secret just minted: ``secret`` (``ek_…``) is shown once and never stored."""

    info: ClientSecretInfo
    secret: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Revocation:
    """Credentials that stopped being valid: one token (``token_id``) or all of a user's."""

    tenant: str
    user: str
    token_id: str | None = None

    def covers(self, principal: Principal) -> bool:
        if (principal.tenant, principal.user) != (self.tenant, self.user):
            return False
        return self.token_id is None or principal.token_id == self.token_id


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    return f"tok_{secrets.token_hex(8)}"


def is_client_secret(token: str) -> bool:
    return token.startswith(CLIENT_SECRET_PREFIX)


def new_client_secret() -> str:
    return CLIENT_SECRET_PREFIX + secrets.token_urlsafe(32)


def new_client_secret_id() -> str:
    return f"cs_{secrets.token_hex(8)}"


def check_id(kind: str, value: str) -> str:
    if not ID_PATTERN.match(value):
        raise InvalidAccount(
            f"{kind} id {value[:40]!r}: 1–128 of A–Z a–z 0–9 _ . @ -, starting alphanumeric"
        )
    return value


def check_role(role: str) -> MembershipRole:
    for known in MEMBERSHIP_ROLES:
        if role == known:
            return known
    raise InvalidAccount(f"role {role[:40]!r}: one of {', '.join(MEMBERSHIP_ROLES)}")


def check_client_secret(
    principal: Principal, role_id: str, ttl: timedelta
) -> tuple[str, str, timedelta]:
    """The minting token's id, the role id and the lifetime of a client secret to mint for
    ``principal``; ``InvalidAccount`` when it may not have one."""
    if principal.is_client_secret:
        raise InvalidAccount("a client secret cannot mint client secrets")
    if principal.token_id is None:
        raise InvalidAccount("a client secret is minted with a token")
    if not role_id or len(role_id) > 128 or not role_id.isprintable():
        raise InvalidAccount("role id: 1–128 printable characters")
    if not timedelta(0) < ttl <= MAX_CLIENT_SECRET_TTL:
        most = MAX_CLIENT_SECRET_TTL.total_seconds()
        raise InvalidAccount(f"a client secret lives more than 0 and at most {most:.0f} s")
    return principal.token_id, role_id, ttl


def check_token_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > MAX_TOKEN_NAME_CHARS or not name.isprintable():
        raise InvalidAccount(f"token name: 1–{MAX_TOKEN_NAME_CHARS} printable characters")
    return name


def check_scopes(scopes: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    if not scopes:
        return DEFAULT_SCOPES
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise InvalidAccount(f"unknown scope {unknown[0][:40]!r}: one of {', '.join(SCOPES)}")
    return tuple(s for s in SCOPES if s in scopes)
