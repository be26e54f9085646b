"""Transcript cues (Rule 1) in English and Chinese, and the combination table (Rule 2)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.endpoint_cues import (
    EAGERNESS_CHANGES,
    PENDING,
    WAITS,
    Cue,
    CueState,
    Verdict,
    Wait,
    endpoint_delay,
    endpoint_wait,
    read_cue,
    transcript_cue,
)
from pipeline.turn_commands import TurnSettings

INCOMPLETE, NEUTRAL, COMPLETE = Cue.INCOMPLETE, Cue.NEUTRAL, Cue.COMPLETE
DELAYS = TurnSettings(silence_delay=0.8, complete_delay=0.3, incomplete_delay=2.5)

# ---------------------------------------------------------------- Rule 1: the transcript cue


@pytest.mark.parametrize(
    "text",
    [
        "Yesterday I went to the store and",
        "We could go on Friday, but",
        "I'm calling because",
        "Do you want tea or",
        "I'd like to order the",
        "Can I get a",
        "I want to change my",
        "Before we start, I, um",
        "So it was, uh",
        "It was like",
        "I need to book a flight to",
        "Set a reminder for",
        "Tell me a story about",
        "Okay, so",
        "My phone number is",
        "The thing I wanted to ask you about is",
    ],
)
def test_english_trailing_words_are_incomplete(text: str) -> None:
    assert transcript_cue(text, "en") is INCOMPLETE


@pytest.mark.parametrize(
    "text",
    [
        "我先去银行，然后",
        "我想订机票但是",
        "因为",
        "明天可能会下雨所以",
        "帮我买两杯咖啡还有",
        "我说的就是",
        "我想问一下那个",
        "嗯",
        "我觉得呃",
        "我想要一个红色的",
        "我做了造型，然後",  # Whisper often writes traditional characters
        "你要茶还是",
        "我的电话是",
        "我想打电话给",
    ],
)
def test_chinese_trailing_words_are_incomplete(text: str) -> None:
    assert transcript_cue(text, "zh") is INCOMPLETE


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("My number is 0 1 7 6", "en"),
        ("my number is zero one seven", "en"),
        ("My phone number is 017 654", "en"),
        ("The code is four", "en"),
        ("The code is 4. 9. 2.", "en"),
        ("My order number is A10086", "en"),
        ("It's spelled S M I", "en"),
        ("四 五 六", "zh"),
        ("我的手机号是一三八", "zh"),
        ("验证码是四", "zh"),
        ("订单号是A10086", "zh"),
        ("My flight number is 1432.", "en"),  # a finished dictation looks open: the long wait
    ],
)
def test_numbers_and_spelled_items_being_dictated_are_incomplete(text: str, language: str) -> None:
    assert read_cue(text, language).rule == "dictation"
    assert transcript_cue(text, language) is INCOMPLETE


@pytest.mark.parametrize(
    "text",
    [
        "I would like, ",
        "我先去银行，",
        "我先去银行、",
        "My number is:",
        "I need to book a flight to...",
        "I would like to order…",
    ],
)
def test_a_trailing_comma_or_ellipsis_is_incomplete(text: str) -> None:
    reading = read_cue(text, None)
    assert reading.cue is INCOMPLETE and reading.rule == "trailing_punctuation"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("What time is it?", "question_mark"),
        ("what time is it", "question"),
        ("How much does a ticket to the museum cost", "question"),
        ("thanks", "acknowledgement"),
        ("Okay, thank you.", "acknowledgement"),
        ("that's all", "acknowledgement"),
        ("Turn off the lights in the kitchen.", "full_stop"),
        ("I think so.", "full_stop"),
        ("Here it is.", "full_stop"),
    ],
)
def test_clearly_finished_english_is_complete(text: str, rule: str) -> None:
    assert read_cue(text, "en") == read_cue(text, None)
    reading = read_cue(text, "en")
    assert reading.cue is COMPLETE and reading.rule == rule


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("好的", "acknowledgement"),
        ("谢谢", "acknowledgement"),
        ("好的，谢谢。", "acknowledgement"),
        ("是的", "acknowledgement"),
        ("现在几点了？", "question_mark"),
        ("你明天来吗", "question"),
        ("现在几点", "question"),
        ("你去不去", "question"),
        ("你是不是", "question"),  # an A-not-A question, not a copula left open
        ("我们走吧", "final_particle"),
        ("我要大的。", "full_stop"),
        ("帮我把客厅的灯关掉。", "full_stop"),
    ],
)
def test_clearly_finished_chinese_is_complete(text: str, rule: str) -> None:
    reading = read_cue(text, "zh")
    assert reading.cue is COMPLETE and reading.rule == rule


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("", "en"),
        ("   ", None),
        ("...", None),
        ("hello there", "en"),
        ("So I was thinking that maybe we could", "en"),
        ("We're looking for a restaurant that.", "en"),  # a full stop after "that" proves little
        ("I think so", "en"),
        ("Here it is", "en"),
        ("Who did you talk to?", "en"),  # English strands prepositions in wh-questions
        ("What does it look like?", "en"),
        ("我今天很忙", "zh"),
    ],
)
def test_texts_without_a_cue_are_neutral(text: str, language: str | None) -> None:
    assert transcript_cue(text, language) is NEUTRAL


def test_incomplete_rules_come_before_complete_ones() -> None:
    assert transcript_cue("thanks, and", "en") is INCOMPLETE  # the last phrase is "and"
    assert transcript_cue("好的，然后", "zh") is INCOMPLETE
    assert transcript_cue("Could you send a message to?", "en") is INCOMPLETE  # not a wh-question
    assert transcript_cue("Can you tell me, um?", "en") is INCOMPLETE
    # A question mark closes a number: "is it 0176?" is asked, not dictated.
    assert transcript_cue("Is my number 0 1 7 6?", "en") is COMPLETE


def test_the_language_chooses_the_word_lists() -> None:
    assert transcript_cue("然后", "en") is NEUTRAL
    assert transcript_cue("然后", "zh") is INCOMPLETE
    assert transcript_cue("然后", None) is INCOMPLETE
    # Mandarin speakers code-switch into English: English words are read for "zh" too.
    assert transcript_cue("我们先去吃饭 and", "zh") is INCOMPLETE
    assert transcript_cue("好吧，OK", "zh") is COMPLETE
    # Digits, codes and punctuation are read in every language.
    assert transcript_cue("一三八", "en") is INCOMPLETE
    assert transcript_cue("我先去银行，", "en") is INCOMPLETE


def test_case_quotes_and_curly_apostrophes_do_not_matter() -> None:
    assert transcript_cue("“AND THE”", "en") is INCOMPLETE
    assert transcript_cue("That\u2019s all.", "en") is COMPLETE


@given(st.text(max_size=200), st.sampled_from(["en", "zh", None, "fr"]))
def test_any_text_gets_a_cue(text: str, language: str | None) -> None:
    reading = read_cue(text, language)
    assert reading.cue in Cue
    assert transcript_cue(text, language) is reading.cue


# ---------------------------------------------------------------- Rule 2: the combination

VERDICTS: tuple[Verdict, ...] = (True, False, None, PENDING)
CUES: tuple[CueState, ...] = (INCOMPLETE, NEUTRAL, COMPLETE, PENDING)

S, Q, L = Wait.SHORT, Wait.SILENCE, Wait.LONG
DOCUMENTED_MEDIUM = {
    # verdict: waits for cue INCOMPLETE, NEUTRAL, COMPLETE, PENDING (the module docstring)
    True: (L, S, S, Q),
    False: (L, L, L, L),
    None: (L, Q, S, Q),
    PENDING: (L, Q, Q, Q),
}


def test_the_table_covers_every_pair_of_signals() -> None:
    assert set(WAITS) == set(itertools.product(VERDICTS, CUES))
    for changes in EAGERNESS_CHANGES.values():
        assert set(changes) <= set(WAITS)


@pytest.mark.parametrize(("verdict", "cue"), list(itertools.product(VERDICTS, CUES)))
def test_the_medium_table_is_the_documented_one(verdict: Verdict, cue: CueState) -> None:
    expected = DOCUMENTED_MEDIUM[verdict][CUES.index(cue)]
    assert endpoint_wait(verdict, cue, "medium") is expected
    assert endpoint_wait(verdict, cue, "auto") is expected


def test_without_cues_the_neutral_column_is_the_coordinators_rule() -> None:
    assert endpoint_delay(True, NEUTRAL, delays=DELAYS) == 0.3
    assert endpoint_delay(False, NEUTRAL, delays=DELAYS) == 2.5
    assert endpoint_delay(None, NEUTRAL, delays=DELAYS) == 0.8
    assert endpoint_delay(PENDING, NEUTRAL, delays=DELAYS) == 0.8


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_an_incomplete_cue_vetoes_the_model_at_every_eagerness(eagerness: str) -> None:
    for verdict in VERDICTS:
        assert endpoint_wait(verdict, INCOMPLETE, eagerness) is Wait.LONG


def test_a_complete_cue_confirms_but_never_overrules_an_incomplete_verdict() -> None:
    assert endpoint_wait(True, COMPLETE) is Wait.SHORT
    assert endpoint_wait(None, COMPLETE) is Wait.SHORT  # no model: the text decides
    assert endpoint_wait(False, COMPLETE) is Wait.LONG
    assert endpoint_wait(False, COMPLETE, "low") is Wait.LONG
    assert endpoint_wait(False, COMPLETE, "high") is Wait.SILENCE


def test_one_signal_pending_holds_a_finished_turn_at_the_silence_delay() -> None:
    # Smart Turn says complete, the transcript is still being made: it may still veto.
    assert endpoint_delay(True, PENDING, delays=DELAYS) == 0.8
    # The transcript says complete, Smart Turn is still judging.
    assert endpoint_delay(PENDING, COMPLETE, delays=DELAYS) == 0.8
    # High eagerness does not wait for the second signal.
    assert endpoint_wait(True, PENDING, "high") is Wait.SHORT
    assert endpoint_wait(PENDING, COMPLETE, "high") is Wait.SHORT


def test_low_eagerness_needs_both_signals_to_shorten_the_wait() -> None:
    assert endpoint_wait(True, NEUTRAL, "low") is Wait.SILENCE
    assert endpoint_wait(None, COMPLETE, "low") is Wait.SILENCE
    assert endpoint_wait(True, COMPLETE, "low") is Wait.SHORT


@pytest.mark.parametrize(
    ("eagerness", "scale"), [("low", 1.6), ("medium", 1.0), ("auto", 1.0), ("high", 0.6)]
)
def test_eagerness_scales_every_wait(eagerness: str, scale: float) -> None:
    assert endpoint_delay(True, COMPLETE, eagerness=eagerness, delays=DELAYS) == pytest.approx(
        0.3 * scale
    )
    assert endpoint_delay(None, NEUTRAL, eagerness=eagerness, delays=DELAYS) == pytest.approx(
        0.8 * scale
    )
    assert endpoint_delay(None, INCOMPLETE, eagerness=eagerness, delays=DELAYS) == pytest.approx(
        2.5 * scale
    )


def test_an_unknown_eagerness_is_refused() -> None:
    with pytest.raises(ValueError, match="eagerness"):
        endpoint_delay(True, COMPLETE, eagerness="max", delays=DELAYS)
