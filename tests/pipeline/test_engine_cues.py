"""The engine hands the cue of the pause's speculative transcript to the coordinator: the end of
a turn waits for a trailing "and" and comes early after "thanks." (scripted plugins, 20 ms
frames on the virtual-time loop, the engine on the loop's clock)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from journal.events import ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.audio import INPUT_SAMPLE_RATE
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.turn_commands import TurnSettings
from plugins.fakes import FakeASR, FakeBrain, FakeEndpointer, FakeTTS, Faults
from plugins.vad.energy import EnergyVAD
from tests.virtual_time import in_virtual_time

FRAME_S = 0.02
FRAME = int(INPUT_SAMPLE_RATE * FRAME_S)
LOUD = np.full(FRAME, 3000, dtype=np.int16)
QUIET = np.zeros(FRAME, dtype=np.int16)

SHORT, SILENCE, LONG = 0.3, 0.8, 2.5
"""The ``TurnSettings`` defaults: complete, silence and incomplete delays."""


class TimedSink:
    """Keeps each event's type with the loop time it was sent at."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.sent: list[tuple[float, dict[str, Any]]] = []

    def send(self, value: ServerEvent) -> None:
        self.sent.append((self.loop.time(), wire(value, extensions=False)))

    def first(self, kind: str) -> float | None:
        return next((t for t, e in self.sent if e["type"] == kind), None)


async def end_of_turn_wait(
    text: str,
    *,
    verdicts: list[bool | None] | None = None,
    asr_faults: Faults | None = None,
    turns: TurnSettings | None = None,
    asr: FakeASR | None = None,
    sink: TimedSink | None = None,
    answer_s: float = 0.0,
) -> float:
    """Say something for 1 s, then be quiet; the wait from the end of speech to the commit
    (then ``answer_s`` more of quiet)."""
    loop = asyncio.get_running_loop()
    sink = sink or TimedSink()
    endpointer = FakeEndpointer(verdicts) if verdicts is not None else None
    asr = asr or FakeASR([text], faults=asr_faults)
    engine = Engine(
        plugins=Plugins(EnergyVAD(), asr, FakeBrain(), FakeTTS(), endpointer),
        sink=sink,
        journal=InMemoryJournalStore(),
        thread=ThreadRef("t", "u", "th"),
        persona=Persona("Answer briefly.", language="en"),
        voice_session_id="vs_cues",
        settings=EngineSettings(turns=turns or TurnSettings()),
        clock=loop.time,
    )
    try:
        for _ in range(10):
            await engine.push_audio(QUIET)
            await asyncio.sleep(FRAME_S)
        for _ in range(50):
            await engine.push_audio(LOUD)
            speech_end = loop.time()  # a frame pushed at t holds the audio up to t
            await asyncio.sleep(FRAME_S)
        for _ in range(250):  # 5 s of quiet
            await engine.push_audio(QUIET)
            if sink.first("input_audio_buffer.committed") is not None:
                break
            await asyncio.sleep(FRAME_S)
        await asyncio.sleep(answer_s)
    finally:
        await engine.close()
    assert sink.first("input_audio_buffer.speech_stopped") is not None
    committed = sink.first("input_audio_buffer.committed")
    assert committed is not None, "the turn never ended"
    return committed - speech_end


@pytest.mark.parametrize(
    ("text", "wait"),
    [
        ("I'd like to book a table for two and", LONG),  # the speaker goes on
        ("thanks.", SHORT),  # clearly finished: no need to wait out the silence
        ("hello there", SILENCE),  # nothing either way
    ],
)
@in_virtual_time
async def test_the_transcript_at_the_pause_sets_the_end_of_turn_wait(
    text: str, wait: float
) -> None:
    assert await end_of_turn_wait(text) == pytest.approx(wait, abs=FRAME_S)


@pytest.mark.parametrize(
    ("text", "verdict", "wait"),
    [
        ("so I was wondering if", True, LONG),  # the transcript vetoes the model
        ("I want to cancel my order.", True, SHORT),  # both finished
        ("thanks.", False, LONG),  # never shortened against the model
    ],
)
@in_virtual_time
async def test_the_cue_combines_with_the_end_of_turn_model(
    text: str, verdict: bool, wait: float
) -> None:
    assert await end_of_turn_wait(text, verdicts=[verdict]) == pytest.approx(wait, abs=FRAME_S)


@in_virtual_time
async def test_the_cue_comes_from_the_transcript_the_turn_is_committed_with() -> None:
    asr, sink = FakeASR(["thanks.", "a second transcription"]), TimedSink()
    wait = await end_of_turn_wait("", asr=asr, sink=sink, answer_s=1.0)
    assert wait == pytest.approx(SHORT, abs=FRAME_S)
    assert asr.calls == 1  # the speculation made at the pause, reused at the commit
    completed = [
        e for _, e in sink.sent if e["type"].endswith("input_audio_transcription.completed")
    ]
    assert [e["transcript"] for e in completed] == ["thanks."]


@in_virtual_time
async def test_a_failed_transcription_says_nothing() -> None:
    # NEUTRAL: the model's "finished" is enough (a cue left pending would hold it to SILENCE).
    wait = await end_of_turn_wait("and", verdicts=[True], asr_faults=Faults(fail=True))
    assert wait == pytest.approx(SHORT, abs=FRAME_S)


@in_virtual_time
async def test_a_slow_transcription_still_vetoes_before_the_silence_deadline() -> None:
    # The transcript is ready 0.5 s into the pause: the model's verdict alone does not commit.
    wait = await end_of_turn_wait(
        "my number is 0 1 7 6", verdicts=[True], asr_faults=Faults(delay=0.5)
    )
    assert wait == pytest.approx(LONG, abs=FRAME_S)


@in_virtual_time
async def test_without_transcript_cues_the_wait_is_the_silence_rule() -> None:
    no_cues = TurnSettings(transcript_cues=False)
    wait = await end_of_turn_wait("I'd like to book a table for two and", turns=no_cues)
    assert wait == pytest.approx(SILENCE, abs=FRAME_S)


@in_virtual_time
async def test_eagerness_scales_the_wait() -> None:
    eager = TurnSettings(eagerness="high")
    wait = await end_of_turn_wait("I'd like to book a table for two and", turns=eager)
    assert wait == pytest.approx(LONG * 0.6, abs=FRAME_S)
