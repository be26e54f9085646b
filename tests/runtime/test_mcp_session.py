"""GA ``mcp`` tools through the real server and a real MCP server (``tests.mcp.server``, its own
process): the listing item, a call run by the runtime inside the response, approvals, a deny,
failures, refused declarations — every server event validated against the ``openai`` package
(``GAConnection``). The brain is a fake that calls what it is offered; the default brain's
choice is tested with the real model in ``test_function_tools_real``."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from journal.events import EventKind
from plugins.contracts import BrainDelta, BrainInput, ToolCall
from plugins.fakes import FakeASR, FakeTTS
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.fleet import free_port
from tests.mcp import mcp_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_ga_conformance import GAConnection, journal_of, say
from tests.runtime.test_ga_session import connect, live
from tools.capability import Capability
from tools.grants import GrantedBy, NewGrant

KEY = "mcp-key-7Qx2"


class ShopBrain:
    """Calls the MCP shop's tools when offered and asked for; answers from their output."""

    def __init__(self) -> None:
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        offered = {tool.name for tool in request.tools}
        said = request.current_input.lower()
        if request.tool_results:
            yield BrainDelta(text=f"Here is what I found: {request.tool_results[-1].content}")
        elif "stock" in said and "stock_level" in offered:
            yield BrainDelta(tool_call=ToolCall("call_s1", "stock_level", {"product": "bolts"}))
        elif "order" in said and "reorder" in offered:
            call = ToolCall("call_r1", "reorder", {"product": "nuts", "quantity": 50})
            yield BrainDelta(tool_call=call)
        elif "broken" in said and "broken" in offered:
            yield BrainDelta(tool_call=ToolCall("call_b1", "broken", {}))
        else:
            yield BrainDelta(text="Hello.")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=300, tool_hosts="127.0.0.1"
    )
    plugins = fake_plugins(brain=ShopBrain(), asr=FakeASR(["hello"]), tts=FakeTTS(ms_per_char=1))
    async with running_server(settings, plugins=plugins) as running:
        yield running


def shop(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "shop", "server_url": url, **fields}


async def declare(conn: GAConnection, *tools: dict[str, Any]) -> dict[str, Any]:
    """``session.update`` with ``tools``; the listing that follows (its done item)."""
    await conn.send(
        {"type": "session.update", "session": {"output_modalities": ["text"], "tools": list(tools)}}
    )
    updated = await conn.wait("session.updated")
    added = await conn.wait(
        "conversation.item.added", where=lambda e: e["item"]["type"] == "mcp_list_tools"
    )
    await conn.wait("mcp_list_tools.in_progress")
    outcome = await conn.wait("mcp_list_tools.completed")
    done = await conn.wait(
        "conversation.item.done", where=lambda e: e["item"]["id"] == outcome["item_id"]
    )
    assert added["item"]["id"] == outcome["item_id"] and added["item"]["tools"] == []
    return {"updated": updated, "item": done["item"]}


def outputs(done: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [o for o in done["response"]["output"] if o["type"] == kind]


async def test_a_server_is_listed_and_its_tool_runs_inside_the_response(
    server: RunningServer,
) -> None:
    async with mcp_server() as url:
        ws, conn = await connect(server)
        async with ws:
            declared = await declare(conn, shop(url, require_approval="never"))
            (shown,) = declared["updated"]["session"]["tools"]
            assert shown == {
                "type": "mcp",
                "server_label": "shop",
                "server_url": url,
                "require_approval": "never",
            }
            listed = {t["name"]: t for t in declared["item"]["tools"]}
            assert {"stock_level", "reorder", "broken"} <= set(listed)
            assert listed["stock_level"]["annotations"]["readOnlyHint"] is True
            assert listed["reorder"]["input_schema"]["required"] == ["product", "quantity"]

            await say(conn, "How many bolts are in stock?")
            added = await conn.wait("response.output_item.added")
            assert added["item"]["type"] == "mcp_call" and added["item"]["arguments"] == ""
            args = await conn.wait("response.mcp_call_arguments.done")
            assert json.loads(args["arguments"]) == {"product": "bolts"}
            await conn.wait("response.mcp_call.in_progress")
            await conn.wait("response.mcp_call.completed")
            item_done = await conn.wait("response.output_item.done")
            assert item_done["item"]["output"] == "bolts: 17 in stock"
            done = await conn.wait("response.done")
            thread = live(server).thread
    (call,) = outputs(done, "mcp_call")
    assert (call["name"], call["server_label"], call["output"]) == (
        "stock_level",
        "shop",
        "bolts: 17 in stock",
    )
    (answer,) = outputs(done, "message")
    assert "17 in stock" in answer["content"][0]["text"]
    types = [e["type"] for e in conn.events]
    assert "response.function_call_arguments.done" not in types  # the runtime ran it
    journal = await journal_of(server, thread.thread_id)
    kinds = [e.kind for e in journal if e.payload.get("name") == "stock_level"]
    assert kinds == [EventKind.TOOL_CALL, EventKind.TOOL_RESULT]


async def test_approval_is_asked_for_what_the_declaration_covers(server: RunningServer) -> None:
    policy = {"never": {"read_only": True}}  # read-only tools run; the rest is asked about
    async with mcp_server() as url:
        ws, conn = await connect(server)
        async with ws:
            await declare(conn, shop(url, require_approval=policy))
            await say(conn, "How many bolts are in stock?")
            done = await conn.wait("response.done")
            assert outputs(done, "mcp_call")[0]["output"] == "bolts: 17 in stock"

            await say(conn, "Please order more nuts.")
            request = await conn.wait(
                "conversation.item.added",
                where=lambda e: e["item"]["type"] == "mcp_approval_request",
            )
            asked = request["item"]
            assert (asked["name"], asked["server_label"]) == ("reorder", "shop")
            assert json.loads(asked["arguments"]) == {"product": "nuts", "quantity": 50}
            done = await conn.wait("response.done")
            assert outputs(done, "mcp_call") == []  # nothing ran before the answer

            await conn.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "mcp_approval_response",
                        "approval_request_id": asked["id"],
                        "approve": True,
                    },
                }
            )
            done = await conn.wait("response.done")
            (call,) = outputs(done, "mcp_call")
            assert call["approval_request_id"] == asked["id"]
            assert call["output"] == "Ordered 50 nuts; delivery on Tuesday."
            assert "delivery on Tuesday" in outputs(done, "message")[0]["content"][0]["text"]

            await say(conn, "Order more nuts again.")
            again = await conn.wait(
                "conversation.item.added",
                where=lambda e: e["item"]["type"] == "mcp_approval_request",
            )
            await conn.wait("response.done")
            await conn.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "mcp_approval_response",
                        "approval_request_id": again["item"]["id"],
                        "approve": False,
                    },
                }
            )
            done = await conn.wait("response.done")
    assert outputs(done, "mcp_call") == []  # refused: it never ran
    assert "declined" in outputs(done, "message")[0]["content"][0]["text"]


async def test_a_deny_wins_over_a_declaration_that_waives_approval(
    server: RunningServer,
) -> None:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    async with mcp_server() as url:
        ws, conn = await connect(server)
        async with ws:
            await declare(conn, shop(url, require_approval="never"))
            await server.services.grants.create(
                principal.tenant,
                live(server).role.id,
                NewGrant(
                    capability=Capability("reorder", "*"),
                    effect="deny",
                    scope="lifetime",
                    granted_by=GrantedBy("person", principal.user),
                ),
            )
            await say(conn, "Please order more nuts.")
            failed = await conn.wait("response.mcp_call.failed")
            item = await conn.wait("response.output_item.done")
            done = await conn.wait("response.done")
    assert failed["item_id"] == item["item"]["id"]
    assert item["item"]["error"]["type"] == "tool_execution_error"
    assert item["item"]["error"]["message"].startswith("Not permitted")
    assert "Not permitted" in outputs(done, "message")[0]["content"][0]["text"]


async def test_failures_are_items_and_the_session_goes_on(server: RunningServer) -> None:
    async with mcp_server() as url:
        ws, conn = await connect(server)
        async with ws:
            await declare(conn, shop(url, require_approval="never"))
            await say(conn, "Run the broken tool.")
            await conn.wait("response.mcp_call.failed")
            done = await conn.wait("response.done")
            (call,) = outputs(done, "mcp_call")
            assert call["error"] == {
                "type": "tool_execution_error",
                "message": "Error executing tool broken",
            }

            gone = f"http://127.0.0.1:{free_port()}/mcp"
            await conn.send(
                {"type": "session.update", "session": {"tools": [shop(gone, server_label="gone")]}}
            )
            await conn.wait("mcp_list_tools.failed")
            await say(conn, "Hi.")
            done = await conn.wait("response.done")
    assert done["response"]["status"] == "completed"
    assert outputs(done, "message")[0]["content"][0]["text"] == "Hello."


async def test_headers_reach_the_mcp_server_and_nowhere_else(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the server's default level (runtime/logs.py rule 3)
    async with mcp_server(api_key=KEY) as url:
        ws, conn = await connect(server)
        async with ws:
            declared = await declare(
                conn, shop(url, require_approval="never", headers={"X-Api-Key": KEY})
            )
            await say(conn, "How many bolts are in stock?")
            done = await conn.wait("response.done")
            shown = live(server).session_json()
    assert outputs(done, "mcp_call")[0]["output"] == "bolts: 17 in stock"
    assert "headers" not in declared["updated"]["session"]["tools"][0]
    assert KEY not in json.dumps(conn.events) and KEY not in json.dumps(shown)
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    ("tool", "code", "param"),
    [
        ({"server_url": "http://10.1.2.3/mcp"}, "invalid_value", "session.tools[0].server_url"),
        (
            {"connector_id": "connector_gmail", "server_url": None},
            "unsupported_parameter",
            "session.tools[0].connector_id",
        ),
        ({"server_url": None}, "invalid_value", "session.tools[0].server_url"),
        ({"require_approval": "sometimes"}, "invalid_value", "session.tools[0].require_approval"),
    ],
)
async def test_a_declaration_that_cannot_be_served_is_refused_and_changes_nothing(
    server: RunningServer, tool: dict[str, Any], code: str, param: str
) -> None:
    ws, conn = await connect(server)
    async with ws:
        declared = {
            k: v for k, v in shop("http://127.0.0.1:9/mcp", **tool).items() if v is not None
        }
        await conn.send({"type": "session.update", "session": {"tools": [declared]}})
        error = await conn.wait("error")
        assert (error["error"]["code"], error["error"]["param"]) == (code, param)
        await conn.send(
            {
                "type": "session.update",
                "session": {
                    "tools": [shop("http://127.0.0.1:9/mcp"), shop("http://127.0.0.1:9/mcp")]
                },
            }
        )
        twice = await conn.wait("error")
        assert twice["error"]["param"] == "session.tools[1].server_label"
        await conn.send(
            {"type": "response.create", "response": {"tools": [shop("http://127.0.0.1:9/mcp")]}}
        )
        per_response = await conn.wait("error")
        assert per_response["error"]["code"] == "unsupported_parameter"
        await say(conn, "Hi.")
        done = await conn.wait("response.done")
    assert not any(e["type"].startswith("mcp_list_tools") for e in conn.events)
    assert done["response"]["status"] == "completed"


async def test_an_admins_mcp_server_serves_the_roles_sessions(server: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {server.token}"}
    async with (
        mcp_server(api_key=KEY) as url,
        httpx.AsyncClient(base_url=server.http_url, headers=auth) as http,
    ):
        ws, conn = await connect(server)
        async with ws:
            role_id = live(server).role.id
            base = f"/api/roles/{role_id}/mcp_servers"
            assert (await http.put("/api/tool-secrets/shop_key", json={"value": KEY})).is_success
            declared = {"server_url": url, "require_approval": "never",
                        "allowed_tools": ["stock_level"],
                        "headers": [{"header": "X-Api-Key", "secret": "shop_key"}]}  # fmt: skip
            saved = await http.put(f"{base}/shop", json=declared)
            assert saved.status_code == 200, saved.text
            assert saved.json()["headers"] == [{"header": "X-Api-Key", "secret": "shop_key"}]
            listed = (await http.get(base)).json()["mcp_servers"]
            assert [s["server_label"] for s in listed] == ["shop"] and KEY not in str(listed)
            off_list = await http.put(f"{base}/evil", json={"server_url": "http://10.0.0.1/mcp"})
            assert (off_list.status_code, off_list.json()["code"]) == (400, "host_not_allowed")

            # The session declared nothing: the role's server is listed at its first turn.
            await say(conn, "How many bolts are in stock?")
            done_listing = await conn.wait("mcp_list_tools.completed")
            item = await conn.wait(
                "conversation.item.done", where=lambda e: e["item"]["id"] == done_listing["item_id"]
            )
            assert [t["name"] for t in item["item"]["tools"]] == ["stock_level"]
            done = await conn.wait("response.done")
            assert outputs(done, "mcp_call")[0]["output"] == "bolts: 17 in stock"
            assert KEY not in json.dumps(conn.events)
            assert (await http.delete(f"{base}/shop")).status_code == 204
            assert (await http.delete(f"{base}/shop")).status_code == 404
