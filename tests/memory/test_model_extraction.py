"""Facts the patterns missed, read by a model: what is asked, what is kept, what is written."""

from __future__ import annotations

import json

import pytest

from memory.extraction import extract
from memory.model_extraction import SCHEMA, messages, read_answer, statement
from plugins.brain.grounding import attributes


def answer(attribute: str, value: str) -> str:
    return json.dumps({"attribute": attribute, "value": value})


@pytest.mark.parametrize(
    "text",
    [
        "What's my dog's name again?",
        "如果我搬到上海，会更方便吗？",
        "My friend said he teaches piano.",
        "my password is hunter2",
        "",
    ],
)
def test_questions_hypotheticals_reported_speech_and_secrets_are_not_read(text: str) -> None:
    assert statement(text) == ""


def test_a_statement_the_patterns_miss_is_read() -> None:
    text = "Oh, and I teach piano to kids three days a week."
    assert extract(text) == []
    assert "teach piano" in statement(text)


@pytest.mark.parametrize(
    ("stated", "model_says", "content", "key", "asked"),
    [
        (
            "I teach piano to kids",
            answer("job", "teach piano"),
            "My job: teach piano",
            "job",
            "job",
        ),
        ("我们家狗叫豆豆", answer("pet", "狗叫豆豆"), "我的宠物：狗叫豆豆", None, "pet"),
        (
            "peanuts make me ill, I'm allergic",
            answer("allergy", "peanuts"),
            "I am allergic to peanuts",
            None,
            "allergy",
        ),  # noqa: E501
        ("I'm 34 years old", answer("age", "34"), "My age: 34", "age", "age"),
    ],
)
def test_what_the_model_reads_is_written_so_the_brain_finds_it_by_attribute(
    stated: str, model_says: str, content: str, key: str | None, asked: str
) -> None:
    found = read_answer(model_says, stated)

    assert found is not None
    assert (found.content, found.key) == (content, key)
    assert asked in attributes(found.content)


@pytest.mark.parametrize(
    "model_says",
    [
        answer("job", "astronaut"),  # not in the person's words
        answer("none", ""),
        answer("salary", "teach piano"),  # not an attribute on the list
        answer("job", "x" * 61),
        "not json",
        "[]",
    ],
)
def test_anything_but_a_listed_attribute_with_the_persons_own_words_is_refused(
    model_says: str,
) -> None:
    assert read_answer(model_says, "I teach piano to kids") is None


def test_an_attribute_a_person_has_one_of_replaces_the_older_value() -> None:
    first = read_answer(answer("current_city", "Porto"), "home is Porto these days")
    later = read_answer(answer("current_city", "Valencia"), "scratch that, home is Valencia now")
    assert first is not None and later is not None
    assert first.key == later.key == "current_city"


def test_an_attribute_needs_a_word_of_it_in_the_statement() -> None:
    assert read_answer(answer("current_city", "日本"), "我下个月要去日本旅游") is None
    home = read_answer(answer("hometown", "Valencia"), "my home is Valencia now")
    assert home is not None and home.key == "current_city"
    origin = read_answer(answer("hometown", "Lyon"), "I grew up in Lyon")
    assert origin is not None and origin.key == "hometown"


def test_the_prompt_and_schema() -> None:
    said = messages("I teach piano")
    assert said[0]["role"] == "system" and said[-1] == {"role": "user", "content": "I teach piano"}
    assert "none" in SCHEMA["properties"]["attribute"]["enum"]
