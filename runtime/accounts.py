"""Accounts: bearer tokens mapped to (tenant, user).

Tokens are random (256 bits) and stored only as SHA-256 hashes. With embedded defaults the
server creates one local user on first start and keeps its token in ``<data_dir>/local-token``
(mode 0600) so the printed URL stays valid across restarts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: always derived from authentication, never from message fields."""

    tenant: str
    user: str


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


class AccountStore(Protocol):
    async def authenticate(self, token: str) -> Principal | None: ...

    async def add_token(self, principal: Principal, token: str) -> None: ...


class InMemoryAccountStore:
    def __init__(self) -> None:
        self._tokens: dict[str, Principal] = {}

    async def authenticate(self, token: str) -> Principal | None:
        return self._tokens.get(hash_token(token))

    async def add_token(self, principal: Principal, token: str) -> None:
        self._tokens[hash_token(token)] = principal


LOCAL_PRINCIPAL = Principal(tenant="local", user="local-user")


async def ensure_local_token(store: AccountStore, data_dir: Path) -> str:
    """The local user's token: read from the data directory, or created there once."""
    token = _local_token(data_dir)
    await store.add_token(LOCAL_PRINCIPAL, token)
    return token


def _local_token(data_dir: Path) -> str:
    path = data_dir / "local-token"
    if path.exists():
        token = path.read_text(encoding="utf-8").strip()
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        token = new_token()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
    return token
