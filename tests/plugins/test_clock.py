"""Before or after a clock time, in code (``plugins.brain.clock``)."""

from __future__ import annotations

import pytest

from plugins.brain.clock import clock_answer, time_compared
from plugins.brain.grounding import Passage

FERRY = Passage(
    "Northline Ferries",
    "A car with its driver costs £38 each way. Vehicles must be in the check-in lane 30 "
    "minutes before departure. The crossing takes 50 minutes.",
)
CLEANING = Passage("安心家政", "服务开始前 12 小时以上取消免费。保洁员到达后取消,按 2 小时收费。")
AIRPORT = Passage("机场", "登机口在起飞前 45 分钟关闭。")


@pytest.mark.parametrize(
    ("question", "language", "found", "said"),
    [
        ("If the boat leaves at 11:00, by when must I be in the lane?", "en", FERRY,
         "it is 30 minutes before 11:00, so 10:30."),
        ("My ferry is at 2 pm. What time should I be in the check-in lane?", "en", FERRY,
         "it is 30 minutes before 2:00 pm, so 1:30 pm."),
        ("航班下午两点十分起飞,登机口几点关?", "zh", AIRPORT,
         "是 14:10 的 45 分钟前，也就是 13:25。"),
        ("明天上午9点的服务,最晚几点前取消免费?", "zh", CLEANING,
         "是 9:00 的 12 小时前，也就是 21:00。"),
    ],
)  # fmt: skip
def test_a_time_before_or_after_a_clock_time_is_computed(
    question: str, language: str, found: Passage, said: str
) -> None:
    answer = clock_answer(question, language, [found])
    assert answer is not None and answer.sentence(language) == said


@pytest.mark.parametrize(
    ("question", "language", "found"),
    [
        ("How long is the crossing?", "en", FERRY),  # asks for no time
        ("What time does the 11:00 boat arrive?", "en", FERRY),  # "takes 50 minutes": a length
        ("Is 10:40 too late for the 11:00 boat? When must I be there?", "en", FERRY),  # two
        ("保洁员几点到?", "zh", CLEANING),  # no clock time given
    ],
)
def test_no_single_time_or_no_duration_tied_to_before_or_after_computes_nothing(
    question: str, language: str, found: Passage
) -> None:
    assert clock_answer(question, language, [found]) is None


WINTER = Passage("Northline Ferries", "From November to March there is no sailing before 8:00 am.")
HOURS = Passage("安心家政", "至少提前 24 小时在小程序预约,服务时间为每天 8:00 至 18:00。")
POSTED = Passage("城东快递驿站", "当天 17:00 前寄出的包裹当天发出,之后寄出的次日发出。")
OFFICE = Passage("Office", "The office is open from 1:00 to 5:00 pm.")
INN = Passage(
    "Tidewater Inn",
    "Check-in starts at 3:00 pm and check-out is at 11:00 am. Early check-in from 12:00 noon "
    "is available for a fee of $25 when a room is ready.",
)


@pytest.mark.parametrize(
    ("question", "language", "found", "said"),
    [
        ("Can I catch a 7 am boat in January?", "en", WINTER,
         "7:00 am is before 8:00 am. From November to March there is no sailing before 8:00 am."),
        ("晚上八点能来打扫吗?", "zh", HOURS,
         "20:00 不在 8:00 至 18:00 之内。"
         "至少提前 24 小时在小程序预约,服务时间为每天 8:00 至 18:00。"),
        ("晚上六点去寄,今天能发出去吗?", "zh", POSTED,
         "18:00 在 17:00 之后。当天 17:00 前寄出的包裹当天发出,之后寄出的次日发出。"),
        ("Can I come at 2 pm?", "en", OFFICE,
         "2:00 pm is within 1:00 pm to 5:00 pm. The office is open from 1:00 to 5:00 pm."),
        # two times that make no span are passed over for the sentence after them
        ("Could I get in at 1 pm instead?", "en", INN,
         "1:00 pm is after 12:00 pm. Early check-in from 12:00 noon is available for a fee of "
         "$25 when a room is ready."),
    ],
)  # fmt: skip
def test_one_clock_time_is_set_against_the_rules_time_or_span(
    question: str, language: str, found: Passage, said: str
) -> None:
    compared = time_compared(question, language, [found])
    assert compared is not None and compared.said(language) == said


@pytest.mark.parametrize(
    ("question", "language", "found"),
    [
        ("What time is the first boat?", "en", WINTER),  # asks for a time: Rule 1's
        ("The 7 am boat was full.", "en", WINTER),  # no question
        ("Can I come at 9 am or at 2 pm?", "en", OFFICE),  # two times
        ("Can I check out at 10 am?", "en", Passage("Inn", "Check-in starts at 3:00 pm and "
                                                    "check-out is at 11:00 am.")),
        ("Is the pool open?", "en", OFFICE),  # no time asked about
    ],
)  # fmt: skip
def test_no_comparison_without_one_time_asked_and_one_rule(
    question: str, language: str, found: Passage
) -> None:
    assert time_compared(question, language, [found]) is None
