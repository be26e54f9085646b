"""Accounts in the runtime: the local user and its token (the accounts themselves are the
``accounts`` package's).

With embedded defaults the server makes one local user, the owner of the tenant ``local``, on
first start and keeps its token in ``<data_dir>/local-token`` (mode 0600) so the printed URL
stays valid across restarts. That token carries the ``metrics`` scope too (one person's machine).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from accounts.errors import UserExists
from accounts.model import Principal, hash_token, new_token
from accounts.store import AccountStore, InMemoryAccountStore

__all__ = [
    "LOCAL_PRINCIPAL",
    "AccountStore",
    "InMemoryAccountStore",
    "Principal",
    "ensure_local_token",
    "hash_token",
    "new_token",
]

LOCAL_PRINCIPAL = Principal(tenant="local", user="local-user", role="owner")
LOCAL_SCOPES = ("api", "metrics")


async def ensure_local_token(store: AccountStore, data_dir: Path) -> str:
    """The local user's token: read from the data directory, or created there once. The local
    user is made the owner of ``local`` when it has no membership yet."""
    token = _local_token(data_dir)
    if await store.membership(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user) is None:
        try:
            await store.add_user(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user, role="owner")
        except UserExists:
            pass  # another process starting on the same database made it first
    await store.add_token(LOCAL_PRINCIPAL, token, scopes=LOCAL_SCOPES)
    return token


def _local_token(data_dir: Path) -> str:
    """Read, or made once. Processes of a fleet can start on one data directory together: the
    token is written whole to a file of this process's own, then linked to its name, which
    fails when another process linked first; then that one's is read. The file is never seen
    half-written (two servers started at once: one read it empty, or failed with EEXIST)."""
    path = data_dir / "local-token"
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    token = new_token()
    draft = data_dir / f".local-token.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            return path.read_text(encoding="utf-8").strip()
    finally:
        draft.unlink(missing_ok=True)
    return token
