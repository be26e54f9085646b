from __future__ import annotations

from pipeline.sentences import SentenceSplitter


def feed_all(tokens: list[str]) -> list[str]:
    splitter = SentenceSplitter()
    out: list[str] = []
    for token in tokens:
        out.extend(splitter.feed(token))
    return out + splitter.flush()


def test_sentences_are_emitted_as_soon_as_complete() -> None:
    splitter = SentenceSplitter()
    assert splitter.feed("Hello there") == []
    assert splitter.feed(".") == []  # a terminator needs following whitespace
    assert splitter.feed(" How are") == ["Hello there."]
    assert splitter.feed(" you?") == []
    assert splitter.flush() == ["How are you?"]


def test_decimals_and_abbreviations_stay_whole() -> None:
    assert feed_all(["It costs 3.5 dollars, e.g. today. ", "Dr. Smith agrees."]) == [
        "It costs 3.5 dollars, e.g. today.",
        "Dr. Smith agrees.",
    ]


def test_chinese_terminators_split_immediately() -> None:
    assert feed_all(["你好。", "今天天气", "很好！明天呢？"]) == [
        "你好。",
        "今天天气很好！",
        "明天呢？",
    ]


def test_long_first_clause_is_cut_at_a_comma() -> None:
    out = feed_all(
        ["Well, ", "before we start with all of that, ", "let me check something first."]
    )
    assert out[0] == "Well, before we start with all of that,"
    assert out[1] == "let me check something first."


def test_cut_speaks_the_opening_words_at_once_and_keeps_the_first_bar() -> None:
    splitter = SentenceSplitter(first_clause_chars=24)
    assert splitter.feed("Okay, ") == []  # a short clause waits for more …
    assert splitter.cut() == ["Okay,"]  # … unless the brain says it is to be said now
    assert splitter.cut() == []
    # The model's first piece still gets the first piece's lower bar.
    assert splitter.feed("the meeting moved to Friday, at ten in the morning") == [
        "the meeting moved to Friday,"
    ]
