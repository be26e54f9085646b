"""Recordings against the real server and a real WebSocket session (SPEC REC-1, REC-2, REC-6):
the tenant's ceiling and the role's switch decide, the client is told, both sides rest sealed
and time-aligned, and nothing of the audio rests in plaintext."""

from __future__ import annotations

import asyncio
import io
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
import soundfile

from plugins.fakes import FakeBrain, FakeTTS
from records.audio_store import open_pieces, seal_piece
from records.expiry import expire_recordings
from records.recorder import RATE
from records.recordings import Recording
from runtime.accounts import Principal
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from tests.loudness import loud_spans
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_api_conversations import segment_body
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

__all__ = ["postgres_url"]


@pytest.fixture(params=["memory", "postgres"])
async def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    common = {"port": 0, "data_dir": tmp_path / "data", "silence_ms": 300}
    if request.param == "memory":
        return Settings(storage="memory", recording_tenants="*", **common)
    url = request.getfixturevalue("postgres_url")
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        await truncate_all(pool)
    finally:
        await pool.close()
    return Settings(storage="postgres", database_url=url, recording_tenants="*", **common)


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    plugins = fake_plugins(brain=FakeBrain(["Sure, here it is."]), tts=FakeTTS(tone_hz=440))
    async with running_server(settings, plugins=plugins) as running:
        yield running


async def switch_recording(server: RunningServer, on: bool) -> str:
    """The default role's switch, as an admin sets it; the tenant's id."""
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    role = await default_role(server.services.roles, owner.tenant)
    await server.services.roles.update(owner.tenant, role.id, recording_enabled=on)
    return owner.tenant


async def stored_recording(
    server: RunningServer, rec: str, *, tenant: str, owner: str, thread: str,
    retain_until: datetime, protected: bool = False,
) -> None:  # fmt: skip
    """A recording as a session leaves one: its audio stored first, then its row."""
    services = server.services
    assert services.audio_store is not None and services.keyring is not None
    await services.audio_store.put(rec, 0, seal_piece(services.keyring, tenant, rec, 0, b"fLaC"))
    started = retain_until - timedelta(days=30)
    await services.recording_index.add(
        Recording(
            tenant,
            rec,
            owner,
            "vs_1",
            thread,
            "role_1",
            "local",
            "k",
            started,
            started,
            10,
            10,
            retain_until,
            protected=protected,
        )  # fmt: skip
    )


def files_under(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()]


async def test_a_recorded_session_keeps_both_sides_sealed_and_on_one_timeline(
    server: RunningServer, settings: Settings
) -> None:
    tenant = await switch_recording(server, True)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        told = await client.wait_type("openrealtime.session.recording")
        recording_id = told["recording_id"]
        assert client.session["recording"] == {"id": recording_id}
        notice = client.wait_type("response.done", timeout=20)
        await stream(client, SILENCE, 1_000)  # the notice plays while the microphone streams
        said = (await notice)["response"]
        assert said.get("conversation_id") is None  # out of band: not in the conversation
        assert said["output"][0]["content"][0]["transcript"] == "This conversation is recorded."
        await stream(client, tone_frame(), 600)
        await stream(client, SILENCE, 400)
        done = client.wait_type("response.done", timeout=20)
        await stream(client, SILENCE, 2_500)  # the answer plays while the microphone streams
        await done
        sent_ms = sum(len(a.audio) for a in client.audio()) * 1000 // (2 * 24_000)
        await client.end_session()
        await client.wait_closed()

    index = server.services.recording_index

    async with asyncio.timeout(10):  # the session's end closes its recording
        while (row := await index.get(tenant, recording_id)) is None or row.ended_at is None:  # noqa: ASYNC110 (polls the store)
            await asyncio.sleep(0.02)
    # Input that came before the notice played is not recorded (the person had not heard it).
    skipped = 4_500 - row.duration_ms
    assert 0 <= skipped <= 200 and row.size_bytes > 0
    assert server.services.audio_store is not None and server.services.keyring is not None
    pieces = await server.services.audio_store.read(recording_id)
    audio, rate = soundfile.read(
        io.BytesIO(open_pieces(server.services.keyring, tenant, recording_id, pieces)),
        dtype="int16",
    )
    assert rate == RATE and audio.shape == (RATE * row.duration_ms // 1000, 2)
    person, agent = loud_spans(audio[:, 0], RATE), loud_spans(audio[:, 1], RATE)
    assert person == [(1_000 - skipped, 1_600 - skipped)]
    (notice_start, notice_end), (start, end) = agent
    assert notice_start == 0 and abs(notice_end - 300) <= 40  # the notice comes first
    assert person[0][1] < start < person[0][1] + 700  # after the person's words ended
    heard_ms = (notice_end - notice_start) + (end - start)
    assert abs(heard_ms - sent_ms) <= 40  # every sample the client was sent, once
    flac = b"fLaC"
    assert not any(flac in data for data in files_under(settings.data_dir / "recordings"))

    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        timeline = (await http.get(f"/api/recordings/{recording_id}/timeline")).json()
    assert timeline["word_timing"] == "estimated" and timeline["truncated"] is False
    sides = [(s["side"], s["text"]) for s in timeline["segments"]]
    assert sides == [
        ("agent", "This conversation is recorded."),
        ("person", "what is the weather"),
        ("agent", "Sure, here it is."),
    ]
    spans = [(s["start_ms"], s["end_ms"]) for s in timeline["segments"]]
    for (got_start, got_end), (want_start, want_end) in zip(
        spans, [agent[0], person[0], agent[1]], strict=True
    ):
        assert abs(got_start - want_start) <= 40 and abs(got_end - want_end) <= 40
    for segment in timeline["segments"]:
        words = segment["words"]
        assert " ".join(w["text"] for w in words) == segment["text"]
        assert words[0]["start_ms"] == segment["start_ms"]
        assert words[-1]["end_ms"] == segment["end_ms"]
        assert all(a["end_ms"] == b["start_ms"] for a, b in itertools.pairwise(words))


async def test_the_notice_is_in_the_roles_language_or_the_configured_words(
    server: RunningServer, settings: Settings
) -> None:
    tenant = await switch_recording(server, True)
    role = await default_role(server.services.roles, tenant)
    await server.services.roles.update(tenant, role.id, language="zh")

    async def notice() -> str:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            done = client.wait_type("response.done", timeout=20)
            await stream(client, SILENCE, 600)
            return str((await done)["response"]["output"][0]["content"][0]["transcript"])

    assert await notice() == "本次对话会被录音。"
    words = "Calls are recorded for quality and training."
    server.services.settings = settings.model_copy(update={"recording_notice": words})
    assert await notice() == words


async def test_nothing_is_recorded_unless_the_tenant_may_and_the_role_says_so(
    server: RunningServer, settings: Settings
) -> None:
    tenant = await switch_recording(server, False)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        assert client.session["recording"] is None
        await stream(client, tone_frame(), 200)
    settings_without = settings.model_copy(update={"recording_tenants": "another-tenant"})
    server.services.settings = settings_without
    await switch_recording(server, True)
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        assert client.session["recording"] is None
        await stream(client, tone_frame(), 200)
    await asyncio.sleep(0)
    assert not client.events("openrealtime.session.recording")
    assert not (settings.data_dir / "recordings").exists() or not files_under(
        settings.data_dir / "recordings"
    )
    assert tenant


async def test_admins_switch_a_roles_recording_over_http(server: RunningServer) -> None:
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    role = await default_role(server.services.roles, owner.tenant)
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        assert (await http.get(f"/api/roles/{role.id}")).json()["recording_enabled"] is False
        on = await http.patch(f"/api/roles/{role.id}", json={"recording_enabled": True})
        assert on.status_code == 200 and on.json()["recording_enabled"] is True
        null = await http.patch(f"/api/roles/{role.id}", json={"recording_enabled": None})
        assert null.status_code == 422 and null.json()["code"] == "invalid_role"


async def test_the_server_deletes_expired_recordings_by_itself(settings: Settings) -> None:
    quick = settings.model_copy(update={"recording_expiry_interval_s": 0.1})
    async with running_server(quick, plugins=fake_plugins()) as server:
        services = server.services
        assert services.audio_store is not None and services.keyring is not None
        past = datetime.now(UTC) - timedelta(days=1)
        rec = f"rec_{'e' * 32}"
        await stored_recording(server, rec, tenant="t1", owner="ann", thread="th_1",
                               retain_until=past)  # fmt: skip
        async with asyncio.timeout(10):  # the next run of the expiry takes it
            while (receipt := await services.recording_index.receipt("t1", rec)) is None:  # noqa: ASYNC110 (polls the store)
                await asyncio.sleep(0.05)
        assert receipt.reason == "expired"
        assert await services.audio_store.read(rec) == []
        assert await services.recording_index.get("t1", rec) is None


async def test_recordings_over_http_download_hold_and_a_deleted_ones_receipt(
    server: RunningServer,
) -> None:
    services = server.services
    assert services.audio_store is not None and services.keyring is not None
    owner = await services.accounts.authenticate(server.token)
    assert owner is not None
    await services.accounts.add_token(Principal(owner.tenant, "max", role="member"), "max-token")
    rec = f"rec_{'f' * 32}"
    await stored_recording(server, rec, tenant=owner.tenant, owner=owner.user, thread="th_1",
                           retain_until=datetime.now(UTC) - timedelta(days=1))  # fmt: skip
    mine = {"Authorization": f"Bearer {server.token}"}
    other = {"Authorization": "Bearer max-token"}
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        audio = await http.get(f"/api/recordings/{rec}/audio", headers=mine)
        assert audio.status_code == 200 and audio.content == b"fLaC"
        assert audio.headers["content-type"] == "audio/flac"
        hidden = await http.get(f"/api/recordings/{rec}/audio", headers=other)
        assert hidden.status_code == 404 and hidden.json()["code"] == "recording_not_found"
        listed = await http.get("/api/recordings", params={"thread_id": "th_1"}, headers=mine)
        assert [r["id"] for r in listed.json()["recordings"]] == [rec]
        assert (await http.get("/api/recordings", params={"thread_id": "th_1"},
                               headers=other)).json()["recordings"] == []  # fmt: skip
        held = await http.put(f"/api/recordings/{rec}/protection", json={"protected": True},
                              headers=mine)  # fmt: skip
        assert held.status_code == 200 and held.json()["protected"] is True
        assert await expire_recordings(services.recording_index, services.audio_store,
                                       now=datetime.now(UTC)) == []  # fmt: skip
        await http.put(f"/api/recordings/{rec}/protection", json={"protected": False},
                       headers=mine)  # fmt: skip
        (receipt,) = await expire_recordings(services.recording_index, services.audio_store,
                                             now=datetime.now(UTC))  # fmt: skip
        gone = await http.get(f"/api/recordings/{rec}", headers=mine)
        assert gone.status_code == 404 and gone.json()["code"] == "recording_deleted"
        assert gone.json()["receipt"]["recording_id"] == rec == receipt.recording_id
        again = await http.put(f"/api/recordings/{rec}/protection", json={"protected": True},
                               headers=mine)  # fmt: skip
        assert again.status_code == 404


async def test_deleting_a_conversation_is_refused_under_a_hold_and_schedules_its_recordings(
    server: RunningServer,
) -> None:
    services = server.services
    assert services.audio_store is not None and services.keyring is not None
    owner = await services.accounts.authenticate(server.token)
    assert owner is not None
    recs = [f"rec_{c * 32}" for c in "12"]
    for rec in recs:
        await stored_recording(server, rec, tenant=owner.tenant, owner=owner.user,
                               thread="th_del", retain_until=datetime.now(UTC) + timedelta(days=30),
                               protected=rec == recs[0])  # fmt: skip
    auth = {"Authorization": f"Bearer {server.token}"}
    body = segment_body("conv-1", 0, 0, "hi", "hello", thread_id="th_del")
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        assert (await http.post("/api/conversations", json=body)).status_code in (200, 201)
        held = await http.delete("/api/conversations/conv-1", params={"delete_recordings": "true"})
        assert held.status_code == 409 and held.json()["code"] == "recording_protected"
        assert (await http.get("/api/conversations/conv-1")).status_code == 200  # kept for a retry
        await http.put(f"/api/recordings/{recs[0]}/protection", json={"protected": False})
        done = await http.delete("/api/conversations/conv-1", params={"delete_recordings": "true"})
        assert done.status_code == 200 and sorted(done.json()["recordings_scheduled"]) == recs
        receipts = await expire_recordings(services.recording_index, services.audio_store,
                                           now=datetime.now(UTC))  # fmt: skip
        assert sorted(r.recording_id for r in receipts) == recs
        assert {r.reason for r in receipts} == {"requested"}
        for rec in recs:
            assert await services.audio_store.read(rec) == []
            gone = (await http.get(f"/api/recordings/{rec}")).json()
            assert gone["code"] == "recording_deleted" and gone["receipt"]["reason"] == "requested"


async def test_a_tenants_retention_set_by_its_admin_expires_what_is_now_past_it(
    server: RunningServer,
) -> None:
    services = server.services
    assert services.audio_store is not None
    owner = await services.accounts.authenticate(server.token)
    assert owner is not None
    later = datetime.now(UTC) + timedelta(days=10)  # started 20 days ago, kept 30 days
    old, held = f"rec_{'1' * 32}", f"rec_{'2' * 32}"
    for rec in (old, held):
        await stored_recording(
            server, rec, tenant=owner.tenant, owner=owner.user, thread="th_1",
            retain_until=later, protected=rec == held,
        )  # fmt: skip
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=auth) as http:
        assert (await http.get("/api/recordings/policy")).json() == {
            "retention_days": None, "deployment_retention_days": None,
            "effective_retention_days": None,
        }  # fmt: skip
        bad = await http.put("/api/recordings/policy", json={"retention_days": 0})
        assert bad.status_code == 422
        set_ = await http.put("/api/recordings/policy", json={"retention_days": 7})
        assert set_.status_code == 200
        assert set_.json()["effective_retention_days"] == 7
        assert set_.json()["recordings_updated"] == 2
        await expire_recordings(services.recording_index, services.audio_store,
                                now=datetime.now(UTC))  # fmt: skip
        gone = await http.get(f"/api/recordings/{old}")
        assert gone.status_code == 404 and gone.json()["receipt"]["reason"] == "expired"
        kept = await http.get(f"/api/recordings/{held}")  # a legal hold outlasts any retention
        assert kept.status_code == 200 and kept.json()["protected"] is True
    assert await services.audio_store.read(old) == []
