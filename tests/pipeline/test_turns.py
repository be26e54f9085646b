"""Scripted timelines for the TurnCoordinator (virtual time: every input carries ``now``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.turn_commands import (
    CommitUserTurn,
    DropUtterance,
    Interrupt,
    TurnSettings,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from pipeline.turns import TRANSITIONS, Trigger, TurnCoordinator, TurnState, TurnStateError

SETTINGS = TurnSettings(
    silence_delay=0.8,
    complete_delay=0.3,
    incomplete_delay=2.5,
    min_interrupt=0.4,
    false_interruption_timeout=None,  # barge-in at once; holds: test_turns_hold.py
)


def speak(c: TurnCoordinator, start: float, end: float, step: float = 0.02) -> None:
    """Voiced frames from ``start`` to ``end`` with the VAD deciding start at ``start``."""
    c.on_speech_start(start, at=start)
    t = start
    while t < end:
        t = round(t + step, 6)
        c.on_voice(t)
        c.on_tick(t)


def start_response(c: TurnCoordinator, *, audio_at: float | None = None) -> int:
    c.on_text_input("hello", 0.0)
    c.commands()
    if audio_at is not None:
        c.on_audio_started(c.generation, audio_at)
    return c.generation


def test_normal_turn_commits_after_silence_delay() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 1.0, 2.0)
    assert c.state is TurnState.USER_SPEAKING
    c.on_speech_end(2.3, at=2.0)
    assert c.state is TurnState.ENDPOINTING
    assert c.next_deadline() == pytest.approx(2.8)
    c.on_tick(2.79)
    assert c.state is TurnState.ENDPOINTING
    c.on_tick(2.8)
    assert c.state is TurnState.THINKING
    commands = c.commands()
    assert [type(x) for x in commands] == [
        UserSpeechStarted,
        UserSpeechStopped,
        CommitUserTurn,
    ]
    commit = commands[2]
    assert isinstance(commit, CommitUserTurn) and commit.reason == "endpoint"
    assert c.is_current(1)


def test_resumed_speech_resets_the_endpoint_timer() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 1.0, 2.0)
    c.on_speech_end(2.3, at=2.0)
    c.on_speech_start(2.6, at=2.5)  # before the 2.8 deadline
    assert c.state is TurnState.USER_SPEAKING
    assert c.next_deadline() is None
    c.on_tick(3.0)
    assert c.state is TurnState.USER_SPEAKING
    c.on_speech_end(3.5, at=3.2)
    assert c.next_deadline() == pytest.approx(4.0)
    c.on_tick(3.9)
    assert c.state is TurnState.ENDPOINTING
    c.on_tick(4.0)
    kinds = [type(x) for x in c.commands()]
    assert UserSpeechResumed in kinds
    assert kinds.count(CommitUserTurn) == 1
    assert c.turn_id == 1


def test_voice_in_the_pause_holds_the_commit_until_the_vad_confirms() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 0.0, 1.0)
    c.on_speech_end(1.3, at=1.0)
    # The user resumes at 1.75; the VAD confirms only at 1.95 — after the 1.8 deadline.
    for t in (1.76, 1.78, 1.80, 1.82, 1.84):
        c.on_voice(t)
        c.on_tick(t)
    assert c.state is TurnState.ENDPOINTING
    c.on_speech_start(1.95, at=1.75)
    assert c.state is TurnState.USER_SPEAKING
    # A pause with no sound commits on time.
    c2 = TurnCoordinator(SETTINGS)
    speak(c2, 0.0, 1.0)
    c2.on_speech_end(1.3, at=1.0)
    c2.on_tick(1.8)
    assert c2.state is TurnState.THINKING


def test_without_cues_the_endpoint_verdict_moves_the_deadline() -> None:
    # The rule before transcript cues (tests/pipeline/test_turns_cues.py has the rest).
    no_cues = replace(SETTINGS, transcript_cues=False)
    c = TurnCoordinator(no_cues, end_of_turn_model=True)
    speak(c, 0.0, 1.0)
    c.on_speech_end(1.1, at=1.0)
    c.on_endpoint_verdict(c.turn_id, False, 1.2)  # unfinished: wait up to 2.5 s
    assert c.next_deadline() == pytest.approx(3.5)
    c.on_tick(2.0)
    assert c.state is TurnState.ENDPOINTING

    c2 = TurnCoordinator(no_cues, end_of_turn_model=True)
    speak(c2, 0.0, 1.0)
    c2.on_speech_end(1.1, at=1.0)
    c2.on_endpoint_verdict(c2.turn_id, True, 1.35)  # finished: deadline 1.3 already passed
    assert c2.state is TurnState.THINKING


def test_stale_endpoint_verdict_is_ignored() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 0.0, 1.0)
    c.on_speech_end(1.1, at=1.0)
    old_turn = c.turn_id
    c.on_tick(1.8)  # committed by the silence timer
    c.commands()
    c.on_endpoint_verdict(old_turn, True, 1.9)
    assert c.commands() == []


def test_barge_in_while_speaking() -> None:
    c = TurnCoordinator(SETTINGS)
    generation = start_response(c, audio_at=0.5)
    assert c.state is TurnState.SPEAKING
    speak(c, 1.0, 1.38)
    assert c.state is TurnState.SPEAKING
    assert not any(isinstance(x, Interrupt) for x in c.commands())
    c.on_voice(1.4)
    c.on_tick(1.4)
    assert c.state is TurnState.USER_SPEAKING
    commands = c.commands()
    assert commands[0] == Interrupt(generation, "barge_in")
    assert isinstance(commands[1], UserSpeechStarted) and commands[1].at == 1.0
    assert not c.is_current(generation)


def test_barge_in_while_thinking() -> None:
    c = TurnCoordinator(SETTINGS)
    generation = start_response(c)
    assert c.state is TurnState.THINKING
    speak(c, 0.2, 0.7)
    assert c.state is TurnState.USER_SPEAKING
    assert Interrupt(generation, "barge_in") in c.commands()
    # The interrupting speech is a normal user turn from here on.
    c.on_speech_end(1.0, at=0.8)
    c.on_tick(1.6)
    assert c.state is TurnState.THINKING
    assert c.generation == generation + 1


def test_short_noise_does_not_interrupt() -> None:
    c = TurnCoordinator(SETTINGS)
    generation = start_response(c, audio_at=0.1)
    speak(c, 1.0, 1.2)  # 200 ms burst
    # Silent before the threshold: no timer is due (a past deadline would be re-armed at once,
    # round and round) — only a voiced frame can still interrupt.
    assert c.next_deadline() is None
    # The VAD has not closed the segment yet, but no voiced frames arrive any more.
    for t in (1.3, 1.4, 1.5):
        c.on_tick(t)
    c.on_speech_end(1.55, at=1.2)
    assert c.state is TurnState.SPEAKING
    assert c.is_current(generation)
    assert not any(isinstance(x, Interrupt) for x in c.commands())
    c.on_response_done(generation, 3.0)
    assert c.state is TurnState.LISTENING


def test_a_short_burst_before_a_barge_in_joins_the_new_utterance() -> None:
    c = TurnCoordinator(SETTINGS)
    generation = start_response(c, audio_at=0.1)
    speak(c, 1.0, 1.17)  # "Wait," — too short to interrupt
    c.on_tick(1.3)
    c.on_speech_end(1.5, at=1.2)
    assert c.is_current(generation)
    speak(c, 1.55, 1.96)  # "stop." — long enough
    commands = c.commands()
    assert Interrupt(generation, "barge_in") in commands
    started = [x for x in commands if isinstance(x, UserSpeechStarted)]
    assert started[-1].at == 1.0  # the utterance includes "Wait,"


def test_typed_input_during_speech_interrupts_and_starts_a_new_response() -> None:
    c = TurnCoordinator(SETTINGS)
    first = start_response(c, audio_at=0.1)
    c.on_text_input("actually, something else", 1.0)
    commands = c.commands()
    assert commands[0] == Interrupt(first, "text_input")
    commit = commands[1]
    assert isinstance(commit, CommitUserTurn) and commit.text == "actually, something else"
    assert commit.generation == first + 1
    assert c.state is TurnState.THINKING
    assert c.is_current(first + 1) and not c.is_current(first)


def test_typed_input_while_user_is_speaking_drops_the_utterance() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 0.0, 0.5)
    spoken_turn = c.turn_id
    c.on_text_input("typed instead", 0.6)
    commands = c.commands()
    assert DropUtterance(spoken_turn) in commands
    assert c.state is TurnState.THINKING


def test_pause_and_resume_microphone() -> None:
    c = TurnCoordinator(SETTINGS)
    speak(c, 0.0, 0.5)
    c.pause_microphone(0.6)
    assert c.state is TurnState.LISTENING
    assert DropUtterance(1) in c.commands()
    speak(c, 1.0, 2.0)  # ignored while paused
    c.on_speech_end(2.1, at=2.0)
    c.on_tick(5.0)
    assert c.state is TurnState.LISTENING
    assert c.commands() == []
    c.resume_microphone(6.0)
    speak(c, 6.0, 6.5)
    assert c.state is TurnState.USER_SPEAKING
    # Typed text still works while paused, and the assistant may finish speaking.
    c.pause_microphone(6.6)
    c.on_text_input("typed", 6.7)
    assert c.state is TurnState.THINKING


def test_stale_generation_is_not_current() -> None:
    c = TurnCoordinator(SETTINGS)
    first = start_response(c, audio_at=0.1)
    c.on_text_input("next", 1.0)
    second = c.generation
    assert second == first + 1
    assert not c.is_current(first)
    # Late progress reports of the old generation change nothing.
    c.on_audio_started(first, 1.1)
    c.on_response_done(first, 1.2)
    assert c.state is TurnState.THINKING
    assert c.is_current(second)


def test_explicit_commit() -> None:
    c = TurnCoordinator(TurnSettings(auto_commit=False))
    assert c.commit(0.0) is False  # nothing to commit
    speak(c, 0.0, 1.0)
    c.on_speech_end(1.1, at=1.0)
    c.on_tick(30.0)  # push-to-talk: no timer commits
    assert c.state is TurnState.ENDPOINTING
    assert c.commit(30.1) is True
    commands = c.commands()
    assert CommitUserTurn(1, "commit", None, generation=1) in commands
    assert c.state is TurnState.THINKING


def test_response_done_while_user_talking_hands_the_floor_to_the_user() -> None:
    c = TurnCoordinator(SETTINGS)
    generation = start_response(c, audio_at=0.1)
    speak(c, 1.0, 1.2)  # below the interruption threshold so far
    c.on_response_done(generation, 1.2)
    assert c.state is TurnState.USER_SPEAKING
    started = [x for x in c.commands() if isinstance(x, UserSpeechStarted)]
    assert started and started[-1].at == 1.0


def test_cancel_response() -> None:
    c = TurnCoordinator(SETTINGS)
    assert c.cancel_response(0.0) is False
    generation = start_response(c, audio_at=0.1)
    assert c.cancel_response(0.5) is True
    assert Interrupt(generation, "cancel") in c.commands()
    assert c.state is TurnState.LISTENING


def test_moves_outside_the_table_are_refused() -> None:
    c = TurnCoordinator(SETTINGS)
    assert (TurnState.LISTENING, Trigger.AUDIO_STARTED) not in TRANSITIONS
    with pytest.raises(TurnStateError):
        c._move(Trigger.AUDIO_STARTED)


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="min_interrupt"):
        TurnSettings(min_interrupt=-1)
