"""The role routes over HTTP (``runtime/http/roles.py``): revisions and 409 ``stale_revision``,
what a deletion does (and says it will do beforehand), members refused, and voice samples
spoken by the configured TTS."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memory.pool import tenant_tag
from plugins.contracts import SpeechChunk
from plugins.fakes import FakeTTS, Faults
from runtime.accounts import Principal
from runtime.app import create_app
from runtime.config import Settings
from runtime.http.roles import MAX_SAMPLE_CHARS, SAMPLE_TEXT
from runtime.services import Services, open_services
from tests.runtime.conftest import fake_plugins

ADA = Principal("local", "ada", role="admin")
MAX = Principal("local", "max", role="member")
EVE = Principal("globex", "eve", role="owner")


class Api:
    def __init__(self, services: Services, http: httpx.AsyncClient) -> None:
        self.services = services
        self.http = http
        self.owner = {"Authorization": f"Bearer {services.local_token}"}
        self.admin = {"Authorization": "Bearer ada-token"}
        self.member = {"Authorization": "Bearer max-token"}
        self.other = {"Authorization": "Bearer eve-token"}

    async def new_role(self, **fields: Any) -> dict[str, Any]:
        response = await self.http.post(
            "/api/roles", json={"name": "Tutor", **fields}, headers=self.admin
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body


MakeApi = Callable[..., AbstractAsyncContextManager[Api]]


@pytest.fixture
def make_api(tmp_path: Path) -> MakeApi:
    @asynccontextmanager
    async def start(settings_: dict[str, Any] | None = None, **plugins: Any) -> AsyncIterator[Api]:
        settings = Settings(
            port=0, storage="memory", data_dir=tmp_path, knowledge_semantic=False,
            write_requests_per_minute=1000, **(settings_ or {}),
        )  # fmt: skip
        services = await open_services(settings, plugins=fake_plugins(**plugins))
        for who, token in ((ADA, "ada-token"), (MAX, "max-token"), (EVE, "eve-token")):
            await services.accounts.add_token(who, token)
        transport = httpx.ASGITransport(app=create_app(services))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                yield Api(services, http)
        finally:
            await services.close()

    return start


@pytest.fixture
async def api(make_api: MakeApi) -> AsyncIterator[Api]:
    async with make_api() as running:
        yield running


# ------------------------------------------------------------------ revisions


async def test_a_role_starts_at_revision_one_and_each_edit_adds_one(api: Api) -> None:
    role = await api.new_role(language="en")
    url = f"/api/roles/{role['id']}"
    first = await api.http.patch(
        url, json={"expected_revision": 1, "instructions": "Teach."}, headers=api.admin
    )
    second = await api.http.patch(
        url, json={"expected_revision": 2, "voice": "verse", "memory_enabled": False},
        headers=api.admin,
    )  # fmt: skip
    fetched = (await api.http.get(url, headers=api.member)).json()
    assert role["revision"] == 1
    assert first.status_code == 200 and first.json()["revision"] == 2
    assert second.status_code == 200 and second.json()["revision"] == 3
    assert fetched == second.json()
    assert (fetched["instructions"], fetched["voice"], fetched["memory_enabled"]) == (
        "Teach.", "verse", False,
    )  # fmt: skip


async def test_the_failure_message_is_set_off_or_default_and_bounded(api: Api) -> None:
    role = await api.new_role(language="en", failure_message="One more time?")
    url = f"/api/roles/{role['id']}"
    assert role["failure_message"] == "One more time?"
    off = await api.http.patch(url, json={"failure_message": ""}, headers=api.admin)
    assert off.status_code == 200 and off.json()["failure_message"] == ""
    default = await api.http.patch(url, json={"failure_message": None}, headers=api.admin)
    assert default.json()["failure_message"] is None
    too_long = await api.http.patch(url, json={"failure_message": "x" * 201}, headers=api.admin)
    assert too_long.status_code == 422
    member = await api.http.patch(url, json={"failure_message": "hi"}, headers=api.member)
    assert member.status_code == 403


async def test_a_stale_edit_is_409_with_the_current_role_and_changes_nothing(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    await api.http.patch(url, json={"expected_revision": 1, "name": "Coach"}, headers=api.owner)
    stale = await api.http.patch(
        url, json={"expected_revision": 1, "name": "Mentor"}, headers=api.admin
    )
    now = (await api.http.get(url, headers=api.admin)).json()
    assert stale.status_code == 409
    body = stale.json()
    assert body["code"] == "stale_revision"
    assert body["current_revision"] == 2
    assert body["role"] == now
    assert (now["name"], now["revision"]) == ("Coach", 2)


async def test_an_edit_without_a_revision_is_accepted_as_before(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    await api.http.patch(url, json={"name": "Coach"}, headers=api.admin)
    latest = await api.http.patch(url, json={"name": "Mentor"}, headers=api.admin)
    assert latest.status_code == 200
    assert (latest.json()["name"], latest.json()["revision"]) == ("Mentor", 3)


async def test_the_memory_switch_moves_the_role_to_a_new_revision(api: Api) -> None:
    role = await api.new_role()
    switched = await api.http.put(
        "/api/memory/settings",
        json={"role_id": role["id"], "enabled": False, "scope": "role"},
        headers=api.admin,
    )
    stale = await api.http.patch(
        f"/api/roles/{role['id']}", json={"expected_revision": 1, "name": "x"}, headers=api.admin
    )
    assert switched.status_code == 200, switched.text
    assert stale.status_code == 409 and stale.json()["role"]["memory_enabled"] is False


async def test_a_bad_expected_revision_is_invalid(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    zero = await api.http.patch(url, json={"expected_revision": 0}, headers=api.admin)
    words = await api.http.delete(f"{url}?expected_revision=one", headers=api.admin)
    assert (zero.status_code, zero.json()["code"]) == (422, "invalid_request")
    assert (words.status_code, words.json()["code"]) == (422, "invalid_request")


# ------------------------------------------------------------------ deletion


async def test_a_stale_delete_is_409_and_keeps_the_role(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    await api.http.patch(url, json={"name": "Coach"}, headers=api.admin)
    stale = await api.http.delete(f"{url}?expected_revision=1", headers=api.admin)
    kept = await api.http.get(url, headers=api.admin)
    deleted = await api.http.delete(f"{url}?expected_revision=2", headers=api.admin)
    gone = await api.http.get(url, headers=api.admin)
    assert stale.status_code == 409 and stale.json()["current_revision"] == 2
    assert kept.status_code == 200
    assert deleted.status_code == 204
    assert gone.status_code == 404 and gone.json()["code"] == "role_not_found"


async def test_the_impact_counts_every_users_threads_and_says_they_end(api: Api) -> None:
    role = await api.new_role()
    threads = api.services.threads
    await threads.create("local", "ada", "th_a", role["id"])
    await threads.create("local", "max", "th_b", role["id"])
    await threads.create("globex", "eve", "th_c", role["id"])
    impact = await api.http.get(f"/api/roles/{role['id']}/impact", headers=api.admin)
    roles = (await api.http.get("/api/roles", headers=api.admin)).json()["roles"]
    default = next(r for r in roles if r["is_default"])
    of_default = await api.http.get(f"/api/roles/{default['id']}/impact", headers=api.admin)
    assert impact.status_code == 200
    assert impact.json() == {
        "role_id": role["id"],
        "revision": 1,
        "deletable": True,
        "threads": 2,
        "threads_resumable_after": False,
        "memory_purged": True,
        "tools_removed": True,
        "documents_kept": True,
    }
    assert of_default.json()["deletable"] is False


async def test_deleting_a_role_purges_its_memory_pool_records_and_tools(api: Api) -> None:
    role = await api.new_role()
    keep = await api.new_role(name="Other")
    rid = role["id"]
    for target in (rid, keep["id"]):
        added = await api.http.post(
            "/api/memory",
            json={"role_id": target, "kind": "preference", "content": "I like short answers"},
            headers=api.member,
        )
        assert added.status_code == 201, added.text
    pinned = await api.http.post(
        f"/api/roles/{rid}/memory/remember", json={"content": "Meetings are on Monday"},
        headers=api.admin,
    )  # fmt: skip
    configured = await api.http.patch(
        f"/api/roles/{rid}/memory/settings",
        json={"expected": 0, "instructions": "Keep salaries private."},
        headers=api.admin,
    )
    assert pinned.status_code == 201 and configured.status_code == 200, configured.text
    ruled = await api.http.post(
        f"/api/roles/{rid}/rules", json={"text": "Weather lookups are fine."}, headers=api.admin
    )
    assert ruled.status_code == 201, ruled.text

    deleted = await api.http.delete(f"/api/roles/{rid}", headers=api.admin)
    services = api.services
    left_in_pool = await services.pool.purge("local", rid, tenant_tag("local"))
    settings = await services.role_records.settings("local", rid)
    other_memory = await api.http.get(f"/api/memory?role_id={keep['id']}", headers=api.member)
    assert deleted.status_code == 204
    assert left_in_pool == 0
    assert settings.revision == 0 and settings.instructions == ""
    assert await services.rules.list("local", rid) == []  # its tools went with it
    assert [e["content"] for e in other_memory.json()["entries"]] == ["I like short answers"]


async def test_the_default_role_cannot_be_deleted(api: Api) -> None:
    roles = (await api.http.get("/api/roles", headers=api.admin)).json()["roles"]
    default = next(r for r in roles if r["is_default"])
    refused = await api.http.delete(f"/api/roles/{default['id']}", headers=api.admin)
    assert (refused.status_code, refused.json()["code"]) == (409, "role_is_default")


# ------------------------------------------------------------------ who may


async def test_a_member_reads_roles_but_cannot_edit_delete_or_ask_the_impact(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    read = await api.http.get(url, headers=api.member)
    refused = [
        await api.http.post("/api/roles", json={"name": "Mine"}, headers=api.member),
        await api.http.patch(
            url, json={"expected_revision": 1, "name": "Mine"}, headers=api.member
        ),
        await api.http.delete(f"{url}?expected_revision=1", headers=api.member),
        await api.http.get(f"{url}/impact", headers=api.member),
    ]
    after = (await api.http.get(url, headers=api.admin)).json()
    assert read.status_code == 200
    assert [(r.status_code, r.json()["code"]) for r in refused] == [(403, "forbidden")] * 4
    assert after == role


async def test_another_tenants_role_is_not_found(api: Api) -> None:
    role = await api.new_role()
    url = f"/api/roles/{role['id']}"
    answers = [
        await api.http.get(url, headers=api.other),
        await api.http.patch(url, json={"expected_revision": 1, "name": "x"}, headers=api.other),
        await api.http.delete(url, headers=api.other),
        await api.http.get(f"{url}/impact", headers=api.other),
    ]
    assert [(r.status_code, r.json()["code"]) for r in answers] == [(404, "role_not_found")] * 4


# ------------------------------------------------------------------ voices


def wav_of(response: httpx.Response) -> tuple[np.ndarray, int]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(response.content)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (1, 2)
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2"), wav.getframerate()


async def test_the_embedded_engines_offer_one_voice_per_language(api: Api) -> None:
    listed = await api.http.get("/api/voices", headers=api.member)
    assert listed.json() == {
        "engine": "auto",
        "voices": [],
        "default": None,
        "by_language": {"en": "Piper en_US-joe-medium", "zh": "eSpeak NG cmn"},
    }


async def test_an_openai_compatible_engine_offers_named_voices(make_api: MakeApi) -> None:
    async with make_api({"tts": "openai", "tts_api_key": "sk-unused"}) as running:
        listed = (await running.http.get("/api/voices", headers=running.member)).json()
    assert listed["engine"] == "openai" and listed["default"] == "alloy"
    assert "alloy" in listed["voices"] and "verse" in listed["voices"]


async def test_a_sample_is_spoken_by_the_configured_tts_with_the_voice(make_api: MakeApi) -> None:
    tts = FakeTTS(ms_per_char=10.0, sample_rate=24_000)
    async with make_api(tts=tts) as running:
        given = await running.http.post(
            "/api/voices/sample", json={"voice": "verse", "text": "Hello there"},
            headers=running.member,
        )  # fmt: skip
        greeting = await running.http.post(
            "/api/voices/sample", json={"language": "zh"}, headers=running.member
        )
        too_long = await running.http.post(
            "/api/voices/sample", json={"text": "x" * (MAX_SAMPLE_CHARS + 1)},
            headers=running.member,
        )  # fmt: skip
    pcm, rate = wav_of(given)
    assert rate == 24_000 and len(pcm) == 24_000 * len("Hello there") * 10 // 1000
    assert tts.texts == ["Hello there", SAMPLE_TEXT["zh"]]
    assert wav_of(greeting)[0].size > 0
    assert too_long.status_code == 422


class HeldTTS:
    """A fake TTS that starts speaking only once the test releases it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.speech = FakeTTS(ms_per_char=10.0)

    async def stream(
        self, text: str, *, voice: str | None, language: str | None
    ) -> AsyncIterator[SpeechChunk]:
        self.started.set()
        await self.release.wait()
        async for chunk in self.speech.stream(text, voice=voice, language=language):
            yield chunk


async def test_a_second_sample_while_one_is_made_is_busy(make_api: MakeApi) -> None:
    tts = HeldTTS()
    async with make_api(tts=tts) as running:
        first = asyncio.create_task(
            running.http.post("/api/voices/sample", json={}, headers=running.member)
        )
        await tts.started.wait()
        busy = await running.http.post("/api/voices/sample", json={}, headers=running.member)
        tts.release.set()
        done = await first
    assert (busy.status_code, busy.json()["code"]) == (429, "voice_sample_busy")
    assert busy.headers["retry-after"] == "1"
    assert done.status_code == 200


async def test_a_failing_tts_is_503(make_api: MakeApi) -> None:
    async with make_api(tts=FakeTTS(faults=Faults(fail=True))) as running:
        failed = await running.http.post("/api/voices/sample", json={}, headers=running.member)
    assert (failed.status_code, failed.json()["code"]) == (503, "tts_failed")


async def test_a_sample_from_the_real_piper_voice_is_speech(make_api: MakeApi) -> None:
    from plugins.tts import create_tts

    async with make_api({"tts": "piper"}, tts=create_tts("piper")) as running:
        sample = await running.http.post(
            "/api/voices/sample", json={"language": "en"}, headers=running.member
        )
    pcm, rate = wav_of(sample)
    seconds = len(pcm) / rate
    loud = np.abs(pcm.astype(np.int32)).max()
    assert 1.0 < seconds < 15.0
    assert loud > 1000  # speech, not silence
