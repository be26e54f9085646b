"""Declared HTTP tools and tool secrets on PostgreSQL: the contracts of ``tools/catalog.py``.

Theory of operation
-------------------
Tables live in ``tools/migrations/0002_tool_catalog.sql``.

1. ``tool_declarations`` holds one row per (tenant, role, name): the checked declaration as
   ``tool_record`` JSON. ``put`` checks first (``check_http_tool``, this catalog's allowlist and
   bounds), then upserts; a replaced declaration keeps its place (``seq``), so lists are in
   the order tools were first declared, as in memory.
2. Count bounds (catalog rule 4) are checked and written in one transaction holding a
   transaction-level advisory lock on (table, tenant[, role]): two concurrent ``put``s of new
   names cannot both pass the count. The lock's two-integer form never meets the migrations'
   one-integer key; a hash collision only serialises two writers a little more.
3. ``tool_secrets`` holds one row per (tenant, name): the value sealed with the memory keyring
   under ``row_context("tool_secrets", "value", tenant, name)``, the key id beside it. A
   ciphertext copied to another tenant's or name's row fails its tag (``SealBroken``); no
   column ever holds the value in clear. ``names`` never decrypts.
4. ``rotate`` re-seals, in batches of one transaction each, every secret not under the active
   key (``FOR UPDATE SKIP LOCKED``); ``key_ids_in_use`` counts rows per key id. With
   ``seal_plaintext`` (nothing: sealed from the first row) they make this a sealed store of
   ``openrealtime memory rotate-key`` (``runtime/cli/memory.py``).
5. Every statement names ``tenant`` and is bounded by ``query_timeout``, the wait for a
   connection by ``acquire_timeout``; connection failures and timeouts become
   ``ToolsUnavailable``. Nothing here logs a value, a declaration or a name.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from typing import Any, TypeVar

from memory.crypto import Keyring, Sealed, row_context
from tools.catalog import (
    MAX_DECLARED_TOOLS,
    MAX_SECRETS_PER_TENANT,
    check_secret,
    tool_from_record,
    tool_record,
)
from tools.errors import ToolLimitExceeded, UnknownTool
from tools.mcp import (
    MAX_SERVERS_PER_ROLE,
    McpServer,
    check_server,
    server_from_record,
    server_record,
)
from tools.postgres_common import PooledStore, forget_role_rows
from tools.registry import HttpTool, HttpToolBounds, check_http_tool

T = TypeVar("T")
DECLARATIONS_TABLE = "tool_declarations"
MCP_PREFIX = "mcp:"
"""A role's MCP server is a row named ``mcp:<label>`` (no HTTP tool name has a colon)."""
SECRETS_TABLE = "tool_secrets"
RESEAL_BATCH = 500
"""Secrets one ``rotate`` transaction re-seals."""


def secret_context(tenant: str, name: str) -> bytes:
    """Associated data binding a sealed secret to its row (rule 3)."""
    return row_context(SECRETS_TABLE, "value", tenant, name)


class _Pooled(PooledStore):
    WHAT = "tool catalog"

    async def _lock(self, conn: Any, table: str, *parts: str) -> None:
        """Rule 2's advisory lock for the rest of the transaction."""
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
            table, "\x1f".join(parts), timeout=self.query_timeout,
        )  # fmt: skip


class PostgresToolCatalog(_Pooled):
    """``ToolCatalog`` on an asyncpg pool whose database has the tools migrations."""

    def __init__(
        self,
        pool: Any,
        allowed_hosts: Iterable[str] = (),
        bounds: HttpToolBounds | None = None,
        *,
        max_tools: int = MAX_DECLARED_TOOLS,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        super().__init__(pool, query_timeout=query_timeout, acquire_timeout=acquire_timeout)
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.bounds = bounds or HttpToolBounds()
        self.max_tools = max_tools

    async def list(self, tenant: str, role_id: str) -> builtins.list[HttpTool]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT declaration FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND left(name, 4) <> $3 ORDER BY seq",
                tenant, role_id, MCP_PREFIX, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return [tool_from_record(json.loads(r["declaration"])) for r in rows]

    async def get(self, tenant: str, role_id: str, name: str) -> HttpTool:
        found = await self._call(
            lambda conn: conn.fetchval(
                f"SELECT declaration FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND name = $3",
                tenant, role_id, name, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        if found is None or name.startswith(MCP_PREFIX):
            raise UnknownTool(f"no tool named {name!r}")
        return tool_from_record(json.loads(found))

    async def put(self, tenant: str, role_id: str, tool: HttpTool) -> HttpTool:
        check_http_tool(tool, self.allowed_hosts, self.bounds)  # built-in names too
        record = json.dumps(tool_record(tool), ensure_ascii=False)
        t = self.query_timeout

        async def work(conn: Any) -> HttpTool:
            await self._lock(conn, DECLARATIONS_TABLE, tenant, role_id)
            exists = await conn.fetchval(
                f"SELECT 1 FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND name = $3",
                tenant, role_id, tool.name, timeout=t,
            )  # fmt: skip
            if exists is None:
                count = await conn.fetchval(
                    f"SELECT count(*) FROM {DECLARATIONS_TABLE}"
                    " WHERE tenant = $1 AND role_id = $2 AND left(name, 4) <> $3",
                    tenant, role_id, MCP_PREFIX, timeout=t,
                )  # fmt: skip
                if count >= self.max_tools:
                    raise ToolLimitExceeded(f"a role declares at most {self.max_tools} HTTP tools")
            await conn.execute(
                f"INSERT INTO {DECLARATIONS_TABLE} (tenant, role_id, name, declaration)"
                " VALUES ($1, $2, $3, $4::jsonb)"
                " ON CONFLICT (tenant, role_id, name) DO UPDATE"
                " SET declaration = EXCLUDED.declaration, updated_at = clock_timestamp()",
                tenant, role_id, tool.name, record, timeout=t,
            )  # fmt: skip
            return tool

        return await self._call(work, transaction=True)

    async def delete(self, tenant: str, role_id: str, name: str) -> bool:
        if name.startswith(MCP_PREFIX):
            return False
        return await self._delete(tenant, role_id, name)

    async def _delete(self, tenant: str, role_id: str, name: str) -> bool:
        status = await self._call(
            lambda conn: conn.execute(
                f"DELETE FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND name = $3",
                tenant, role_id, name, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return bool(status != "DELETE 0")

    async def forget_role(self, tenant: str, role_id: str) -> int:
        return await forget_role_rows(
            self._call, DECLARATIONS_TABLE, tenant, role_id, self.query_timeout
        )

    async def list_mcp(self, tenant: str, role_id: str) -> builtins.list[McpServer]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT declaration FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND left(name, 4) = $3 ORDER BY seq",
                tenant, role_id, MCP_PREFIX, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return [server_from_record(json.loads(r["declaration"])) for r in rows]

    async def put_mcp(self, tenant: str, role_id: str, server: McpServer) -> McpServer:
        record = json.dumps(server_record(check_server(server, self.allowed_hosts)))
        name, t = MCP_PREFIX + server.label, self.query_timeout

        async def work(conn: Any) -> McpServer:
            await self._lock(conn, DECLARATIONS_TABLE, tenant, role_id)
            count = await conn.fetchval(
                f"SELECT count(*) FILTER (WHERE name <> $4) FROM {DECLARATIONS_TABLE}"
                " WHERE tenant = $1 AND role_id = $2 AND left(name, 4) = $3",
                tenant, role_id, MCP_PREFIX, name, timeout=t,
            )  # fmt: skip
            if count >= MAX_SERVERS_PER_ROLE:
                raise ToolLimitExceeded(
                    f"a role declares at most {MAX_SERVERS_PER_ROLE} MCP servers"
                )
            await conn.execute(
                f"INSERT INTO {DECLARATIONS_TABLE} (tenant, role_id, name, declaration)"
                " VALUES ($1, $2, $3, $4::jsonb)"
                " ON CONFLICT (tenant, role_id, name) DO UPDATE"
                " SET declaration = EXCLUDED.declaration, updated_at = clock_timestamp()",
                tenant, role_id, name, record, timeout=t,
            )  # fmt: skip
            return server

        return await self._call(work, transaction=True)

    async def delete_mcp(self, tenant: str, role_id: str, label: str) -> bool:
        return await self._delete(tenant, role_id, MCP_PREFIX + label)


class PostgresToolSecrets(_Pooled):
    """``ToolSecrets`` on an asyncpg pool, every value sealed with ``keyring`` (rule 3)."""

    def __init__(
        self,
        pool: Any,
        *,
        keyring: Keyring,
        max_secrets: int = MAX_SECRETS_PER_TENANT,
        query_timeout: float = 5.0,
        acquire_timeout: float = 5.0,
    ) -> None:
        super().__init__(pool, query_timeout=query_timeout, acquire_timeout=acquire_timeout)
        self.keyring = keyring
        self.max_secrets = max_secrets

    def __repr__(self) -> str:
        return f"PostgresToolSecrets(keyring={self.keyring!r})"

    async def get(self, tenant: str, name: str) -> str | None:
        row = await self._call(
            lambda conn: conn.fetchrow(
                f"SELECT key_id, value_sealed FROM {SECRETS_TABLE}"
                " WHERE tenant = $1 AND name = $2",
                tenant, name, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        if row is None:
            return None
        sealed = Sealed(row["key_id"], row["value_sealed"])
        return self.keyring.open(sealed, context=secret_context(tenant, name))

    async def set(self, tenant: str, name: str, value: str) -> None:
        check_secret(name, value)
        sealed = self.keyring.seal(value, context=secret_context(tenant, name))
        t = self.query_timeout

        async def work(conn: Any) -> None:
            await self._lock(conn, SECRETS_TABLE, tenant)
            exists = await conn.fetchval(
                f"SELECT 1 FROM {SECRETS_TABLE} WHERE tenant = $1 AND name = $2",
                tenant, name, timeout=t,
            )  # fmt: skip
            if exists is None:
                count = await conn.fetchval(
                    f"SELECT count(*) FROM {SECRETS_TABLE} WHERE tenant = $1", tenant, timeout=t
                )
                if count >= self.max_secrets:
                    raise ToolLimitExceeded(f"a tenant keeps at most {self.max_secrets} secrets")
            await conn.execute(
                f"INSERT INTO {SECRETS_TABLE} (tenant, name, key_id, value_sealed)"
                " VALUES ($1, $2, $3, $4) ON CONFLICT (tenant, name) DO UPDATE"
                " SET key_id = EXCLUDED.key_id, value_sealed = EXCLUDED.value_sealed,"
                " updated_at = clock_timestamp()",
                tenant, name, sealed.key_id, sealed.blob, timeout=t,
            )  # fmt: skip

        await self._call(work, transaction=True)

    async def delete(self, tenant: str, name: str) -> bool:
        status = await self._call(
            lambda conn: conn.execute(
                f"DELETE FROM {SECRETS_TABLE} WHERE tenant = $1 AND name = $2",
                tenant, name, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return bool(status != "DELETE 0")

    async def names(self, tenant: str) -> builtins.list[str]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT name FROM {SECRETS_TABLE} WHERE tenant = $1 ORDER BY name",
                tenant, timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return [r["name"] for r in rows]

    # ------------------------------------------------------------------ key rotation (rule 4)

    async def seal_plaintext(self, *, batch: int = RESEAL_BATCH) -> int:
        """Nothing to seal: this table was sealed from its first row."""
        return 0

    async def rotate(self, *, batch: int = RESEAL_BATCH) -> int:
        """Re-seal every secret not under the active key; how many moved."""
        t = self.query_timeout

        async def work(conn: Any) -> int:
            rows = await conn.fetch(
                f"SELECT tenant, name, key_id, value_sealed FROM {SECRETS_TABLE}"
                f" WHERE key_id <> $1 LIMIT {int(batch)} FOR UPDATE SKIP LOCKED",
                self.keyring.active_id, timeout=t,
            )  # fmt: skip
            for row in rows:
                context = secret_context(row["tenant"], row["name"])
                value = self.keyring.open(Sealed(row["key_id"], row["value_sealed"]),
                                          context=context)  # fmt: skip
                sealed = self.keyring.seal(value, context=context)
                await conn.execute(
                    f"UPDATE {SECRETS_TABLE} SET key_id = $3, value_sealed = $4"
                    " WHERE tenant = $1 AND name = $2",
                    row["tenant"], row["name"], sealed.key_id, sealed.blob, timeout=t,
                )  # fmt: skip
            return len(rows)

        total = 0
        while True:
            done = await self._call(work, transaction=True)
            total += done
            if done < batch:
                return total

    async def key_ids_in_use(self) -> dict[str, int]:
        rows = await self._call(
            lambda conn: conn.fetch(
                f"SELECT key_id, count(*) AS n FROM {SECRETS_TABLE} GROUP BY key_id",
                timeout=self.query_timeout,
            ),
            transaction=False,
        )  # fmt: skip
        return {r["key_id"]: int(r["n"]) for r in rows}


__all__ = ["PostgresToolCatalog", "PostgresToolSecrets", "secret_context"]
