"""End to end (SPEC KB-3, KB-4): a text turn over the real WebSocket server with the offline
``LocalBrain`` asks what a document bound to the session's role answers; the reply names the
source and gives its content, the tool call and result are journaled, and a document bound only
to another role (or another user's) is never used."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from journal.events import EventKind, ThreadRef
from plugins.brain.local import LocalBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

SHOP = (
    "# 星河商店售后说明 v1\n\n星河商店的退货期限为签收后 7 天。\n\n"
    "退货运费规则:商品质量问题由商店承担,其他情况由买家承担。\n"
)
MEMBERS = "会员日是每周三,当天全场九折。"


@pytest.fixture(params=[False, True], ids=["lexical", "semantic"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, data_dir=tmp_path, storage="memory", knowledge_semantic=request.param
    )
    async with running_server(settings, plugins=fake_plugins(brain=LocalBrain())) as running:
        yield running


async def ask(server: RunningServer, question: str) -> tuple[str, list[dict[str, Any]]]:
    """The assistant's answer to ``question`` in a new session, and the thread's events."""
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text(question)
        done = await client.wait_type("response.done", timeout=30)
        assert done["response"]["status"] == "completed"
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        ref = ThreadRef(principal.tenant, principal.user, client.session["thread_id"])
        events = [{"kind": e.kind, **e.payload} for e in await server.services.journal.read(ref)]
        return str(done["response"]["output_text"]), events


async def test_a_bound_document_answers_and_the_tool_is_journaled(server: RunningServer) -> None:
    services = server.services
    principal = await services.accounts.authenticate(server.token)
    assert principal is not None
    role = await default_role(services.roles, principal.tenant)
    other = await services.roles.create(
        principal.tenant, name="Members", instructions="", voice=None, language=None,
        memory_enabled=False,
    )  # fmt: skip
    knowledge = services.knowledge
    await knowledge.add_document(
        principal.tenant, principal.user, name="星河商店售后说明 v1", text=SHOP, role_ids=[role.id]
    )
    await knowledge.add_document(
        principal.tenant, principal.user, name="会员日说明", text=MEMBERS, role_ids=[other.id]
    )
    # Another user's document, bound to the same role id, is not this user's knowledge.
    await knowledge.add_document(
        principal.tenant, "someone-else", name="别人的资料", text="会员日是每周五。",
        role_ids=[role.id],
    )  # fmt: skip

    answer, events = await ask(server, "星河商店的退货期限是多少?")
    assert "星河商店售后说明 v1" in answer and "签收后 7 天" in answer
    kinds = [e["kind"] for e in events]
    assert kinds == [
        EventKind.USER_INPUT,
        EventKind.TOOL_CALL,
        EventKind.TOOL_RESULT,
        EventKind.ASSISTANT_OUTPUT,
    ]
    call, result = events[1], events[2]
    assert call["name"] == "knowledge_search" and call["arguments"] == {
        "query": "星河商店的退货期限是多少?"
    }
    assert result["call_id"] == call["call_id"] and result["is_error"] is False
    assert "[source: 星河商店售后说明 v1]" in result["content"]
    assert "<untrusted_knowledge>" in result["content"]

    # Only the other role's document (and another user's) would answer this one.
    answer, events = await ask(server, "会员日是星期几?")
    assert "每周" not in answer
    result = next(e for e in events if e["kind"] == EventKind.TOOL_RESULT)
    assert "会员日说明" not in result["content"] and "别人的资料" not in result["content"]
    assert "每周" not in result["content"]
    if not services.settings.knowledge_semantic:
        # Lexically nothing bound covers the question: the agent says it does not know. (With
        # semantic recall the bound shop document may come back as loosely related; which
        # on-topic questions still get hits is measured by benchmarks.knowledge_eval.)
        assert "不知道" in answer
        assert "<untrusted_knowledge>" not in result["content"]
    answer, _ = await ask(server, "What is the capital of Australia?")
    assert "do not know" in answer
