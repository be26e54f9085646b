"""Turn-taking of the engine, whole conversations in virtual time (SPEC RT-3, RT-4, RT-6, TT-5).

Each test is a script on ``tests/conversation_harness.py``: the microphone streams 20 ms frames,
the client plays the answer at real time and reports playback, and every time is an exact
virtual millisecond. The numbers follow from the settings: the energy VAD reports speech after
60 ms of sound and its end after 300 ms of quiet (back-dated to where each began), the product's
turn settings (silence delay 800 ms, barge-in after 400 ms of sound) and ``FakeTTS`` at 40 ms per
character, so "First sentence of a long answer." lasts 1,280 ms.

Sound over an answer first holds it (TT-1): 400 ms into the sound playback pauses, and the sound
is judged once it stops (120 ms without a voiced frame); the harness's ASR is instant, so words
interrupt right then and noise resumes the answer right then. The simulated client pauses its
playback with the server, as the talk page does.
"""

from __future__ import annotations

import pytest

from journal.events import EventKind
from pipeline.engine import EngineSettings
from pipeline.turns import TurnState
from plugins.fakes import FakeBrain, FakeEndpointer, Faults
from tests.conversation_harness import FRAME_MS, ClientSettings, Conversation, conversation
from tests.virtual_time import in_virtual_time

STORY = (
    "First sentence of a long answer. Second sentence goes on and on. "
    "Third sentence is here too. Fourth sentence ends it all."
)
STORY_MS = 4_720.0  # 118 characters of four sentences at 40 ms
HEARD_AFTER_1000_MS = "First sentence of a long"  # the words whose audio ended by 1,000 ms


def story_brain() -> FakeBrain:
    return FakeBrain([STORY, "Okay, I stopped.", "Fine."])


async def story_from_typed_text(convo: Conversation) -> None:
    """Typed at 0 ms; the zero-latency fakes start the answer's audio at once."""
    convo.type("tell me a story")
    await convo.until("response.output_audio.delta")
    assert convo.first_audio_at(1) == convo.at("response.created")


def stream_position(reported_ms: int, virtual_ms: float) -> bool:
    """An input position the engine reports (``audio_start_ms``…) against the virtual time it
    stands for. The engine counts the audio received so far; a timer that fires at the same
    instant as a frame's arrival may run just before it, so a position is one frame early."""
    return virtual_ms - FRAME_MS <= reported_ms <= virtual_ms


def users(journal: list[dict[str, object]]) -> list[object]:
    return [e["text"] for e in journal if e["kind"] is EventKind.USER_INPUT]


def outputs(journal: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in journal if e["kind"] is EventKind.ASSISTANT_OUTPUT]


# ---------------------------------------------------------------- end of turn


@in_virtual_time
async def test_a_spoken_turn_is_committed_the_silence_delay_after_the_speech() -> None:
    async with conversation() as convo:
        # No transcript cue either way (no question, no trailing "and"): silence decides.
        await convo.say("the weather in Paris", ms=600)
        done = await convo.until("response.done")

        started = convo.events("input_audio_buffer.speech_started")[0]
        assert (started.at, started["audio_start_ms"]) == (60.0, 0)
        stopped = convo.events("input_audio_buffer.speech_stopped")[0]
        assert (stopped.at, stopped["audio_end_ms"]) == (900.0, 600)
        # Speech ended at 600 ms; the 800 ms silence delay commits at 1,400 ms.
        assert convo.at("input_audio_buffer.committed") == 1_400.0
        transcript = convo.events("conversation.item.input_audio_transcription.completed")[0]
        assert (transcript.at, transcript["transcript"]) == (1_400.0, "the weather in Paris")
        assert convo.first_audio_at(1) == 1_400.0
        # "Sure. Here is the answer. Anything else?" is 1,520 ms of audio, played to the end.
        assert convo.audio_sent_ms(1) == 1_520.0
        assert done.at == 1_400.0 + 1_520.0
        assert done["response"]["status"] == "completed"
        latency = convo.events("openrealtime.turn.latency")[0]
        assert latency["origin"] == "vad_end"
        # The transcript was made speculatively 180 ms into the pause, long before the commit.
        assert latency["latency_ms"] == {
            "committed": 800.0,
            "asr_started": 180.0,
            "asr_done": 180.0,
            "asr_final": 800.0,
            "brain_first_token": 800.0,
            "tts_first_audio": 800.0,
            "first_audio_sent": 800.0,
        }
        journal = await convo.journal()
        assert users(journal) == ["the weather in Paris"]
        assert outputs(journal)[0]["interrupted"] is False
        assert outputs(journal)[0]["heard_text"] == outputs(journal)[0]["text"]


@pytest.mark.parametrize(
    ("verdict", "verdict_delay_s", "committed_at"),
    [
        (None, 0.0, 1_400.0),  # no opinion: the silence delay (600 + 800)
        (True, 0.0, 900.0),  # complete: 600 + 300, reached when the VAD confirms the pause
        (True, 0.2, 1_100.0),  # complete but 200 ms late: committed on arrival
        (False, 0.0, 3_100.0),  # incomplete: 600 + 2,500
    ],
)
@in_virtual_time
async def test_the_endpointer_verdict_moves_the_commit(
    verdict: bool | None, verdict_delay_s: float, committed_at: float
) -> None:
    endpointer = FakeEndpointer([verdict], faults=Faults(delay=verdict_delay_s))
    async with conversation(endpointer=endpointer) as convo:
        await convo.say("the weather in Paris", ms=600)
        await convo.until("input_audio_buffer.committed")
        assert convo.at("input_audio_buffer.committed") == committed_at
        assert endpointer.calls == 1  # asked once, when the VAD confirmed the pause at 900 ms
        await convo.until("response.done")


@in_virtual_time
async def test_speech_resuming_in_the_pause_continues_the_same_turn() -> None:
    async with conversation() as convo:
        await convo.say("book a table", ms=600)
        await convo.say("for two", ms=400, at=1_200)  # 600 ms into the 800 ms wait
        await convo.until("response.done")
        # One turn, one item: speech resumed, then ended at 1,600 ms; committed 800 ms later.
        items = {r["item_id"] for r in convo.events("input_audio_buffer.speech_started")}
        assert len(items) == 1
        assert [r.at for r in convo.events("input_audio_buffer.speech_stopped")] == [900.0, 1_900.0]
        assert convo.at("input_audio_buffer.committed") == 2_400.0
        assert users(await convo.journal()) == ["book a table for two"]


@in_virtual_time
async def test_long_speech_gets_partial_transcripts_and_the_final_is_speculative() -> None:
    async with conversation() as convo:
        await convo.say("a long question", ms=3_200)
        partial = await convo.until("conversation.item.input_audio_transcription.delta")
        # partial_every_s 2.5 from the utterance's start (the VAD's decision at 60 ms).
        assert partial.at == 2_560.0
        assert (partial["delta"], partial["transcript"]) == ("a long question", "a long question")
        final = await convo.until("conversation.item.input_audio_transcription.completed")
        assert final["item_id"] == partial["item_id"]
        assert final.at == 3_200.0 + 800.0
        latency = await convo.until("openrealtime.turn.latency")
        assert latency["latency_ms"]["asr_started"] == 180.0  # in the pause, not at the commit
        await convo.until("response.done")


# ---------------------------------------------------------------- barge-in (RT-4)


@in_virtual_time
async def test_barge_in_cuts_the_answer_and_journals_exactly_the_heard_prefix() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.say("wait stop", ms=500, at=600)  # over the answer, from 600 to 1,100 ms

        # 400 ms of speech holds the answer at 1,000 ms, after exactly 1,000 ms of playback;
        # its words, judged when it stops (1,100 + 120 ms), interrupt.
        assert convo.at("openrealtime.output_audio.paused") == 1_000.0
        await convo.until("response.done", where=lambda r: r.generation == 1)
        assert convo.interrupted_at(1) == 1_220.0
        interrupted = convo.events("openrealtime.response.interrupted")[0]
        assert interrupted["reason"] == "barge_in"
        assert convo.client.playback[1].stopped_at == 1_220.0
        assert convo.client.playback[1].played_ms == 1_000.0
        done = convo.done(1)
        assert done["status"] == "cancelled"
        assert done["status_details"]["reason"] == "turn_detected"
        assert done["heard_text"] == HEARD_AFTER_1000_MS
        assert done["output_text"] == STORY
        # Nothing of the interrupted answer is sent after its interruption event.
        assert not [r for r in convo.audio(1) if r.index > interrupted.index]
        assert convo.audio_sent_ms(1) < STORY_MS

        # The interrupting speech is the next turn, from where it began (600 ms).
        second = await convo.until("response.done", where=lambda r: r.generation == 2)
        started = convo.events("input_audio_buffer.speech_started")[-1]
        assert started.at == 1_220.0
        assert stream_position(started["audio_start_ms"], 600)
        assert convo.at("input_audio_buffer.committed") == 1_100.0 + 800.0
        assert second["response"]["output_text"] == "Okay, I stopped."
        journal = await convo.journal()
        assert users(journal) == ["tell me a story", "wait stop"]
        first = outputs(journal)[0]
        assert (first["interrupted"], first["heard_text"]) == (True, HEARD_AFTER_1000_MS)


@pytest.mark.parametrize(
    ("sound_ms", "held_ms"),
    [
        (160, None),  # a cough: silent 240 ms before the threshold
        (260, None),  # silent 140 ms before it: more than the 120 ms voice gap
        (300, 20),  # silent 100 ms before it: held at 900, resumed at its stop + 120 ms
        (600, 320),  # held at 900, resumed at 1,100 + 120 ms
    ],
)
@in_virtual_time
async def test_noise_holds_the_answer_only_if_still_voiced_at_min_interrupt_then_resumes_it(
    sound_ms: int, held_ms: int | None
) -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.noise(ms=sound_ms, at=500)
        await convo.silence(ms=1_000)
        assert convo.events("openrealtime.response.interrupted") == []
        done = await convo.until("response.done")
        if held_ms is not None:
            assert convo.at("openrealtime.output_audio.paused") == 900.0  # 500 + min_interrupt
            assert convo.at("openrealtime.output_audio.resumed") == 900.0 + held_ms
        else:
            assert convo.events("openrealtime.output_audio.paused") == []
        # The answer plays to its end, later by the hold; nothing of it was lost.
        assert (done.at, done["response"]["status"]) == (STORY_MS + (held_ms or 0), "completed")
        assert done["response"]["heard_text"] == STORY
        assert convo.audio_sent_ms(1) == STORY_MS
        assert convo.events("input_audio_buffer.speech_started") == []
        assert users(await convo.journal()) == ["tell me a story"]
        assert convo.engine.coordinator.state is TurnState.LISTENING


@in_virtual_time
async def test_a_short_burst_before_a_barge_in_begins_the_new_turn() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.say("hmm", ms=160, at=500)  # too short to interrupt
        await convo.say("stop please", ms=600, at=1_200)  # within burst_join of it
        await convo.until("openrealtime.response.interrupted")
        assert convo.at("openrealtime.output_audio.paused") == 1_600.0
        assert convo.interrupted_at(1) == 1_800.0 + 120.0
        started = convo.events("input_audio_buffer.speech_started")[0]
        assert stream_position(started["audio_start_ms"], 500)  # the turn starts with the burst
        await convo.until("response.done", where=lambda r: r.generation == 2)
        assert users(await convo.journal()) == ["tell me a story", "hmm stop please"]


@in_virtual_time
async def test_the_journal_keeps_what_a_late_playback_report_says_was_heard() -> None:
    # Reports only when interrupted, each arriving 120 ms late: the engine waits for it.
    client = ClientSettings(report_every_ms=None, report_delay_ms=120.0)
    async with conversation(brain=story_brain(), client=client) as convo:
        await story_from_typed_text(convo)
        await convo.say("wait stop", ms=500, at=600)
        await convo.until("openrealtime.response.interrupted")
        assert convo.interrupted_at(1) == 1_220.0
        done = await convo.until("response.done")
        assert done.at == 1_220.0 + 120.0
        assert done["response"]["heard_text"] == HEARD_AFTER_1000_MS  # paused at 1,000 ms


@in_virtual_time
async def test_without_playback_reports_the_server_assumes_all_audio_sent_was_heard() -> None:
    # A GA client: no reports, no pausing — it plays out what it had while the answer is held.
    client = ClientSettings(reports=False, pauses=False)
    async with conversation(brain=story_brain(), client=client) as convo:
        await story_from_typed_text(convo)
        await convo.say("wait stop", ms=500, at=600)
        await convo.until("openrealtime.response.interrupted")
        assert convo.interrupted_at(1) == 1_220.0
        assert convo.audio_sent_ms(1) == 1_280.0  # the lead sent by the hold at 1,000 ms
        done = await convo.until("response.done")
        assert done.at == 1_220.0 + 500.0  # heard_report_wait_s, then the estimate
        assert done["response"]["heard_text"] == "First sentence of a long answer."


@in_virtual_time
async def test_without_reports_a_pausing_client_is_heard_up_to_the_hold() -> None:
    async with conversation(brain=story_brain(), client=ClientSettings(reports=False)) as convo:
        await story_from_typed_text(convo)
        await convo.say("wait stop", ms=500, at=600)
        done = await convo.until("response.done")
        assert done["response"]["heard_text"] == HEARD_AFTER_1000_MS


# ---------------------------------------------------------------- other ways to cut in


@in_virtual_time
async def test_typed_text_interrupts_the_answer_and_is_answered_at_once() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.wait(until_ms=1_000)
        convo.type("something else")
        assert convo.interrupted_at(1) == 1_000.0
        assert convo.events("openrealtime.response.interrupted")[0]["reason"] == "text_input"
        first = await convo.until("response.done")
        assert first["response"]["status_details"]["reason"] == "client_cancelled"
        assert first["response"]["heard_text"] == HEARD_AFTER_1000_MS
        assert convo.first_audio_at(2) == 1_000.0
        second = await convo.until("response.done")
        assert second["response"]["output_text"] == "Okay, I stopped."
        assert not [r for r in convo.audio(1) if r.at > 1_000.0]
        journal = await convo.journal()
        assert users(journal) == ["tell me a story", "something else"]
        assert [e["heard_text"] for e in outputs(journal)] == [
            HEARD_AFTER_1000_MS,
            "Okay, I stopped.",
        ]


@in_virtual_time
async def test_cancel_stops_the_answer_at_once_and_the_floor_is_free() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.wait(until_ms=1_000)
        assert convo.cancel() is True
        assert convo.interrupted_at(1) == 1_000.0
        assert convo.events("openrealtime.response.interrupted")[0]["reason"] == "cancel"
        done = await convo.until("response.done")
        assert (done.at, done["response"]["status"]) == (1_000.0, "cancelled")
        assert done["response"]["heard_text"] == HEARD_AFTER_1000_MS
        assert convo.engine.coordinator.state is TurnState.LISTENING
        assert convo.cancel() is False  # nothing left to cancel
        await convo.say("next question", ms=400)
        await convo.until("response.done")
        assert users(await convo.journal()) == ["tell me a story", "next question"]


@in_virtual_time
async def test_a_commit_while_the_assistant_speaks_changes_nothing() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.wait(until_ms=1_000)
        assert convo.commit() is False
        done = await convo.until("response.done")
        assert (done.at, done["response"]["status"]) == (STORY_MS, "completed")


@in_virtual_time
async def test_a_commit_after_a_barge_in_answers_it_without_the_silence_wait() -> None:
    async with conversation(brain=story_brain()) as convo:
        await story_from_typed_text(convo)
        await convo.say("wait stop", ms=500, at=600)
        assert convo.commit() is True  # at 1,100 ms, the moment the user stops, while held
        assert convo.interrupted_at(1) == 1_100.0
        assert convo.at("input_audio_buffer.committed") == 1_100.0
        second = await convo.until("response.done", where=lambda r: r.generation == 2)
        assert convo.first_audio_at(2) == 1_100.0
        assert second["response"]["output_text"] == "Okay, I stopped."
        assert users(await convo.journal()) == ["tell me a story", "wait stop"]


# ---------------------------------------------------------------- the microphone (RT-6)


@in_virtual_time
async def test_a_paused_microphone_ignores_speech_and_resuming_restores_it() -> None:
    async with conversation() as convo:
        convo.pause_microphone()
        await convo.say("not for you", ms=500)
        await convo.silence(ms=1_500)
        assert convo.events("input_audio_buffer.speech_started") == []
        convo.resume_microphone()
        await convo.say("hello again", ms=500, at=2_200)
        await convo.until("response.done")
        # The times after the pause are as before it: the VAD's clock skips the paused audio.
        started = convo.events("input_audio_buffer.speech_started")[0]
        assert (started.at, started["audio_start_ms"]) == (2_260.0, 2_200)
        assert convo.at("input_audio_buffer.committed") == 2_700.0 + 800.0
        assert users(await convo.journal()) == ["hello again"]


@in_virtual_time
async def test_after_a_microphone_pause_a_short_noise_still_does_not_interrupt() -> None:
    async with conversation(brain=story_brain()) as convo:
        convo.pause_microphone()
        await convo.silence(ms=2_000)
        convo.resume_microphone()
        await story_from_typed_text(convo)
        await convo.noise(ms=160, at=2_500)  # a cough, 500 ms into the answer
        await convo.silence(ms=1_000)
        # Back-dated by the 2 s of paused audio, it would have "lasted" min_interrupt already.
        assert convo.events("openrealtime.response.interrupted") == []


@in_virtual_time
async def test_pausing_the_microphone_drops_the_utterance_but_typing_still_works() -> None:
    async with conversation(brain=FakeBrain(["Typed answer."])) as convo:
        await convo.say("half a senten", ms=400)
        convo.pause_microphone()  # 400 ms in, before the end of the turn
        await convo.silence(ms=1_500)
        assert convo.events("input_audio_buffer.committed") == []
        convo.type("typed instead")
        done = await convo.until("response.done")
        assert done["response"]["output_text"] == "Typed answer."
        assert users(await convo.journal()) == ["typed instead"]


# ---------------------------------------------------------------- watchdogs and idle time


@in_virtual_time
async def test_a_brain_silent_past_its_watchdog_fails_the_response_at_that_virtual_time() -> None:
    brain = FakeBrain(["Back again."], faults=Faults(hang=True))
    settings = EngineSettings(brain_timeout_s=2.0, tool_timeout_s=1.0)
    async with conversation(brain=brain, settings=settings) as convo:
        convo.type("hello")
        error = await convo.until("error")
        # The brain's idle watchdog allows brain_timeout_s plus one tool's timeout.
        assert error.at == 3_000.0
        assert (error["error"]["code"], error["error"]["retryable"]) == ("plugin_timeout", True)
        done = await convo.until("response.done")
        # In voice the person hears a short apology instead of silence (SPEC RT-11), then
        # the response fails with the error.
        assert done["response"]["status"] == "failed"
        assert done["response"]["status_details"]["error"]["code"] == "plugin_timeout"
        assert done["response"]["output_text"] == "Sorry, I lost that — could you say it again?"
        assert done.at > 3_000.0
        brain.faults.hang = False
        convo.type("hello again")
        done = await convo.until("response.done")
        assert done["response"]["status"] == "completed"


@in_virtual_time
async def test_a_brain_slow_to_its_first_token_but_within_the_watchdog_is_answered() -> None:
    brain = FakeBrain(["Late but here."], faults=Faults(delay=2.9))
    settings = EngineSettings(brain_timeout_s=2.0, tool_timeout_s=1.0)
    async with conversation(brain=brain, settings=settings) as convo:
        convo.type("hello")
        done = await convo.until("response.done")
        assert convo.first_audio_at(1) == 2_900.0
        assert done["response"]["status"] == "completed"
        assert convo.events("error") == []


@in_virtual_time
async def test_a_failing_brain_reports_an_error_and_the_session_goes_on() -> None:
    brain = FakeBrain(["never"], faults=Faults(fail=True))
    async with conversation(brain=brain) as convo:
        convo.type("hello")
        error = await convo.until("error")
        assert (error["error"]["code"], error["error"]["retryable"]) == ("plugin_error", True)
        done = await convo.until("response.done")
        assert done["response"]["status"] == "failed"
        brain.faults.fail = False
        convo.type("hello again")
        done = await convo.until("response.done")
        assert done["response"]["status"] == "completed"


@in_virtual_time
async def test_the_idle_timeout_fires_exactly_that_long_after_the_answer() -> None:
    async with conversation(idle_timeout_s=5.0) as convo:
        convo.type("hello")
        done = await convo.until("response.done")
        assert done.at == 1_520.0
        timeout = await convo.until("input_audio_buffer.timeout_triggered")
        assert timeout.at == 1_520.0 + 5_000.0
        # The microphone streamed all along: its positions are the virtual times.
        assert stream_position(timeout["audio_start_ms"], 1_520)
        assert stream_position(timeout["audio_end_ms"], 6_520)
        assert convo.events("response.created")[1:] == []  # no answer without words


@in_virtual_time
async def test_speech_before_the_idle_timeout_cancels_it() -> None:
    async with conversation(idle_timeout_s=5.0) as convo:
        convo.type("hello")
        await convo.until("response.done")
        await convo.say("still here", ms=400, at=4_000)
        done = await convo.until("response.done")
        assert done.at == 4_400.0 + 800.0 + 1_520.0
        await convo.wait(until_ms=done.at + 4_980.0)
        assert convo.events("input_audio_buffer.timeout_triggered") == []
        timeout = await convo.until("input_audio_buffer.timeout_triggered")
        assert timeout.at == done.at + 5_000.0
