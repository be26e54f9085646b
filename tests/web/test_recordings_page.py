"""A recorded conversation in a real browser (SPEC REC-1, REC-3 … REC-5): spoken on the talk
page, it plays on the history page with the word highlight moving; under a legal hold its
deletion is refused and the record kept; deleted with its recordings, the recording's files are
gone once the cleanup has run and the page shows its receipt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.engine import Plugins
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from records.expiry import expire_recordings
from runtime.config import Settings
from runtime.roles import default_role
from runtime.server import RunningServer, running_server
from tests.web.conftest import Launch, last_answer, open_page, spoken, start_talking, wait_js
from tests.web.test_history import api

ANSWER = "We open at nine in the morning and close at six."


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    settings = Settings(
        port=0, data_dir=tmp_path / "data", storage="memory", silence_ms=300,
        min_interrupt_ms=300, webrtc_host_addresses="127.0.0.1", recording_tenants="*",
    )  # fmt: skip
    plugins = Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(["what time do you open"]),
        brain=FakeBrain([ANSWER]),
        tts=FakeTTS(ms_per_char=40.0, chunk_ms=40.0),
    )
    async with running_server(settings, plugins=plugins) as running:
        owner = await running.services.accounts.authenticate(running.token)
        assert owner is not None
        role = await default_role(running.services.roles, owner.tenant)
        await running.services.roles.update(owner.tenant, role.id, recording_enabled=True)
        yield running


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.web.conftest import write_wav

    # After the notice (1.2 s of fake speech), one question; Chromium loops the file.
    pcm = spoken("What time do you open?", lead_s=3.0, tail_s=40.0)
    return write_wav(tmp_path_factory.mktemp("wav") / "question.wav", pcm)


async def test_a_spoken_conversation_plays_back_is_held_and_is_deleted_with_its_recording(
    launch: Launch, question_wav: Path, server: RunningServer
) -> None:
    browser = await launch(question_wav)
    page = await open_page(browser, server)
    await start_talking(page)
    await last_answer(page, "We open at nine", timeout=30_000)
    record_id = await page.evaluate("window.openrealtime.record.id")
    await wait_js(page, f"window.openrealtime.saver.status({record_id!r})?.state === 'saved'")
    thread_id = await page.evaluate("window.openrealtime.session.thread_id")
    told = await page.text_content("#notice")  # the page says the conversation is recorded
    await page.click("#start")  # End: the session closes and so does its recording
    owner = await server.services.accounts.authenticate(server.token)
    assert owner is not None
    index = server.services.recording_index
    ((recording,),) = [await index.of_thread(owner.tenant, owner.user, thread_id)]
    folder = server.services.settings.data_dir / "recordings" / recording.id
    await wait_js(page, "true")  # (the page is alive)
    for _ in range(200):  # the session's end closes the recording's row
        row = await index.get(owner.tenant, recording.id)
        if row is not None and row.ended_at is not None:
            break
        await page.wait_for_timeout(50)

    # Playback beside the transcript, the word being heard highlighted as it moves.
    await page.goto(f"{server.http_url}/history.html?id={record_id}")
    await page.wait_for_selector(".recording[data-ready=true]", timeout=15_000)
    transcript = await page.locator(".recording .segment").all_text_contents()
    messages = await page.locator("#messages .msg").all_text_contents()
    await page.evaluate(
        """() => {
            window.seenWords = new Set();
            const box = document.querySelector('.recording');
            new MutationObserver(() => { if (box.dataset.word) window.seenWords.add(
                document.querySelector('.recording .word.current').textContent); })
              .observe(box, {attributes: true, attributeFilter: ['data-word']});
        }"""
    )
    await page.click(".recording .rec-play")
    seen = await wait_js(page, "window.seenWords.size >= 4 && [...window.seenWords]", 30_000)
    await page.click(".recording .rec-play")  # pause
    # A click on the waveform plays from there: near the end, the last words.
    box = await page.locator(".recording canvas").bounding_box()
    assert box is not None
    await page.mouse.click(box["x"] + box["width"] * 0.999, box["y"] + box["height"] / 2)
    at_end = await page.evaluate("document.querySelector('.recording audio').currentTime")

    # A legal hold (the owner is an admin): the deletion is refused and the record kept.
    await page.click(".recording .rec-hold-toggle")
    await page.wait_for_selector(".recording .rec-hold:not(.hidden)")
    await page.click("#delete")
    await page.check("#delete-recordings")
    await page.click("#confirm-delete")
    await page.wait_for_selector("#notice.bad")
    refused = await page.text_content("#notice")
    kept = await api(page, "GET", f"/api/conversations/{record_id}")
    held_files = sorted(p.name for p in folder.iterdir())

    # Lifted, the deletion goes through and schedules the recording; the cleanup deletes it.
    await page.click(".recording .rec-hold-toggle")
    await page.wait_for_selector(".recording .rec-hold.hidden", state="attached")
    await page.click("#delete")
    await page.check("#delete-recordings")
    await page.click("#confirm-delete")
    await page.wait_for_selector("#recording-receipts:not(.hidden)")
    scheduled = await page.text_content("#recording-receipt-list")
    assert server.services.audio_store is not None
    later = datetime.now(UTC) + timedelta(seconds=1)
    receipts = await expire_recordings(index, server.services.audio_store, now=later)
    await page.click("#recheck-recordings")
    listed = "document.querySelector('#recording-receipt-list').innerText"
    await wait_js(page, f"{listed}.includes('receipt')")
    receipt = await page.text_content("#recording-receipt-list")
    report = await page.text_content("#delete-report-text")

    assert "This conversation is recorded" in (told or "")
    # The notice is heard and recorded, but is no message of the conversation's record.
    assert messages == ["what time do you open", ANSWER]
    assert transcript[0].strip() == "0:00 Agent: This conversation is recorded."  # first
    assert any("what time do you open" in line for line in transcript)
    assert any(ANSWER in line for line in transcript)
    assert set(seen) <= set(" ".join(transcript).split()) and len(seen) >= 4
    assert row is not None and at_end > row.duration_ms / 1000 * 0.95
    assert "legal hold" in (refused or "") or "protected" in (refused or "")
    assert kept["status"] == 200 and held_files  # the record and the audio stay
    assert "scheduled for deletion" in (scheduled or "")
    assert [r.recording_id for r in receipts] == [recording.id]
    assert "deleted" in (receipt or "") and "requested" in (receipt or "")
    assert "Recordings: 1 scheduled for deletion" in (report or "")
    assert not folder.exists()  # the files are gone
