"""The conversation harness (``tests/conversation_harness.py``, ``tests/simulated_client.py``):
the microphone's grid, words in audio, the client's playback and reports, and failing fast
instead of hanging."""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
import pytest

from pipeline import events as ev
from plugins.fakes import FakeBrain, Faults
from tests.conversation_harness import ClientSettings, conversation
from tests.simulated_client import FRAME_MS, PhraseBook, noise_frames
from tests.virtual_time import VirtualTimeDeadlock, VirtualTimeLoop, in_virtual_time

RATE = 24_000


def audio(ms: float, generation: int = 7) -> ev.OutputAudioDelta:
    pcm = np.zeros(int(RATE * ms / 1000), dtype=np.int16)
    return ev.OutputAudioDelta("resp_x", "item_x", 0, 0, pcm.tobytes(), generation=generation)


@in_virtual_time
async def test_the_microphone_streams_20_ms_frames_at_virtual_real_time() -> None:
    async with conversation() as convo:
        assert convo.now == 0.0
        await convo.say("hello", ms=100)
        assert (convo.now, convo.engine.listening.stream_ms) == (100.0, 100.0)
        await convo.silence(ms=40)
        assert (convo.now, convo.engine.listening.stream_ms) == (140.0, 140.0)
        await convo.wait(until_ms=150)
        await convo.say("again", ms=40)  # not before now: from the next frame, 160 ms
        assert convo.now == 200.0
        await convo.noise(ms=40, at=300)
        assert convo.now == 340.0
        with pytest.raises(ValueError, match="whole number of 20 ms frames"):
            await convo.say("odd", ms=30)
        with pytest.raises(ValueError, match="in the past"):
            await convo.say("late", ms=20, at=100)


def test_the_words_are_in_the_audio() -> None:
    book = PhraseBook()
    silence = np.zeros(320, dtype=np.int16)
    noise = np.concatenate(noise_frames(2 * FRAME_MS))
    a, b = book.speech("book a table", 640), book.speech("for two", 320)
    assert book.heard(np.concatenate((silence, a, silence, b))) == "book a table for two"
    assert book.heard(np.concatenate((a, noise, a))) == "book a table book a table"
    assert book.heard(np.concatenate((noise, silence))) == ""
    assert book.heard(silence) == ""


@in_virtual_time
async def test_the_client_plays_at_real_time_stalls_when_dry_and_reports_like_the_talk_page() -> (
    None
):
    async with conversation() as convo:
        convo.send(audio(300))  # at 0 ms: 300 ms buffered
        await convo.wait(until_ms=500)  # played dry at 300 ms, stalled since
        convo.send(audio(200))
        await convo.wait(until_ms=600)
        playback = convo.client.playback[7]
        playback.advance(convo.now)
        assert playback.played_ms == 400.0
        convo.send(ev.OutputAudioDone("resp_x", "item_x", 0, 0))
        await convo.wait(until_ms=800)
        assert playback.drained_at == 700.0
        # Every 250 ms while playing, and once drained.
        assert [(r.at, r.played_ms) for r in convo.client.reports] == [
            (250.0, 250.0),
            (500.0, 300.0),
            (700.0, 500.0),
        ]


@in_virtual_time
async def test_the_client_drops_an_interrupted_generation_and_reports_late_if_told() -> None:
    client = ClientSettings(report_every_ms=None, report_delay_ms=100.0)
    async with conversation(brain=FakeBrain(["One two three four five six."]), client=client) as c:
        c.type("count")
        await c.until("response.output_audio.delta")
        await c.wait(until_ms=400)
        c.cancel()
        tracker = c.engine.responder.responses[1].tracker
        assert c.client.playback[1].stopped_at == 400.0
        assert [(r.at, r.played_ms) for r in c.client.reports] == [(400.0, 400.0)]
        assert tracker.client_played_ms is None  # still on its way
        await c.wait(until_ms=500)
        assert tracker.client_played_ms == 400.0


@in_virtual_time
async def test_until_fails_in_virtual_time_naming_what_happened() -> None:
    started = time.monotonic()
    async with conversation() as convo:
        convo.type("hello")
        with pytest.raises(AssertionError, match=r"no error within 60000 ms .*response\.done@"):
            await convo.until("error", within_ms=60_000)
        assert convo.now == 60_000.0
    assert time.monotonic() - started < 5.0


def test_a_conversation_where_nothing_can_happen_any_more_raises_instead_of_hanging() -> None:
    loop = VirtualTimeLoop()
    loop.stuck_after_s = 0.05

    async def stuck() -> None:
        async with conversation(horizon_ms=1_000) as convo:
            await convo.wait(until_ms=1_000)
            await asyncio.Event().wait()  # an unbounded wait, past the microphone's horizon

    with pytest.raises(VirtualTimeDeadlock), asyncio.Runner(loop_factory=lambda: loop) as runner:
        runner.run(stuck())


@in_virtual_time
async def test_past_the_horizon_a_sound_cannot_be_made() -> None:
    async with conversation(horizon_ms=200) as convo:
        with pytest.raises(AssertionError, match="microphone stopped at 200"):
            await convo.say("too late", ms=400)


async def test_a_conversation_refuses_to_run_in_real_time() -> None:
    with pytest.raises(TypeError, match="virtual time"):
        async with conversation():
            pass


@in_virtual_time
async def test_closing_in_the_middle_of_an_answer_leaves_nothing_running() -> None:
    # in_virtual_time fails the test if any task is left.
    async with conversation(brain=FakeBrain(["A long answer. " * 20])) as convo:
        convo.type("talk")
        await convo.until("response.output_audio.delta")
        await convo.say("and meanwhile", ms=200)
    assert len(convo.engine.tasks) == 0


@in_virtual_time
async def test_audio_of_a_generation_after_its_interruption_fails_the_conversation() -> None:
    with pytest.raises(AssertionError, match="audio of generation 7 at 0.0 ms after its interr"):
        async with conversation() as convo:
            convo.send(ev.ResponseInterrupted("resp_x", 7, "barge_in"))
            convo.send(audio(40))


@in_virtual_time
async def test_an_engine_error_fails_the_conversation_unless_expected() -> None:
    with pytest.raises(AssertionError, match="engine errors: engine task boom failed"):
        async with conversation():
            logging.getLogger("pipeline.engine").error("engine task %s failed", "boom")
    async with conversation(expect_errors=True) as convo:
        logging.getLogger("pipeline.engine").error("engine task %s failed", "boom")
    assert len(convo.errors) == 1


@in_virtual_time
async def test_plugin_delays_are_virtual_too() -> None:
    brain = FakeBrain(["Fine."], token_delay=0.25, faults=Faults(delay=1.0))
    async with conversation(brain=brain, asr_faults=Faults(delay=0.5)) as convo:
        await convo.say("tell me about paris", ms=600)  # no cue: the silence delay
        await convo.until("response.done")
        # Speculative ASR at 780 ms done by 1,280 ms, before the commit at 1,400 ms; the brain
        # starts on that transcript at once (preemptive) and its first token comes 1,000 + 250
        # ms later, the answer's first audio with it (after the commit).
        latency = convo.events("openrealtime.turn.latency")[0]
        marks = latency["latency_ms"]
        assert (marks["asr_started"], marks["asr_done"]) == (180.0, 680.0)
        assert latency["preempted"] is True
        assert marks["brain_first_token"] == 680.0 + 1_250.0
        assert convo.first_audio_at(1) == 1_280.0 + 1_250.0
