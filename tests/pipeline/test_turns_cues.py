"""Rule 2 of the TurnCoordinator with transcript cues: the endpoint deadline follows
``endpoint_delay(verdict, cue, eagerness)`` as the end-of-turn verdict and the transcript's cue
arrive (scripted timelines, virtual time: every input carries ``now``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.endpoint_cues import PENDING, Cue, CueState, Verdict
from pipeline.turn_commands import CommitUserTurn, TurnSettings
from pipeline.turns import TurnCoordinator, TurnState

SETTINGS = TurnSettings(silence_delay=0.8, complete_delay=0.3, incomplete_delay=2.5)
SPEECH_END = 1.0
DECIDED = 1.1
"""When the VAD reports the end of speech (its hangover after ``SPEECH_END``)."""
ARRIVES = 1.15
"""When the signals arrive: before the shortest deadline of any eagerness (1.0 + 0.18)."""

INC, NEU, COM = Cue.INCOMPLETE, Cue.NEUTRAL, Cue.COMPLETE
S, Q, L = "short", "silence", "long"
DELAY = {S: SETTINGS.complete_delay, Q: SETTINGS.silence_delay, L: SETTINGS.incomplete_delay}
SCALE = {"low": 1.6, "medium": 1.0, "high": 0.6}

# The wait table of pipeline/endpoint_cues.py, written out: (verdict, cue) → wait at medium.
MEDIUM: dict[tuple[Verdict, CueState], str] = {
    (True, INC): L, (True, NEU): S, (True, COM): S, (True, PENDING): Q,
    (False, INC): L, (False, NEU): L, (False, COM): L, (False, PENDING): L,
    (None, INC): L, (None, NEU): Q, (None, COM): S, (None, PENDING): Q,
    (PENDING, INC): L, (PENDING, NEU): Q, (PENDING, COM): Q, (PENDING, PENDING): Q,
}  # fmt: skip
CHANGED: dict[str, dict[tuple[Verdict, CueState], str]] = {
    "low": {(True, NEU): Q, (None, COM): Q},
    "medium": {},
    "high": {(True, PENDING): S, (PENDING, COM): S, (False, COM): Q},
}


def expected_wait(verdict: Verdict, cue: CueState, eagerness: str) -> float:
    wait = CHANGED[eagerness].get((verdict, cue), MEDIUM[(verdict, cue)])
    return DELAY[wait] * SCALE[eagerness]


def paused(settings: TurnSettings = SETTINGS, *, model: bool = True) -> TurnCoordinator:
    """A coordinator whose user spoke from 0.2 s to ``SPEECH_END`` and is now in the pause."""
    c = TurnCoordinator(settings, end_of_turn_model=model)
    c.on_speech_start(0.2, at=0.2)
    c.on_speech_end(DECIDED, at=SPEECH_END)
    c.commands()
    assert state(c) is TurnState.ENDPOINTING
    return c


def state(c: TurnCoordinator) -> TurnState:
    return c.state  # read afresh after each input (mypy would keep the last narrowing)


def committed(c: TurnCoordinator) -> bool:
    return any(isinstance(x, CommitUserTurn) and x.reason == "endpoint" for x in c.commands())


CELLS = [
    (verdict, cue, eagerness) for eagerness in ("low", "medium", "high") for verdict, cue in MEDIUM
]


@pytest.mark.parametrize("cue_first", [False, True], ids=["verdict_first", "cue_first"])
@pytest.mark.parametrize(("verdict", "cue", "eagerness"), CELLS)
def test_every_cell_of_the_wait_table_sets_the_deadline(
    verdict: Verdict, cue: CueState, eagerness: str, cue_first: bool
) -> None:
    settings = replace(SETTINGS, eagerness=eagerness)  # type: ignore[arg-type]
    # A verdict still PENDING needs an end-of-turn model; "no opinion" is also what a
    # coordinator without one starts from (checked below).
    c = paused(settings, model=verdict is not None)
    signals: list[bool | Cue] = []
    if isinstance(verdict, bool):
        signals.append(verdict)
    if isinstance(cue, Cue):
        signals.append(cue)
    for signal in reversed(signals) if cue_first else signals:
        if isinstance(signal, Cue):
            c.on_transcript_cue(c.turn_id, signal, ARRIVES)
        else:
            c.on_endpoint_verdict(c.turn_id, signal, ARRIVES)
        assert not committed(c)
    deadline = SPEECH_END + expected_wait(verdict, cue, eagerness)
    assert c.next_deadline() == pytest.approx(deadline)
    c.on_tick(deadline - 0.01)
    assert state(c) is TurnState.ENDPOINTING
    c.on_tick(deadline)
    assert state(c) is TurnState.THINKING and committed(c)


def test_a_model_that_says_no_opinion_counts_as_no_model() -> None:
    with_model, without = paused(), paused(model=False)
    with_model.on_endpoint_verdict(with_model.turn_id, None, ARRIVES)
    for c in (with_model, without):
        c.on_transcript_cue(c.turn_id, COM, ARRIVES)
        assert c.next_deadline() == pytest.approx(SPEECH_END + 0.3)


def test_a_model_still_judging_keeps_a_finished_transcript_to_the_silence_delay() -> None:
    c = paused()
    c.on_transcript_cue(c.turn_id, COM, ARRIVES)
    assert c.next_deadline() == pytest.approx(SPEECH_END + 0.8)
    c.on_endpoint_verdict(c.turn_id, True, 1.2)
    assert c.next_deadline() == pytest.approx(SPEECH_END + 0.3)
    c.on_tick(1.3)
    assert committed(c)


def test_a_signal_after_the_new_deadline_commits_at_once() -> None:
    c = paused()
    c.on_endpoint_verdict(c.turn_id, True, 1.2)  # the transcript is still being made
    assert not committed(c)
    c.on_transcript_cue(c.turn_id, COM, 1.45)  # deadline 1.3: already passed
    assert state(c) is TurnState.THINKING and committed(c)


def test_a_late_trailing_conjunction_vetoes_a_finished_verdict() -> None:
    c = paused()
    c.on_endpoint_verdict(c.turn_id, True, 1.2)
    assert c.next_deadline() == pytest.approx(SPEECH_END + 0.8)
    c.on_transcript_cue(c.turn_id, INC, 1.7)  # before the silence deadline
    assert c.next_deadline() == pytest.approx(SPEECH_END + 2.5)
    c.on_tick(3.4)
    assert state(c) is TurnState.ENDPOINTING
    c.on_tick(3.5)
    assert committed(c)


def test_signals_of_another_turn_or_after_the_pause_are_ignored() -> None:
    c = paused()
    c.on_transcript_cue(c.turn_id - 1, COM, ARRIVES)
    c.on_endpoint_verdict(c.turn_id - 1, True, ARRIVES)
    assert c.next_deadline() == pytest.approx(SPEECH_END + 0.8)
    c.on_speech_start(1.3, at=1.25)  # speech resumed: the pause is over
    c.on_transcript_cue(c.turn_id, INC, 1.4)
    assert c.next_deadline() is None and state(c) is TurnState.USER_SPEAKING
    c.on_tick(5.0)
    assert state(c) is TurnState.USER_SPEAKING


def test_each_pause_starts_with_both_signals_pending() -> None:
    c = paused()
    c.on_endpoint_verdict(c.turn_id, True, ARRIVES)
    c.on_transcript_cue(c.turn_id, INC, ARRIVES)
    c.on_speech_start(1.3, at=1.25)
    c.on_speech_end(2.1, at=2.0)
    # Neither the first pause's verdict nor its cue carries over to the second.
    assert c.next_deadline() == pytest.approx(2.0 + 0.8)
    c.on_transcript_cue(c.turn_id, COM, 2.15)
    assert c.next_deadline() == pytest.approx(2.0 + 0.8)  # the model has not spoken
    c.on_endpoint_verdict(c.turn_id, True, 2.2)
    assert c.next_deadline() == pytest.approx(2.0 + 0.3)


def test_a_cue_after_the_commit_changes_nothing() -> None:
    c = paused(model=False)
    c.on_tick(SPEECH_END + 0.8)
    assert committed(c)
    c.on_transcript_cue(c.turn_id, INC, 1.9)
    assert c.commands() == [] and c.next_deadline() is None


def test_without_cues_the_deadline_follows_the_verdict_alone() -> None:
    # The rule before transcript cues: silence, then the complete or the incomplete delay.
    no_cues = replace(SETTINGS, transcript_cues=False)
    for verdict, wait in ((True, 0.3), (False, 2.5), (None, 0.8)):
        c = paused(no_cues)
        assert c.next_deadline() == pytest.approx(SPEECH_END + 0.8)
        c.on_transcript_cue(c.turn_id, INC, ARRIVES)  # ignored: cues are off
        assert c.next_deadline() == pytest.approx(SPEECH_END + 0.8)
        c.on_endpoint_verdict(c.turn_id, verdict, ARRIVES)
        assert c.next_deadline() == pytest.approx(SPEECH_END + wait)


def test_push_to_talk_has_no_deadline_whatever_the_cue() -> None:
    c = paused(replace(SETTINGS, auto_commit=False), model=False)
    c.on_transcript_cue(c.turn_id, COM, ARRIVES)
    c.on_endpoint_verdict(c.turn_id, True, ARRIVES)
    assert c.next_deadline() is None
    c.on_tick(10.0)
    assert state(c) is TurnState.ENDPOINTING


def test_a_paused_microphone_drops_the_pause_and_its_cue() -> None:
    c = paused(model=False)
    c.pause_microphone(1.12)
    c.on_transcript_cue(c.turn_id, COM, ARRIVES)
    assert state(c) is TurnState.LISTENING and c.next_deadline() is None


def test_eagerness_is_validated() -> None:
    with pytest.raises(ValueError, match="eagerness"):
        TurnSettings(eagerness="auto")  # type: ignore[arg-type]
