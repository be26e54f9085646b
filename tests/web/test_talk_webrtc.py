"""The talk page over WebRTC (SPEC RTC-2): Chromium's fake microphone speaks on the offer's
track to the real server, the answer comes back on the remote track, and the page falls back to
its WebSocket when WebRTC cannot connect — never when the server refused the credential."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import (
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    spoken,
    start_talking,
    wait_js,
    write_wav,
)

STATEMENT = "my favourite colour is green"

# What the page's peer connection received on its audio track (the agent's voice).
INBOUND_AUDIO_JS = """async () => {
    const stats = await window.openrealtime.conn.transport._pc.getStats();
    let packets = 0;
    stats.forEach((s) => {
        if (s.type === 'inbound-rtp' && s.kind === 'audio') packets += s.packetsReceived;
    });
    return packets;
}"""


@pytest.fixture(scope="module")
def statement_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spoken sentence, then 20 s of quiet before Chromium loops the file."""
    pcm = spoken("My favourite colour is green.", lead_s=0.5, tail_s=20)
    return write_wav(tmp_path_factory.mktemp("speech") / "statement.wav", pcm)


async def connection(page: Any) -> tuple[str, str]:
    """The connection pill: its text and which transport it names."""
    label = await page.text_content("#connection")
    transport = await page.get_attribute("#connection", "data-transport")
    return label or "", transport or ""


async def test_the_talk_page_talks_over_webrtc_by_default(
    launch: Launch, statement_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(heard=STATEMENT) as server:
        browser = await launch(statement_wav)
        page = await open_page(browser, server)
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        await start_talking(page)
        pill = await connection(page)
        # The microphone's speech went out on the track: heard, transcribed and answered.
        transcript = await wait_js(
            page,
            "document.querySelector('.msg.user:not(.partial) .text')?.textContent",
            timeout=20_000,
        )
        answer = await last_answer(page, "I understand", timeout=20_000)
        # The answer played out on the remote track; the server says when it started and ended.
        await wait_js(
            page,
            "window.openrealtime.outputAudio.some(e => e.type === 'output_audio_buffer.stopped')",
        )
        played = await page.evaluate("window.openrealtime.outputAudio.map(e => e.type)")
        packets = await page.evaluate(INBOUND_AUDIO_JS)
        attached = await page.evaluate(
            "document.querySelector('#remote-audio').srcObject?.getAudioTracks().length"
        )
        sent = await page.evaluate("window.openrealtime.conn.sent.map(m => m.type)")
        player = await page.evaluate("window.openrealtime.player")
    assert pill == ("connected · WebRTC", "webrtc")
    assert sockets == []  # every event went over the data channel
    assert transcript == STATEMENT
    assert answer == "Okay, I understand."
    assert played[:2] == ["output_audio_buffer.started", "output_audio_buffer.stopped"]
    assert packets > 25  # over half a second of 20 ms Opus packets
    assert attached == 1
    assert player is None  # no page-side player over WebRTC …
    assert "openrealtime.playback" not in sent  # … and no playback reports: the server knows


async def unreachable_answer(route: Any) -> None:
    """As when a firewall drops the media's UDP: the call is set up, ICE never connects. The
    offer goes without the browser's candidates and the answer's point at an address nobody
    holds (TEST-NET-1), so neither side can reach the other."""
    offer = re.sub(r"a=candidate:[^\r\n]*\r\n", "", route.request.post_data or "")
    response = await route.fetch(post_data=offer)
    answer = (await response.text()).replace("127.0.0.1", "192.0.2.1")
    await route.fulfill(response=response, body=answer)


FALLBACKS = {
    "no RTCPeerConnection": "webrtc_unavailable",
    "the server serves no WebRTC": "webrtc_disabled",
    "the offer's POST fails": "network_error",
    "ICE never connects": "webrtc_not_connected",
}


@pytest.mark.parametrize("blocked", list(FALLBACKS))
async def test_with_webrtc_blocked_the_page_falls_back_to_websocket_and_talks(
    blocked: str, launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(webrtc=blocked != "the server serves no WebRTC") as server:
        browser = await launch(silence_wav)
        if blocked == "no RTCPeerConnection":
            page = await open_page(browser, server, webrtc=False)
        elif blocked == "the server serves no WebRTC":  # Settings(webrtc=False): 404
            page = await open_page(browser, server)
        elif blocked == "the offer's POST fails":  # the page's HTTP goes through, not this
            page = await open_page(browser, server)
            await page.route("**/v1/realtime/calls", lambda route: route.abort())
        else:
            page = await open_page(browser, server)
            await page.route("**/v1/realtime/calls", unreachable_answer)
        sent_frames: list[str] = []
        page.on(
            "websocket",
            lambda ws: ws.on("framesent", lambda frame: sent_frames.append(str(frame)[:400])),
        )
        hangups: list[str] = []
        page.on("request", lambda r: r.url.endswith("/hangup") and hangups.append(r.url))
        await start_talking(page)
        pill = await connection(page)
        fallback = await page.evaluate("window.openrealtime.conn.fallback")
        title = await page.get_attribute("#connection", "title")
        await say(page, STATEMENT)
        answer = await last_answer(page, "I understand")
    assert pill == ("connected · WebSocket", "websocket")
    assert fallback["code"] == FALLBACKS[blocked]
    assert FALLBACKS[blocked] in (title or "")
    # A call the server had set up (its answer came, ICE did not) was hung up, not left waiting.
    assert len(hangups) == (blocked == "ICE never connects")
    assert answer == "Okay, I understand."
    # Over the WebSocket the token travels in the first message only.
    assert [i for i, frame in enumerate(sent_frames) if server.token in frame] == [0]


async def test_a_refused_credential_is_shown_and_never_retried_over_websocket(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        refusal = {"code": "unauthorized", "message": "the token was revoked"}
        await page.route(
            "**/v1/realtime/calls",
            lambda route: route.fulfill(
                status=401, content_type="application/json", body=json.dumps(refusal)
            ),
        )
        sockets: list[str] = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        await page.click("#start")
        await page.wait_for_selector("#connection[data-state=failed]")
        pill = await page.text_content("#connection")
        notice = await page.text_content("#notice")
    assert pill == "disconnected (unauthorized)"
    assert "the token was revoked (unauthorized)" in (notice or "")
    assert sockets == []


async def test_a_dropped_peer_connection_resumes_the_same_session_over_webrtc(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server)
        session_id = await start_talking(page)
        await say(page, STATEMENT)
        await last_answer(page, "I understand")
        # The peer connection dies mid-session (closed without a hangup, as a network would).
        await page.evaluate("window.openrealtime.conn.drop()")
        await wait_js(page, "window.openrealtime.conn.resumes === 1")
        pill = await connection(page)
        await say(page, "what did I just say")
        answer = await last_answer(page, "You said")
        same_session = await page.evaluate("window.openrealtime.session.id")
        keys = await page.evaluate("[...document.querySelectorAll('.msg')].map(n => n.dataset.key)")
        resume = await page.evaluate(
            "window.openrealtime.conn.sent.some(m => m.type === 'openrealtime.session.resume')"
        )
    assert pill == ("connected · WebRTC (resumed ×1)", "webrtc")
    assert same_session == session_id
    assert answer == f'You said: "{STATEMENT}"'
    assert len(keys) == len(set(keys)) == 4  # nothing replayed twice
    assert resume is False  # the resume went in the offer's body, not on the data channel
