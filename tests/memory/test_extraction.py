"""Extraction table tests (SPEC MEM-2/3/4): what is remembered, as which kind and key, and
what never is (negations, questions, third parties, hypotheticals, secrets)."""

from __future__ import annotations

import statistics
import time

import pytest

from memory.extraction import (
    MAX_MESSAGE_CHARS,
    Extracted,
    corrected_values,
    extract,
    next_subject,
    stated_clauses,
)

REMEMBERED: list[tuple[str, list[tuple[str, str | None, str]]]] = [
    # Chinese (the product guide's examples first)
    ("我喜欢简洁回答", [("preference", None, "我喜欢简洁回答")]),
    (
        "Our family has a dachshund named Pretzel.",
        [("relation", None, "Our family has a dachshund named Pretzel")],
    ),
    ("We just adopted two kittens.", [("relation", None, "We just adopted two kittens")]),
    ("我不喜欢太长的解释", [("preference", None, "我不喜欢太长的解释")]),
    ("我偏好中文交流。", [("preference", None, "我偏好中文交流")]),
    ("我的目标是学会日语", [("goal", None, "我的目标是学会日语")]),
    ("我打算长期学习编程", [("goal", None, "我打算长期学习编程")]),
    ("请记住我更喜欢分步骤说明", [("correction", None, "我更喜欢分步骤说明")]),
    ("纠正一下，我叫王小明", [("fact", "name", "我叫王小明")]),
    ("我和同事每周一起复盘", [("relation", None, "我和同事每周一起复盘")]),
    ("我的生日是3月5日", [("fact", "birthday", "我的生日是3月5日")]),
    ("我现在住在杭州", [("fact", "current_city", "我现在住在杭州")]),
    # A phone number, under one key: a later one replaces it.
    ("My mobile is 07700 900123.", [("fact", "phone", "My phone number is 07700 900123")]),
    (
        "Sorry, I gave you the wrong number earlier, it's actually 07700 900321.",
        [("fact", "phone", "My phone number is 07700 900321")],
    ),
    (
        "Call me on 020 7946 0958 after six.",
        [("fact", "phone", "My phone number is 020 7946 0958")],
    ),
    ("我的手机号是138 0013 8000。", [("fact", "phone", "我的手机号是138 0013 8000")]),
    ("嗯，其实我搬到了深圳", [("fact", "current_city", "我搬到了深圳")]),
    ("我是一名老师", [("fact", "job", "我是一名老师")]),
    ("我在腾讯工作", [("fact", "employer", "我在腾讯工作")]),
    ("我来自成都", [("fact", "hometown", "我来自成都")]),
    ("我的母语是粤语", [("fact", "native_language", "我的母语是粤语")]),
    ("我最喜欢的颜色是蓝色", [("preference", "favorite:颜色", "我最喜欢的颜色是蓝色")]),
    ("我女儿叫朵朵", [("relation", "relation:女儿", "我女儿叫朵朵")]),
    (
        "我叫小明，我住在上海。我喜欢喝茶！",
        [
            ("fact", "name", "我叫小明"),
            ("fact", "current_city", "我住在上海"),
            ("preference", None, "我喜欢喝茶"),
        ],
    ),
    # English
    ("I prefer concise answers.", [("preference", None, "I prefer concise answers")]),
    ("I don't like long explanations", [("preference", None, "I don't like long explanations")]),
    ("Well, actually I love spicy food!", [("preference", None, "I love spicy food")]),
    ("My goal is to learn Japanese", [("goal", None, "My goal is to learn Japanese")]),
    ("I plan to learn Spanish this year", [("goal", None, "I plan to learn Spanish this year")]),
    (
        "Please remember that I want step-by-step answers",
        [("correction", None, "I want step-by-step answers")],
    ),
    (
        "Please remember that my birthday is March 3",
        [("fact", "birthday", "my birthday is March 3")],
    ),  # noqa: E501
    ("Correction: my name is Anne", [("fact", "name", "my name is Anne")]),
    (
        "My name is Tom and I live in Paris",
        [("fact", "name", "My name is Tom"), ("fact", "current_city", "I live in Paris")],
    ),  # noqa: E501
    ("I was born on July 4th", [("fact", "birthday", "I was born on July 4th")]),
    ("I just moved to Berlin", [("fact", "current_city", "I just moved to Berlin")]),
    ("I work as a nurse", [("fact", "job", "I work as a nurse")]),
    ("I'm from Lagos", [("fact", "hometown", "I'm from Lagos")]),
    (
        "My favorite color is green",
        [("preference", "favorite:color", "My favorite color is green")],
    ),  # noqa: E501
    ("My wife's name is Anna", [("relation", "relation:wife", "My wife's name is Anna")]),
    (
        "I work with my brother every weekend",
        [("relation", None, "I work with my brother every weekend")],
    ),  # noqa: E501
    ("I'm allergic to peanuts", [("fact", None, "I'm allergic to peanuts")]),
    ("And please call me Sam.", [("fact", "name", "please call me Sam")]),
    # Chinese ways of saying one's pet, child and workplace
    ("我家狗叫豆豆，是一只柯基。", [("relation", "relation:狗", "我家狗叫豆豆，是一只柯基")]),
    ("我养了一只猫，叫咪咪。", [("relation", None, "我养了一只猫，叫咪咪")]),
    ("我女儿今年五岁了", [("relation", "relation:女儿:age", "我女儿今年五岁了")]),
    ("我在杭州上班，是一名护士。", [("fact", "employer", "我在杭州上班，是一名护士")]),
    # a household ("we", "our", 我们), jobs said as "I'm a …", relatives and pets as theirs
    (
        "Actually we moved to Bristol last month.",
        [("fact", "current_city", "we moved to Bristol last month")],
    ),  # noqa: E501
    ("At home we speak Portuguese.", [("fact", None, "At home we speak Portuguese")]),
    (
        "We've got a golden retriever called Biscuit.",
        [("relation", None, "We've got a golden retriever called Biscuit")],
    ),  # noqa: E501
    ("Our cat sleeps all day.", [("relation", None, "Our cat sleeps all day")]),
    ("My son Leo is seven.", [("relation", None, "My son Leo is seven")]),
    ("I'm a pharmacist, so my shifts are long.", [("fact", "job", "I work as a pharmacist")]),
    ("I am an electrician.", [("fact", "job", "I work as an electrician")]),
    ("I'm training for a half marathon.", [("goal", None, "I'm training for a half marathon")]),  # noqa: E501
    ("Everyone calls me Jojo.", [("fact", "name", "Everyone calls me Jojo")]),
    ("I was born in Lyon.", [("fact", "hometown", "I was born in Lyon")]),
    ("我家有只猫，叫团团。", [("relation", None, "我家有只猫，叫团团")]),
    ("我妈妈的生日是十月一号。", [("relation", None, "我妈妈的生日是十月一号")]),
    ("我是在保险公司上班。", [("fact", "employer", "我是在保险公司上班")]),
    ("我是在重庆长大的。", [("fact", "hometown", "我是在重庆长大的")]),
    ("我们上个月搬到了苏州。", [("fact", "current_city", "我们上个月搬到了苏州")]),
    ("我们家里说粤语。", [("fact", None, "我们家里说粤语")]),
    # an introduction by name alone
    ("Hi, I'm Sam.", [("fact", "name", "My name is Sam")]),
    ("This is Ana Lopez speaking.", [("fact", "name", "My name is Ana Lopez")]),
    ("我是小王。", [("fact", "name", "我叫小王")]),
    ("我是王小明", [("fact", "name", "我叫王小明")]),
]

NOT_REMEMBERED = [
    # negations
    "My name is not Bob",
    "I am not from here",
    "我不住在北京",
    "我喜欢的不是咖啡",
    "I never said I like tea",
    # questions
    "Do I like tea?",
    "I live in Paris?",
    "我喜欢吗？",
    "你喜欢什么",
    "我住在哪里",
    # third parties and reported speech
    "My friend likes jazz",
    "He prefers tea",
    "他喜欢猫",
    "我朋友喜欢猫",
    "He said I like tea",
    "她说我喜欢猫",
    # hypotheticals
    "If I lived in Paris I would be happy",
    "I would prefer a window seat",
    "Maybe I like tea",
    "如果我住在北京就好了",
    "假如我的目标是赚钱",
    # secrets and access links
    "My password is hunter2",
    "请记住我的密码是123456",
    "Remember that my API key is sk-abcdefghijklmnopqrst",
    "Please remember this link https://example.com/share/abc",
    "我喜欢用这个链接 www.example.com/x",
    # requests and small talk are not memories
    "I plan to return this item",
    "我打算退货",
    "Hello there",
    "What is the weather",
    "退货期限是多少？",
    "我家的狗可以带进去吗？",
    "我女儿五岁能参加吗",
    # "I'm a …" that names no job
    "I'm a member of your gym",
    "I'm a big fan of your shop",
    "I'm a bit tired today",
    # "I'm …" / 我是… that names no one
    "I'm Sorry",
    "I'm fine, thanks",
    "It is Monday again",
    "我是老师",
    "我是新会员",
    "我是黄金会员",
    # numbers that are not the person's phone
    "My flight number is BA 1234567.",
    "Room 1203 please, my booking number is 88231234.",
    "My old number was 07700 900123.",
    "我老婆的电话是13800138000",
]


@pytest.mark.parametrize(("text", "expected"), REMEMBERED)
def test_statements_are_remembered(text: str, expected: list[tuple[str, str | None, str]]) -> None:
    assert extract(text) == [Extracted(kind, content, key) for kind, key, content in expected]


@pytest.mark.parametrize("text", NOT_REMEMBERED)
def test_non_statements_are_not_remembered(text: str) -> None:
    assert extract(text) == []


def test_too_long_statements_are_not_stored_or_cut() -> None:
    long_clause = "I like " + "very " * 80 + "long walks"
    assert len(long_clause) > 300
    assert extract(long_clause) == []
    assert extract("I like tea. " * (MAX_MESSAGE_CHARS // 12 + 1)) == []


def test_at_most_five_memories_per_message() -> None:
    text = "。".join(f"我喜欢第{n}种茶" for n in range(9))
    assert len(extract(text)) == 5


def test_pattern_extraction_is_fast() -> None:
    messages = [text for text, _ in REMEMBERED] + NOT_REMEMBERED
    timings = []
    for _ in range(20):
        for message in messages:
            start = time.perf_counter()
            extract(message)
            timings.append((time.perf_counter() - start) * 1000)
    assert statistics.median(timings) < 1.0


# ---------------------------------------------------------------- pronouns: whom "he"/"it" means

PRONOUN_CONVERSATIONS = [
    (
        ["We've got a beagle called Max.", "He's three.", "He weighs about 12 kilos.",
         "It's too expensive though."],
        [["We've got a beagle called Max"], ["My beagle Max is three"],
         ["My beagle Max weighs about 12 kilos"], []],
    ),
    (
        ["My daughter Emma just started school.", "She's allergic to peanuts."],
        [["My daughter Emma just started school"], ["My daughter Emma is allergic to peanuts"]],
    ),
    (["我家有只猫叫团团", "它三岁了"], [["我家有只猫叫团团"], ["我家的猫三岁了"]]),
    (["我有一个女儿", "她很喜欢画画"], [["我有一个女儿"], ["我女儿很喜欢画画"]]),
    # "it" never means a person; a message that names or refers to nobody ends the subject.
    (["My brother lives in Oslo.", "It is raining there.", "He is a pilot."],
     [["My brother lives in Oslo"], [], []]),
    # No one named before: a pronoun is nobody's, and "it" is the product.
    (["What's the price of the plan?", "It's too expensive.", "She is seven."], [[], [], []]),
    # Within one message, an earlier clause names them.
    (["We have a dog. He is three."], [["We have a dog", "My dog is three"]]),
    # Their name, once said, stands for them too; a longer word that starts like it does not.
    (["We've got a beagle called Max.", "Max is three.", "Maxine lives next door."],
     [["We've got a beagle called Max"], ["My beagle Max is three"], []]),
    (["My son's name is Leo.", "Leo is nine."], [["My son's name is Leo"], ["My son Leo is nine"]]),
    (["我家有只猫叫团团", "团团三岁了"], [["我家有只猫叫团团"], ["我家的猫三岁了"]]),
    # A question can name them ("Is my dog allowed in the cabin?"); it is never stored itself.
    (["Is my dog allowed in the cabin?", "He is small."], [[], ["My dog is small"]]),
]  # fmt: skip


@pytest.mark.parametrize(("messages", "stored"), PRONOUN_CONVERSATIONS)
def test_a_leading_pronoun_means_the_relative_or_pet_spoken_of_last(
    messages: list[str], stored: list[list[str]]
) -> None:
    subject = None
    for message, expected in zip(messages, stored, strict=True):
        assert [e.content for e in extract(message, subject)] == expected, message
        subject = next_subject(message, subject)


def test_a_pets_age_is_kept_under_its_own_key_and_never_as_the_persons() -> None:
    subject = next_subject("我家有只猫叫团团", None)
    aged = Extracted("relation", "我家的猫三岁了", "relation:猫:age")
    assert extract("它三岁了", subject) == [aged]
    assert extract("它三岁了") == []


def test_a_card_length_number_is_never_stored_but_a_phone_number_is() -> None:
    assert extract("My number is +44 7700 900123.") == [
        Extracted("fact", "My phone number is +44 7700 900123", "phone")
    ]
    assert extract("My phone is 4111 1111 1111 1111.") == []


def test_a_subject_of_two_stays_one_clause_for_the_model() -> None:
    said = "My partner and I are celebrating our tenth anniversary with you."
    assert stated_clauses(said) == [
        "My partner and I are celebrating our tenth anniversary with you"
    ]
    assert stated_clauses("Just so you know, shellfish makes me really ill.") == [
        "shellfish makes me really ill"
    ]
    # The patterns still read the person's own part.
    assert extract("My wife and I live in Leeds.") == [
        Extracted("fact", "I live in Leeds", "current_city")
    ]


def test_a_dash_sets_off_a_statement_before_a_question() -> None:
    said = "I'm Deepak, by the way — could you arrange a birthday cake for my mum?"
    assert stated_clauses(said) == ["I'm Deepak"]
    said = "My son Leo's six and my little girl Maisie is three — do they pay for breakfast?"
    assert stated_clauses(said) == ["My son Leo's six", "my little girl Maisie is three"]
    # A clause that only leads into the question states nothing.
    assert stated_clauses("Given the car I've got, which parking spaces should I use?") == []
    assert stated_clauses("按我女儿的身高，她的儿童套餐怎么收费？") == []


def test_a_chinese_speaker_who_goes_on_without_a_subject_is_still_the_speaker() -> None:
    assert stated_clauses("我是小学语文老师，周末喜欢去爬山，平时说粤语和普通话。") == [
        "我是小学语文老师",
        "我周末喜欢去爬山",
        "我平时说粤语和普通话",
    ]
    # A request stays as said; a relative's clauses stay theirs; a correction stays whole.
    assert stated_clauses("我叫周敏，习惯坐靠窗的位子，有事请发微信给我。") == [
        "我叫周敏",
        "我习惯坐靠窗的位子",
        "有事请发微信给我",
    ]
    assert stated_clauses("我女儿朵朵五岁了，身高一米一左右。") == [
        "我女儿朵朵五岁了，身高一米一左右"
    ]
    assert stated_clauses("我有两个儿子，大的叫明明，小的叫亮亮。") == [
        "我有两个儿子，大的叫明明，小的叫亮亮"
    ]
    assert stated_clauses("我记错了，其实是七个人，不是五个。") == ["是七个人"]


def test_a_correction_names_what_it_corrects() -> None:
    assert corrected_values("我记错了，其实是七个人，不是五个。") == ["五个"]
    assert corrected_values("I've just moved to York, so that's home now, not Leeds.") == ["Leeds"]
    assert corrected_values("Our anniversary is actually the 16th of June, not the 14th.") == [
        "14th"
    ]
    assert corrected_values("I'm not sure about the dates.") == []
    # The stored statement is what is true now.
    assert stated_clauses("I've just moved to York, so that's home now, not Leeds.") == [
        "I've just moved to York, so that's home now"
    ]
