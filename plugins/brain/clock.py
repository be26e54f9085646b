"""Before or after a clock time, in code (SPEC BRAIN-4; issue 31 item 6: "before/after a time").

Theory of operation
-------------------
"If the boat leaves at 11:00, by when must I be in the lane?" over "Vehicles must be in the
check-in lane 30 minutes before departure": the answer, 10:30, is in no passage, so the model
can only copy the rule (or invent a time, which ``Support`` then drops). Rule 8's expressions
(``arithmetic``) add amounts, not clock times. Here code does it, with no model call.

Rule 1. The question holds exactly one clock time ("11:00", "7 pm", "下午两点", "9点半") and
        asks for a time ("by when", "what time", "how late", 「几点」, 「最晚」, 「什么时候」).
Rule 2. Of the passages' sentences, best first by the question's words
        (``grounding.best_sentences``), the first holding exactly one duration tied to before
        or after ("30 minutes before departure", "提前 30 分钟", "起飞前 45 分钟", "2 小时后")
        is used; none: no result, and the turn is answered as any other. A bare length of time
        ("保管 3 天", "The crossing takes 50 minutes") is tied to nothing.
Rule 3. Code adds or subtracts and says the result with the rule it came from, in the
        question's language and clock style ("10:30 am" when the question said "am"/"pm"),
        after the source's name: "it is 30 minutes before 11:00, so 10:30." /
        「是 11:00 的 30 分钟前，也就是 10:30。」
Rule 4. Whether one clock time is in time: a yes/no question naming exactly one clock time
        ("Can I catch a 7 am boat?", 「晚上八点能来打扫吗?」, not asking for a time: Rule 1)
        over a sentence holding one clock time ("no sailing before 8:00 am") or one span of
        two ("每天 8:00 至 18:00", "from 7:00 to 10:30 am") — the first such sentence of the
        candidates, best first; a sentence naming two times that make no span ("Check-in
        starts at 3:00 pm and check-out is at 11:00 am") is passed over. Code says how the
        two relate, then the sentence as the document writes it, so the person hears the rule
        that decides: "7:00 am is before 8:00 am. From November to March there is no sailing
        before 8:00 am." / 「20:00 不在 8:00 至 18:00 之内。服务时间为每天 8:00 至 18:00。」
        The words the question and the rule share are not checked: the retrieval found the
        passage, and a paraphrase shares none ("get in" for check-in). A small model asked
        whether 6 pm is before 17:00 copies the rule or answers at random.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from plugins.brain.arithmetic import zh_number
from plugins.brain.grounding import Passage, best_sentences, sentences

_EN_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "ten": 10}
_EN_NUMBERS |= {"fifteen": 15, "twenty": 20, "thirty": 30, "forty-five": 45, "an": 1, "a": 1}

_EN_TIME = re.compile(
    r"\b(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<half>a\.?m\.?|p\.?m\.?)(?![a-z])"
    r"|\b(?P<h24>\d{1,2}):(?P<m24>\d{2})\b",
    re.I,
)
_ZH_TIME = re.compile(
    r"(?P<part>上午|早上|中午|下午|晚上)?\s*(?P<h>\d{1,2}|十[一二]?|[一二两三四五六七八九])\s*(?:点|时)"
    r"(?:\s*(?P<half>半)|\s*(?P<m>\d{1,2}|[一二两三四五六七八九十]+)\s*分?)?"
    r"|(?P<h24>\d{1,2}):(?P<m24>\d{2})"
)
_ASKS_WHEN = {
    "en": re.compile(
        r"\bby when\b|\bwhat time\b|\bhow late\b|\bhow early\b|\blatest\b|\bearliest\b"
        r"|^\W*when\b|\bwhen (?:must|should|do|does|can|will|is|are)\b",
        re.I,
    ),
    "zh": re.compile(r"几点|什么时候|最晚|最迟|最早|何时"),
}
_EN_DURATION = re.compile(
    r"\b(?P<n>\d+|an?|one|two|three|four|five|six|ten|fifteen|twenty|thirty|forty-five)"
    r"\s*(?P<unit>minutes?|mins?|hours?|hrs?)\s+(?P<side>before|after|prior to|ahead of|later)\b",
    re.I,
)
_ZH_DURATION = re.compile(
    r"(?P<ahead>提前|之前|以前|前|之后|以后|后)?\s*(?P<n>\d+|[一二两三四五六七八九十半]+)\s*(?P<unit>分钟|个?小时|个?钟头)"
    r"\s*(?P<side>之前|以前|前|之后|以后|后)?"
)
_BEFORE_EN = ("before", "prior to", "ahead of")
_YES_NO = {
    "en": re.compile(
        r"^\W*(?:(?:and|so|but|then|ok(?:ay)?|well),?\s+)?(?:can|could|may|is|are|am|will|would|do|does|"
        r"did|shall|should|have|has)\b",
        re.I,
    ),
    "zh": re.compile(r"吗\W*$|么\W*$|能不能|可不可以|行不行|来得及|赶得上|可以|能"),
}
_SPAN = re.compile(r"^\s*(?:to|until|till|and|through|-|–|—|~|～|至|到)\s*$", re.I)
"""What joins two clock times into one span ("8:00 至 18:00", "from 7:00 to 10:30 am")."""


@dataclass(frozen=True, slots=True)
class ClockAnswer:
    minutes: int
    """The result, in minutes after midnight."""
    given: int
    duration: int
    before: bool
    twelve_hour: bool

    def sentence(self, language: str) -> str:
        result, given = _said(self.minutes, self.twelve_hour), _said(self.given, self.twelve_hour)
        length = _duration(self.duration, language)
        if language == "zh":
            side = "前" if self.before else "后"
            return f"是 {given} 的{length}{side}，也就是 {result}。"
        side = "before" if self.before else "after"
        return f"it is {length} {side} {given}, so {result}."


def clock_answer(question: str, language: str, found: Sequence[Passage]) -> ClockAnswer | None:
    """Rules 1–3: the time the question asks for, computed from the evidence; None when the
    question asks for no time, names no single clock time, or no sentence ties a duration to
    before or after."""
    if not _ASKS_WHEN["zh" if language == "zh" else "en"].search(question):
        return None
    times = _clock_times(question)
    if len(times) != 1:
        return None
    given, twelve_hour = times[0]
    for passage in best_sentences(question, found, limit=3):
        for sentence in sentences(passage.text):
            durations = _durations(sentence)
            if len(durations) == 1:
                duration, before = durations[0]
                minutes = (given - duration if before else given + duration) % (24 * 60)
                return ClockAnswer(minutes, given, duration, before, twelve_hour)
    return None


@dataclass(frozen=True, slots=True)
class TimeCompared:
    """Rule 4: how the question's clock time relates to the rule's, and the rule."""

    given: int
    start: int
    end: int | None
    """None: the rule names one time; else the span's end."""
    twelve_hour: bool
    sentence: str

    def said(self, language: str) -> str:
        given, start = _said(self.given, self.twelve_hour), _said(self.start, self.twelve_hour)
        zh = language == "zh"
        if self.end is not None:
            end = _said(self.end, self.twelve_hour)
            inside = self.start <= self.given <= self.end
            if zh:
                where = "在" if inside else "不在"
                return f"{given} {where} {start} 至 {end} 之内。{self.sentence}"
            where = "within" if inside else "outside"
            return f"{given} is {where} {start} to {end}. {self.sentence}"
        if self.given == self.start:
            relation = "正好是" if zh else "is exactly"
            said = f"{given} {relation} {start}。" if zh else f"{given} {relation} {start}."
        elif zh:
            said = f"{given} 在 {start} {'之前' if self.given < self.start else '之后'}。"
        else:
            said = f"{given} is {'before' if self.given < self.start else 'after'} {start}."
        return f"{said}{'' if zh else ' '}{self.sentence}"


def time_compared(
    question: str, language: str, candidates: Sequence[Passage]
) -> TimeCompared | None:
    """Rule 4: the question's one clock time against the first candidate sentence holding one
    clock time or one span; None when the question asks for a time, is no yes/no question,
    names no single clock time, or no sentence qualifies."""
    lang = "zh" if language == "zh" else "en"
    if _ASKS_WHEN[lang].search(question) or not _YES_NO[lang].search(question):
        return None
    times = _clock_times(question)
    if len(times) != 1:
        return None
    given, twelve_hour = times[0]
    for passage in candidates:
        for sentence in sentences(passage.text):
            found = _spans(sentence)
            if found is not None:
                start, end = found
                return TimeCompared(given, start, end, twelve_hour, sentence)
    return None


def _spans(sentence: str) -> tuple[int, int | None] | None:
    """The one clock time (end None) or the one span ``sentence`` names, else None."""
    english = list(_EN_TIME.finditer(sentence))
    spans = english or list(_ZH_TIME.finditer(sentence))
    times = _clock_times(sentence)
    if len(times) != len(spans) or not 1 <= len(times) <= 2:
        return None
    if len(times) == 1:
        return times[0][0], None
    if not _SPAN.match(sentence[spans[0].end() : spans[1].start()]):
        return None
    start, end = times[0][0], times[1][0]
    first, second = (spans[0]["half"], spans[1]["half"]) if english else (None, None)
    if first is None and second and second.lower().startswith("p") and start + 720 < end:
        start += 720  # "from 1:00 to 5:00 pm": the first time is in the second's half of the day
    return (start, end) if start < end else None


def _clock_times(text: str) -> list[tuple[int, bool]]:
    """Each clock time ``text`` names, as (minutes after midnight, said with am/pm)."""
    out = []
    for match in _EN_TIME.finditer(text):
        if match["h24"] is not None:
            hour, minute = int(match["h24"]), int(match["m24"])
            if hour < 24 and minute < 60:
                out.append((hour * 60 + minute, False))
            continue
        hour, minute = int(match["h"]) % 12, int(match["m"] or 0)
        if match["half"].lower().startswith("p"):
            hour += 12
        if minute < 60:
            out.append((hour * 60 + minute, True))
    if out:
        return out
    for match in _ZH_TIME.finditer(text):
        if match["h24"] is not None:
            hour, minute = int(match["h24"]), int(match["m24"])
        else:
            hour = _zh_number(match["h"])
            minute = 30 if match["half"] else _zh_number(match["m"] or "0")
            if match["part"] in ("下午", "晚上") and hour < 12:
                hour += 12
            elif match["part"] == "中午" and hour < 6:
                hour += 12
        if hour < 24 and minute < 60:
            out.append((hour * 60 + minute, False))
    return out


def _durations(sentence: str) -> list[tuple[int, bool]]:
    """Each duration ``sentence`` ties to before or after, as (minutes, before)."""
    out = []
    for match in _EN_DURATION.finditer(sentence):
        n = match["n"].lower()
        count = int(n) if n.isdigit() else _EN_NUMBERS[n]
        unit = 60 if match["unit"].lower().startswith("h") else 1
        out.append((count * unit, match["side"].lower() in _BEFORE_EN))
    for match in _ZH_DURATION.finditer(sentence):
        if match["side"] is None and match["ahead"] is None:
            continue  # a length of time ("保管 3 天", "50 分钟"), not a point before or after
        unit = 1 if match["unit"] == "分钟" else 60
        amount = unit // 2 if match["n"] == "半" else _zh_number(match["n"]) * unit
        side = match["side"] or match["ahead"]  # "2 小时后", "起飞前 45 分钟", "提前 30 分钟"
        before = side in ("提前", "之前", "以前", "前")
        out.append((amount, before))
    return [(minutes, before) for minutes, before in out if minutes > 0]


def _zh_number(text: str) -> int:
    """Digits or a Chinese numeral (``arithmetic.zh_number``); 0 when neither."""
    return int(text) if text.isdigit() else (zh_number(text) or 0)


def _said(minutes: int, twelve_hour: bool) -> str:
    hour, minute = divmod(minutes, 60)
    if not twelve_hour:
        return f"{hour:02d}:{minute:02d}" if hour >= 10 else f"{hour}:{minute:02d}"
    half = "am" if hour < 12 else "pm"
    return f"{hour % 12 or 12}:{minute:02d} {half}"


def _duration(minutes: int, language: str) -> str:
    hours, rest = divmod(minutes, 60)
    if language == "zh":
        if hours and rest:
            return f" {hours} 小时 {rest} 分钟"
        return f" {hours} 小时" if hours else f" {rest} 分钟"
    if hours and not rest:
        return f"{hours} hour{'s' if hours > 1 else ''}"
    if hours:
        return f"{hours} h {rest} min"
    return f"{rest} minutes"
