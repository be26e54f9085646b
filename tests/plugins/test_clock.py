"""Before or after a clock time, in code (``plugins.brain.clock``)."""

from __future__ import annotations

import pytest

from plugins.brain.clock import clock_answer
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
