"""CONV-4 / MEM-8 end to end, memory side: a memory extracted in a voice session goes away with
its conversation record (receipt in the answer), is never extracted again from that thread, and
an export taken before the deletion does not bring it back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx

from memory.entries import MemoryDraft, MemorySource
from plugins.brain.local import LocalBrain
from plugins.fakes import FakeTTS
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import running_server
from tests.runtime.conftest import fake_plugins


async def test_deleting_a_conversation_removes_its_memories_for_good(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path, storage="memory", knowledge_semantic=False)
    plugins = fake_plugins(brain=LocalBrain(), tts=FakeTTS(ms_per_char=0.5))
    async with running_server(settings, plugins=plugins) as server:
        me = {"Authorization": f"Bearer {server.token}"}
        async with RealtimeClient(server.ws_url, server.token) as client:
            session = await client.connect()
            await client.send_text("我的目标是学会日语")
            await client.wait_type("response.done")
            if not client.events("openrealtime.memory.status"):
                await client.wait_type("openrealtime.memory.status")
        thread_id = session["thread_id"]
        async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
            await http.post("/api/memory", json={"kind": "preference", "content": "我喜欢简洁回答"},
                            headers=me)  # fmt: skip
            entries = (await http.get("/api/memory", headers=me)).json()["entries"]
            assert {(e["content"], e["source_thread_id"]) for e in entries} == {
                ("我的目标是学会日语", thread_id),
                ("我喜欢简洁回答", None),
            }
            backup = (await http.get("/api/memory/export", headers=me)).json()
            saved = await http.post(
                "/api/conversations",
                json={
                    "id": "rec-1", "idempotency_key": "k-1", "base_version": 0, "start_index": 0,
                    "messages": [{"role": "user", "text": "我的目标是学会日语",
                                  "at": "2026-11-29T10:00:00Z"}],
                    "thread_id": thread_id, "voice_session_id": session["id"],
                },
                headers=me,
            )  # fmt: skip
            assert saved.status_code == 200, saved.text
            deleted = await http.delete("/api/conversations/rec-1", headers=me)
            assert deleted.status_code == 200, deleted.text
            body = deleted.json()
            assert body["memories_removed"] == 1 and body["receipt_id"].startswith("rcpt_")
            left = (await http.get("/api/memory", headers=me)).json()["entries"]
            assert [e["content"] for e in left] == ["我喜欢简洁回答"]

            # A late revision of that conversation's transcript does not extract it again …
            principal = await server.services.accounts.authenticate(server.token)
            assert principal is not None
            role = await server.services.role_for(principal, None)
            assert role is not None
            late = await server.services.memory.save(
                principal.tenant, principal.user, role.id,
                MemoryDraft("goal", "我的目标是学会日语", None, "extraction",
                            MemorySource(thread_id, 1, datetime.now(UTC))),
            )  # fmt: skip
            assert late.action == "blocked"
            # … and restoring the export taken before the deletion does not either.
            restored = await http.post("/api/memory/import", json=backup, headers=me)
            assert restored.json() == {"imported": 0, "skipped": 2}
            left = (await http.get("/api/memory", headers=me)).json()["entries"]
            assert [e["content"] for e in left] == ["我喜欢简洁回答"]
            changes = (await http.get("/api/memory/changes", headers=me)).json()["changes"]
            assert changes[0]["action"] == "source_deleted" and changes[0]["actor"] == "person"
