"""Thread memory in the running server (``runtime/thread_memory.py``, ``runtime/http/threads.py``):
the command route and its conflicts, the live event, injection, and learning after each turn
with a scripted model — including a fact said at turn 2 still shown at turn 40 after the
early turns were compacted away."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from plugins.fakes import FakeBrain
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins

ITEM = re.compile(r"^user: (?P<text>.*) \(id (?P<id>[^)]+)\)$", re.M)
BUDGET = re.compile(r"my budget is (\d+)", re.I)


class LearningBrain(FakeBrain):
    """A fake brain with a scripted JSON model: it learns "my budget is N" said by the user
    (citing that item) and answers every turn briefly. ``consolidations`` counts its calls."""

    context_tokens = 1024
    reserved_output_tokens = 128

    def __init__(self, replies: tuple[str, ...] = ("Noted.",), *, fail: int = 0) -> None:
        super().__init__(replies)
        self.consolidations = 0
        self.fail = fail

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        self.consolidations += 1
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("model down")
        changes = []
        for match in ITEM.finditer(messages[-1]["content"]):
            found = BUDGET.search(match["text"])
            if found:
                changes.append(
                    {
                        "op": "upsert",
                        "key": "budget",
                        "content": f"my budget is {found[1]} euros",
                        "kind": "fact",
                        "sources": [match["id"]],
                    }
                )
        return json.dumps({"changes": changes[-1:]})


def settings_for(tmp_path: Path) -> Settings:
    return Settings(port=0, data_dir=tmp_path / "data", storage="memory", knowledge_semantic=False)


@pytest.fixture
async def learning(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, LearningBrain]]:
    brain = LearningBrain()
    async with running_server(settings_for(tmp_path), plugins=fake_plugins(brain=brain)) as server:
        yield server, brain


class Api:
    def __init__(self, server: RunningServer, token: str | None = None) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {token or server.token}"}

    async def get(self, thread_id: str) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.server.http_url, timeout=10) as http:
            return await http.get(f"/api/threads/{thread_id}/memory", headers=self.headers)

    async def command(
        self, thread_id: str, view: dict[str, Any], command: dict[str, Any]
    ) -> httpx.Response:
        body = {"expected": view["head"], "revision": view["revision"], "command": command}
        async with httpx.AsyncClient(base_url=self.server.http_url, timeout=10) as http:
            return await http.post(
                f"/api/threads/{thread_id}/memory", json=body, headers=self.headers
            )


async def wait_for_revision(api: Api, thread_id: str, revision: int) -> dict[str, Any]:
    for _ in range(200):
        view = (await api.get(thread_id)).json()
        if view["revision"] >= revision:
            return dict(view)
        await asyncio.sleep(0.02)
    raise AssertionError("the memory did not change")


async def test_a_turn_teaches_the_thread_a_fact_it_shows_to_later_turns(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    server, brain = learning
    api = Api(server)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        thread_id = client.session["thread_id"]
        await client.send_text("Hello! My budget is 1500 for the trip.")
        await client.wait_type("response.done", 10)
        updated = await client.wait_type("openrealtime.thread_memory.updated", 10)
        view = updated["memory"]
        assert [e["key"] for e in view["entries"]] == ["budget"]
        fact = view["entries"][0]
        assert fact["content"] == "my budget is 1500 euros" and fact["status"] == "active"
        # The fact cites the user's item, which is now processed.
        assert fact["sources"][0] in view["processed"]
        await client.send_text("What should I pack?")
        await client.wait_type("response.done", 10)
    system = brain.requests[-1].system
    assert "<thread_memory>" in system and "my budget is 1500 euros" in system
    assert "past evidence" in system  # the note: memory does not outrank instructions
    assert (await api.get(thread_id)).json()["entries"][0]["key"] == "budget"


async def test_commands_move_head_and_revision_and_stale_ones_get_409(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    server, _ = learning
    api = Api(server)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        thread_id = client.session["thread_id"]
        await client.send_text("Hi there")
        await client.wait_type("response.done", 10)
        view = await wait_for_revision(api, thread_id, 1)  # the turn was read (no fact)
        assert view["entries"] == [] and view["settings"] == {"use": True, "generate": True}
        remembered = await api.command(
            thread_id,
            view,
            {"type": "remember", "key": "Arrival Date", "content": "arrives May 3", "kind": "fact"},
        )
        assert remembered.status_code == 200, remembered.text
        after = remembered.json()
        assert after["revision"] == view["revision"] + 1
        assert after["head"] != view["head"]  # the journal recorded the change
        assert after["entries"][0]["key"] == "arrival_date"
        assert after["entries"][0]["sources"] == [after["head"]]
        live = await client.wait_for(
            lambda m: (
                m.type == "openrealtime.thread_memory.updated"
                and m.event is not None
                and m.event["memory"]["revision"] == after["revision"]
            ),
            10,
        )
        assert live.event is not None and live.event["memory"]["entries"] == after["entries"]
        # The old view is stale now: a second writer who saw it is refused, with the truth.
        stale = await api.command(thread_id, view, {"type": "forget", "key": "arrival_date"})
        assert stale.status_code == 409
        assert stale.json()["code"] == "thread_conflict"
        current = (stale.json()["head"], stale.json()["revision"])
        assert current == (after["head"], after["revision"])
        unknown = await api.command(thread_id, after, {"type": "forget", "key": "nope"})
        assert (unknown.status_code, unknown.json()["code"]) == (409, "unknown_fact")
        # Configure: set, leave, clear — and the head stays where it was.
        off = (await api.command(thread_id, after, {"type": "configure", "use": False})).json()
        assert off["settings"] == {"use": False, "generate": True}
        assert off["overrides"] == {"use": False, "generate": None}
        assert off["head"] == after["head"]
        same = (await api.command(thread_id, off, {"type": "configure", "generate": False})).json()
        assert same["overrides"] == {"use": False, "generate": False}
        cleared = (await api.command(thread_id, same, {"type": "configure", "use": None})).json()
        assert cleared["overrides"] == {"use": None, "generate": False}
        assert cleared["settings"] == {"use": True, "generate": False}
        forgot = await api.command(thread_id, cleared, {"type": "forget", "key": "arrival_date"})
        assert forgot.status_code == 200
        assert forgot.json()["entries"][0]["status"] == "retracted"


async def test_two_writers_at_one_revision_one_wins(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    server, _ = learning
    api = Api(server)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        thread_id = client.session["thread_id"]
    view = (await api.get(thread_id)).json()
    results = await asyncio.gather(
        *(
            api.command(
                thread_id, view, {"type": "remember", "key": f"k{i}", "content": f"value {i}"}
            )
            for i in range(4)
        )
    )
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 409, 409, 409]
    final = (await api.get(thread_id)).json()
    assert len(final["entries"]) == 1 and final["revision"] == view["revision"] + 1


async def test_the_thread_is_its_owners_only_and_bad_commands_are_refused(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    server, _ = learning
    services = server.services
    await services.accounts.add_user("local", "eve", role="member")
    eve_token = (await services.accounts.issue_token("local", "eve", name="eve")).secret
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        thread_id = client.session["thread_id"]
    mine = (await Api(server).get(thread_id)).json()
    other = Api(server, eve_token)
    assert (await other.get(thread_id)).status_code == 404
    refused = await other.command(thread_id, mine, {"type": "forget", "key": "x"})
    assert (refused.status_code, refused.json()["code"]) == (404, "thread_not_found")
    api = Api(server)
    secret = await api.command(
        thread_id, mine, {"type": "remember", "key": "pw", "content": "my password is hunter2"}
    )
    assert secret.status_code == 422 and secret.json()["code"] == "sensitive_content"
    bad = await api.command(thread_id, mine, {"type": "explode"})
    assert bad.status_code == 422


async def test_a_model_failure_is_recorded_and_retried_after_the_next_turn(
    tmp_path: Path,
) -> None:
    brain = LearningBrain(fail=1)
    async with running_server(settings_for(tmp_path), plugins=fake_plugins(brain=brain)) as server:
        api = Api(server)
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            thread_id = client.session["thread_id"]
            await client.send_text("My budget is 900.")
            done = await client.wait_type("response.done", 10)
            assert done["response"]["status"] == "completed"  # the failure never fails a turn
            failed = await wait_for_revision(api, thread_id, 1)
            assert failed["last_failure"] == "model_error" and failed["entries"] == []
            assert failed["processed"] == []  # nothing read: retried next time
            await client.send_text("Thanks.")
            await client.wait_type("response.done", 10)
            learned = await wait_for_revision(api, thread_id, 2)
        assert learned["last_failure"] is None
        assert learned["entries"][0]["content"] == "my budget is 900 euros"


async def test_refresh_needs_a_model_and_a_brain_without_one_learns_nothing(
    tmp_path: Path,
) -> None:
    async with running_server(settings_for(tmp_path), plugins=fake_plugins()) as server:
        api = Api(server)
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            thread_id = client.session["thread_id"]
            await client.send_text("My budget is 700.")
            await client.wait_type("response.done", 10)
        view = (await api.get(thread_id)).json()
        assert view["revision"] == 0 and view["processed"] == []  # no model ran: no change
        refresh = await api.command(thread_id, view, {"type": "refresh"})
        assert (refresh.status_code, refresh.json()["code"]) == (503, "memory_model_unavailable")


async def test_a_fact_from_turn_2_is_still_in_the_model_input_at_turn_40(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    """The history is compacted long before turn 40 (a 1k-token window): the early turns become
    a summary, and the budget given at turn 2 reaches the model through the thread's memory,
    whatever the summary kept."""
    server, brain = learning
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("Hello, I am planning a trip to Lisbon in the spring.")
        await client.wait_type("response.done", 10)
        await client.send_text("My budget is 2300 for the whole week, please keep it in mind.")
        await client.wait_type("response.done", 10)
        for turn in range(3, 41):
            await client.send_text(
                f"Turn {turn}: tell me about another neighbourhood, museum or restaurant "
                "worth a visit, and how long it takes to get there from the centre."
            )
            await client.wait_type("response.done", 10)
    last = brain.requests[-1]
    # Compacted: the early turns are a summary now, not the person's words …
    assert "Summary" in last.conversation_context
    said = "My budget is 2300 for the whole week, please keep it in mind."
    assert all(turn.text != said for turn in last.history)
    # … and the fact reaches the model whatever the summary kept.
    assert "my budget is 2300 euros" in last.system


async def test_tenant_defaults_apply_until_a_thread_overrides_them(
    learning: tuple[RunningServer, LearningBrain],
) -> None:
    server, brain = learning
    api = Api(server)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
        put = await http.put(
            "/api/thread-memory/defaults",
            json={"use": True, "generate": False},
            headers=api.headers,
        )
    assert put.json() == {"use": True, "generate": False}
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        thread_id = client.session["thread_id"]
        await client.send_text("My budget is 400.")
        await client.wait_type("response.done", 10)
        view = (await api.get(thread_id)).json()
        assert view["settings"] == {"use": True, "generate": False}
        assert brain.consolidations == 0 and view["revision"] == 0  # generate is off
        on = await api.command(thread_id, view, {"type": "configure", "generate": True})
        assert on.json()["settings"] == {"use": True, "generate": True}
        await client.send_text("Thanks.")
        await client.wait_type("response.done", 10)
        learned = await wait_for_revision(api, thread_id, on.json()["revision"] + 1)
    assert learned["entries"][0]["content"] == "my budget is 400 euros"


class Lanes:
    """What the hook reads of a local model: how many requests each lane made."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def calls(self, lane: str) -> int:
        return self.counts.get(lane, 0)

    async def chat(
        self, payload: dict[str, Any], *, lane: str, background: bool = False
    ) -> AsyncIterator[str]:
        yield "{}"  # never used: the brain's own complete_json answers


async def test_a_turn_answered_without_the_model_changes_nothing(tmp_path: Path) -> None:
    brain = LearningBrain()
    lanes = Lanes()
    brain.model = lanes  # type: ignore[attr-defined]
    async with running_server(settings_for(tmp_path), plugins=fake_plugins(brain=brain)) as server:
        api = Api(server)
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            thread_id, lane = client.session["thread_id"], client.session["id"]
            await client.send_text("My budget is 300.")  # code answered: no model request
            await client.wait_type("response.done", 10)
            await asyncio.sleep(0.2)
            assert brain.consolidations == 0
            assert (await api.get(thread_id)).json()["revision"] == 0
            lanes.counts[lane] = 1  # the next turn's answer came from the model
            await client.send_text("Thanks.")
            await client.wait_type("response.done", 10)
            learned = await wait_for_revision(api, thread_id, 1)
    assert brain.consolidations == 1
    assert learned["entries"][0]["content"] == "my budget is 300 euros"


class SlowLearningBrain(LearningBrain):
    """Learns like ``LearningBrain``, but each consolidation takes ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.cancelled = 0

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return await super().complete_json(messages, schema, max_tokens=max_tokens, lane=lane)


async def test_a_consolidation_still_running_is_not_cancelled_by_the_next_turn(
    tmp_path: Path,
) -> None:
    brain = SlowLearningBrain(delay=1.0)
    async with running_server(settings_for(tmp_path), plugins=fake_plugins(brain=brain)) as server:
        api = Api(server)
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            thread_id = client.session["thread_id"]
            await client.send_text("My budget is 800.")
            await client.wait_type("response.done", 10)
            await asyncio.sleep(0.2)  # learning has begun
            await client.send_text("And we travel in June.")
            await client.wait_type("response.done", 10)
            # The model's queue, not the session, makes the answer come first (SPEC RT-11:
            # tests/plugins/test_local_model_lanes.py); the learning run is not thrown away.
            assert brain.cancelled == 0
            learned = await wait_for_revision(api, thread_id, 1)
    assert learned["entries"][0]["content"] == "my budget is 800 euros"
    assert learned["last_failure"] is None
