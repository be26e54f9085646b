"""Prices per unit, read and multiplied by code (SPEC BRAIN-4; issue 31 item 6).

Theory of operation
-------------------
"I need parking for three nights. What will that cost?" over "$15 per night", or
「包裹放了 5 天才来取，要交多少保管费？」 over 「免费保管 3 天，从第 4 天起每件每天收取 1 元保管
费，最高收取 10 元」: the 0.5B model, asked for an expression (``arithmetic`` Rule 2), picks
numbers the evidence states in the wrong role — a cap or a threshold as a price, days added as
money, another tier's price (a probe of eleven sums on dev documents: 6 computed, 1 right).
Where the evidence prices something *per unit* and the question counts that unit, the sum
needs no model: code pairs them.

Only a question asking for an amount ("how much", "What's the late fee?", 「多少」) and
holding no comparison ("how much more", 「贵多少」: the model's expression) is read here; it
costs no model call, so it runs before ``arithmetic``'s gate (Rule 1 there).

Rule 1. A rate is a price the evidence ties to a unit: "$15 per night", "$18 per adult",
        "€4 a bag", "$100 … for every electric bike", 「每瓶收取 50 元」, 「按每小时 8 元」,
        「每件每天收取 1 元」 (two units), 「50 元/瓶」. Its *label* is the words between the
        sentence's previous rate (or its start) and it: what it prices ("and double kayaks" in
        "Single kayaks cost $18 per hour and double kayaks $25 per hour"). Its sentence may
        give units free before it applies (「免费停车 2 小时」, 「从第 4 天起」, "the first 2
        hours are free"; where several rates of the sentence have that unit, only to those
        whose label the free clause names: 「每天前 10 页黑白打印免费」 frees black-and-white
        pages, not colour ones), a minimum ("with a two-hour minimum", 「2 小时起订」) and a cap
        (「最高收取 10 元」, "up to $60", "capped at $50"). A free allowance that needs a spend
        (「消费满 300 元可免费停车 2 小时」) holds only when the question states that spend; a
        question that states none gets no answer here.
Rule 2. A count is a number the question ties to a unit: "three nights", "two adults", "4
        hours", 「两瓶葡萄酒」, 「4 个小时」, 「两个包裹」; "both of us" and 「我们俩」 are two
        people; a week of a rate per day is seven days (「储物柜用一周」). Units are compared
        in one vocabulary ("nights", 「晚」 and 「夜」 are one unit; 「个」, 「件」 and "items"
        count things); two two-word units that each hold a word of their own are not one
        ("two city bikes" is not "for every electric bike"). A money amount ("消费满了 300
        元") or a number that names a thing (``arithmetic.NAMES``: "a 30-minute lesson") is no
        count.
Rule 3. Each rate whose every unit a count fills (an item unit no count fills is one item)
        is a candidate. Of the candidates for a count, the one whose sentence and label share
        the most of the question's words is taken — a word weighs one over the number of the
        evidence's sentences holding it ("bike" in every line of a bike shop's prices chooses
        nothing, "late" in one does), a shared label word twice, a label word the question
        does not say counts against — and the sentence must share at least one ("parking"
        picks "$15 per night" for parking, not a room's rate per night). A count of a thing
        the label of a time rate names multiplies it ("two city bikes for three hours" over
        "City bikes rent for $6 per hour"). A tie between different prices, one rate for two
        counts (a comparison), a count no rate takes (unless it is of one thing the evidence
        says is free: 「一箱啤酒」 over 「啤酒不收开瓶费」), or a person naming a condition
        another sentence discounts ("I'm a member" over "Members get the first hour free"):
        code gives no answer, and the turn goes on to the model's expression
        (``arithmetic``). One of a thing at its plain price is left to the quoted sentence.
Rule 4. The total is each rate times its counts (at least the minimum) less the free units,
        capped per item where the sentence caps it, said by ``arithmetic.Computation`` in the
        question's language, after the rule that shaped it where one did: "The minimum is 2
        hours, so 2 times 18 is $36." / 「前 3 天免费，算下来是2元。」
Rule 5. The model's expression (``arithmetic``) is checked here too (``fits``): a count the
        question states times a price that is no rate per the count's unit, where the
        evidence has one ("5 天" times 「10 元」 over 「每天收取 1 元」); a price per a span the
        question does not speak of, where the evidence prices the one it does ("for a day":
        not "$6 per hour" beside "$28 per day"); a sum ignoring the discount a condition the
        person names gets. Any of these: no result.

Measured: a probe of eleven sums over four dev documents (``dev_combination.json``) went
from 2 to 8 of 11; a second probe written before the second round of these rules over two new
dev documents (``dev_combination2.json``, 17 sums) passed 3 of 17 at its first run and 12 of
17 after.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from plugins.brain.arithmetic import (
    EN_NUMBER,
    NAMES,
    Computation,
    spoken_sums,
    stated_numbers,
    zh_number,
)
from plugins.language import is_cjk_ideograph
from plugins.text import STOP_WORDS, query_terms, sentences

_NUMBER = r"\d+(?:\.\d+)?"
_ZH_NUM = r"[零一二两三四五六七八九十百]+"
_EN_WORDS = {
    word: Fraction(n)
    for word, n in EN_NUMBER.items()
    if word not in ("twice", "twins", "both", "pair", "double", "half")
}
_EN_NUM = r"\d+|" + "|".join(_EN_WORDS)

ITEM = "item"
"""The unit of things counted by a generic measure word (「个」, 「件」, "item", "piece")."""

_ZH_UNITS: dict[str, str] = {
    "个小时": "hour",
    "小时": "hour",
    "钟头": "hour",
    "天": "day",
    "日": "day",
    "晚": "night",
    "夜": "night",
    "周": "week",
    "星期": "week",
    "个月": "month",
    "月": "month",
    "人": "person",
    "位": "person",
    "名": "person",
    "个": ITEM,
    "件": ITEM,
    "只": ITEM,
    "份": "portion",
    "瓶": "bottle",
    "箱": "case",
    "张": "ticket",
    "次": "time",
    "节": "lesson",
    "堂": "lesson",
    "间": "room",
    "辆": "vehicle",
    "公斤": "kg",
    "千克": "kg",
    "斤": "jin",
    "杯": "cup",
    "盒": "box",
    "袋": "bag",
    "包": "pack",
    "套": "set",
    "张票": "ticket",
    "页": "page",
    "课时": "lesson",
    "桌": "table",
    "场": "session",
    "双": "pair",
}
_ZH_UNIT = "|".join(sorted(_ZH_UNITS, key=len, reverse=True))
_EN_UNITS: dict[str, str] = {
    "people": "person",
    "persons": "person",
    "guest": "person",
    "head": "person",
    "children": "child",
    "kid": "child",
    "piece": ITEM,
    "parcel": ITEM,
    "package": ITEM,
    "kilo": "kg",
    "kilogram": "kg",
    "hr": "hour",
    "evening": "night",
}
_CURRENCY_BEFORE = r"[$€£¥]"
_CURRENCY_WORDS = r"dollars?|euros?|pounds?|yuan|usd|eur|gbp|rmb"
_ZH_MONEY = r"(?:元|块)"

_EN_RATE = re.compile(
    rf"(?:({_CURRENCY_BEFORE})\s?({_NUMBER})|({_NUMBER})\s*({_CURRENCY_WORDS}))"
    rf"\s*(?:per|a|an|/|each|every)\s+([a-z-]+)(?:\s+([a-z-]+))?"
    rf"(?:\s+per\s+([a-z-]+))?",
    re.I,
)
_EN_RATE_FOR_EVERY = re.compile(
    rf"(?:({_CURRENCY_BEFORE})\s?({_NUMBER})|({_NUMBER})\s*({_CURRENCY_WORDS}))"
    rf"[^.;$€£¥\d]{{0,40}}?\bfor (?:every|each)\s+([a-z-]+)(?:\s+([a-z-]+))?",
    re.I,
)
_MINIMUMS = (
    re.compile(rf"\b({_EN_NUM})[- ]([a-z]+) minimum\b", re.I),
    re.compile(rf"\bminimum (?:of |booking of |rental of |stay of )?({_EN_NUM})\s+([a-z]+)", re.I),
    re.compile(rf"({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})\s*起(?:订|租|售|约)"),
    re.compile(rf"(?:起订|最少|至少)(?:预订|租|订)?\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})"),
)
_ZH_RATE = re.compile(
    rf"每\s*(?:一\s*)?({_ZH_UNIT})(?:\s*每\s*(?:一\s*)?({_ZH_UNIT}))?"
    rf"[^\d。；;，,]{{0,8}}?({_NUMBER})\s*{_ZH_MONEY}"
)
_ZH_RATE_AFTER = re.compile(rf"({_NUMBER})\s*{_ZH_MONEY}\s*(?:/|每)\s*({_ZH_UNIT})")
_ZH_FREE = (
    re.compile(rf"免费[\u4e00-\u9fff]{{0,4}}?\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})"),
    re.compile(rf"前\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})[\u4e00-\u9fff]{{0,6}}?免费"),
    re.compile(rf"({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})\s*(?:内|以内)\s*免费"),
)
_ZH_FROM = re.compile(rf"从?第\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})\s*(?:起|开始)")
_EN_FREE = (
    re.compile(rf"\bfirst\s+({_EN_NUM})\s+([a-z]+)\s+(?:are|is)\s+free\b", re.I),
    re.compile(rf"\bfree\s+for\s+(?:the\s+first\s+)?({_EN_NUM})\s+([a-z]+)", re.I),
    re.compile(rf"\b({_EN_NUM})\s+([a-z]+)\s+free\b", re.I),
)
_CAP = (
    re.compile(rf"(?:最高|最多|封顶)(?:收取|收|不超过)?\s*({_NUMBER})\s*{_ZH_MONEY}"),
    re.compile(
        rf"\b(?:up to|capped at|at most|a maximum of|maximum of|max\.?)\s*{_CURRENCY_BEFORE}\s?"
        rf"({_NUMBER})",
        re.I,
    ),
)
_ZH_THRESHOLD = re.compile(rf"满\s*({_NUMBER})\s*{_ZH_MONEY}")
_EN_THRESHOLD = re.compile(
    rf"\b(?:over|above|more than|at least|spend(?:ing)?)\s*{_CURRENCY_BEFORE}\s?({_NUMBER})", re.I
)
_ZH_COUNT = re.compile(rf"({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})([\u4e00-\u9fff]{{0,4}})")
_EN_COUNT = re.compile(rf"\b({_EN_NUM})\s+([a-z-]+)(?:\s+([a-z-]+))?", re.I)
_BOTH_OF_US = re.compile(
    r"\b(?:both of us|the two of us|for two(?![ \t]+[a-z]))\b|我们(?:俩|两个)|两个人", re.I
)
_ASKS_AMOUNT = re.compile(
    r"\bhow much\b|\bwhat (?:do|does|will|would) (?:i|we|it|that|this) (?:pay|owe|cost)\b|"
    r"\bwhat(?:'s| is| are| will be| would be)\b[^?.]{0,30}\b(?:cost|price|fee|charge|deposit|"
    r"total|bill|rate)s?\b|多少|几块",
    re.I,
)
_COMPARES = re.compile(
    r"多多少|少多少|贵多少|便宜多少|差多少|相差|差价|比.{1,12}(?:多|少|贵|便宜)|"
    r"\b(?:more than|less than|cheaper|dearer|difference|compared|than)\b",
    re.I,
)
_TIME_UNITS = frozenset({"minute", "hour", "day", "night", "week", "month", "year"})
_SAID_UNIT = {
    "hour": ("hour", "小时"),
    "day": ("day", "天"),
    "night": ("night", "晚"),
    "week": ("week", "周"),
    "month": ("month", "个月"),
    "page": ("page", "页"),
}
_SPAN_WORDS = {
    "hour": "hour",
    "hours": "hour",
    "hourly": "hour",
    "day": "day",
    "days": "day",
    "daily": "day",
    "night": "night",
    "nights": "night",
    "nightly": "night",
    "week": "week",
    "weeks": "week",
    "weekly": "week",
    "month": "month",
    "months": "month",
    "monthly": "month",
    "小时": "hour",
    "天": "day",
    "晚": "night",
    "周": "week",
    "月": "month",
}
_SPAN = re.compile(
    r"\b(?:" + "|".join(w for w in _SPAN_WORDS if w.isascii()) + r")\b|小时|天|晚|周|月", re.I
)
_GENERIC_TERMS = frozenset(
    query_terms(
        "cost costs price fee charge pay paid total much many altogether extra each per night "
        "day hour week month person people adult item time 要多少钱 付多少钱 一共多少 收多少钱 "
        "总共多少 要交多少"
    )
)
"""Words any price question or rate holds: they choose no rate (Rule 3)."""
_DISCOUNT = re.compile(
    r"免费|免收|折|优惠|减免|半价|\b(?:free|off|discount|discounted|half|waived|reduced)\b", re.I
)
_WHAT_I_AM = re.compile(
    r"\b(?:i'm|i am|we're|we are|as)\s+(?:a|an|the)?\s*([a-z]+(?:\s+[a-z]+)?)|"
    r"(?:我是|我们是|作为|凭)([\u4e00-\u9fff]{1,4})",
    re.I,
)
_NOT_UNITS = STOP_WORDS | {"and", "or", "on", "in", "at", "for", "of", "the", "to", "with", "per"}
_FREE_NOUN = r"(?:不收|免收|免费|不另收|free|no charge|at no (?:extra )?charge)"


@dataclass(frozen=True, slots=True)
class Rate:
    """A price per unit the evidence states (Rule 1)."""

    amount: Fraction
    currency: str
    units: tuple[frozenset[str], ...]
    """Each unit the price is per, as the words that may name it (the first is the count's)."""
    sentence: str
    label: str = ""
    """The words between the previous rate of the sentence (or its start) and this one: what
    it prices ("and double kayaks" in "Single kayaks cost $18 per hour and double kayaks $25
    per hour")."""
    free: Fraction = Fraction(0)
    cap: Fraction | None = None
    needs_spend: Fraction | None = None
    minimum: Fraction = Fraction(0)


@dataclass(frozen=True, slots=True)
class Count:
    """A number of a unit the question states (Rule 2)."""

    n: Fraction
    words: frozenset[str]


def priced(question: str, evidence: str) -> Computation | None:
    """Rules 3–4: the question's counts times the evidence's rates, or None."""
    if not _ASKS_AMOUNT.search(question) or _COMPARES.search(question):
        return None  # a difference: the model's expression (``arithmetic``)
    found = counts(question)
    if not found:
        return None
    rates = list(read_rates(evidence))
    if not rates:
        return None
    found = _in_days(found, rates)
    asked = {t for t in query_terms(question) if not t.isdigit()} - _GENERIC_TERMS
    weight = _weights(evidence)
    used: set[int] = set()
    unpaired: list[int] = []
    terms: list[tuple[Rate, Fraction, Fraction]] = []  # rate, count, items
    for index, count in enumerate(found):
        if index in used:
            continue
        choice = _best_rate(index, found, used, rates, asked, weight)
        if choice is None:
            unpaired.append(index)
            continue
        rate, filled = choice
        if any(rate is taken for taken, _, _ in terms):
            return None  # one price for two counts: a comparison, not a total
        if rate.needs_spend is not None and not _spends(question, rate.needs_spend):
            return None
        used.update(filled)
        items = Fraction(1)
        for slot in rate.units[1:]:
            other = next((found[i] for i in filled if _same_unit(found[i].words, slot)), None)
            items *= other.n if other is not None else 1
        if rate.units[0] & _TIME_UNITS:  # "two city bikes" for "City bikes rent for $6 per hour"
            for other_index in _things_priced(rate, found, used | {index}):
                used.add(other_index)
                items *= found[other_index].n
        terms.append((rate, count.n, items))
    for index in unpaired:
        if index not in used and not (found[index].n == 1 and _said_free(found[index], evidence)):
            return None
    if not terms or len({rate.currency for rate, _, _ in terms}) != 1:
        return None
    if _changed_elsewhere(question, [rate for rate, _, _ in terms], evidence):
        return None
    if all(n == 1 and items == 1 and not (r.minimum > 1 or r.free) for r, n, items in terms):
        return None  # one of a thing at its price: the sentence says it as the document does
    return _said(terms)


def _changed_elsewhere(question: str, chosen: list[Rate], evidence: str) -> bool:
    """The person says what they are ("I'm a member", 「我是学生」) and a sentence other than
    the rate's gives that a discount or a free part ("Members get the first hour free"):
    code's rate alone is not their price (Rule 3)."""
    own = {rate.sentence for rate in chosen}
    return any(sentence not in own for sentence in _conditions(question, evidence))


def _conditions(question: str, evidence: str) -> Iterable[str]:
    """The evidence's sentences giving a discount or a free part to what the person says they
    are."""
    said = " ".join(m.group(1) or m.group(2) for m in _WHAT_I_AM.finditer(question))
    condition = set(query_terms(said)) - _GENERIC_TERMS
    if not condition:
        return
    for sentence in sentences(evidence):
        if sentence and _DISCOUNT.search(sentence) and condition & set(query_terms(sentence)):
            yield sentence


def _things_priced(rate: Rate, found: list[Count], used: set[int]) -> Iterable[int]:
    """The counts of a thing the rate's label names (Rule 3: items of a time rate)."""
    label = set(query_terms(rate.label)) - _GENERIC_TERMS
    for index, count in enumerate(found):
        if index in used or count.words & _TIME_UNITS:
            continue
        if label & set(query_terms(" ".join(count.words))):
            yield index


def _in_days(found: list[Count], rates: list[Rate]) -> list[Count]:
    """A count of weeks as days where the evidence prices days and not weeks (「一周」)."""
    per = {unit for rate in rates for unit in rate.units[0]}
    if "week" in per or "day" not in per:
        return found
    return [
        Count(c.n * 7, (c.words - {"week"}) | {"day"}) if "week" in c.words else c for c in found
    ]


def fits(expression: str, question: str, evidence: str) -> bool:
    """Rule 5: a product of a count the question states and a price is a rate per the count's
    unit where the evidence has one ("5 天" times 「10 元」 is no day's fee when the evidence
    says 「每天收取 1 元」)."""
    tree = ast.parse(expression, mode="eval").body
    found = counts(question)
    rates = list(read_rates(evidence))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            continue
        numbers = {
            Fraction(str(side.value))
            for side in (node.left, node.right)
            if isinstance(side, ast.Constant) and isinstance(side.value, int | float)
        }
        for count in found:
            if count.n not in numbers:
                continue
            per_unit = {r.amount for r in rates if any(count.words & slot for slot in r.units)}
            others = numbers - {count.n}
            if per_unit and others and not others & per_unit:
                return False
    if _per_other_span(tree, question, rates):
        return False
    return not _condition_ignored(tree, question, evidence)


def _condition_ignored(tree: ast.expr, question: str, evidence: str) -> bool:
    """The person says what they are and a sentence gives that a discount or a free part,
    but the expression uses none of that sentence's numbers ("I'm a member" and "4*6" over
    "Members get the first hour of any bike rental free")."""
    used = {
        Fraction(str(node.value))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float)
    }
    for sentence in _conditions(question, evidence):
        if not used & stated_numbers(sentence):
            return True
    return False


def _per_other_span(tree: ast.expr, question: str, rates: list[Rate]) -> bool:
    """An operand is a price only per a span of time the question does not speak of, while
    the evidence prices the one it does ("for a day": not "$6 per hour" beside "$28 per
    day")."""
    spans = {_SPAN_WORDS[w.lower()] for w in _SPAN.findall(question)}
    if not spans:
        return False
    priced_for = {r.amount for r in rates if r.units[0] & spans}
    if not priced_for:
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, int | float)):
            continue
        value = Fraction(str(node.value))
        per = [r for r in rates if r.amount == value]
        if per and value not in priced_for and all(r.units[0] & _TIME_UNITS for r in per):
            return True
    return False


def counts(question: str) -> list[Count]:
    """Rule 2: the question's counts of a unit, in order."""
    text = NAMES.sub(" ", question)
    text = re.sub(rf"({_NUMBER})\s*(?:{_ZH_MONEY}|{_CURRENCY_WORDS})", " ", text, flags=re.I)
    text = re.sub(rf"{_CURRENCY_BEFORE}\s?{_NUMBER}", " ", text)
    found: list[Count] = []
    for match in _ZH_COUNT.finditer(text):
        n = _value(match.group(1))
        if n is None or n == 0:
            continue
        words = {_ZH_UNITS[match.group(2)]}
        if match.group(3):
            words.add(match.group(3))
        found.append(Count(n, frozenset(words)))
    for match in _EN_COUNT.finditer(text):
        n = _value(match.group(1))
        if n is None or n == 0:
            continue
        words = {_unit(w) for w in match.groups()[1:] if w and w.lower() not in _NOT_UNITS}
        if not words:
            continue
        found.append(Count(n, frozenset(words)))
    if _BOTH_OF_US.search(question) and not any("person" in c.words for c in found):
        if not any(c.n == 2 and c.words & {"adult", "child"} for c in found):
            found.append(Count(Fraction(2), frozenset({"person", "adult"})))
    return found


def read_rates(evidence: str) -> Iterable[Rate]:
    """Rule 1: every rate of ``evidence``'s sentences."""
    for sentence in sentences(evidence):
        if not sentence:
            continue
        terms = _Terms.of(sentence)
        found = sorted(_rates_in(sentence))
        free_unit = terms.free[1]
        several = sum(1 for *_, units in found if free_unit in units[0]) > 1
        previous_end = 0
        for start, end, amount, currency, units in found:
            label = sentence[previous_end:start]
            previous_end = end
            rate = terms.rate(amount, currency, units, sentence, label)
            if several and not _free_for(label, sentence):
                rate = dataclasses.replace(rate, free=Fraction(0), needs_spend=None)
            yield rate


def _rates_in(
    sentence: str,
) -> Iterable[tuple[int, int, Fraction, str, tuple[frozenset[str], ...]]]:
    """Each price tied to a unit in ``sentence``: where it is, amount, currency, units."""
    taken: set[int] = set()
    for pattern in (_EN_RATE, _EN_RATE_FOR_EVERY):
        for match in pattern.finditer(sentence):
            if match.start() in taken:
                continue
            taken.add(match.start())
            symbol, before, after, word, *per = match.groups()
            first = frozenset(_unit(w) for w in per[:2] if w and w.lower() not in _NOT_UNITS)
            if not first:
                continue
            units = (first,) if len(per) < 3 or not per[2] else (first, frozenset({_unit(per[2])}))
            amount = Fraction(before or after)
            yield match.start(), match.end(), amount, symbol or _currency_symbol(word), units
    for match in _ZH_RATE.finditer(sentence):
        first_unit, second_unit, number = match.groups()
        slots = [frozenset({_ZH_UNITS[first_unit]})]
        if second_unit:
            slots.append(frozenset({_ZH_UNITS[second_unit]}))
        # 「每件每天」: the thing is counted per day; the day is the count, the thing the items
        if len(slots) == 2 and ITEM in slots[0]:
            slots.reverse()
        yield match.start(), match.end(), Fraction(number), "元", tuple(slots)
    for match in _ZH_RATE_AFTER.finditer(sentence):
        number, unit = match.groups()
        yield match.start(), match.end(), Fraction(number), "元", (frozenset({_ZH_UNITS[unit]}),)


@dataclass(frozen=True, slots=True)
class _Terms:
    """What a sentence says of every rate in it: units free, a cap, a spend, a minimum."""

    free: tuple[Fraction, str]
    cap: Fraction | None
    spend: Fraction | None
    minimum: tuple[Fraction, str]

    @classmethod
    def of(cls, sentence: str) -> _Terms:
        spend = _ZH_THRESHOLD.search(sentence) or _EN_THRESHOLD.search(sentence)
        return cls(
            _free(sentence),
            _first(_CAP, sentence),
            Fraction(spend.group(1)) if spend is not None else None,
            _minimum(sentence),
        )

    def rate(
        self,
        amount: Fraction,
        currency: str,
        units: tuple[frozenset[str], ...],
        sentence: str,
        label: str,
    ) -> Rate:
        free, free_unit = self.free
        frees = free_unit in units[0]
        minimum, minimum_unit = self.minimum
        return Rate(
            amount,
            currency,
            units,
            sentence,
            label,
            free if frees else Fraction(0),
            self.cap if self.cap is not None and self.cap > amount else None,
            self.spend if frees else None,
            minimum if minimum_unit in units[0] else Fraction(0),
        )


def _best_rate(
    index: int,
    found: list[Count],
    used: set[int],
    rates: list[Rate],
    asked: set[str],
    weight: dict[str, float],
) -> tuple[Rate, set[int]] | None:
    """Rule 3: the rate the count at ``index`` fills best, with the counts it takes; None on a
    tie or when none shares a word with the question."""
    count = found[index]
    scored: list[tuple[float, Rate, set[int]]] = []
    for rate in rates:
        if not _same_unit(count.words, rate.units[0]):
            continue
        filled = {index}
        for slot in rate.units[1:]:
            other = next(
                (
                    i
                    for i, c in enumerate(found)
                    if i != index and i not in used and _same_unit(c.words, slot)
                ),
                None,
            )
            if other is None and ITEM not in slot:
                break
            if other is not None:
                filled.add(other)
        else:
            shared = asked & set(query_terms(rate.sentence))
            if shared:
                label = set(query_terms(rate.label)) - _GENERIC_TERMS
                score = sum(weight.get(t, 1.0) for t in shared)
                score += 2 * sum(weight.get(t, 1.0) for t in asked & label)
                score -= 0.5 * sum(weight.get(t, 1.0) for t in label - asked)
                scored.append((round(score, 6), rate, filled))
    if not scored:
        return None
    best = max(score for score, _, _ in scored)
    top = {(r.amount, r.free, r.cap, r.minimum) for score, r, _ in scored if score == best}
    if len(top) != 1:
        return None
    _, rate, filled = next(s for s in scored if s[0] == best)
    return rate, filled


def _same_unit(words: frozenset[str], unit: frozenset[str]) -> bool:
    """A count's words name the rate's unit: they share one, and not each a word of its own
    when both are two ("two city bikes" is not "for every electric bike")."""
    if not words & unit:
        return False
    return not (len(words) > 1 and len(unit) > 1 and words - unit and unit - words)


def _weights(evidence: str) -> dict[str, float]:
    """A term's weight: one over the number of the evidence's sentences that hold it ("bike"
    in every line of a bike shop's prices chooses no rate; "late" in one does)."""
    held: dict[str, int] = {}
    for sentence in sentences(evidence):
        for term in set(query_terms(sentence)):
            held[term] = held.get(term, 0) + 1
    return {term: 1 / n for term, n in held.items()}


def _said(terms: list[tuple[Rate, Fraction, Fraction]]) -> Computation:
    """Rule 4: the total, as ``arithmetic`` says a computation."""
    parts: list[str] = []
    value = Fraction(0)
    for rate, asked, items in terms:
        n = max(asked, rate.minimum)
        billed = max(n - rate.free, Fraction(0))
        per_item = billed * rate.amount
        count = _text(n) if not rate.free else f"({_text(n)}-{_text(rate.free)})"
        if rate.cap is not None and per_item > rate.cap:
            per_item = rate.cap
            part = _text(rate.cap)
        else:
            part = f"{count}*{_text(rate.amount)}"
        if items != 1:
            part = f"{_text(items)}*{part}"
        parts.append(part)
        value += per_item * items
    expression = " + ".join(parts)
    tree = ast.parse(expression, mode="eval").body
    spoken: dict[str, str | None] = {"zh": None, "en": None}
    if isinstance(tree, ast.BinOp):
        spoken = spoken_sums(tree)
    said_before = _rule_said(*terms[0][:2]) if len(terms) == 1 else {}
    return Computation(expression, value, terms[0][0].currency, spoken, said_before)


def _rule_said(rate: Rate, asked: Fraction) -> dict[str, str]:
    """The rule that shaped a one-rate total, said before it (Rule 4): a minimum, units free,
    a cap — with the unit named only where code knows its words."""
    unit = next(iter(rate.units[0] & _SAID_UNIT.keys()), None)
    if unit is None:
        return {}
    en, zh = _SAID_UNIT[unit]
    if rate.cap is not None and (max(asked, rate.minimum) - rate.free) * rate.amount > rate.cap:
        cap = _text(rate.cap)
        money = cap + " 元" if rate.currency == "元" else rate.currency + cap
        return {"en": f"It is capped at {money}, so ", "zh": f"最高收取 {money}，"}
    if rate.minimum > asked:
        n = _text(rate.minimum)
        return {"en": f"The minimum is {n} {en}s, so ", "zh": f"最少按 {n} {zh}计，"}
    if rate.free and asked > rate.free:
        n = _text(rate.free)
        return {"en": f"The first {n} {en}s are free, so ", "zh": f"前 {n} {zh}免费，"}
    return {}


def _count_in(patterns: Iterable[re.Pattern[str]], sentence: str) -> tuple[Fraction, str]:
    """The first count and unit one of ``patterns`` finds in ``sentence`` (none: 0, "")."""
    for pattern in patterns:
        match = pattern.search(sentence)
        if match is not None:
            n = _value(match.group(1))
            if n is not None:
                return n, _ZH_UNITS.get(match.group(2)) or _unit(match.group(2))
    return Fraction(0), ""


def _free_for(label: str, sentence: str) -> bool:
    """The clause giving units free names what the label names (「每天前 10 页黑白打印免费」 for
    「打印黑白每页 0.5 元」, not for 「彩色每页 2 元」)."""
    clause = next((c for c in re.split(r"[,;，；]", sentence) if _DISCOUNT.search(c)), "")
    return bool((set(query_terms(label)) - _GENERIC_TERMS) & set(query_terms(clause)))


def _minimum(sentence: str) -> tuple[Fraction, str]:
    return _count_in(_MINIMUMS, sentence)


def _free(sentence: str) -> tuple[Fraction, str]:
    found = _count_in((*_ZH_FREE, *_EN_FREE), sentence)
    if found[0]:
        return found
    match = _ZH_FROM.search(sentence)
    if match is not None:
        n = _value(match.group(1))
        if n is not None and n > 1:
            return n - 1, _ZH_UNITS[match.group(2)]
    return Fraction(0), ""


def _said_free(count: Count, evidence: str) -> bool:
    """The evidence says the counted thing costs nothing (「啤酒不收开瓶费」)."""
    nouns = {
        word[:end]
        for word in count.words
        if word not in _ZH_UNITS.values() and is_cjk_ideograph(word[0])
        for end in range(2, len(word) + 1)
    }
    pattern = "|".join(re.escape(w) for w in count.words if not is_cjk_ideograph(w[0]))
    for sentence in sentences(evidence):
        if not re.search(_FREE_NOUN, sentence, re.I):
            continue
        if any(noun in sentence for noun in nouns):
            return True
        if pattern and re.search(rf"\b(?:{pattern})", sentence, re.I):
            return True
    return False


def _spends(question: str, threshold: Fraction) -> bool:
    """The question states a spend of at least ``threshold`` (Rule 1)."""
    pattern = rf"({_NUMBER})\s*(?:{_ZH_MONEY}|{_CURRENCY_WORDS})|{_CURRENCY_BEFORE}\s?({_NUMBER})"
    for match in re.finditer(pattern, question, re.I):
        if Fraction(match.group(1) or match.group(2)) >= threshold:
            return True
    return False


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> Fraction | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            return Fraction(match.group(1))
    return None


def _value(text: str) -> Fraction | None:
    if text.replace(".", "", 1).isdigit():
        return Fraction(text)
    if text.lower() in _EN_WORDS:
        return Fraction(_EN_WORDS[text.lower()])
    number = zh_number(text)
    return None if number is None else Fraction(number)


def _unit(word: str) -> str:
    """An English unit word in one vocabulary: singular, synonyms joined (Rule 2)."""
    word = word.lower()
    if word in _EN_UNITS:
        return _EN_UNITS[word]
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("ches", "shes", "sses", "xes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    return _EN_UNITS.get(word, word)


def _currency_symbol(word: str) -> str:
    word = word.lower()
    if word.startswith("dollar") or word == "usd":
        return "$"
    if word.startswith("euro") or word == "eur":
        return "€"
    if word.startswith("pound") or word == "gbp":
        return "£"
    return "元"


def _text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return str(float(value))
