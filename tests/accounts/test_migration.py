"""``accounts/migrations/0001``: the tokens of a database from before accounts keep working."""

from __future__ import annotations

from pathlib import Path

from accounts.model import hash_token
from accounts.postgres_store import PostgresAccountStore
from runtime.accounts import ensure_local_token
from runtime.migrations import apply_migrations
from tests.runtime.test_migrations import PoolFactory, schema_pools

__all__ = ["schema_pools"]


async def test_the_local_token_keeps_working_and_its_user_owns_local(
    schema_pools: PoolFactory, tmp_path: Path
) -> None:
    pool = await schema_pools()
    await apply_migrations(pool, ["runtime"])
    (tmp_path / "local-token").write_text("the-old-local-token\n")
    await pool.execute(
        "INSERT INTO account_tokens (token_hash, tenant, user_id)"
        " VALUES ($1, $2, $3), ($4, $5, $6)",
        hash_token("the-old-local-token"), "local", "local-user",
        hash_token("bobs-old-token"), "local", "bob",
    )  # fmt: skip
    await apply_migrations(pool, ["runtime", "accounts"])
    store = PostgresAccountStore(pool)
    local = await store.authenticate("the-old-local-token")
    assert local is not None and (local.tenant, local.user, local.role) == (
        "local", "local-user", "owner",
    )  # fmt: skip
    assert local.scopes == frozenset({"api", "metrics"})
    bob = await store.authenticate("bobs-old-token")
    assert bob is not None and bob.role == "member" and bob.scopes == frozenset({"api"})
    # The server's start finds the same token and membership: nothing new is made.
    assert await ensure_local_token(store, tmp_path) == "the-old-local-token"
    assert [t.name for t in await store.list_tokens("local", "local-user")] == ["local"]
    old = await pool.fetchval("SELECT to_regclass('account_tokens')")
    assert old is None
