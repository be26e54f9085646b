"""Headless knowledge + memory demo (SPEC DEMO-1).

``python -m demos.knowledge_memory_demo`` runs the real server in-process (FastAPI + the
realtime WebSocket, PostgreSQL stores, the knowledge base, long-term memory, the journal and its
budgeted projector, the offline ``LocalBrain``) in a temporary data directory, drives it only
through its public surfaces — the HTTP API (roles, documents, memory) and ``RealtimeClient``
text turns over a real WebSocket — and prints one JSON object: the exact model input of one turn
(``system_prompt`` with ``<memory_data>``, ``user_text`` with the recent history, the
``knowledge_tool_result``) and ``checks``, each computed from what the brain was actually given
(a recording wrapper around ``LocalBrain`` keeps every ``BrainInput``) and what the API returned:

- ``unbound_knowledge_misses``: a document bound to another role is not found;
- ``bound_knowledge_hits``: once bound to the role, the same question finds it, with its source;
- ``users_isolated``: another user of the tenant gets neither the documents nor the memory;
- ``new_session_reads_memory``: a memory added by hand and one extracted from an earlier session
  are both in the next session's ``<memory_data>``;
- ``disabled_memory_not_injected``: with the role's memory off nothing is injected or extracted,
  and nothing is deleted;
- ``same_thread_reads_history``: the second turn of a thread sees the first in its context;
- ``new_thread_starts_empty``: a new thread does not inherit the old history.

Database: ``OPENREALTIME_DATABASE_URL`` (or ``DATABASE_URL``) names a server where the demo
creates its own database (dropped at the end); without one the embedded PostgreSQL runs in the
temporary directory. No credentials, microphone or model provider needed: text turns skip ASR
and the demo's TTS is the instant fake (audio is not what this demo shows). Exit status 1 when a
check fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from pipeline.engine import Plugins
from plugins.brain.local import LocalBrain
from plugins.contracts import BrainDelta, BrainInput
from plugins.fakes import FakeASR, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.accounts import Principal
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server

DOCUMENT_NAME = "星河商店售后说明 v1"
DOCUMENT_TEXT = """星河商店的退货期限为签收后 7 天。
退货条件:商品未使用、包装完整,并提供订单号。
客服服务时间为工作日 09:00—18:00。
退货运费规则:商品质量问题由商店承担,其他情况由买家承担。
"""
INSTRUCTIONS = "你是商店助手,请依据资料回答。"
MEMORY_BLOCK = "<memory_data>"
KNOWLEDGE_BLOCK = "<untrusted_knowledge>"
CONTEXT_LABEL = "最近对话上下文:"
BOB = Principal("local", "bob")


class RecordingBrain:
    """The offline ``LocalBrain``, keeping every ``BrainInput`` it is given (the exact model
    input: system prompt, user text, tool results)."""

    def __init__(self) -> None:
        self.inner = LocalBrain()
        self.inputs: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.inputs.append(request)
        async for delta in self.inner.stream(request):
            yield delta


@contextlib.asynccontextmanager
async def demo_database(data_dir: Path) -> AsyncIterator[tuple[str | None, str]]:
    """(database URL or None for the embedded server under ``data_dir``, "external"|"embedded")."""
    server = os.environ.get("OPENREALTIME_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not server:
        yield None, "embedded"
        return
    name = f"openrealtime_demo_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(server, timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    try:
        yield urlunsplit(urlsplit(server)._replace(path="/" + name)), "external"
    finally:
        conn = await asyncpg.connect(server, timeout=10)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


class Demo:
    def __init__(self, server: RunningServer, brain: RecordingBrain, http: httpx.AsyncClient):
        self.server = server
        self.brain = brain
        self.http = http
        self.alice = {"Authorization": f"Bearer {server.token}"}
        self.bob = {"Authorization": "Bearer demo-bob-token"}

    async def api(self, method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
        response = await self.http.request(method, path, headers=headers, **kw)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    async def session(
        self,
        texts: list[str],
        *,
        token: str | None = None,
        role_id: str,
        memory_status: bool = False,
    ) -> tuple[list[list[BrainInput]], list[str], dict[str, Any]]:
        """Text turns in one new thread: per turn the brain inputs and the answer; and the
        session's info (thread id, memory status events)."""
        inputs: list[list[BrainInput]] = []
        answers: list[str] = []
        async with RealtimeClient(self.server.ws_url, token or self.server.token) as client:
            session = await client.connect(role_id=role_id)
            for text in texts:
                before = len(self.brain.inputs)
                await client.send_text(text)
                done = await client.wait_type("response.done", timeout=30)
                answers.append(done["response"]["output_text"])
                inputs.append(self.brain.inputs[before:])
            if memory_status:
                # Extraction runs beside the response: its status may come before or after it.
                if not client.events("openrealtime.memory.status"):
                    await client.wait_type("openrealtime.memory.status", timeout=10)
            info = {
                "thread_id": session["thread_id"],
                "memory_status": client.events("openrealtime.memory.status"),
            }
        return inputs, answers, info


def tool_result(inputs: list[BrainInput]) -> str:
    """The knowledge tool's result the brain read in a turn ("" when it made no search)."""
    for request in inputs:
        for result in request.tool_results:
            if result.name == "knowledge_search":
                return result.content
    return ""


def final_input(inputs: list[BrainInput]) -> BrainInput:
    return inputs[-1]


async def run_demo(server: RunningServer, brain: RecordingBrain) -> dict[str, Any]:
    await server.services.accounts.add_token(BOB, "demo-bob-token")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        demo = Demo(server, brain, http)
        alice, bob = demo.alice, demo.bob
        shop = await demo.api(
            "POST", "/api/roles", alice,
            json={"name": "星河商店助手", "instructions": INSTRUCTIONS, "language": "zh",
                  "memory_enabled": True},
        )  # fmt: skip
        other = await demo.api("POST", "/api/roles", alice, json={"name": "其他助手"})
        role = shop["id"]
        document = await demo.api(
            "POST", "/api/documents", alice,
            json={"name": DOCUMENT_NAME, "text": DOCUMENT_TEXT, "role_id": other["id"]},
        )  # fmt: skip
        question = "请查知识库,星河商店的退货期限是多少?"

        # Knowledge: bound to another role, then to this one.
        unbound, _, _ = await demo.session([question], role_id=role)
        unbound_result = tool_result(unbound[0])
        await demo.api(
            "PUT", f"/api/roles/{role}/documents", alice, json={"document_ids": [document["id"]]}
        )
        bound, bound_answers, _ = await demo.session([question], role_id=role)
        bound_result = tool_result(bound[0])

        # Memory: one entry by hand, one extracted from a session.
        await demo.api(
            "POST", "/api/memory", alice,
            json={"role_id": role, "kind": "preference", "content": "我喜欢简洁回答"},
        )  # fmt: skip
        _, _, said = await demo.session(["我的目标是学会日语"], role_id=role, memory_status=True)
        extracted = [e for s in said["memory_status"] for e in s["entries"]]

        # A new session and thread, two turns: memory in the system prompt, the first turn in
        # the second turn's context, the knowledge tool's result for the follow-up question.
        first_text = "我刚签收了星河商店的商品,想退货。"
        shown, shown_answers, shown_info = await demo.session(
            [first_text, "那运费谁承担?"], role_id=role
        )
        shown_input = final_input(shown[1])
        shown_first = shown[0][0]

        # Another new thread of the same user and role.
        fresh, _, _ = await demo.session(["你好"], role_id=role)
        fresh_input = fresh[0][0]

        # Another user of the same tenant, same role.
        other_user, _, _ = await demo.session([question], token="demo-bob-token", role_id=role)
        bob_memory = await demo.api("GET", "/api/memory", bob, params={"role_id": role})
        bob_documents = await demo.api("GET", "/api/documents", bob)

        # Memory off for the role: nothing injected or extracted, nothing deleted.
        await demo.api(
            "PUT", "/api/memory/settings", alice, json={"role_id": role, "enabled": False}
        )
        disabled, _, disabled_info = await demo.session(["我喜欢喝茶。你记得我什么?"], role_id=role)
        after_disable = await demo.api("GET", "/api/memory", alice, params={"role_id": role})
        await demo.api(
            "PUT", "/api/memory/settings", alice, json={"role_id": role, "enabled": True}
        )

    system = shown_input.system
    checks = {
        "unbound_knowledge_misses": bool(unbound[0])
        and KNOWLEDGE_BLOCK not in unbound_result
        and "7 天" not in unbound_result,
        "bound_knowledge_hits": KNOWLEDGE_BLOCK in bound_result
        and f"[source: {DOCUMENT_NAME}]" in bound_result
        and "签收后 7 天" in bound_result,
        "users_isolated": all(MEMORY_BLOCK not in i.system for i in other_user[0])
        and KNOWLEDGE_BLOCK not in tool_result(other_user[0])
        and bob_memory["entries"] == []
        and bob_documents["documents"] == [],
        "new_session_reads_memory": MEMORY_BLOCK in system
        and "我喜欢简洁回答" in system
        and "我的目标是学会日语" in system
        and any(e["action"] == "created" and e["kind"] == "goal" for e in extracted),
        "disabled_memory_not_injected": all(MEMORY_BLOCK not in i.system for i in disabled[0])
        and disabled_info["memory_status"] == []
        and {e["content"] for e in after_disable["entries"]}
        == {"我喜欢简洁回答", "我的目标是学会日语"},
        "same_thread_reads_history": shown_input.model_text.startswith(CONTEXT_LABEL)
        and first_text in shown_input.model_text,
        "new_thread_starts_empty": CONTEXT_LABEL not in fresh_input.model_text
        and first_text not in fresh_input.model_text
        and CONTEXT_LABEL not in shown_first.model_text,
    }
    return {
        "model_input": {
            "system_prompt": system,
            "user_text": shown_input.model_text,
            "knowledge_tool_result": tool_result(shown[1]),
        },
        "answer": shown_answers[1],
        "checks": checks,
        "all_passed": all(checks.values()),
        "details": {
            "thread_id": shown_info["thread_id"],
            "memory_extracted": extracted,
            "bound_answer": bound_answers[0],
            "brain": "LocalBrain (offline, rule-based), recorded",
            "turns": len(brain.inputs),
        },
    }


async def main_async(data_dir: Path) -> dict[str, Any]:
    async with demo_database(data_dir) as (url, kind):
        settings = Settings(port=0, data_dir=data_dir, storage="postgres", database_url=url)
        brain = RecordingBrain()
        plugins = Plugins(
            vad=EnergyVAD(), asr=FakeASR([]), brain=brain, tts=FakeTTS(ms_per_char=0.2)
        )
        async with running_server(settings, plugins=plugins) as server:
            result = await run_demo(server, brain)
    result["details"]["database"] = kind
    return result


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="openrealtime-demo-") as tmp:
        result = asyncio.run(main_async(Path(tmp) / "data"))
    result["details"]["temp_dir_removed"] = not os.path.exists(tmp)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    sys.exit(0 if result["all_passed"] else 1)


if __name__ == "__main__":
    main()
