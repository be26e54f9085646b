"""The tool catalog and tool secrets contracts, run against the in-memory and the PostgreSQL
stores; then what only PostgreSQL has: secrets sealed at rest, bound to their row, and rotated
under a new key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from memory.crypto import Keyring
from memory.errors import SealBroken
from tools.catalog import ToolCatalog, ToolSecrets, tool_from_record, tool_record
from tools.errors import HostNotAllowed, InvalidTool, ToolLimitExceeded, UnknownTool
from tools.mcp import (
    MAX_SERVERS_PER_ROLE,
    ApprovalPolicy,
    McpServer,
    ToolFilter,
    server_from_record,
    server_record,
)
from tools.postgres_catalog import PostgresToolSecrets
from tools.registry import HttpTool, SecretHeader

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


def weather(name: str = "weather", **fields: Any) -> HttpTool:
    base: dict[str, Any] = {
        "name": name, "description": "Forecast for a city", "parameters": SCHEMA,
        "method": "GET", "url_template": "https://api.example.com/forecast?q={city}",
        "headers": (SecretHeader("Authorization", "weather_key", "Bearer "),),
        "timeout_s": 5.0, "max_response_bytes": 4_096, "cancellable": False, "target": "city",
    }  # fmt: skip
    return HttpTool(**(base | fields))


# ------------------------------------------------------------------ the catalog


async def test_a_declaration_round_trips_with_every_field(tool_catalog: ToolCatalog) -> None:
    tool = weather()
    assert await tool_catalog.put("t", "r", tool) == tool
    assert await tool_catalog.get("t", "r", "weather") == tool
    assert await tool_catalog.list("t", "r") == [tool]
    assert tool_from_record(tool_record(tool)) == tool


async def test_declarations_are_scoped_by_tenant_and_role(tool_catalog: ToolCatalog) -> None:
    await tool_catalog.put("t", "r", weather())
    assert await tool_catalog.list("t", "other") == []
    assert await tool_catalog.list("t2", "r") == []
    for tenant, role in (("t", "other"), ("t2", "r")):
        with pytest.raises(UnknownTool):
            await tool_catalog.get(tenant, role, "weather")
        assert await tool_catalog.delete(tenant, role, "weather") is False
    assert [t.name for t in await tool_catalog.list("t", "r")] == ["weather"]


async def test_a_replaced_declaration_keeps_its_place(tool_catalog: ToolCatalog) -> None:
    for name in ("a", "b", "c"):
        await tool_catalog.put("t", "r", weather(name))
    changed = weather("a", description="Now with rain", method="POST")
    await tool_catalog.put("t", "r", changed)
    listed = await tool_catalog.list("t", "r")
    assert [t.name for t in listed] == ["a", "b", "c"]
    assert listed[0] == changed


async def test_delete_removes_only_that_tool(tool_catalog: ToolCatalog) -> None:
    await tool_catalog.put("t", "r", weather("a"))
    await tool_catalog.put("t", "r", weather("b"))
    assert await tool_catalog.delete("t", "r", "a") is True
    assert await tool_catalog.delete("t", "r", "a") is False
    assert [t.name for t in await tool_catalog.list("t", "r")] == ["b"]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"url_template": "https://evil.example.net/x?q={city}"}, HostNotAllowed),
        ({"url_template": "https://{city}.example.com/"}, InvalidTool),
        ({"name": "knowledge_search"}, InvalidTool),
        ({"name": "has space"}, InvalidTool),
        ({"method": "TRACE"}, InvalidTool),
        ({"timeout_s": 0.0}, InvalidTool),
        ({"parameters": {"type": "object", "properties": {"x": {"$ref": "#/a"}}}}, InvalidTool),
    ],
)
async def test_a_bad_declaration_is_refused_and_nothing_is_kept(
    tool_catalog: ToolCatalog, fields: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await tool_catalog.put("t", "r", weather(**fields))
    assert await tool_catalog.list("t", "r") == []


async def test_a_role_declares_at_most_max_tools_but_may_replace_one(
    tool_catalog: ToolCatalog,
) -> None:
    for name in ("a", "b", "c"):  # the fixtures' bound is 3
        await tool_catalog.put("t", "r", weather(name))
    with pytest.raises(ToolLimitExceeded):
        await tool_catalog.put("t", "r", weather("d"))
    await tool_catalog.put("t", "r", weather("c", description="replaced"))
    await tool_catalog.put("t", "other", weather("d"))  # another role has its own bound
    assert [t.name for t in await tool_catalog.list("t", "r")] == ["a", "b", "c"]


async def test_concurrent_new_tools_never_pass_the_bound(tool_catalog: ToolCatalog) -> None:
    results = await asyncio.gather(
        *(tool_catalog.put("t", "r", weather(f"t{n}")) for n in range(6)), return_exceptions=True
    )
    assert sum(isinstance(r, HttpTool) for r in results) == 3
    assert all(isinstance(r, (HttpTool, ToolLimitExceeded)) for r in results)
    assert len(await tool_catalog.list("t", "r")) == 3


# ------------------------------------------------------------------ the secrets


async def test_a_secret_is_set_read_replaced_and_deleted(tool_secrets: ToolSecrets) -> None:
    assert await tool_secrets.get("t", "weather_key") is None
    await tool_secrets.set("t", "weather_key", "sk-live-1")
    assert await tool_secrets.get("t", "weather_key") == "sk-live-1"
    await tool_secrets.set("t", "weather_key", "sk-live-2")
    assert await tool_secrets.get("t", "weather_key") == "sk-live-2"
    assert await tool_secrets.names("t") == ["weather_key"]
    assert await tool_secrets.delete("t", "weather_key") is True
    assert await tool_secrets.delete("t", "weather_key") is False
    assert await tool_secrets.get("t", "weather_key") is None
    assert await tool_secrets.names("t") == []


async def test_secrets_are_scoped_by_tenant_and_names_are_sorted(tool_secrets: ToolSecrets) -> None:
    await tool_secrets.set("t", "b", "one")
    await tool_secrets.set("t", "a", "two")
    await tool_secrets.set("t2", "c", "three")
    assert await tool_secrets.names("t") == ["a", "b"]
    assert await tool_secrets.names("t2") == ["c"]
    assert await tool_secrets.get("t2", "a") is None
    assert await tool_secrets.delete("t2", "a") is False
    assert await tool_secrets.get("t", "a") == "two"


@pytest.mark.parametrize(
    ("name", "value"),
    [("bad name", "v"), ("", "v"), ("ok", ""), ("ok", "two\nlines"), ("ok", "x" * 4_097)],
)
async def test_a_bad_secret_is_refused(tool_secrets: ToolSecrets, name: str, value: str) -> None:
    with pytest.raises(InvalidTool):
        await tool_secrets.set("t", name, value)
    assert await tool_secrets.names("t") == []


async def test_a_tenant_keeps_at_most_max_secrets(tool_secrets: ToolSecrets) -> None:
    for name in ("a", "b", "c"):  # the fixtures' bound is 3
        await tool_secrets.set("t", name, "v")
    with pytest.raises(ToolLimitExceeded):
        await tool_secrets.set("t", "d", "v")
    await tool_secrets.set("t", "c", "replaced")
    await tool_secrets.set("t2", "d", "v")
    assert await tool_secrets.get("t", "c") == "replaced"
    assert await tool_secrets.names("t") == ["a", "b", "c"]


async def test_no_secret_value_shows_in_repr(tool_secrets: ToolSecrets) -> None:
    await tool_secrets.set("t", "k", "sk-very-secret")
    assert "sk-very-secret" not in repr(tool_secrets)


# ------------------------------------------------------------------ sealed at rest (PostgreSQL)


PLAIN = "sk-plaintext-9f8e7d6c"


async def _every_table_as_text(pool: Any) -> str:
    """Every row of every table of the schema, as PostgreSQL renders it (bytea as hex)."""
    async with pool.acquire() as conn:
        tables = await conn.fetch(
            "SELECT quote_ident(tablename) AS name FROM pg_tables WHERE schemaname = 'public'"
        )
        texts = [
            str(r[0])
            for t in tables
            for r in await conn.fetch(f"SELECT t::text FROM {t['name']} t")
        ]
    return "\n".join(texts)


async def test_no_column_of_any_table_holds_a_secret_in_clear(pg_pool: Any) -> None:
    secrets = PostgresToolSecrets(pg_pool, keyring=Keyring.generate())
    await secrets.set("t", "weather_key", PLAIN)
    dump = await _every_table_as_text(pg_pool)
    assert "weather_key" in dump  # the name is plain (it is listed), the value never
    assert PLAIN not in dump
    assert PLAIN.encode().hex() not in dump
    assert await secrets.get("t", "weather_key") == PLAIN


async def test_a_ciphertext_moved_to_another_row_does_not_open(pg_pool: Any) -> None:
    secrets = PostgresToolSecrets(pg_pool, keyring=Keyring.generate())
    await secrets.set("t", "a", PLAIN)
    await secrets.set("t", "b", "something else")
    await secrets.set("t2", "a", "another tenant's")
    async with pg_pool.acquire() as conn:
        await conn.execute(
            "UPDATE tool_secrets SET value_sealed = (SELECT value_sealed FROM tool_secrets"
            " WHERE tenant = 't' AND name = 'a') WHERE (tenant, name) IN (('t', 'b'), ('t2', 'a'))"
        )
    with pytest.raises(SealBroken):
        await secrets.get("t", "b")
    with pytest.raises(SealBroken):
        await secrets.get("t2", "a")
    assert await secrets.get("t", "a") == PLAIN


async def test_rotate_reseals_every_secret_under_the_new_key(pg_pool: Any) -> None:
    old = Keyring.generate("old")
    await PostgresToolSecrets(pg_pool, keyring=old).set("t", "a", PLAIN)
    await PostgresToolSecrets(pg_pool, keyring=old).set("t2", "b", "second")
    new = old.with_new_active_key("new")
    secrets = PostgresToolSecrets(pg_pool, keyring=new)
    assert await secrets.key_ids_in_use() == {"old": 2}
    assert await secrets.seal_plaintext() == 0
    assert await secrets.rotate(batch=1) == 2
    assert await secrets.key_ids_in_use() == {"new": 2}
    only_new = new.without({"old"})
    assert await PostgresToolSecrets(pg_pool, keyring=only_new).get("t", "a") == PLAIN
    assert await PostgresToolSecrets(pg_pool, keyring=only_new).get("t2", "b") == "second"


# ------------------------------------------------------------------ a role's MCP servers


def shop(label: str = "shop", **fields: Any) -> McpServer:
    base: dict[str, Any] = {
        "label": label, "url": "https://api.example.com/mcp",
        "allowed": ToolFilter(frozenset({"stock_level", "reorder"})),
        "approval": ApprovalPolicy(mode=None, never=ToolFilter(read_only=True)),
        "description": "The warehouse",
        "secret_headers": (SecretHeader("X-Api-Key", "shop_key"),),
    }  # fmt: skip
    return McpServer(**(base | fields))


async def test_mcp_servers_round_trip_beside_the_http_tools(tool_catalog: ToolCatalog) -> None:
    await tool_catalog.put("t", "r", weather())
    server = shop()
    assert await tool_catalog.put_mcp("t", "r", server) == server
    assert await tool_catalog.list_mcp("t", "r") == [server]
    assert server_from_record(server_record(server)) == server
    # The two kinds never mix: an HTTP tool named like a server's row is neither.
    assert [t.name for t in await tool_catalog.list("t", "r")] == ["weather"]
    with pytest.raises(UnknownTool):
        await tool_catalog.get("t", "r", "mcp:shop")
    assert await tool_catalog.delete("t", "r", "mcp:shop") is False
    for name in ("w1", "w2"):  # the HTTP tool limit (3 here) does not count the server
        await tool_catalog.put("t", "r", weather(name))
    replaced = shop(url="https://api.example.com/mcp2", secret_headers=())
    await tool_catalog.put_mcp("t", "r", replaced)
    assert await tool_catalog.list_mcp("t", "r") == [replaced]
    assert await tool_catalog.list_mcp("t", "other") == []
    assert await tool_catalog.list_mcp("t2", "r") == []
    assert await tool_catalog.delete_mcp("t", "r", "shop") is True
    assert await tool_catalog.delete_mcp("t", "r", "shop") is False
    assert await tool_catalog.list_mcp("t", "r") == []


async def test_mcp_servers_are_checked_bounded_and_forgotten(tool_catalog: ToolCatalog) -> None:
    with pytest.raises(HostNotAllowed):
        await tool_catalog.put_mcp("t", "r", shop(url="https://evil.example.net/mcp"))
    with pytest.raises(InvalidTool):  # a role's server names secrets, never a header value
        await tool_catalog.put_mcp("t", "r", shop(headers={"X-Api-Key": "plain"}))
    with pytest.raises(InvalidTool):
        await tool_catalog.put_mcp("t", "r", shop(label="a shop"))
    for index in range(MAX_SERVERS_PER_ROLE):
        await tool_catalog.put_mcp("t", "r", shop(f"s{index}"))
    await tool_catalog.put_mcp("t", "r", shop("s0", description="replacing one is fine"))
    with pytest.raises(ToolLimitExceeded):
        await tool_catalog.put_mcp("t", "r", shop("one_more"))
    assert await tool_catalog.forget_role("t", "r") == MAX_SERVERS_PER_ROLE
    assert await tool_catalog.list_mcp("t", "r") == []
