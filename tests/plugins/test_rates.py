"""Prices per unit read by code: which counts pair with which rates, and what is said."""

from __future__ import annotations

from fractions import Fraction

import pytest

from plugins.brain.rates import counts, fits, priced, read_rates

HOSTEL = (
    "Bunk beds cost $28 per night and private rooms $70 per night. "
    "Towels can be rented for $2 per towel. "
    "Bike hire is $12 a day; the first day is free for guests staying a week. "
    "Lockers cost $1 per hour, capped at $6. "
    "Our car park charges $9 per night."
)
LAUNDRY = (
    "洗衣店营业时间为每天 7:00 至 22:00。"
    "普通衣物每件 12 元,羽绒服每件 35 元。"
    "衣物洗好后免费存放 7 天,从第 8 天起每件每天收取 2 元,最高收取 20 元。"
    "会员消费满 200 元可免费停车 1 小时,超出部分按每小时 6 元收费。"
    "矿泉水不收费,咖啡 15 元/杯。"
)


BOATS = (
    "Rowing boats cost $15 per hour and motor boats $40 per hour, with a two-hour minimum. "
    "Paddle boards rent for $9 per hour or $35 per day. "
    "Club members get the first hour of any rowing boat hire free. "
    "Late returns are charged $20 per hour, up to $80. "
    "A deposit of $50 is taken for every motor boat."
)
PRINT_SHOP = "复印黑白每页 0.3 元,彩色每页 1.5 元,每天前 20 页黑白复印免费。储物格每天 4 元。"


@pytest.mark.parametrize(
    ("question", "evidence", "total", "said"),
    [
        ("We'll park the car for four nights. What will that cost?", HOSTEL, 36, "$36"),
        ("How much for two towels?", HOSTEL, 4, "$4"),
        ("I need a locker for 3 hours, how much is it?", HOSTEL, 3, "$3"),
        ("I need a locker for 10 hours, how much is it?", HOSTEL, 6, "$6"),
        ("点三杯咖啡要多少钱?", LAUNDRY, 45, "45元"),
        ("衣服放了 10 天才来拿,要交多少存放费?", LAUNDRY, 6, "6元"),
        ("两件衣服都放了 10 天,存放费一共多少?", LAUNDRY, 12, "12元"),
        ("衣服放了 30 天,存放费要多少?", LAUNDRY, 20, "20元"),
        ("消费满了 200 元,停车 3 个小时要付多少停车费?", LAUNDRY, 12, "12元"),
        ("两杯咖啡和一瓶矿泉水一共多少钱?", LAUNDRY, 30, "30元"),
        ("How much for three paddle boards for 2 hours?", BOATS, 54, "$54"),
        ("We'd like a motor boat for 3 hours. What's the cost?", BOATS, 120, "$120"),
        ("How much is a rowing boat for just one hour?", BOATS, 30, "minimum is 2 hours"),
        ("What's the deposit for two motor boats?", BOATS, 100, "$100"),
        ("We came back 6 hours late. What's the late fee?", BOATS, 80, "capped at $80"),
        ("彩色复印 10 页多少钱?", PRINT_SHOP, 15, "15元"),
        ("黑白复印 50 页要多少钱?", PRINT_SHOP, 9, "前 20 页免费"),
        ("储物格用一周要多少钱?", PRINT_SHOP, 28, "28元"),
    ],
)
def test_a_count_is_multiplied_by_the_price_per_its_unit(
    question: str, evidence: str, total: int, said: str
) -> None:
    computed = priced(question, evidence)
    assert computed is not None
    assert computed.value == total
    lang = "en" if question.isascii() else "zh"
    assert said in computed.sentence(lang)


@pytest.mark.parametrize(
    ("question", "evidence", "why"),
    [
        ("How much for three nights?", HOSTEL, "two prices per night, no word to choose"),
        ("停车 3 个小时要付多少停车费?", LAUNDRY, "the free hour needs a spend not stated"),
        ("How much more is a private room than a bunk for two nights?", HOSTEL, "a difference"),
        ("Two towels and a kayak for three hours, how much?", HOSTEL, "the kayak has no price"),
        ("We're four people for two nights in a private room. Total?", HOSTEL, "per person?"),
        ("What time does the laundry open?", LAUNDRY, "no count"),
    ],
)
def test_code_gives_no_total_it_cannot_read_whole(question: str, evidence: str, why: str) -> None:
    assert priced(question, evidence) is None, why


def test_rates_keep_their_units_free_allowance_and_cap() -> None:
    by_amount = {rate.amount: rate for rate in read_rates(LAUNDRY)}
    storage = by_amount[Fraction(2)]
    assert storage.units == (frozenset({"day"}), frozenset({"item"}))
    assert (storage.free, storage.cap) == (7, 20)
    parking = by_amount[Fraction(6)]
    assert (parking.free, parking.needs_spend) == (1, 200)
    assert by_amount[Fraction(15)].units == (frozenset({"cup"}),)
    assert by_amount[Fraction(12)].units == (frozenset({"item"}),)


def test_counts_are_read_in_both_languages_and_money_is_no_count() -> None:
    assert [(c.n, "night" in c.words) for c in counts("three nights for both of us")] == [
        (3, True),
        (2, False),
    ]
    assert [c.n for c in counts("消费满了 200 元,停车 3 个小时")] == [3]
    assert [c.n for c in counts("a 30-minute lesson for $25")] == []


def test_a_count_times_a_price_per_another_unit_does_not_fit() -> None:
    question = "衣服放了 10 天才来拿,要交多少存放费?"
    assert not fits("10*12", question, LAUNDRY)  # 12 is a garment's price, not a day's
    assert fits("(10-7)*2", question, LAUNDRY)
    assert fits("2*15", "点两杯咖啡多少钱?", LAUNDRY)


def test_a_discount_for_what_the_person_is_leaves_the_total_to_no_one() -> None:
    question = "I'm a club member. How much is a rowing boat for 3 hours?"
    assert priced(question, BOATS) is None
    assert not fits("3*15", question, BOATS)  # the model's sum ignores the free hour too
    assert priced("How much is a rowing boat for 3 hours?", BOATS) is not None


def test_a_price_per_another_span_does_not_fit() -> None:
    question = "How much more is a paddle board than a rowing boat for a day?"
    assert not fits("35-15", question, BOATS)  # 15 is an hour's price
    assert fits("35-9", "How much more is a paddle board for a day than for an hour?", BOATS)
