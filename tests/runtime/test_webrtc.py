"""WebRTC calls (``POST /v1/realtime/calls``) between an aiortc client and the real server over
loopback, host candidates on 127.0.0.1 only. The plugins are fakes whose voice is a tone (Opus
keeps no DC level); the one full-stack test speaks a question synthesised with our TTS."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from journal.events import EventKind, ThreadRef
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.webrtc import calls
from runtime.webrtc.client import MIC_RATE, CallRefused, WebRTCClient
from tests.runtime.conftest import fake_plugins
from tests.runtime.ga import strict
from tests.waiting import until

LONG_ANSWER = " ".join(["This answer goes on for quite a while so it can be interrupted."] * 8)


def ToneTTS(*, ms_per_char: float) -> FakeTTS:  # noqa: N802
    """FakeTTS's timing and word marks, with a 440 Hz tone for a voice (Opus keeps no DC)."""
    return FakeTTS(ms_per_char=ms_per_char, tone_hz=440.0)


def tone(seconds: float, level: int = 4000) -> np.ndarray:
    t = np.arange(int(MIC_RATE * seconds)) / MIC_RATE
    return (level * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def rtc_settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "port": 0,
        "data_dir": tmp_path / "data",
        "silence_ms": 300,
        "min_interrupt_ms": 300,
        "storage": "memory",
        "webrtc_host_addresses": "127.0.0.1",
        "false_interruption_ms": 0,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    plugins = fake_plugins(
        tts=ToneTTS(ms_per_char=10.0), brain=FakeBrain(["Sure. Here is the answer. Anything else?"])
    )
    async with running_server(rtc_settings(tmp_path), plugins=plugins) as running:
        yield running


async def test_a_turn_over_webrtc_is_heard_and_its_events_arrive_on_the_channel(
    server: RunningServer,
) -> None:
    async with WebRTCClient(server.http_url, server.token) as client:
        config = await client.call()
        assert config["openrealtime"]["id"].startswith("vs_")
        client.say(tone(1.0), MIC_RATE)
        done = await client.wait_type("response.done", 20)
        stopped = await client.wait_type("output_audio_buffer.stopped", 10)
        await asyncio.sleep(0.5)  # what is still in flight and in the jitter buffer
        heard_ms = client.speaker.speech_ms()
    types = client.types()
    response_id = done["response"]["id"]
    assert done["response"]["status"] == "completed"
    assert done["response"]["output_text"] == "Sure. Here is the answer. Anything else?"
    # The voice is media: no audio event crosses the data channel.
    assert "response.output_audio.delta" not in types
    started = client.of_type("output_audio_buffer.started")
    assert [e["response_id"] for e in started] == [response_id]
    assert stopped["response_id"] == response_id
    assert types.index("response.done") < types.index("output_audio_buffer.stopped")
    assert "output_audio_buffer.cleared" not in types
    # 40 characters at 10 ms each: the whole answer reached the client's decoder.
    assert heard_ms >= 0.8 * 400
    seqs = [e["seq"] for e in client.events]
    assert seqs == list(range(1, len(seqs) + 1))


async def test_barge_in_clears_the_voice_and_the_heard_prefix_is_what_was_played(
    tmp_path: Path,
) -> None:
    plugins = fake_plugins(
        tts=ToneTTS(ms_per_char=10.0),
        brain=FakeBrain([LONG_ANSWER, "Second answer."]),
        asr=FakeASR(["tell me a story", "stop please"]),
    )
    async with (
        running_server(rtc_settings(tmp_path), plugins=plugins) as server,
        WebRTCClient(server.http_url, server.token) as client,
    ):
        await client.call()
        client.say(tone(0.8), MIC_RATE)
        started = await client.wait_type("output_audio_buffer.started", 20)
        await asyncio.sleep(1.2)  # the answer plays for a while
        client.mark()
        client.say(tone(0.8), MIC_RATE)
        cleared = await client.wait_type("output_audio_buffer.cleared", 10)
        done = await client.wait_for(
            lambda e: (
                e.get("type") == "response.done" and e["response"]["id"] == started["response_id"]
            ),
            10,
        )
        cut_at = client.arrivals[client.events.index(cleared)]
        await asyncio.sleep(0.5)
        heard_ms = client.speaker.speech_ms()
        after_cut_ms = client.speaker.speech_ms(after=cut_at + 0.1)
        await client.wait_type("output_audio_buffer.stopped", 20)  # the second answer
    response = done["response"]
    assert cleared["response_id"] == started["response_id"]
    assert response["status"] == "cancelled" and response["interrupted"] is True
    heard = response["heard_text"]
    assert heard and LONG_ANSWER.startswith(heard) and len(heard) < len(LONG_ANSWER) / 2
    # The heard prefix is what the server played (10 ms a character), and the client's decoder
    # got that much of the first answer, give or take a word and the jitter buffer.
    first_answer_ms = heard_ms - client.speaker.speech_ms(after=cut_at + 0.3)
    assert abs(len(heard) * 10 - first_answer_ms) < 250
    # Nothing of the interrupted answer came after the cut but what was already in flight,
    # and the second answer's voice that followed.
    assert after_cut_ms < heard_ms


async def test_a_dropped_call_resumes_with_a_new_offer_and_the_same_session(
    server: RunningServer,
) -> None:
    async with WebRTCClient(server.http_url, server.token) as client:
        await client.call()
        session_id = client.session["id"]
        client.say(tone(0.8), MIC_RATE)
        await client.wait_type("response.done", 20)
        await client.drop()
        await asyncio.sleep(0.3)
        assert session_id in server.services.live_sessions  # waiting for its client
        resumed = await client.resume()
        assert resumed["session_id"] == session_id
        client.mark()
        client.say(tone(0.8), MIC_RATE)
        done = await client.wait_type("response.done", 20)
        assert done["response"]["status"] == "completed"
        await client.wait_type("output_audio_buffer.stopped", 10)
        # The decoder's jitter buffer may still hold the end of the answer's voice.
        await until(lambda: client.speaker.speech_ms() > 300, 10)
        assert len(server.services.calls) == 1  # the dropped call was torn down
        # A resume carries its token in the body: a stale one is refused as over a WebSocket.
        stale = WebRTCClient(server.http_url, server.token)
        stale.session = {"id": session_id}
        stale.resume_token = "rt_not_a_token"
        with pytest.raises(CallRefused) as refused:
            await stale.resume()
        await stale.close()
        assert refused.value.status in (403, 409)
        assert refused.value.body["code"] == "resume_refused"


async def test_hangup_ends_the_session_and_tears_the_call_down(server: RunningServer) -> None:
    async with WebRTCClient(server.http_url, server.token) as client:
        await client.call()
        session_id = client.session["id"]
        assert await client.hang_up() == 200
        for _ in range(100):
            if session_id not in server.services.live_sessions:
                break
            await asyncio.sleep(0.05)
        assert session_id not in server.services.live_sessions
        assert len(server.services.calls) == 0
        assert server.services.active_sessions == set()


async def test_a_ga_offer_with_the_official_sdk_opens_a_ga_session(server: RunningServer) -> None:
    """The ``openai`` SDK's ``realtime.calls.create`` (multipart sdp + session) is answered."""
    from aiortc import RTCPeerConnection, RTCSessionDescription

    pc = RTCPeerConnection()
    channel = pc.createDataChannel("oai-events")
    pc.addTransceiver("audio", direction="sendrecv")
    messages: list[dict[str, object]] = []
    arrived: asyncio.Queue[dict[str, object]] = asyncio.Queue()
    opened = asyncio.Event()
    channel.on("open", opened.set)
    channel.on("message", lambda m: arrived.put_nowait(json.loads(m)))

    async def next_of(kind: str) -> dict[str, object]:
        while True:
            message = await arrived.get()
            strict(message)  # the GA shape the official SDK validates, no extension field
            messages.append(message)
            if message.get("type") == kind:
                return message

    try:
        await pc.setLocalDescription(await pc.createOffer())
        sdk = openai.AsyncOpenAI(api_key=server.token, base_url=f"{server.http_url}/v1")
        answer = await sdk.realtime.calls.create(
            sdp=pc.localDescription.sdp,
            session={"type": "realtime", "model": "gpt-realtime", "instructions": "Be brief."},
        )
        await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        async with asyncio.timeout(10):
            await opened.wait()
            created = await next_of("session.created")
        assert messages == [created]
        assert created["type"] == "session.created"
        session = created["session"]
        assert isinstance(session, dict)
        assert session["instructions"] == "Be brief."
        assert "seq" not in created and "openrealtime" not in session  # GA only
        channel.send(json.dumps({"type": "output_audio_buffer.clear"}))
        channel.send(json.dumps({"type": "no.such.event", "event_id": "e1"}))
        async with asyncio.timeout(10):
            error = await next_of("error")
        assert error["error"]["code"] == "unknown_message_type"  # type: ignore[index]
    finally:
        await pc.close()
    for _ in range(100):
        if not server.services.calls:
            break
        await asyncio.sleep(0.05)
    assert len(server.services.calls) == 0  # a GA call ends with its peer


async def test_bad_offers_get_clear_errors(server: RunningServer) -> None:
    url = f"{server.http_url}/v1/realtime/calls"
    auth = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(timeout=10) as http:
        nobody = await http.post(
            url, content="v=0\r\n", headers={"Content-Type": "application/sdp"}
        )
        not_sdp = await http.post(
            url, content="hello", headers={**auth, "Content-Type": "application/sdp"}
        )
        broken = await http.post(
            url,
            content="v=0\r\no=- 1 1 IN IP4 0\r\n",
            headers={**auth, "Content-Type": "application/sdp"},
        )
        wrong_type = await http.post(url, json={"sdp": "v=0"}, headers=auth)
        big = await http.post(
            url, content="v=0" + "a" * 70_000, headers={**auth, "Content-Type": "application/sdp"}
        )
        secret_in_url = await http.post(f"{url}/rtc_nope/hangup", headers=auth)
    assert (nobody.status_code, nobody.json()["code"]) == (401, "unauthorized")
    assert (not_sdp.status_code, not_sdp.json()["code"]) == (400, "invalid_sdp")
    assert (broken.status_code, broken.json()["code"]) == (400, "invalid_sdp")
    assert wrong_type.status_code == 415
    assert big.status_code == 413
    assert secret_in_url.status_code == 404
    assert len(server.services.calls) == 0 and server.services.live_sessions == {}


async def test_a_fault_of_ours_while_answering_is_not_called_the_clients_bad_offer(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ``OfferRejected`` is ``invalid_sdp``: a ``ValueError`` from a bug is a 500 (the
    class of fault where any ``ValueError`` became the client's bad input)."""

    async def broken(self: object, offer_sdp: str) -> str:
        raise ValueError("a bug of ours")

    monkeypatch.setattr(calls.Call, "answer", broken)
    auth = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/sdp"}
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(
            f"{server.http_url}/v1/realtime/calls", content="v=0\r\n", headers=auth
        )
    assert reply.status_code == 500
    assert "invalid_sdp" not in reply.text
    assert len(server.services.calls) == 0


async def test_binary_audio_is_refused_over_webrtc(server: RunningServer) -> None:
    client = WebRTCClient(server.http_url, server.token)
    try:
        with pytest.raises(CallRefused) as refused:
            await client.call(extensions={"events": True, "seq": True, "binary_audio": True})
    finally:
        await client.close()
    assert refused.value.status == 400


async def test_a_spoken_question_gets_a_spoken_answer_over_webrtc(tmp_path: Path) -> None:
    """The embedded speech stack end to end: Opus from speech synthesised at test time."""
    from pipeline.audio import resample
    from plugins.tts import create_tts

    tts = create_tts("piper")
    parts = [
        resample(c.pcm, c.sample_rate, MIC_RATE)
        async for c in tts.stream("Tell me, who are you?", voice=None, language="en")
    ]
    question = np.concatenate([np.zeros(MIC_RATE // 2, np.int16), *parts])
    settings = rtc_settings(tmp_path, brain="rules", silence_ms=800, min_interrupt_ms=400)
    async with (
        running_server(settings) as server,
        WebRTCClient(server.http_url, server.token) as client,
    ):
        await client.call()
        client.say(question, MIC_RATE)
        transcript = await client.wait_type(
            "conversation.item.input_audio_transcription.completed", 60
        )
        done = await client.wait_type("response.done", 60)
        await client.wait_type("output_audio_buffer.stopped", 30)
        heard_ms = client.speaker.speech_ms()
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        events = await server.services.journal.read(
            ThreadRef(principal.tenant, principal.user, client.session["thread_id"])
        )
    assert "who are you" in transcript["transcript"].lower()
    assert "OpenRealtime" in done["response"]["output_text"]
    assert heard_ms > 1000  # a second and more of the answer's voice out of the decoder
    assert [e.kind for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]


async def test_a_client_secret_opens_a_call_of_its_role_and_a_thread_continues(
    server: RunningServer,
) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        minted = await http.post(
            f"{server.http_url}/v1/realtime/client_secrets",
            json={},
            headers={"Authorization": f"Bearer {server.token}"},
        )
    secret = minted.json()["value"]
    assert secret.startswith("ek_")
    async with WebRTCClient(server.http_url, secret) as client:
        await client.call()
        thread_id, session_id = client.session["thread_id"], client.session["id"]
        role_id = client.session["role"]["id"]
        assert role_id == minted.json()["session"]["model"]
        # One session per call: the data channel does not start a second one.
        await client.send({"type": "openrealtime.session.start", "event_id": "again"})
        again = await client.wait_type("error", 10)
        assert again["error"]["code"] == "session_already_started"
        client.say(tone(0.8), MIC_RATE)  # a turn, so the thread has this session in it
        await client.wait_type("response.done", 20)
        assert await client.hang_up() == 200
    # A new call continues the thread (the continuation rules of the WebSocket apply).
    async with WebRTCClient(server.http_url, server.token) as client:
        with pytest.raises(CallRefused) as refused:
            await client.call_with({"requested_thread_id": thread_id})
        assert (refused.value.status, refused.value.body["code"]) == (400, "invalid_message")
        await client.call_with(
            {"requested_thread_id": thread_id, "previous_voice_session_id": session_id}
        )
        assert client.session["thread_id"] == thread_id


async def test_the_per_user_session_limit_refuses_a_call_with_429(tmp_path: Path) -> None:
    plugins = fake_plugins(tts=ToneTTS(ms_per_char=10.0))
    settings = rtc_settings(tmp_path, max_live_sessions_per_user=1)
    async with (
        running_server(settings, plugins=plugins) as server,
        WebRTCClient(server.http_url, server.token) as first,
    ):
        await first.call()
        second = WebRTCClient(server.http_url, server.token)
        try:
            with pytest.raises(CallRefused) as refused:
                await second.call()
        finally:
            await second.close()
        assert refused.value.status == 429
        assert refused.value.body["code"] == "too_many_sessions"
        assert len(server.services.calls) == 1  # the refused call left nothing behind


async def test_an_offer_without_a_data_channel_is_a_voice_only_call(
    server: RunningServer,
) -> None:
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from runtime.webrtc.client import Microphone, Speaker

    client = WebRTCClient(server.http_url, server.token)
    pc = RTCPeerConnection()
    microphone, speaker = Microphone(), Speaker()
    pc.addTrack(microphone)
    pc.on(
        "track",
        lambda track: setattr(speaker, "task", asyncio.ensure_future(speaker.listen(track))),
    )
    try:
        await pc.setLocalDescription(await pc.createOffer())
        answer = await client.post_offer(pc.localDescription.sdp, None, None, 10)
        await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        microphone.feed(tone(0.8))
        await until(lambda: speaker.speech_ms() >= 300, 20)  # the answer's voice, no event says so
    finally:
        await pc.close()
        if speaker.task is not None:
            speaker.task.cancel()
            with contextlib.suppress(BaseException):
                await speaker.task
    for _ in range(100):
        if not server.services.calls:
            break
        await asyncio.sleep(0.05)
    assert len(server.services.calls) == 0


async def test_a_hangup_after_the_peer_connection_dropped_still_ends_the_session(
    server: RunningServer,
) -> None:
    """A page hangs up and closes its peer connection at once: whichever the server sees
    first, the session ends for good instead of waiting for a resume."""
    async with WebRTCClient(server.http_url, server.token) as client:
        await client.call()
        session_id = client.session["id"]
        await client.drop()
        for _ in range(100):  # the call is torn down; the session waits for a resume
            if not server.services.calls:
                break
            await asyncio.sleep(0.05)
        assert session_id in server.services.live_sessions
        assert await client.hang_up() == 200
        assert session_id not in server.services.live_sessions
        with pytest.raises(CallRefused) as refused:
            await client.resume()
        assert refused.value.body["code"] == "resume_refused"
    async with httpx.AsyncClient(timeout=10) as http:  # another user's call id is unknown
        other = await http.post(
            f"{server.http_url}{client.location}/hangup",
            headers={"Authorization": "Bearer not-a-token"},
        )
    assert other.status_code == 401
