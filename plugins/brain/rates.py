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

Rule 1. A rate is a price the evidence ties to a unit: "$15 per night", "$18 per adult",
        "€4 a bag", 「每瓶收取 50 元」, 「按每小时 8 元」, 「每件每天收取 1 元」 (two units),
        「50 元/瓶」. Its sentence may also give units free before it applies (「免费停车 2
        小时」, 「从第 4 天起」, "the first 2 hours are free") and a cap (「最高收取 10 元」,
        "up to $50", "capped at $50"). A free allowance that needs a spend (「消费满 300 元可
        免费停车 2 小时」) holds only when the question states that spend; a question that
        states none gets no answer here.
Rule 2. A count is a number the question ties to a unit: "three nights", "two adults", "4
        hours", 「两瓶葡萄酒」, 「4 个小时」, 「两个包裹」; "both of us" and 「我们俩」 are two
        people. Units are compared in one vocabulary ("nights", 「晚」 and 「夜」 are one unit;
        「个」, 「件」 and "items" count things). A money amount ("消费满了 300 元") or a
        number that names a thing (``arithmetic.NAMES``: "a 30-minute lesson") is no count.
Rule 3. Each rate whose every unit a count fills (an item unit no count fills is one item)
        is a candidate; of the candidates for a count, the one whose sentence shares the most
        of the question's words (its units aside) is taken, and it must share at least one
        ("parking" picks "$15 per night" for parking, not a room's rate per night). A tie
        between different prices, or a count no rate takes, and code gives no answer — the
        turn goes on to the model's expression (``arithmetic``) — unless the count is of one
        thing the evidence says is free (「一箱啤酒」 over 「啤酒不收开瓶费」).
Rule 4. The total is each rate times its counts less the free units, capped per item where
        the sentence caps it, said by ``arithmetic.Computation`` in the question's language.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from plugins.brain.arithmetic import NAMES, Computation, spoken_sums, zh_number
from plugins.language import is_cjk_ideograph
from plugins.text import STOP_WORDS, query_terms, sentences

_NUMBER = r"\d+(?:\.\d+)?"
_ZH_NUM = r"[零一二两三四五六七八九十百]+"
_EN_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_EN_NUM = r"\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"

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
_ZH_RATE = re.compile(
    rf"每\s*(?:一\s*)?({_ZH_UNIT})(?:\s*每\s*(?:一\s*)?({_ZH_UNIT}))?"
    rf"[^\d。；;，,]{{0,8}}?({_NUMBER})\s*{_ZH_MONEY}"
)
_ZH_RATE_AFTER = re.compile(rf"({_NUMBER})\s*{_ZH_MONEY}\s*(?:/|每)\s*({_ZH_UNIT})")
_ZH_FREE = (
    re.compile(rf"免费[\u4e00-\u9fff]{{0,4}}?\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})"),
    re.compile(rf"前\s*({_NUMBER}|{_ZH_NUM})\s*({_ZH_UNIT})(?:内|以内)?\s*免费"),
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
_COMPARES = re.compile(
    r"多多少|少多少|贵多少|便宜多少|差多少|相差|差价|比.{1,12}(?:多|少|贵|便宜)|"
    r"\b(?:more than|less than|cheaper|dearer|difference|compared|than)\b",
    re.I,
)
_GENERIC_TERMS = frozenset(
    query_terms(
        "cost costs price fee charge pay paid total much many altogether extra each per night "
        "day hour week month person people adult item time 要多少钱 付多少钱 一共多少 收多少钱 "
        "总共多少 要交多少"
    )
)
"""Words any price question or rate holds: they choose no rate (Rule 3)."""
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
    free: Fraction = Fraction(0)
    free_unit: str = ""
    cap: Fraction | None = None
    needs_spend: Fraction | None = None


@dataclass(frozen=True, slots=True)
class Count:
    """A number of a unit the question states (Rule 2)."""

    n: Fraction
    words: frozenset[str]


def priced(question: str, evidence: str) -> Computation | None:
    """Rules 3–4: the question's counts times the evidence's rates, or None."""
    if _COMPARES.search(question):
        return None  # a difference: the model's expression (``arithmetic``)
    found = counts(question)
    if not found:
        return None
    rates = list(read_rates(evidence))
    if not rates:
        return None
    asked = set(query_terms(question)) - _GENERIC_TERMS
    used: set[int] = set()
    unpaired: list[int] = []
    terms: list[tuple[Rate, Fraction, Fraction]] = []  # rate, count, items
    for index, count in enumerate(found):
        if index in used:
            continue
        choice = _best_rate(index, found, used, rates, asked)
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
            other = next((found[i] for i in filled if found[i].words & slot), None)
            items *= other.n if other is not None else 1
        terms.append((rate, count.n, items))
    for index in unpaired:
        if index not in used and not (found[index].n == 1 and _said_free(found[index], evidence)):
            return None
    if not terms or len({rate.currency for rate, _, _ in terms}) != 1:
        return None
    return _said(terms)


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
    return True


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
        cap = _first(_CAP, sentence)
        spend = _ZH_THRESHOLD.search(sentence) or _EN_THRESHOLD.search(sentence)
        free, free_unit = _free(sentence)
        for match in _EN_RATE.finditer(sentence):
            symbol, before, after, word, *per = match.groups()
            amount = Fraction(before or after)
            currency = symbol or _currency_symbol(word)
            first = frozenset(_unit(w) for w in per[:2] if w and w.lower() not in _NOT_UNITS)
            units = (first,) if not per[2] else (first, frozenset({_unit(per[2])}))
            yield _rate(amount, currency, units, sentence, free, free_unit, cap, spend)
        for match in _ZH_RATE.finditer(sentence):
            first_unit, second_unit, number = match.groups()
            slots = [frozenset({_ZH_UNITS[first_unit]})]
            if second_unit:
                slots.append(frozenset({_ZH_UNITS[second_unit]}))
            # 「每件每天」: the thing is counted per day; the day is the count, the thing the items
            if len(slots) == 2 and ITEM in slots[0]:
                slots.reverse()
            yield _rate(Fraction(number), "元", tuple(slots), sentence, free, free_unit, cap, spend)
        for match in _ZH_RATE_AFTER.finditer(sentence):
            number, unit = match.groups()
            unit_of = (frozenset({_ZH_UNITS[unit]}),)
            yield _rate(Fraction(number), "元", unit_of, sentence, free, free_unit, cap, spend)


def _rate(
    amount: Fraction,
    currency: str,
    units: tuple[frozenset[str], ...],
    sentence: str,
    free: Fraction,
    free_unit: str,
    cap: Fraction | None,
    spend: re.Match[str] | None,
) -> Rate:
    applies = free_unit in units[0]
    return Rate(
        amount,
        currency,
        units,
        sentence,
        free if applies else Fraction(0),
        free_unit if applies else "",
        cap if cap is not None and cap > amount else None,
        Fraction(spend.group(1)) if applies and spend is not None else None,
    )


def _best_rate(
    index: int, found: list[Count], used: set[int], rates: list[Rate], asked: set[str]
) -> tuple[Rate, set[int]] | None:
    """Rule 3: the rate the count at ``index`` fills best, with the counts it takes; None on a
    tie or when none shares a word with the question."""
    count = found[index]
    scored: list[tuple[int, Rate, set[int]]] = []
    for rate in rates:
        if not count.words & rate.units[0]:
            continue
        filled = {index}
        for slot in rate.units[1:]:
            other = next(
                (i for i, c in enumerate(found) if i != index and i not in used and c.words & slot),
                None,
            )
            if other is None and ITEM not in slot:
                break
            if other is not None:
                filled.add(other)
        else:
            shared = asked & set(query_terms(rate.sentence))
            if shared:
                scored.append((len(shared), rate, filled))
    if not scored:
        return None
    best = max(score for score, _, _ in scored)
    top = {(r.amount, r.free, r.cap) for score, r, _ in scored if score == best}
    if len(top) != 1:
        return None
    _, rate, filled = next(s for s in scored if s[0] == best)
    return rate, filled


def _said(terms: list[tuple[Rate, Fraction, Fraction]]) -> Computation:
    """Rule 4: the total, as ``arithmetic`` says a computation."""
    parts: list[str] = []
    value = Fraction(0)
    for rate, n, items in terms:
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
    return Computation(expression, value, terms[0][0].currency, spoken)


def _free(sentence: str) -> tuple[Fraction, str]:
    for pattern in (*_ZH_FREE, *_EN_FREE):
        match = pattern.search(sentence)
        if match is not None:
            n = _value(match.group(1))
            unit = _ZH_UNITS.get(match.group(2)) or _unit(match.group(2))
            if n is not None:
                return n, unit
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
