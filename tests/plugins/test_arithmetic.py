"""Combination in code: which questions ask for it, what operands pass, what is said."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plugins.brain.arithmetic import (
    NotAComputation,
    asks_to_compute,
    computation,
    expression_messages,
    implied,
    stated_numbers,
)

PLANS = "畅享39元套餐每月含20G流量，超出后每G收费3元，副卡每张每月20元。"
LIBRARY = "Adult books are charged 25 cents a day. A lost item costs its list price plus $5."


def answer(expression: str, unit: str = "") -> str:
    return json.dumps({"expression": expression, "unit": unit})


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("加两张的话，每个月一共交多少？", "zh"),
        ("这两个套餐流量差了多少？", "zh"),
        ("黑白的打10页要多少钱？", "zh"),
        ("这个月孩子去了20天，饭钱是多少？", "zh"),
        ("I brought a library book back 8 days late. How much do I owe?", "en"),
        ("How much more per day is an SUV than a Golf-sized car?", "en"),
        ("What would he pay in total for two days?", "en"),
    ],
)
def test_questions_that_combine_amounts_ask_to_compute(question: str, language: str) -> None:
    assert asks_to_compute(question, language)


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("副卡多少钱？", "zh"),
        ("周三晚上几点关门？", "zh"),
        ("How much is the late fee for a DVD?", "en"),
        ("Can I bring my dog?", "en"),
        ("How long is the warranty on the Nova X2 headphones?", "en"),
        ("种一颗牙大概多少钱？", "zh"),
    ],
)
def test_a_single_lookup_costs_nothing(question: str, language: str) -> None:
    assert not asks_to_compute(question, language)


def test_numbers_are_read_in_every_way_a_question_writes_them() -> None:
    assert stated_numbers("加两张，住三晚，12个月") >= {Fraction(2), Fraction(3), Fraction(12)}
    assert Fraction(20) in stated_numbers("二十天")
    assert stated_numbers("带两瓶红酒,上三节课,订两间房") == {Fraction(2), Fraction(3)}
    assert Fraction(1, 5) in stated_numbers("退还20%")
    assert Fraction(2) in stated_numbers("My twins both go there")
    assert Fraction(1500) in stated_numbers("It costs 1,500 yuan")


@pytest.mark.parametrize(
    ("question", "language"),
    [
        ("300M的宽带每个月多少钱？", "zh"),
        ("我家狗12公斤，绝育要多少钱？", "zh"),
        ("孩子10岁，门票多少钱？", "zh"),
        ("3月5日去的话门票多少钱？", "zh"),
        ("My daughter is 10 years old. How much is her ticket?", "en"),
        ("How much is the 500 Mbps plan?", "en"),
        ("If I come at 7 pm, how much is entry?", "en"),
        ("How much does a class in Room 3 cost?", "en"),
    ],
)
def test_a_number_that_names_a_thing_asks_for_no_computation(question: str, language: str) -> None:
    """Rule 3a: an age, a weight, a speed, a time, a date or a room is no amount."""
    assert not asks_to_compute(question, language)


@pytest.mark.parametrize(
    ("expression", "evidence", "question"),
    [
        ("12*1100", "体重12公斤以下的犬绝育费用1100元。", "我家狗12公斤，一共要多少钱？"),
        ("10*36 + 10*15", "门票36元，讲解器15元。", "孩子10岁，总共多少钱？"),
        ("300*24", "300M套餐每月99元，合约24个月。", "300M的一共要交多少？"),
        ("2*45", "Our 500 Mbps plan is 45 dollars a month.", "500 Mbps for 2 months in total?"),
    ],
)
def test_a_number_that_names_a_thing_is_no_operand(
    expression: str, evidence: str, question: str
) -> None:
    if expression == "2*45":  # the months are a count, the price an amount: computed
        assert computation(answer(expression), evidence=evidence, question=question).value == 90
        return
    with pytest.raises(NotAComputation, match="stated nowhere"):
        computation(answer(expression), evidence=evidence, question=question)


def test_a_span_is_implied_only_when_the_question_speaks_of_it() -> None:
    evidence = "A season ticket is 240 dollars."
    monthly = computation(answer("240/12"), evidence=evidence, question="How much a month?")
    assert monthly.value == 20
    with pytest.raises(NotAComputation, match="operand 12"):
        computation(answer("240/12"), evidence=evidence, question="How much for my dog?")


def test_counts_of_a_measure_stay_amounts() -> None:
    assert stated_numbers("每月含20G流量，超出后每G收费3元，30日内可退") >= {
        Fraction(20),
        Fraction(3),
        Fraction(30),
    }
    assert stated_numbers("3 nights for 2 adults, 12 months") >= {Fraction(3), Fraction(2)}
    assert not stated_numbers("Open 9:30 to 17:00 on May 5, Gallery 4, 10-year-olds")
    assert Fraction(7) in implied("每周去几次") and Fraction(7) not in implied("几张")


def test_a_sum_of_stated_numbers_is_computed_and_said_with_its_working() -> None:
    result = computation(answer("39 + 2*20", "元"), evidence=PLANS, question="加两张一共多少？")

    assert result.value == 79
    assert result.sentence("zh") == "39 加 2 乘 20，等于79元。"
    assert result.sentence("en") == "39 plus 2 times 20 is 79 元."


def test_a_sum_that_needs_brackets_is_said_as_its_result_alone() -> None:
    evidence = "A Compact costs 59 dollars a day; the cover adds 11 dollars a day."
    result = computation(answer("3 * (59 + 11)", "dollars"), evidence=evidence, question="three")

    assert result.sentence("en") == "That comes to 210 dollars."
    assert (
        computation(answer("100 - (20 + 30)"), evidence="20 30", question="").sentence("zh")
        == "算下来是50。"
    )


def test_a_currency_named_in_words_is_said_as_the_evidence_writes_it() -> None:
    result = computation(answer("20 + 5", "dollars"), evidence=LIBRARY, question="lost, 20?")

    assert result.sentence("en") == "20 plus 5 is $25."


def test_decimals_and_percentages_are_exact() -> None:
    result = computation(answer("8 * 0.25"), evidence="0.25 a day", question="8 days late")
    assert result.sentence("en") == "8 times 0.25 is 2."
    share = computation(answer("2800 * 0.2"), evidence="月费2800元，退还20%", question="退多少")
    assert share.value == 560


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("39 + 2*25", "operand 25 is stated nowhere"),
        ("79", "no operator"),
        ("__import__('os')", "no operator"),
        ("39 +", "unparsable"),
        ("2 / (20 - 20)", "division by zero"),
        ("1+1+1+1+1+1+1", "too many operands"),
        ("2 ** 20", "only numbers"),
        ("20 - 39", "a negative amount"),
        ("20 * 1", "a product or quotient by one"),
        ("20 / 1", "a product or quotient by one"),
    ],
)
def test_anything_code_cannot_check_is_refused(expression: str, reason: str) -> None:
    with pytest.raises(NotAComputation, match=reason.split()[0]):
        computation(answer(expression), evidence=PLANS, question="加两张一共多少？")


def test_a_question_made_a_combination_by_its_numbers_must_have_one_used() -> None:
    evidence = "种植牙每颗 8000 元起，30 天内复查免费，拔牙后 300 元一次。"
    with pytest.raises(NotAComputation, match="question's numbers"):
        computation(
            answer("300 / 30"),
            evidence=evidence,
            question="拍3次片多少钱",
            uses_one_of=frozenset({Fraction(3)}),
        )  # noqa: E501
    used = computation(
        answer("3 * 300"),
        evidence=evidence,
        question="拍3次片多少钱",
        uses_one_of=frozenset({Fraction(3)}),
    )  # noqa: E501
    assert used.value == 900


def test_a_number_of_the_evidence_is_used_no_more_often_than_it_is_stated() -> None:
    # The second dev set: "2 乘 50 加 50，等于150元" for two bottles' corkage at 50 each.
    corkage = "欢迎自带葡萄酒,每瓶收取 50 元开瓶费;白酒与啤酒不收开瓶费。"
    with pytest.raises(NotAComputation, match="more often than stated"):
        computation(answer("2 * 50 + 50"), evidence=corkage, question="带两瓶红酒,一共多少?")
    assert (
        computation(answer("2 * 50"), evidence=corkage, question="带两瓶红酒,一共多少?").value
        == 100
    )
    # A count the question gives may apply to several rates; a rate stated twice, twice.
    rooms = "A room is $120 a night and breakfast is $18 a night."
    both = computation(answer("3 * 120 + 3 * 18"), evidence=rooms, question="3 nights in total?")
    assert both.value == 414
    with pytest.raises(NotAComputation, match="operand 30 is stated nowhere"):
        computation(
            answer("30 * 2 + 30 * 2"),
            evidence="A 30-minute lesson term costs $420.",
            question="Both my daughters want 30-minute lessons. What's the total?",
        )  # a lesson's length names its kind, in the question and in the evidence
    with pytest.raises(NotAComputation, match="no number of the evidence"):
        computation(
            answer("2 + 3"),
            evidence="A term of lessons costs $420.",
            question="2 adults and 3 children: what's the total?",
        )
    twice = computation(
        answer("50 + 50"),
        evidence="Lunch is $50. Dinner is $50.",
        question="Lunch and dinner: how much in total?",
    )
    assert twice.value == 100


def test_one_of_a_thing_in_a_sum_is_taken_out_and_alone_combines_nothing() -> None:
    # The third dev set: two air conditioners and one range hood, "2*120 + 1*180".
    prices = "家电清洗中,空调每台 120 元,油烟机每台 180 元。"
    question = "洗两台空调和一台油烟机一共多少?"
    both = computation(answer("2*120 + 1*180"), evidence=prices, question=question)
    assert both.value == 420
    assert both.sentence("zh") == "2 乘 120 加 180，等于420。"
    with pytest.raises(NotAComputation, match="by one"):
        computation(answer("1*180"), evidence=prices, question=question)


def test_with_a_count_asked_every_product_uses_the_questions_numbers() -> None:
    # The third dev set: "5 乘 45 加 4 乘 8" for five hours, the minimum booking times the
    # price per square metre; the second: "6 乘 8 加 10 乘 5" for a parcel kept six days.
    cleaning = "日常保洁每小时 45 元,4 小时起订。深度保洁按房屋面积计算,每平方米 8 元,最低 400 元。"
    question = "日常保洁做 5 个小时要多少钱?"
    with pytest.raises(NotAComputation, match="evidence's numbers alone"):
        computation(answer("5*45 + 4*8"), evidence=cleaning, question=question)
    assert computation(answer("5*45"), evidence=cleaning, question=question).value == 225
    # No count asked: the evidence's own numbers may make the product.
    term = "A term has 12 weekly lessons. Each lesson costs $35."
    whole = computation(answer("12*35"), evidence=term, question="What's the term's total?")
    assert whole.value == 420


def test_a_lessons_length_and_a_flats_size_are_read_as_they_are_meant() -> None:
    assert stated_numbers("Both my daughters want 30-minute lessons.") == {Fraction(2)}
    assert stated_numbers("一百平的房子做深度保洁多少钱?") == {Fraction(100)}
    assert asks_to_compute("一百平的房子做深度保洁多少钱?", "zh")


@pytest.mark.parametrize("raw", ["", "[1]", "not json", '{"unit": "元"}'])
def test_a_malformed_answer_is_refused(raw: str) -> None:
    with pytest.raises(NotAComputation):
        computation(raw, evidence=PLANS, question="一共多少？")


@given(st.text(max_size=80))
def test_no_model_answer_escapes_as_anything_but_a_refusal(raw: str) -> None:
    try:
        result = computation(answer(raw), evidence=PLANS, question="加两张一共多少？")
    except NotAComputation:
        return
    checked = eval(result.expression, {"__builtins__": {}})  # only numbers and + - * / passed
    assert float(result.value) == pytest.approx(checked)


def test_the_prompt_holds_the_earlier_message_when_there_is_one() -> None:
    messages = expression_messages("同样加两张呢？", PLANS, "如果换成99的套餐")
    assert messages[0]["role"] == "system"
    assert "Earlier message: 如果换成99的套餐" in messages[-1]["content"]
    assert "Earlier" not in expression_messages("一共多少？", PLANS, None)[-1]["content"]


SCHOOL = (
    "Lessons last 30, 45 or 60 minutes. A term of 30-minute lessons costs $420, a 45-minute "
    "term $600 and a 60-minute term $780. Orders over $99 ship free; late fees are capped at $10."
)
STATION = (
    "包裹免费保管 3 天,从第 4 天起每天收取 1 元,最高收取 10 元。"
    "寄件省内 10 元、省外 12 元,续重每公斤加收 5 元。"
)


@pytest.mark.parametrize(
    ("expression", "question", "evidence", "reason"),
    [
        ("600-420", "How much more is a 60-minute term than a 30-minute term?", SCHOOL, "kind"),
        ("99+10", "What do I pay for the order and the late fee in total?", SCHOOL, "limit"),
        ("5+5", "两个包裹都放了 5 天，一共要交多少保管费？", STATION, "no amount of money"),
    ],
)
def test_an_operand_in_the_wrong_role_is_refused(
    expression: str, question: str, evidence: str, reason: str
) -> None:
    with pytest.raises(NotAComputation, match=reason):
        computation(answer(expression), evidence=evidence, question=question)


def test_operands_in_their_roles_are_computed() -> None:
    question = "How much more is a 60-minute term than a 30-minute term?"
    assert computation(answer("780-420"), evidence=SCHOOL, question=question).value == 360
    # a limit is the answer's operand where the question asks how far one is from it
    cart = "I have $80 in my cart. How much more do I need to spend to ship free?"
    assert computation(answer("99-80"), evidence=SCHOOL, question=cart).value == 19
    assert computation(answer("10+12"), evidence=STATION, question="省内和省外各寄一件一共多少钱？")


def test_a_discount_in_zhe_states_what_is_paid() -> None:
    assert Fraction(4, 5) in stated_numbers("学生凭学生证购买月卡享 8 折")
    assert Fraction(17, 20) in stated_numbers("会员八五折")
