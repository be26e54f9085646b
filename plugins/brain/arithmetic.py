"""Combination in code: sums, differences and products over the numbers the evidence states
(SPEC BRAIN-4; issue 31 item 6).

Theory of operation
-------------------
A small model copies numbers well and adds them badly, and ``Support`` (``llm.py`` Rule 5)
rightly drops any sentence holding a number the evidence does not state — so "how much for
two?" could never be answered with the total. Here the model only *writes* the sum; code
*does* it.

Rule 1. Only a question that asks for an amount and gives one (``asks_to_compute``): a cue of
        combination ("一共", "总共", "多多少", "in total", "how much more") or a price/quantity
        question ("多少钱", "how much", "what will I pay") that itself holds a number other
        than one ("20天", "8 days late", "两张"; "一颗" only names the thing). Any other turn
        costs nothing here.
Rule 2. The model answers by grammar-constrained JSON (``EXPRESSION_SCHEMA``):
        ``{"expression": "2*180", "unit": "元"}`` — digits, ``+ - * /``, parentheses and
        spaces only, from the question, the person's previous message and the passages.
Rule 3. Code parses the expression with ``ast`` (numbers and the four operators, nothing else), and
        checks every operand: it must be a number the evidence or the question states (Chinese
        numerals and English number words in the question are read as digits; "20%" also states 0.2)
        as an amount, or one it implies (``implied``: one, a pair, a hundred; a week's days, a
        year's months, a day's hours or an hour's minutes only when the question speaks of weeks,
        years or months, days or hours, hours or minutes). An expression with no operator is not a
        combination; a question that only its own numbers made one (no cue of combination) must have
        one of them used; and a negative amount answers no question asked ("how much more", "what is
        left" are differences taken the right way round); a product or quotient by one combines
        nothing ("How much are my 100 points worth?" over "每 100 积分抵扣 1 元" is no "100 × 1":
        the rate is the answer, said as the evidence says it) — inside a sum it is taken out ("2*120
        + 1*180" for two of one thing and one of another); when the question states a count, every
        product uses a number the question states or implies ("5*45 + 4*8" for five hours' cleaning
        multiplies the minimum booking by the price per square metre: two of the evidence's numbers
        that the question relates to nothing); and a number of the evidence is used no more often
        than the evidence states it ("2 乘 50 加 50" for two bottles at 50 each, "30×12 + 45×12 +
        60×12" over one "12 weekly lessons": a count the question gives may apply to several rates,
        a rate is one amount), and at least one operand is the evidence's ("2 + 3" for two adults
        and three children adds no price). Any failure: no result, and the turn is answered as any
        other.
Rule 3a. A number that *names* something is no amount (``NAMES``): an age ("10岁", "a 10-year-old"),
        a weight or a speed ("12公斤", "300M", "500 Mbps"), a time of day ("10:30", "9点", "7 pm"),
        a lesson's length ("a 30-minute lesson": its kind), a date or a year ("3月5日", "2025年",
        "May 5"), a room, floor, gallery, line or phone number. Such a number is not "stated" for
        Rule 1 or Rule 3: "300M的套餐每月多少钱？" asks for one price, not a product, and "12 乘
        1100" over a dog's weight band and a fee is refused. A count of a measure ("20G流量", "3
        nights", "12个月") stays an amount.
Rule 3b. Every operand in the role the evidence gives it (``_check_roles``): a number the
        evidence states only as a limit — a cap or a threshold ("最高收取 10 元", "满 300 元",
        "orders over $99", "capped at $10") — is no amount to add, except in a difference the
        question asks for ("How much more do I need to spend to ship free?"); a price the
        evidence ties to a kind named by a number ("a 45-minute term $600") is no operand of a
        question naming other kinds of it ("a 60-minute term than a 30-minute term"); and in a
        question about money each term of a sum or difference holds an amount of money ("5 + 5"
        for two parcels kept five days adds days). Measured on a probe of eleven sums over four
        dev documents (``dev_combination.json``, written before this rule): the model's
        expressions computed 6, 1 right; each wrong one broke one of these roles. A count times
        a price per another unit is refused by ``rates.fits``.
Rule 4. The result is said by code, with the sum that made it, in the question's language:
        "2 乘 180，等于360元。" / "2 times 180 is 360 yuan." — or the result alone when the
        sum would need brackets to be heard right ("That comes to 210 dollars."). The unit is
        kept only when the evidence holds it (a currency named in words as the evidence writes
        it: "$").
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

IMPLIED = frozenset({Fraction(n) for n in (1, 2, 100)})
"""Operands any question implies without writing them (Rule 3): one, a pair, a hundred."""
IMPLIED_BY: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"week|周|星期|礼拜", re.I), 7),
    (re.compile(r"year|annual|month|年|月", re.I), 12),
    (re.compile(r"\bdays?\b|daily|hour|天|日|小时|钟头", re.I), 24),
    (re.compile(r"hour|minute|小时|分钟|钟头", re.I), 60),
)
"""Operands a question implies only when it speaks of their span (Rule 3): a week's days, a
year's months, a day's hours, an hour's minutes — "12" is no year's months in a question
about a dog's weight."""

MAX_EXPRESSION_CHARS = 60
MAX_OPERANDS = 6

EXPRESSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "expression": {
            "type": "string",
            "pattern": "^[0-9.+*/() -]{1,60}$",
            "maxLength": MAX_EXPRESSION_CHARS,
        },
        "unit": {"type": "string", "maxLength": 8},
    },
    "required": ["expression", "unit"],
}

_STRONG_CUE = {
    "zh": re.compile(
        r"一共|总共|合计|总计|加起来|算下来|多多少|少多少|贵多少|便宜多少|差多少|差了多少|"
        r"多交|多付|多花|最多会花|能退多少|退多少|共计|相差"
    ),
    "en": re.compile(
        r"\b(?:in total|total|altogether|combined|all together|how much more|how much less|"
        r"how many more|how many fewer|more than|less than|cheaper than|comes? to|"
        r"how much (?:extra|longer))\b",
        re.I,
    ),
}
_AMOUNT_CUE = {
    "zh": re.compile(r"多少|几天|几个|多久|多长"),
    "en": re.compile(
        r"\b(?:how much|how many|how long|what will i (?:have to )?pay|what do i pay|"
        r"what would (?:i|he|she|we|they) pay|do i owe|(?:will|would|does) (?:it|that|this) cost|"
        r"cost me)\b",
        re.I,
    ),
}
_DIGITS = re.compile(r"(?<![A-Za-z\d.])\d+(?:\.\d+)?")
"""A number, not a model's name's digits ("Nova X2", "A4")."""
_GROUPED_DIGITS = re.compile(r"(?<![A-Za-z\d.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?|" + _DIGITS.pattern)
_DISCOUNT_ZH = re.compile(r"(\d(?:\.\d)?|[一二三四五六七八九][一二三四五六七八九]?)\s*折")
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_ZH_NUMERAL = re.compile(
    r"[零一二两三四五六七八九十百千]+"
    r"(?=[个张天次颗份人页件本周年小元块台只位名晚夜瓶杯箱盒袋间节堂门辆双套碗条趟平扇包把罐盘副])"
)
"""A Chinese numeral before a measure word ("两张", "两瓶红酒", "三节课", "一百平"; not "三月",
March, nor "十岁", an age)."""
_MONTHS_EN = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|(?:jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b\.?)"
)
NAMES = re.compile(
    "|".join(
        (
            r"\d{1,2}\s*[:：]\s*\d{2}",  # 10:30
            r"\d+(?:[-–]\d+){2,}",  # a phone number
            r"\d+(?:\.\d+)?\s*(?:周岁|岁|公斤|千克|斤|kg\b|kgs\b|kilos?\b|kilograms?\b|lbs?\b)",
            r"\d+\s*(?:M(?![a-z])|兆|mbps\b|mb/s\b|gbps\b|megabits?\b)",
            r"\d+\s*[-‐ ]?\s*(?:years?|months?|weeks?)[-‐ ]olds?\b",
            r"\d+\s*[-‐]\s*minutes?\b",  # a 30-minute lesson: its kind, not a count
            r"\b(?:aged?|ages)\s+\d+(?:\s*(?:to|-|–|and)\s*\d+)?",
            r"\d{1,2}(?:\s*[-–]\s*\d{1,2})?\s*(?:a\.?m\.?|p\.?m\.?|o'clock)(?![a-z])",
            r"\d{1,2}\s*(?:点|时)(?!间)(?:\s*\d{1,2}\s*分|半)?",
            r"(?:19|20)\d{2}\s*年(?:\s*\d{1,2}\s*月)?(?:\s*\d{1,2}\s*[日号])?",
            r"\d{1,2}\s*月\s*\d{1,2}\s*[日号]?",
            r"\d{1,2}\s*号|\d{1,2}\s*日(?![元块内以])",
            r"\b" + _MONTHS_EN + r"\s+\d{1,2}(?:st|nd|rd|th)?\b",
            r"\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTHS_EN + r"(?=\s|$|[,.;])",
            r"\b\d+(?:st|nd|rd|th)\b",
            r"\b(?:in|since|from|until|by)\s+(?:19|20)\d{2}\b",
            r"\b(?:room|gallery|galleries|floor|level|hall|gate|platform|bus|line|route|no\.|"
            r"number|unit|building|block|door|exit|channel|ext\.?|extension)\s*#?\d+",
            r"\d+\s*(?:楼|层|号楼|号线|路|室|展厅|号厅)",
            r"第\s*\d+\s*(?:楼|层|展厅|号)",
        )
    ),
    re.I,
)
"""Numbers that name a thing rather than count or price it (Rule 3a)."""
_ZH_DIGIT = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7}
_ZH_DIGIT |= {"八": 8, "九": 9}
_ZH_UNIT = {"十": 10, "百": 100, "千": 1000}
EN_NUMBER: dict[str, Fraction | int] = {
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
    "twice": 2,
    "twins": 2,
    "both": 2,
    "pair": 2,
    "double": 2,
    "half": Fraction(1, 2),
}
_EN_WORD = re.compile(r"\b(" + "|".join(EN_NUMBER) + r")\b", re.I)
_SPOKEN_OPERATOR: dict[str, dict[type[ast.operator], str]] = {
    "zh": {ast.Add: "加", ast.Sub: "减", ast.Mult: "乘", ast.Div: "除以"},
    "en": {ast.Add: "plus", ast.Sub: "minus", ast.Mult: "times", ast.Div: "divided by"},
}
_RESULT = {"zh": "{sum}，等于{value}{unit}。", "en": "{sum} is {value}{unit}."}
_RESULT_ONLY = {"zh": "算下来是{value}{unit}。", "en": "That comes to {value}{unit}."}
_PRECEDENCE: dict[type[ast.operator], int] = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2}
_CURRENCY_BEFORE = frozenset({"$", "€", "£", "¥"})
_CURRENCY_NAMES = {
    "$": ("dollars", "dollar", "usd"),
    "€": ("euros", "euro", "eur", "欧元"),
    "£": ("pounds", "pound", "gbp"),
    "元": ("yuan", "rmb", "块", "块钱", "人民币"),
}


_LIMIT_BEFORE = re.compile(
    r"(?:满|超过|超出|高于|低于|不超过|不满|最高|最多|最低|至少|封顶|上限|"
    r"\b(?:over|above|under|below|up to|at most|at least|more than|less than|maximum(?: of)?|"
    r"minimum(?: of)?|capped at|exceeding|exceeds?|spend(?:ing)?))"
    r"(?:收取|收|不超过|可达|为)?\s*[$€£¥]?\s*$",
    re.I,
)
"""A number stated as a limit (a cap, a threshold): no amount to add (Rule 3b)."""
_DIFFERENCE_CUE = re.compile(
    r"多多少|少多少|差多少|还差|还要|相差|\b(?:how much more|how much less|how far|still need|"
    r"left|remaining|short of|difference)\b",
    re.I,
)
_ASKS_MONEY = re.compile(
    r"钱|费|价|元|块|付|\b(?:cost|costs|pay|price|fee|fees|charge|charged|owe)\b|[$€£¥]", re.I
)
_MONEY_BEFORE = re.compile(r"[$€£¥]\s?$")
_MONEY_AFTER = re.compile(
    r"\s*(?:元|块|欧元|美元|英镑|dollars?\b|euros?\b|pounds?\b|yuan\b|usd\b|eur\b|gbp\b|rmb\b)",
    re.I,
)
_TIERS = (
    re.compile(
        r"(\d+)\s*[-‐]\s*(minute|hour|day|week|month|year|night|inch|seat|person)s?\b", re.I
    ),
    re.compile(r"(\d+)\s*(分钟)(?=[的课节套])"),
)
"""A kind named by a number: "a 45-minute term", "a 7-day pass", 「30分钟的课」 (Rule 3b)."""


def combines(question: str, language: str) -> bool:
    """A cue of combination in the question ("一共", "how much more")."""
    return _STRONG_CUE["zh" if language == "zh" else "en"].search(question) is not None


def asks_to_compute(question: str, language: str) -> bool:
    """Rule 1: the question asks for an amount that combines what it or the evidence states."""
    if combines(question, language):
        return True
    lang = "zh" if language == "zh" else "en"
    return bool(_AMOUNT_CUE[lang].search(question)) and bool(counts(question))


def counts(question: str) -> set[Fraction]:
    """The numbers a question states that can combine (one of a thing only names it)."""
    return stated_numbers(question) - {Fraction(1)}


def stated_numbers(text: str) -> set[Fraction]:
    """Every number ``text`` states as an amount: digits, a percentage as its fraction too,
    Chinese numerals before a measure word, English number words (Rule 3) — not those that
    name a thing (Rule 3a)."""
    return set(stated_counts(text))


def stated_counts(text: str) -> Counter[Fraction]:
    """``stated_numbers`` with how many times each is stated."""
    text = NAMES.sub(" ", text)
    found = Counter(Fraction(match) for match in _DIGITS.findall(text.replace(",", "")))
    found.update(Fraction(match) / 100 for match in _PERCENT.findall(text))
    for match in _DISCOUNT_ZH.findall(text):  # 「8 折」, 「八五折」: what is paid of the price
        rate = Fraction(match) if match[0].isdigit() else _zh_digits(match)
        if rate is not None:
            found[rate / 10 if rate < 10 else rate / 100] += 1
    for match in _ZH_NUMERAL.findall(text):
        value = zh_number(match)
        if value is not None:
            found[Fraction(value)] += 1
    for word in _EN_WORD.findall(text):
        found[Fraction(EN_NUMBER[word.lower()])] += 1
    return found


def _zh_digits(text: str) -> Fraction | None:
    """「八五」 as 85, 「八」 as 8 (a discount's digits read one by one)."""
    digits = [_ZH_DIGIT.get(char) for char in text]
    if not digits or None in digits:
        return None
    return Fraction(int("".join(str(d) for d in digits)))


def zh_number(text: str) -> int | None:
    """一 … 九千九百九十九 (and 两), or None."""
    total, digit = 0, None
    for char in text:
        if char in _ZH_DIGIT:
            if digit is not None:
                return None
            digit = _ZH_DIGIT[char]
        elif char in _ZH_UNIT:
            total += (1 if digit is None else digit) * _ZH_UNIT[char]
            digit = None
        else:
            return None
    return total + (digit or 0)


@dataclass(frozen=True, slots=True)
class Computation:
    """A checked combination and what code says of it (Rule 4)."""

    expression: str
    value: Fraction
    unit: str
    spoken_sum: dict[str, str | None]
    said_before: dict[str, str] = dataclasses.field(default_factory=dict)
    """What code says before the result, by language: the rule that shaped it ("The first 2
    hours are free, ")."""

    def sentence(self, language: str) -> str:
        lang = "zh" if language == "zh" else "en"
        before = self.said_before.get(lang, "")
        result = self._result(lang)
        if before and lang == "en":
            result = result[0].lower() + result[1:]
        return before + result

    def _result(self, lang: str) -> str:
        unit = self.unit
        value = _format(self.value)
        if unit in _CURRENCY_BEFORE:
            value, unit = f"{unit}{value}", ""
        elif unit and lang == "en":
            unit = f" {unit}"
        spoken_sum = self.spoken_sum[lang]
        if spoken_sum is None:
            return _RESULT_ONLY[lang].format(value=value, unit=unit)
        return _RESULT[lang].format(sum=spoken_sum, value=value, unit=unit)


class NotAComputation(ValueError):
    """The model's expression is not one code may compute (Rule 3); the reason says why."""


def computation(
    answer: str, *, evidence: str, question: str, uses_one_of: frozenset[Fraction] = frozenset()
) -> Computation:
    """Rule 3: parse and check the model's JSON answer; raise ``NotAComputation`` otherwise.
    ``uses_one_of``: numbers of which the expression must use at least one (the question's
    own, when only its numbers made it a combination)."""
    try:
        data = json.loads(answer)
    except ValueError as e:
        raise NotAComputation("not JSON") from e
    if not isinstance(data, dict):
        raise NotAComputation("not an object")
    expression = str(data.get("expression", "")).strip()
    if not expression or len(expression) > MAX_EXPRESSION_CHARS:
        raise NotAComputation("no expression or too long")
    try:
        tree = ast.parse(expression, mode="eval").body
    except (SyntaxError, ValueError) as e:  # ValueError: a NUL byte
        raise NotAComputation("unparsable expression") from e
    if not isinstance(tree, ast.BinOp):
        raise NotAComputation("no operator")
    in_evidence = stated_counts(evidence)
    reusable = stated_numbers(question) | implied(question)
    operands = list(_operands(tree))
    if len(operands) > MAX_OPERANDS:
        raise NotAComputation("too many operands")
    for operand, used in Counter(operands).items():
        if operand in reusable:
            continue
        if operand not in in_evidence:
            raise NotAComputation(f"operand {_format(operand)} is stated nowhere")
        if used > in_evidence[operand]:
            raise NotAComputation(f"operand {_format(operand)} used more often than stated")
    if uses_one_of and not uses_one_of & set(operands):
        raise NotAComputation("none of the question's numbers is used")
    if not any(operand in in_evidence for operand in operands):
        raise NotAComputation("no number of the evidence is used")
    tree = _without_ones(tree)
    if not isinstance(tree, ast.BinOp):
        raise NotAComputation("a product or quotient by one")
    if counts(question) and any(not reusable & set(_operands(p)) for p in _products(tree)):
        raise NotAComputation("a product of the evidence's numbers alone")
    _check_roles(tree, evidence=evidence, question=question)
    value = _evaluate(tree)
    if value < 0:
        raise NotAComputation("a negative amount")  # the model took the operands the wrong way
    unit = _unit_in(str(data.get("unit", "")).strip(), evidence)
    return Computation(expression, value, unit, spoken_sums(tree))


def spoken_sums(tree: ast.expr) -> dict[str, str | None]:
    """The sum in words in each language (Rule 4)."""
    return {lang: _spoken(tree, words) for lang, words in _SPOKEN_OPERATOR.items()}


def _check_roles(tree: ast.BinOp, *, evidence: str, question: str) -> None:
    """Rule 3b: every operand in the role the evidence gives it; raise ``NotAComputation``."""
    operands = set(_operands(tree))
    differs = _DIFFERENCE_CUE.search(question) is not None
    named = _named_in(question)
    for operand in operands:
        where = list(_occurrences(operand, evidence))
        if not differs and where and all(_LIMIT_BEFORE.search(before) for before, _ in where):
            raise NotAComputation(f"operand {_format(operand)} is a limit, not an amount")
        priced_at = [before for before, after in where if _is_money(before, after)]
        if named and priced_at and all(_other_tier(before, named) for before in priced_at):
            raise NotAComputation(f"operand {_format(operand)} is the price of another kind")
    if _ASKS_MONEY.search(question) and isinstance(tree.op, ast.Add | ast.Sub):
        money = {operand for operand in operands if _money_operand(operand, question, evidence)}
        for term in _terms(tree):
            if not money & set(_operands(term)):
                raise NotAComputation("a term of the sum is no amount of money")


def _money_operand(operand: Fraction, question: str, evidence: str) -> bool:
    """An amount of money where the question states it, else where the evidence does (the
    question's "5 天" is days, though the evidence's 「加收 5 元」 is money)."""
    where = list(_occurrences(operand, question)) or list(_occurrences(operand, evidence))
    return any(_is_money(before, after) for before, after in where)


def _occurrences(number: Fraction, text: str) -> Iterable[tuple[str, str]]:
    """The text just before and just after each place ``text`` states ``number`` as digits."""
    masked = NAMES.sub(lambda m: " " * len(m.group()), text)
    for match in _GROUPED_DIGITS.finditer(masked):
        if Fraction(match.group().replace(",", "")) == number:
            start, end = match.span()
            yield text[max(0, start - 40) : start], text[end : end + 12]


def _is_money(before: str, after: str) -> bool:
    return bool(_MONEY_BEFORE.search(before[-3:]) or _MONEY_AFTER.match(after))


def _named_in(question: str) -> set[tuple[str, str]]:
    """The kinds the question names by a number ("a 30-minute term": ("30", "minute"))."""
    return {(n, unit) for _, n, unit in _tiers(question)}


def _other_tier(before: str, named: set[tuple[str, str]]) -> bool:
    """The kind named nearest before a price is of a kind the question names, but another one
    ("a 45-minute term $600" when the question names 60- and 30-minute terms)."""
    found = _tiers(before)
    if not found:
        return False
    _, n, unit = max(found)
    return unit in {u for _, u in named} and (n, unit) not in named


def _tiers(text: str) -> list[tuple[int, str, str]]:
    return [
        (match.start(), match.group(1), match.group(2).lower())
        for pattern in _TIERS
        for match in pattern.finditer(text)
    ]


def _terms(node: ast.expr) -> Iterable[ast.expr]:
    """The terms of a sum or difference ("2*50 + 10 + 12": three)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        yield from _terms(node.left)
        yield from _terms(node.right)
    else:
        yield node


def implied(question: str) -> frozenset[Fraction]:
    """The operands ``question`` implies (``IMPLIED``, ``IMPLIED_BY``)."""
    spans = {Fraction(n) for pattern, n in IMPLIED_BY if pattern.search(question)}
    return IMPLIED | spans


def _unit_in(unit: str, evidence: str) -> str:
    """The unit as the evidence writes it, or "" (Rule 4)."""
    if not unit:
        return ""
    if unit in evidence:
        return unit
    for symbol, names in _CURRENCY_NAMES.items():
        if unit.lower() in names:
            return next((n for n in (symbol, *names) if n in evidence), "")
    return ""


def _operands(node: ast.expr) -> Iterable[Fraction]:
    if isinstance(node, ast.BinOp):
        yield from _operands(node.left)
        yield from _operands(node.right)
    else:
        yield _number(node)


def _without_ones(node: ast.expr) -> ast.expr:
    """The expression with every product or quotient by one taken out ("2*120 + 1*180" for
    two of one thing and one of another is "2*120 + 180"; "100*1" is "100", no combination)."""
    if not isinstance(node, ast.BinOp):
        return node
    left, right = _without_ones(node.left), _without_ones(node.right)
    if isinstance(node.op, ast.Mult) and _is_one(left):
        return right
    if isinstance(node.op, ast.Mult | ast.Div) and _is_one(right):
        return left
    return ast.BinOp(left=left, op=node.op, right=right)


def _is_one(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 1


def _products(node: ast.expr) -> Iterable[ast.BinOp]:
    """The outermost products and quotients of a sum ("5*45 + 4*8": both)."""
    if not isinstance(node, ast.BinOp):
        return
    if isinstance(node.op, ast.Mult | ast.Div):
        yield node
    else:
        yield from _products(node.left)
        yield from _products(node.right)


def _number(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    raise NotAComputation("only numbers and + - * /")


def _evaluate(node: ast.expr) -> Fraction:
    if not isinstance(node, ast.BinOp):
        return _number(node)
    left, right = _evaluate(node.left), _evaluate(node.right)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, ast.Div):
        if right == 0:
            raise NotAComputation("division by zero")
        return left / right
    raise NotAComputation("only numbers and + - * /")


def _spoken(node: ast.expr, words: dict[type[ast.operator], str]) -> str | None:
    """The sum in words, or None when it needs brackets to be heard right (Rule 4)."""
    if not isinstance(node, ast.BinOp):
        return _format(_number(node))
    left, right = _spoken(node.left, words), _spoken(node.right, words)
    if left is None or right is None:
        return None
    own = _PRECEDENCE[type(node.op)]
    if isinstance(node.left, ast.BinOp) and _PRECEDENCE[type(node.left.op)] < own:
        return None
    if isinstance(node.right, ast.BinOp):
        inner = _PRECEDENCE[type(node.right.op)]
        if inner < own or (inner == own and isinstance(node.op, ast.Sub | ast.Div)):
            return None
    return f"{left} {words[type(node.op)]} {right}"


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def expression_messages(question: str, evidence: str, earlier: str | None) -> list[dict[str, str]]:
    """Rule 2's prompt: two worked examples, then the passages, the earlier message and the
    question."""
    context = f"Earlier message: {earlier}\n" if earlier else ""
    return [
        {"role": "system", "content": _EXPRESSION_PROMPT},
        {"role": "user", "content": _EXAMPLE_EN[0]},
        {"role": "assistant", "content": _EXAMPLE_EN[1]},
        {"role": "user", "content": _EXAMPLE_ZH[0]},
        {"role": "assistant", "content": _EXAMPLE_ZH[1]},
        {"role": "user", "content": f"Text: {evidence}\n{context}Question: {question}"},
    ]


_EXPRESSION_PROMPT = (
    "Write the arithmetic that answers the question, using only numbers from the text and the "
    "question, with + - * / and parentheses. Give the unit of the result as the text writes it."
)
_EXAMPLE_EN = (
    "Text: Adult tickets cost 12 dollars. Child tickets cost 7 dollars.\n"
    "Question: Two adults and one child, how much in total?",
    '{"expression": "2*12 + 7", "unit": "dollars"}',
)
_EXAMPLE_ZH = (
    "Text: 标准间每晚300元。早餐每人40元。\nQuestion: 住三晚比住两晚多花多少？",
    '{"expression": "3*300 - 2*300", "unit": "元"}',
)
