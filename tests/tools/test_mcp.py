"""``tools.mcp`` against a real MCP server (``tests.mcp.server``, its own process): listing with
filters, calls, errors by GA type, the timeout, headers, a server that went away."""

from __future__ import annotations

import asyncio

import pytest

from tests.fleet import free_port
from tests.mcp import mcp_server
from tools.errors import HostNotAllowed, InvalidTool, McpCallFailed
from tools.mcp import ApprovalPolicy, McpConnection, McpServer, ToolFilter, check_server

KEY = "k-3f9a"


async def test_lists_the_allowed_tools_and_calls_them() -> None:
    async with mcp_server() as url:
        everything = McpConnection(McpServer("shop", url))
        named = McpConnection(McpServer("shop", url, allowed=ToolFilter(frozenset({"reorder"}))))
        read_only = McpConnection(McpServer("shop", url, allowed=ToolFilter(read_only=True)))
        try:
            listed = {t.name: t for t in await everything.list_tools()}
            assert {"stock_level", "reorder", "slow_report", "broken"} <= set(listed)
            stock = listed["stock_level"]
            assert stock.read_only is True and "in stock" in stock.description
            assert stock.input_schema["required"] == ["product"]
            assert listed["reorder"].read_only is None
            assert [t.name for t in await named.list_tools()] == ["reorder"]
            assert [t.name for t in await read_only.list_tools()] == ["stock_level"]

            assert await everything.call("stock_level", {"product": "bolts"}) == (
                "bolts: 17 in stock"
            )
            text = await everything.call("reorder", {"product": "nuts", "quantity": 50})
            assert text == "Ordered 50 nuts; delivery on Tuesday."
        finally:
            for connection in (everything, named, read_only):
                await connection.aclose()


async def test_failures_carry_the_ga_error_type() -> None:
    async with mcp_server() as url:
        connection = McpConnection(McpServer("shop", url), timeout_s=1.0)
        short = McpConnection(McpServer("shop", url), max_result_chars=12)
        try:
            with pytest.raises(McpCallFailed) as failed:
                await connection.call("broken", {})
            assert failed.value.kind == "tool_execution_error"
            assert failed.value.message == "Error executing tool broken"  # as the server said

            with pytest.raises(McpCallFailed) as missing:
                await connection.call("reorder", {"product": "nuts"})  # quantity is required
            assert missing.value.kind == "tool_execution_error"

            with pytest.raises(McpCallFailed) as slow:
                await connection.call("slow_report", {})
            assert (slow.value.kind, slow.value.status) == ("http_error", 504)

            # After a timeout the connection still serves; results are cut at the limit.
            assert await connection.call("stock_level", {"product": "nuts"}) == (
                "nuts: 240 in stock"
            )
            assert await short.call("stock_level", {"product": "nuts"}) == "nuts: 240 in"
        finally:
            await connection.aclose()
            await short.aclose()


async def test_headers_reach_the_server_and_a_refusal_is_an_http_error() -> None:
    async with mcp_server(api_key=KEY) as url:
        keyed = McpConnection(McpServer("shop", url, headers={"X-Api-Key": KEY}))
        unkeyed = McpConnection(McpServer("shop", url, headers={"X-Api-Key": "wrong"}))
        try:
            assert "reorder" in {t.name for t in await keyed.list_tools()}
            with pytest.raises(McpCallFailed) as refused:
                await unkeyed.list_tools()
            assert refused.value.kind in ("http_error", "protocol_error")
            assert "wrong" not in refused.value.message  # a header value is never in an error
        finally:
            await keyed.aclose()
            await unkeyed.aclose()


async def test_a_server_that_is_not_there_and_one_that_went_away() -> None:
    nobody = McpConnection(McpServer("gone", f"http://127.0.0.1:{free_port()}/mcp"), timeout_s=5)
    with pytest.raises(McpCallFailed) as unreachable:
        await nobody.list_tools()
    assert unreachable.value.kind == "http_error"
    await nobody.aclose()

    async with mcp_server() as url:
        connection = McpConnection(McpServer("shop", url), timeout_s=5)
        assert await connection.call("stock_level", {"product": "bolts"})
    # The server stopped: the next call fails clearly instead of hanging.
    with pytest.raises(McpCallFailed):
        await connection.call("stock_level", {"product": "bolts"})
    await connection.aclose()
    with pytest.raises(McpCallFailed):  # closed: no new connection is opened
        await connection.call("stock_level", {"product": "bolts"})


async def test_a_cancelled_call_leaves_the_connection_usable() -> None:
    async with mcp_server() as url:
        connection = McpConnection(McpServer("shop", url), timeout_s=20)
        try:
            call = asyncio.ensure_future(connection.call("slow_report", {}))
            await asyncio.sleep(0)  # let it start
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert await connection.call("stock_level", {"product": "washers"}) == (
                "washers: 0 in stock"
            )
        finally:
            await connection.aclose()


def test_a_server_url_obeys_the_tool_allowlist() -> None:
    assert check_server(McpServer("shop", "http://127.0.0.1:9/mcp"), {"127.0.0.1"})
    with pytest.raises(HostNotAllowed):
        check_server(McpServer("shop", "http://10.0.0.8/mcp"), {"127.0.0.1"})
    with pytest.raises(InvalidTool):
        check_server(McpServer("shop", "file:///etc/passwd"), {"127.0.0.1"})
    with pytest.raises(InvalidTool):
        check_server(McpServer("shop", "http://user:pw@127.0.0.1/mcp"), {"127.0.0.1"})
    with pytest.raises(InvalidTool):
        check_server(McpServer("a shop", "http://127.0.0.1/mcp"), {"127.0.0.1"})


def test_approval_policies_follow_the_ga_fields() -> None:
    assert ApprovalPolicy().requires("reorder", None)  # GA's default: always
    assert not ApprovalPolicy(mode="never").requires("reorder", None)
    read_only_free = ApprovalPolicy(mode=None, never=ToolFilter(read_only=True))
    assert not read_only_free.requires("stock_level", True)
    assert read_only_free.requires("reorder", None)
    named = ApprovalPolicy(
        mode=None, always=ToolFilter(frozenset({"reorder"})), never=ToolFilter(read_only=True)
    )
    assert named.requires("reorder", True)  # "always" wins over "never"
    assert not named.requires("stock_level", True)
