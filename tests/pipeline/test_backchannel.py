"""What counts as a real turn over the answer (``pipeline.backchannel``)."""

from __future__ import annotations

import pytest

from pipeline.backchannel import is_real_turn


@pytest.mark.parametrize(
    "text",
    ["", "  ", "...", "Uh-huh.", "Mm-hmm", "mhm", "OK.", "Okay, right.", "yeah yeah", "I see.",
     "Got it!", "Thank you.", "Oh, I see.", "嗯", "嗯嗯。", "对对对", "好的", "是的，明白。",
     "哦，原来如此", "(coughing)", "[MUSIC]", "*sighs*", "♪", "you", "Thanks for watching!",
     "字幕由Amara.org社区提供", "Hmm?"],
)  # fmt: skip
def test_no_words_backchannels_and_noise_are_no_turn(text: str) -> None:
    assert not is_real_turn(text)


@pytest.mark.parametrize(
    "text",
    ["Wait, stop.", "stop", "No.", "no no", "Hold on.", "Okay, but what about Tuesday?",
     "Yeah, I meant the blue one.", "不对，我是说明天", "等一下", "不是", "对不对",
     "好的，那价格呢？", "123", "My number is 0176", "(coughing) sorry, what was that?"],
)  # fmt: skip
def test_words_that_stop_ask_or_redirect_are_a_turn(text: str) -> None:
    assert is_real_turn(text)
