from __future__ import annotations

import pytest

from pipeline.audio import WordTiming
from pipeline.playout import PlayoutTracker


def test_heard_prefix_uses_word_timings() -> None:
    t = PlayoutTracker()
    t.add_sentence("Hello there.")
    t.add_audio(500, (WordTiming(0, 5, 0, 250), WordTiming(6, 12, 250, 500)))
    t.add_sentence("How are you today?")
    t.add_audio(400, (WordTiming(0, 3, 0, 100), WordTiming(4, 7, 100, 200)))
    t.add_audio(400, (WordTiming(8, 11, 0, 150), WordTiming(12, 18, 150, 400)))
    assert t.text == "Hello there. How are you today?"
    assert t.heard_text(0) == ""
    assert t.heard_text(260) == "Hello"
    assert t.heard_text(500) == "Hello there."
    assert t.heard_text(720) == "Hello there. How are"
    # Word timings of the second chunk are offset by the first chunk's 400 ms.
    assert t.heard_text(500 + 400 + 160) == "Hello there. How are you"
    assert t.heard_text(10_000) == t.text


def test_heard_prefix_without_timings_is_proportional_and_cut_at_a_word() -> None:
    t = PlayoutTracker()
    t.add_sentence("one two three four")
    t.add_audio(1000)
    assert t.heard_text(500) == "one two"
    t2 = PlayoutTracker()
    t2.add_sentence("今天天气很好")
    t2.add_audio(600)
    assert t2.heard_text(300) == "今天天"


def test_played_estimate_prefers_client_reports() -> None:
    t = PlayoutTracker()
    t.add_sentence("x")
    t.add_audio(1000)
    t.on_sent(400, now=10.0)
    assert t.played_ms(10.2) == pytest.approx(200)
    assert t.played_ms(11.0) == 400  # never more than was sent
    t.on_client_played(150)
    assert t.played_ms(11.0) == 150
    assert t.playout_end() == pytest.approx(10.4)
