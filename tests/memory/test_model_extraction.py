"""Facts the patterns missed, read by a model: what is asked, what is kept, what is written."""

from __future__ import annotations

import json

import pytest

from memory.extraction import extract
from memory.model_extraction import SCHEMA, messages, read_answer, statement, unread
from plugins.brain.memory_match import (
    attributes,
    relevant_memories,
)


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
def test_a_statement_the_model_misreads_is_kept_in_the_persons_words_or_not_at_all(
    model_says: str,
) -> None:
    # Rule 3b: never the model's value; the statement as said when a word shows what it is of.
    said = read_answer(model_says, "I teach piano to kids")
    if said is not None:
        assert (said.content, said.key) == ("I teach piano to kids", None)
    assert read_answer(model_says, "I missed the last train home") is None


@pytest.mark.parametrize(
    ("stated", "model_says", "asked"),
    [
        ("I always order an oat flat white", answer("none", ""), "What coffee do I usually get?"),
        (
            "I play the cello in a community orchestra",
            answer("job", "play cello"),
            "Which instrument do I play?",
        ),  # fmt: skip
        ("我开的是一辆白色的比亚迪", answer("vehicle", "白色比亚迪"), "我的车是什么颜色的？"),
        ("我不吃辣", answer("none", ""), "你还记得我的口味吗？"),
        ("我在读研究生，学的是化学", answer("job", "读研究生"), "我学的是什么专业？"),
    ],
)
def test_a_misread_statement_kept_as_said_is_found_by_a_question_in_other_words(
    stated: str, model_says: str, asked: str
) -> None:
    found = read_answer(model_says, stated)
    assert found is not None and found.content == stated and found.key is None
    assert relevant_memories(asked, ["My name is Sam", found.content]) == [found.content]


def test_a_misread_statement_about_a_relative_is_kept_as_theirs() -> None:
    found = read_answer(answer("habit", "fish"), "My mum always cooks fish on Fridays")
    assert found is not None and found.kind == "relation"
    assert relevant_memories("What do I usually have?", [found.content]) == []


def test_nothing_of_the_listed_attributes_stores_nothing() -> None:
    assert read_answer(answer("none", ""), "I am a bit confused about the bill") is None
    assert read_answer(answer("hobby", "room"), "I need a room for two nights") is None


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


@pytest.mark.parametrize(
    ("stated", "content"),
    [
        ("我已经不做会计了，现在开咖啡店", "我的工作：开咖啡店"),
        ("I'm not a teacher any more I run a bakery now", "My job: run a bakery"),
    ],
)
def test_a_job_given_up_for_another_replaces_the_job(stated: str, content: str) -> None:
    # Rule 3c: the model read these as none; the job now, under the job's key.
    found = read_answer(answer("none", ""), stated)
    assert found is not None and (found.content, found.key) == (content, "job")
    old = "我是一名会计" if "会计" in stated else "I'm a teacher."
    assert relevant_memories("我现在是做什么工作的？" if "会计" in stated else "What's my job?",
                             [found.content, "My name is Sam"]) == [found.content]  # fmt: skip
    assert attributes(old) == {"job"}
    assert read_answer(answer("none", ""), "I left work early today, now I am tired") is None


def test_a_relative_named_and_a_diet_are_kept_as_said_when_the_model_reads_none() -> None:
    husband = read_answer(answer("none", ""), "I'm coming with my husband Jakob next week")
    assert husband is not None and husband.kind == "relation" and husband.key is None
    assert relevant_memories("Who am I travelling with?", [husband.content]) == [husband.content]
    diet = read_answer(answer("none", ""), "I've been vegetarian for ten years")
    assert diet is not None and diet.content == "I've been vegetarian for ten years"
    assert relevant_memories("Do I eat meat?", ["My name is Sam", diet.content]) == [diet.content]
    assert read_answer(answer("none", ""), "My husband is tired today") is None


def test_each_clause_the_patterns_left_is_read_alone() -> None:
    # Rule 1b: the name is the patterns'; the job is the model's to read, on its own.
    text = "I'm Priya and I teach maths at a secondary school."
    assert unread(text, extract(text)) == ["I teach maths at a secondary school"]
    # A clause the patterns' entry holds ("Max"), or one starting with a pronoun, is theirs.
    text = "I have a dog. He's called Max."
    assert unread(text, extract(text)) == []
    # A question is never read.
    assert unread("What's my name?", []) == []


def test_a_statement_before_a_question_in_one_sentence_is_read_and_the_question_is_not() -> None:
    text = "I'm coming with my husband Jakob next week, is there parking at the inn?"
    assert unread(text, extract(text)) == ["I'm coming with my husband Jakob next week"]
    assert unread("我下周和老公一起来，有停车位吗？", []) == ["我下周和老公一起来"]
    assert unread("If I bring my dog, can he stay?", []) == []


def test_an_introduction_and_a_job_in_one_message_are_two_clauses() -> None:
    text = "Hi, Marco here, I'm calling from Turin."
    assert [e.content for e in extract(text)] == ["My name is Marco"]
    assert unread(text, extract(text)) == ["I'm calling from Turin"]
    text = "你好，我是张伟，在一家医院当护士。"
    assert [e.content for e in extract(text)] == ["我叫张伟"]
    assert unread(text, extract(text)) == ["我在一家医院当护士"]  # the speaker goes on
    # A comma before 叫 is no new clause: the daughter's name stays with her.
    assert [e.content for e in extract("我女儿今年五岁，叫朵朵。")] == ["我女儿今年五岁，叫朵朵"]


def test_what_one_cannot_have_is_kept_as_said() -> None:
    found = read_answer(answer("none", ""), "I can't have gluten I'm coeliac")
    assert found is not None and found.content == "I can't have gluten I'm coeliac"
    assert relevant_memories("What can't I eat?", ["My name is Sam", found.content]) == [
        found.content
    ]


def test_how_to_be_reached_and_the_occasion_are_kept_as_said() -> None:
    stated = "Please contact me by email rather than phone"
    found = read_answer(answer("none", ""), stated)
    assert found is not None and found.content == stated and found.key is None
    assert relevant_memories("How do I prefer to be contacted?", [found.content]) == [stated]
    day = "My partner and I are celebrating our tenth anniversary with you"
    kept = read_answer(answer("hobby", "celebrating our tenth anniversary"), day)
    assert kept is not None and kept.content == day and kept.kind == "relation"


@pytest.mark.parametrize(
    "stated",
    ["I just bought the Nova headphones", "我是因为商品质量问题退货", "Let me think", "我知道了"],
)
def test_what_no_attribute_fits_is_not_kept(stated: str) -> None:
    assert read_answer(answer("none", ""), stated) is None


def test_words_the_model_missed_for_a_car_an_allergy_and_a_diet() -> None:
    car = read_answer(answer("vehicle", "Skoda"), "I'll be driving down in my old red Skoda")
    assert car is not None and car.key == "vehicle"
    ill = read_answer(answer("allergy", "shellfish"), "shellfish makes me really ill")
    assert ill is not None and ill.content == "I am allergic to shellfish"
    spicy = read_answer(answer("none", ""), "我吃不了辣的")
    assert spicy is not None and spicy.content == "我吃不了辣的"
    assert relevant_memories("我有什么忌口？", [spicy.content]) == [spicy.content]


@pytest.mark.parametrize(
    "stated",
    [
        "My partner and I cycle just about everywhere",
        "我们一共五个人",
        "I'm driving down from Leeds and should roll in around six in the evening",
    ],
)
def test_what_the_person_says_of_themself_is_kept_as_said_when_the_model_reads_none(
    stated: str,
) -> None:
    # Rule 3e: a rare word or a number says something lasting of the person.
    found = read_answer(answer("none", ""), stated)
    assert found is not None and found.content == stated and found.key is None


@pytest.mark.parametrize(
    "stated",
    ["Before I forget", "Small update", "I got the date wrong earlier", "我记错了", "先说一下",
     "我想订个位子",
     "I left work early today, now I am tired", "我下个月要去日本旅游"],
)  # fmt: skip
def test_what_says_nothing_lasting_is_not_kept(stated: str) -> None:
    assert read_answer(answer("none", ""), stated) is None


def test_each_clause_of_a_statement_the_patterns_found_nothing_in_is_read_alone() -> None:
    # Rule 1b: the model names one attribute per read.
    text = "我是从杭州过来的，在一家做跨境电商的公司上班。"
    assert unread(text, []) == ["我是从杭州过来的", "我在一家做跨境电商的公司上班"]
    # Too short to say what it is about: read with the clause before.
    assert unread("Peanuts make me ill, I'm allergic.", []) == ["Peanuts make me ill I'm allergic"]
