"""The talk page in a real browser over its WebSocket: speech in, transcript and answer audio out,
barge-in, resume (the page's own player and playback reports; WebRTC: test_talk_webrtc.py)."""

from __future__ import annotations

import asyncio
import wave
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from journal.events import EventKind, ThreadRef
from pipeline.audio import PCM
from pipeline.engine import Engine
from runtime.config import Settings
from runtime.server import running_server
from tests.fault_proxy import FaultProxy
from tests.postgres import pg_pool, postgres_url
from tests.web.conftest import (
    BLOCK_WEBRTC,
    Launch,
    ServerFactory,
    last_answer,
    open_page,
    say,
    spoken,
    start_talking,
    text_plugins,
    wait_js,
    write_wav,
)

__all__ = ["pg_pool", "postgres_url"]  # fixtures

QUESTION = "Tell me, who are you?"


def wave_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as file:
        return file.getnframes() / file.getframerate()


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The spoken question, then 20 s of silence before Chromium loops the file."""
    pcm = spoken(QUESTION, lead_s=0.5, tail_s=20)
    return write_wav(tmp_path_factory.mktemp("speech") / "question.wav", pcm)


@pytest.fixture(scope="module")
def interruption_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Quiet for 2.5 s (the answer starts playing), then the person talks over it."""
    pcm = spoken("Wait, wait, please stop there.", lead_s=2.5, tail_s=30)
    return write_wav(tmp_path_factory.mktemp("speech") / "interruption.wav", pcm)


@pytest.fixture(scope="module")
def chatter_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Speech every ~3 s: Chromium loops the short file, so the microphone never goes quiet
    for long."""
    pcm = spoken("Hello there, can you hear me?", lead_s=0.6, tail_s=0.8)
    return write_wav(tmp_path_factory.mktemp("speech") / "chatter.wav", pcm)


async def test_a_paused_microphone_sends_nothing_and_is_heard_again_after_resume(
    launch: Launch, chatter_wav: Path, fake_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = 0  # microphone frames the server received (binary WebSocket messages)
    push_audio = Engine.push_audio

    async def counted(engine: Engine, pcm: PCM) -> None:
        nonlocal frames
        frames += 1
        await push_audio(engine, pcm)

    monkeypatch.setattr(Engine, "push_audio", counted)
    loop_s = wave_seconds(chatter_wav)
    async with fake_server(heard="hello there") as server:
        browser = await launch(chatter_wav)
        page = await open_page(browser, server, webrtc=False)
        await start_talking(page)
        await page.evaluate(
            "window.events = []; window.openrealtime.conn.addEventListener('event',"
            " e => window.events.push(e.detail.type))"
        )
        # Pause in the middle of the first utterance: the server drops it, and so does the page.
        await page.wait_for_selector(".msg.user.partial", timeout=10_000)
        await page.click("#mic")
        await wait_js(page, "window.openrealtime.serverPaused")  # after the last frame sent
        before = frames
        shown = await page.evaluate(
            "[document.querySelector('#mic').textContent,"
            " document.querySelector('#mic').getAttribute('aria-pressed'),"
            " document.querySelector('#mic-state').checkVisibility()]"
        )
        await asyncio.sleep(loop_s + 0.2)  # the whole file, speech included, plays meanwhile
        paused_frames = frames - before
        events_while_paused = await page.evaluate(
            "window.events.slice(window.events.indexOf('openrealtime.input.paused') + 1)"
        )
        users_while_paused = await page.locator(".msg.user").count()
        await page.click("#mic")
        await wait_js(page, "window.openrealtime.serverPaused === false")
        transcript = await wait_js(  # a later loop of the file is heard and transcribed
            page,
            "document.querySelector('.msg.user:not(.partial) .text')?.textContent",
            timeout=(2 * loop_s + 5) * 1000,
        )
        resumed_frames = frames - before - paused_frames
        hidden = await page.evaluate(
            "[document.querySelector('#mic').textContent,"
            " document.querySelector('#mic-state').checkVisibility()]"
        )
    assert shown == ["Resume microphone", "true", True]
    assert before > 0  # the microphone was streaming before the pause
    assert paused_frames == 0
    heard = [e for e in events_while_paused if e.startswith(("input_audio", "conversation.item"))]
    assert heard == []
    assert users_while_paused == 0  # the dropped utterance's "…" went too
    assert transcript == "hello there"
    assert resumed_frames > 0
    assert hidden == ["Pause microphone", False]


async def test_spoken_question_shows_transcript_and_plays_the_answer(
    tmp_path: Path, launch: Launch, question_wav: Path
) -> None:
    settings = Settings(port=0, data_dir=tmp_path / "data", storage="memory")
    async with running_server(settings) as server:  # the embedded speech stack: real ASR, TTS
        browser = await launch(question_wav)
        page = await open_page(browser, server, webrtc=False)
        await start_talking(page)
        transcript = await wait_js(
            page,
            "document.querySelector('.msg.user:not(.partial) .text')?.textContent",
            timeout=40_000,
        )
        answer = await last_answer(page, "OpenRealtime", timeout=40_000)
        # The answer's audio went through the page's player to the end: the final playback
        # report counts the samples the AudioWorklet actually output.
        played = await wait_js(
            page,
            "window.openrealtime.playbackReports.find(r => r.final && r.played_ms > 0)",
            timeout=20_000,
        )
        sent = await page.evaluate("window.openrealtime.conn.sent.map(m => m.type)")
    assert "who are you" in str(transcript).lower()
    assert "OpenRealtime" in answer
    assert played["played_ms"] > 1000  # over a second of speech was played out
    assert "openrealtime.playback" in sent


async def test_a_dropped_websocket_resumes_and_the_conversation_continues(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        browser = await launch(silence_wav)
        page = await open_page(browser, server, webrtc=False)
        session_id = await start_talking(page)
        await say(page, "my favourite colour is green")
        await last_answer(page, "I understand")
        await page.evaluate("window.openrealtime.conn.drop()")  # the socket dies mid-session
        await wait_js(page, "window.openrealtime.conn.resumes === 1")
        state = await page.text_content("#connection")
        await say(page, "what did I just say")
        answer = await last_answer(page, "You said")
        same_session = await page.evaluate("window.openrealtime.session.id")
        keys = await page.evaluate("[...document.querySelectorAll('.msg')].map(n => n.dataset.key)")
    assert "resumed" in (state or "")
    assert same_session == session_id
    assert answer == 'You said: "my favourite colour is green"'
    assert len(keys) == len(set(keys)) == 4  # nothing replayed twice


async def test_speaking_over_the_answer_clears_playback_and_reports_what_was_played(
    launch: Launch, interruption_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(ms_per_char=100.0, heard="wait") as server:  # a ~4.5 s answer
        browser = await launch(interruption_wav)
        page = await open_page(browser, server, webrtc=False)
        session_id = await start_talking(page)
        await say(page, "Tell me something about the weather")
        # 2.5 s into the microphone's file the person starts talking over the answer.
        interruption = await wait_js(page, "window.openrealtime.lastInterruption")
        generation = interruption["generation"]
        await asyncio.sleep(0.4)
        # Nothing more of the interrupted answer played after the clear.
        played_after_ms = await page.evaluate(f"window.openrealtime.player.playedMs({generation})")
        reports = await page.evaluate(
            "window.openrealtime.conn.sent.filter(m => m.type === 'openrealtime.playback')"
        )
        await last_answer(page, "stopped")  # the fake ASR hears "wait": "Okay, I stopped. …"
        note = await page.text_content(f"[data-key='{session_id}:g{generation}'] .note")
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        thread = await page.evaluate("window.openrealtime.session.thread_id")
        events = await server.services.journal.read(
            ThreadRef(principal.tenant, principal.user, thread)
        )
    assert interruption["reason"] == "barge_in"
    assert interruption["clear_ms"] < 150  # the worklet dropped its queue at once
    assert round(played_after_ms) == interruption["played_ms"]
    assert 1000 < interruption["played_ms"] < 4500
    final = [r for r in reports if r["generation"] == generation][-1]
    assert final["played_ms"] == interruption["played_ms"]  # the page told the server
    assert f"after {interruption['played_ms']} ms of playback" in (note or "")
    outputs = [e.payload for e in events if e.kind == EventKind.ASSISTANT_OUTPUT]
    assert outputs[0]["interrupted"] is True
    assert 0 < len(outputs[0]["heard_text"]) < len(outputs[0]["text"])  # the heard prefix


async def test_a_resume_on_another_server_process_reconciles_the_transcript(
    launch: Launch, silence_wav: Path, postgres_url: str, pg_pool: Any, tmp_path: Path
) -> None:
    """Two servers on one database, as two processes: the page talks to A through a proxy; the
    network drops and its resume lands on B, which continues the session from the journal.
    The page shows the journal's account of the session and the conversation goes on."""
    settings = Settings(port=0, data_dir=tmp_path, database_url=postgres_url, silence_ms=300)
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(running_server(settings, plugins=text_plugins(10.0)))
        b = await stack.enter_async_context(running_server(settings, plugins=text_plugins(10.0)))
        proxy = FaultProxy(a.host, a.port)
        port = await proxy.start()
        stack.push_async_callback(proxy.stop)
        browser = await launch(silence_wav)
        context = await browser.new_context()
        await context.add_init_script(BLOCK_WEBRTC)  # the proxy carries TCP only
        page = await context.new_page()
        await page.goto(f"http://127.0.0.1:{port}/#token={a.token}")
        await page.wait_for_selector("body[data-ready=true]")
        session_id = await start_talking(page)
        await say(page, "my favourite colour is green")
        await last_answer(page, "I understand")
        record_id = await page.evaluate("window.openrealtime.record.id")

        proxy.target = (b.host, b.port)
        proxy.cut_all()  # the network drops; the page's resume reaches B
        await wait_js(page, "window.openrealtime.conn.resumes === 1", timeout=20_000)
        await wait_js(page, "window.openrealtime.keyPrefix.includes('~')")
        reconciled = await page.evaluate(
            "[...document.querySelectorAll('.msg')].map(n => [n.dataset.key, n.textContent])"
        )
        await say(page, "what did I just say")
        answer = await last_answer(page, "You said")
        still = await page.evaluate("window.openrealtime.session.id")
        await wait_js(
            page,
            f"(s => s && s.state === 'saved' && s.confirmed === 4)"
            f"(window.openrealtime.saver.status({record_id!r}))",
        )
        principal = await b.services.accounts.authenticate(b.token)
        assert principal is not None
        record = await b.services.records.get(principal.tenant, principal.user, record_id)
        messages = await b.services.records.messages(principal.tenant, principal.user, record_id)
    assert a.token == b.token  # one database, one local account
    assert len(reconciled) == 2  # the journal's account replaced what the page showed
    assert reconciled[0][1] == "my favourite colour is green"
    assert "Okay, I understand." in reconciled[1][1]
    assert all(key.startswith(f"{session_id}~1:j") for key, _ in reconciled)
    assert still == session_id  # the same session, continued on B
    assert answer == 'You said: "my favourite colour is green"'
    assert record is not None and record.message_count == 4
    assert [m.text for m in messages][0] == "my favourite colour is green"
    assert [m.text for m in messages][3] == answer
