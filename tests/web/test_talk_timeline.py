"""The latency timeline under each answer (web/timeline.js) in real Chromium: the numbers it
draws are the server's breakdown — the turn's ``openrealtime.turn.latency`` event, captured
from the page's protocol client, through ``runtime.metrics.turn_stages`` — and an interrupted
answer says how much of it was heard."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from runtime.metrics import turn_stages
from tests.web.conftest import (
    Launch,
    ServerFactory,
    open_page,
    say,
    spoken,
    start_talking,
    wait_js,
    write_wav,
)

CAPTURE_LATENCY = """() => {
  window.capturedLatency = [];
  window.openrealtime.conn.addEventListener("event", (e) => {
    if (e.detail.type === "openrealtime.turn.latency") window.capturedLatency.push(e.detail);
  });
}"""

DRAWN = """(generation) => {
  const node = document.querySelector(`.timeline[data-generation="${generation}"]`);
  if (!node) return null;
  return {
    total: node.querySelector(".timeline-total").textContent,
    stages: [...node.querySelectorAll(".stage")].map((s) => ({
      name: s.dataset.stage, ms: Number(s.dataset.ms), start: Number(s.dataset.startMs),
      end: Number(s.dataset.endMs), title: s.title, left: s.style.left, width: s.style.width,
    })),
  };
}"""


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pcm = spoken("Hello there, can you hear me?", lead_s=0.5, tail_s=20)
    return write_wav(tmp_path_factory.mktemp("speech") / "timeline-question.wav", pcm)


@pytest.fixture(scope="module")
def interruption_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pcm = spoken("Wait, wait, please stop there.", lead_s=2.5, tail_s=30)
    return write_wav(tmp_path_factory.mktemp("speech") / "timeline-interruption.wav", pcm)


def assert_drawn_as_the_server_says(drawn: dict[str, Any], event: dict[str, Any]) -> None:
    expected = turn_stages(event["latency_ms"])
    assert [s["name"] for s in drawn["stages"]] == [s.name for s in expected]
    end = max(s.end_ms for s in expected)
    for shown, stage in zip(drawn["stages"], expected, strict=True):
        length = stage.end_ms - stage.start_ms
        assert (shown["start"], shown["end"]) == (stage.start_ms, stage.end_ms)
        assert abs(shown["ms"] - length) <= 0.01
        # The page rounds as JavaScript does (Math.round: half up; Python's round is half even).
        assert shown["title"].startswith(f"{stage.name}: {math.floor(length + 0.5)} ms")
        # To scale: the segment's place and length are its share of the turn.
        assert abs(float(shown["left"].rstrip("%")) - stage.start_ms / end * 100) < 0.01
        assert abs(float(shown["width"].rstrip("%")) - length / end * 100) < 0.01
    # As above: half up, as the page rounds (a mark of 40.5 ms is "41 ms", not Python's 40).
    first_audio = math.floor(event["latency_ms"]["first_audio_sent"] + 0.5)
    assert drawn["total"].startswith(f"first audio {first_audio} ms")


async def test_a_spoken_turn_shows_the_servers_latency_breakdown(
    launch: Launch, question_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(heard="hello there") as server:
        page = await open_page(await launch(question_wav), server)  # WebRTC
        await start_talking(page)
        await page.evaluate(CAPTURE_LATENCY)
        [event] = await wait_js(page, "window.capturedLatency.length && window.capturedLatency")
        drawn = await wait_js(page, f"({DRAWN})({event['generation']})")
        selector = f".msg.assistant .timeline[data-generation='{event['generation']}']"
        inside = await page.evaluate(f"!!document.querySelector({selector!r})")
    assert event["origin"] == "vad_end"
    assert [s["name"] for s in drawn["stages"]] == ["endpoint", "asr", "brain", "tts", "send"]
    assert_drawn_as_the_server_says(drawn, event)
    assert inside  # under the assistant's message


async def test_a_typed_turn_and_an_interrupted_answer(
    launch: Launch, interruption_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(ms_per_char=100.0, heard="wait") as server:  # a ~4.5 s answer
        page = await open_page(await launch(interruption_wav), server, webrtc=False)
        session_id = await start_talking(page)
        await page.evaluate(CAPTURE_LATENCY)
        await say(page, "Tell me something about the weather")
        interruption = await wait_js(page, "window.openrealtime.lastInterruption")
        generation = interruption["generation"]
        heard_line = f"[data-key='{session_id}:g{generation}'] .heard"
        heard = await wait_js(
            page, f"document.querySelector({heard_line!r})?.textContent.match(/ s of /)?.input"
        )
        received = await page.evaluate(f"window.openrealtime.audioMs[{generation}]")
        [event] = [
            e
            for e in await page.evaluate("window.capturedLatency")
            if e["generation"] == generation
        ]
        drawn = await page.evaluate(f"({DRAWN})({generation})")
    assert event["origin"] == "committed"  # typed: no end of speech, so no endpoint stage
    assert_drawn_as_the_server_says(drawn, event)
    played = interruption["played_ms"]
    assert heard == f"heard {played / 1000:.1f} s of {received / 1000:.1f} s"
    assert 0 < played < received


STAGE_CASES: list[dict[str, float]] = [
    {"committed": 300.0, "asr_final": 420.0, "brain_first_token": 700.0,
     "tts_first_audio": 760.0, "first_audio_sent": 765.5},
    # preempted: the brain's first token was ready before the commit
    {"committed": 500.0, "asr_final": 510.0, "brain_first_token": 120.0,
     "tts_first_audio": 530.0, "first_audio_sent": 531.0},
    # the final transcript came before the commit (speculation): an asr stage of no length
    {"committed": 400.0, "asr_final": 350.0, "brain_first_token": 600.0},
    # typed: committed at the origin, no transcript
    {"committed": 0.0, "brain_first_token": 40.0, "tts_first_audio": 55.0,
     "first_audio_sent": 56.0},
    # missing marks: tts without a first token, send without tts
    {"committed": 200.0, "tts_first_audio": 300.0, "first_audio_sent": 310.0},
    {},
]  # fmt: skip


async def test_the_pages_stages_are_the_servers_turn_stages(
    launch: Launch, silence_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server() as server:
        page = await open_page(await launch(silence_wav), server)
        drawn = await page.evaluate(
            "(cases) => import('./timeline.js').then((m) => cases.map(m.turnStages))", STAGE_CASES
        )
    for case, stages in zip(STAGE_CASES, drawn, strict=True):
        expected = [
            {"name": s.name, "start_ms": s.start_ms, "end_ms": s.end_ms} for s in turn_stages(case)
        ]
        assert stages == expected, case


async def test_over_webrtc_an_interrupted_answer_counts_the_heard_words(
    launch: Launch, interruption_wav: Path, fake_server: ServerFactory
) -> None:
    async with fake_server(ms_per_char=100.0, heard="wait") as server:
        page = await open_page(await launch(interruption_wav), server)  # WebRTC: no player
        session_id = await start_talking(page)
        await page.evaluate(
            """() => {
              window.capturedDone = [];
              window.openrealtime.conn.addEventListener("event", (e) => {
                if (e.detail.type === "response.done") window.capturedDone.push(e.detail.response);
              });
            }"""
        )
        await say(page, "Tell me something about the weather")
        done = await wait_js(
            page, "window.capturedDone.find((r) => r.interrupted) || null", timeout=20_000
        )
        heard_line = f"[data-key='{session_id}:g{done['generation']}'] .heard"
        heard = await wait_js(page, f"document.querySelector({heard_line!r})?.textContent")
        kind = await page.evaluate("window.openrealtime.conn.kind")
    assert kind == "webrtc"
    words = len(done["heard_text"].split())
    assert heard == f"heard {words} of {len(done['output_text'].split())} words"
    assert 0 < words < len(done["output_text"].split())
