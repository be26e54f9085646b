"""False-interruption holds in the TurnCoordinator (Rule 3), as scripted timelines."""

from __future__ import annotations

import pytest

from pipeline.turn_commands import (
    CommitUserTurn,
    DropUtterance,
    Interrupt,
    JudgeInterruption,
    PauseResponse,
    ResumeResponse,
    TurnSettings,
    UserSpeechStarted,
    UserSpeechStopped,
)
from pipeline.turns import TurnCoordinator, TurnState
from tests.pipeline.test_turns import speak, start_response

SETTINGS = TurnSettings(min_interrupt=0.4, max_voice_gap=0.12, false_interruption_timeout=1.5)


def held(c: TurnCoordinator, start: float = 1.0, end: float = 1.5) -> PauseResponse:
    """A response speaking since 0.5 s, and user sound from ``start`` to ``end``."""
    start_response(c, audio_at=0.5)
    speak(c, start, end)
    commands = c.commands()
    pauses = [x for x in commands if isinstance(x, PauseResponse)]
    assert len(pauses) == 1 and not any(isinstance(x, Interrupt) for x in commands)
    return pauses[0]


def test_sound_over_the_answer_holds_it_instead_of_interrupting() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    assert pause.generation == c.generation and pause.at == 1.0
    assert pause.turn_id == c.turn_id + 1
    assert c.state is TurnState.SPEAKING and c.held and c.is_current(pause.generation)


def test_the_hold_is_judged_when_the_sound_stops() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c, 1.0, 1.5)
    # The last voiced frame was at 1.5: the sound has stopped once max_voice_gap passed.
    assert c.next_deadline() == pytest.approx(1.5 + 0.12, abs=1e-5)
    c.on_tick(1.6)
    assert c.commands() == []
    c.on_tick(1.621)
    assert c.commands() == [JudgeInterruption(pause.turn_id, 1.5)]
    assert c.next_deadline() == pytest.approx(1.4 + 1.5)  # waiting for the verdict, or the timeout


def test_a_backchannel_verdict_resumes_the_answer_and_leaves_no_turn() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    turn_before = c.turn_id
    c.on_tick(1.7)
    c.commands()
    c.on_interruption_verdict(pause.turn_id, False, 1.9)
    assert c.commands() == [ResumeResponse(pause.generation, pause.turn_id)]
    assert c.state is TurnState.SPEAKING and not c.held and c.is_current(pause.generation)
    assert c.turn_id == turn_before
    # The VAD's late end of speech for the same sound changes nothing.
    c.on_speech_end(2.0, at=1.6)
    assert c.commands() == [] and c.state is TurnState.SPEAKING


def test_a_real_turn_interrupts_and_adopts_the_recorded_sound() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    c.on_tick(1.7)
    c.commands()
    c.on_interruption_verdict(pause.turn_id, True, 1.9)
    commands = c.commands()
    assert commands == [
        Interrupt(pause.generation, "barge_in"),
        UserSpeechStarted(1.0, pause.turn_id, adopt=True),
    ]
    assert c.state is TurnState.USER_SPEAKING and c.turn_id == pause.turn_id
    assert not c.is_current(pause.generation)
    # Its end of speech starts the endpoint timer as for any turn.
    c.on_speech_end(2.0, at=1.6)
    assert [type(x) for x in c.commands()] == [UserSpeechStopped]
    c.on_tick(1.6 + SETTINGS.silence_delay)
    commit = c.commands()[-1]
    assert isinstance(commit, CommitUserTurn) and commit.turn_id == pause.turn_id


def test_a_real_verdict_after_the_vad_ended_the_speech_goes_straight_to_endpointing() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    c.on_speech_end(1.8, at=1.5)
    assert c.commands() == [JudgeInterruption(pause.turn_id, 1.5)]
    c.on_interruption_verdict(pause.turn_id, True, 1.9)
    assert [type(x) for x in c.commands()] == [Interrupt, UserSpeechStarted, UserSpeechStopped]
    assert c.state is TurnState.ENDPOINTING
    assert c.next_deadline() == pytest.approx(1.5 + SETTINGS.silence_delay)


def test_not_real_while_still_sounding_keeps_the_hold_and_judges_the_next_stop() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c, 1.0, 1.5)
    c.on_tick(1.63)
    assert c.commands() == [JudgeInterruption(pause.turn_id, 1.5)]
    # "uh" … "huh": the sound came back before the verdict ("uh" alone is no turn).
    for t in (1.66, 1.68, 1.70, 1.72):
        c.on_voice(t)
        c.on_tick(t)
    c.on_interruption_verdict(pause.turn_id, False, 1.72)
    assert c.commands() == [] and c.held
    c.on_tick(1.85)
    assert c.commands() == [JudgeInterruption(pause.turn_id, 1.72)]
    c.on_interruption_verdict(pause.turn_id, False, 1.95)
    assert c.commands() == [ResumeResponse(pause.generation, pause.turn_id)]


def test_continuing_noise_is_judged_at_the_timeout_and_then_resumes() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c, 1.0, 1.5)
    t = 1.5
    while t < 3.2:
        t = round(t + 0.02, 6)
        c.on_voice(t)
        c.on_tick(t)
        if c.commands():
            break
    since = 1.4  # the hold began when the candidate reached min_interrupt
    assert t == pytest.approx(since + 1.5, abs=0.021)
    c.on_voice(t + 0.02)
    c.on_interruption_verdict(pause.turn_id, False, t + 0.02)
    assert c.commands() == [ResumeResponse(pause.generation, pause.turn_id)]
    assert not c.held
    # The noise goes on, but it is the same VAD segment: no new hold.
    for step in range(1, 20):
        c.on_voice(t + 0.02 * step)
        c.on_tick(t + 0.02 * step)
    assert c.commands() == []


def test_a_stale_verdict_is_ignored() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    c.on_interruption_verdict(pause.turn_id, True, 1.55)  # nothing was asked yet
    assert c.commands() == [] and c.held
    c.on_tick(1.7)
    c.commands()
    c.on_interruption_verdict(pause.turn_id + 7, True, 1.8)
    assert c.commands() == [] and c.held


def test_typed_text_or_cancel_during_a_hold_drops_the_recording() -> None:
    for act in ("text", "cancel"):
        c = TurnCoordinator(SETTINGS)
        pause = held(c)
        if act == "text":
            c.on_text_input("never mind", 1.6)
        else:
            assert c.cancel_response(1.6)
        commands = c.commands()
        assert commands[0] == DropUtterance(pause.turn_id)
        assert Interrupt(pause.generation, "text_input" if act == "text" else "cancel") in commands
        assert not c.held


def test_pausing_the_microphone_during_a_hold_resumes_the_answer() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    c.pause_microphone(1.6)
    assert c.commands() == [ResumeResponse(pause.generation, pause.turn_id)]
    assert c.state is TurnState.SPEAKING and not c.held


def test_a_response_that_ends_while_held_hands_the_sound_to_the_next_turn() -> None:
    c = TurnCoordinator(SETTINGS)
    pause = held(c)
    c.on_response_done(pause.generation, 1.6)
    assert c.commands() == [UserSpeechStarted(1.0, pause.turn_id, adopt=True)]
    assert c.state is TurnState.USER_SPEAKING and not c.held


def test_without_a_timeout_a_candidate_interrupts_at_once() -> None:
    c = TurnCoordinator(TurnSettings(min_interrupt=0.4, false_interruption_timeout=None))
    start_response(c, audio_at=0.5)
    speak(c, 1.0, 1.5)
    assert any(isinstance(x, Interrupt) for x in c.commands())
    with pytest.raises(ValueError):
        TurnSettings(false_interruption_timeout=0)


def test_a_candidate_that_went_quiet_sets_no_deadline_it_cannot_meet() -> None:
    # It used to ask for a tick at started + min_interrupt although no tick could qualify
    # it; the engine re-armed that past deadline at once, over and over, until the VAD's end.
    c = TurnCoordinator(SETTINGS)
    start_response(c, audio_at=0.5)
    speak(c, 1.0, 1.14)
    c.on_tick(1.3)
    assert c.next_deadline() is None
    c.on_voice(1.32)  # voice again: it may qualify at 1.4 after all
    assert c.next_deadline() == pytest.approx(1.4)


def test_a_late_verdict_resumes_at_the_timeout_and_words_still_interrupt_after() -> None:
    for real in (True, False):
        c = TurnCoordinator(SETTINGS)
        pause = held(c)  # held at 1.4
        c.on_tick(1.63)
        assert c.commands() == [JudgeInterruption(pause.turn_id, 1.5)]
        assert c.next_deadline() == pytest.approx(1.4 + 1.5)
        c.on_tick(2.9)  # a slow ASR: no verdict by the timeout
        assert c.commands() == [ResumeResponse(pause.generation, pause.turn_id, True)]
        assert c.next_deadline() is None and c.held
        c.on_interruption_verdict(pause.turn_id, real, 3.5)
        commands = c.commands()
        if real:
            assert commands[0] == Interrupt(pause.generation, "barge_in")
            assert commands[1] == UserSpeechStarted(1.0, pause.turn_id, adopt=True)
        else:
            assert commands == [DropUtterance(pause.turn_id)]
            assert c.state is TurnState.SPEAKING and c.is_current(pause.generation)
        assert not c.held
