"""How one rule bears on one tool call, decided in code (SPEC TOOL-3; used by ``tools.judge``).

Theory of operation
-------------------
The language model only *reads* each rule, without seeing the call: its kind (permits,
forbids, ask first, other) and, for a rule that is not plain ASCII, an English translation.
Everything that ties a rule to a call is here, in code, so a model that says "yes" to anything
cannot let a tool run.

Rule 1. Words. Text is lower-cased and split into Latin words, each cut to a crude stem
        (``orders`` → ``order``, ``booking`` → ``book``, ``payments`` → ``pay``); the same stem
        function runs on both sides, so it only has to be consistent. Runs of CJK characters
        are kept as they are (matched as substrings of the rule's own text).
Rule 2. The action's words are the tool name split at ``_``, ``-``, ``.`` and camel case
        (``order_status`` → order, status). *Coverage* is the share of them found among the
        rule's words (its text and its translation).
Rule 3. The call's *context* is the target's and the arguments' words (keys and string values;
        words with digits — ids like ``order-12`` — and function words left out) and CJK runs.
        A rule *touches the context* when it holds one of those words or runs.
Rule 4. Kind. The model's kind is overridden towards safety by cues in the text (either
        language): a cue to ask first ("ask … before", "permission", 先问, 确认) makes the rule
        ``ask_first``; a strong prohibition ("never", "must not", "may not", 禁止, 不能, 绝不)
        makes it ``forbids``; a weak negation ("not", "no", 不) turns a "permits" into ``other``.
Rule 5. A permitting rule *allows* only when all of these hold, else it is *out of scope*:
        (a) coverage is 1 — the rule names every word of the action;
        (b) the target is ``*``, or has no words (an id), or the rule names one of its words;
        (c) a rule with a number (digits or Chinese numerals) is a limit: the call must carry
            numbers, each at most the rule's smallest number;
        (d) a rule with a condition ("when", "if", "only", 时, 如果, 只) shares a word (or a
            CJK pair of characters) with the call's arguments beyond the action's own words.
Rule 6. The verdict of one rule (``RuleVerdict``):

        ========== =================================== ==================================
        kind       coverage 1, or > 0 and context     coverage 0 and context | else
        ========== =================================== ==================================
        permits    allows (rule 5) or out_of_scope     related if coverage>0 | unrelated
        forbids    forbids                             blocks                | related/unr.
        ask_first  asks                                asks                  | unrelated
        other      blocks                              blocks                | related/unr.
        ========== =================================== ==================================

        (``related``: coverage > 0 without context; ``unrelated``: nothing shared.)
Rule 7. Combining (``combine``): any ``forbids`` → deny, quoting those rules (deny beats
        allow); else any ``asks``, ``blocks`` or ``out_of_scope`` → no decision (a rule bears on
        the call and does not clearly allow it: the person is asked); else any ``allows`` →
        allow, quoting those rules; else no decision.
Rule 8. A rule that names a value for one of the call's arguments — the word right after
        the argument's name, when it is a name (an id, a capitalised word, a word no everyday
        vocabulary holds): "must not use lookup for the item omega" names item = omega —
        decides only calls that hold that value there. For another value ("l11") it does not
        bear on the call at all (``related``: it neither forbids nor blocks), whatever its
        kind: a rule decides only what it explicitly covers (seeds/003). A rule that names
        no value ("must not use lookup for sensitive items") is judged as Rule 6 says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from plugins.text import background_weight
from tools.capability import ANY_TARGET, Capability

RuleKind = Literal["permits", "forbids", "ask_first", "other"]
RuleVerdict = Literal["allows", "out_of_scope", "forbids", "asks", "blocks", "related", "unrelated"]
Effect = Literal["allow", "deny", "none"]

_LATIN = re.compile(r"[a-z]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CHINESE_NUMBER = re.compile(r"[零〇一二两三四五六七八九十百千万]+")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_FUNCTION_WORDS = frozenset(
    "a an the of to for in on at by and or with from into any all it its is are be this that "
    "agent assistant may can must should will com org net www http https".split()
)
_ACTION_FUNCTION_WORDS = frozenset(("a", "an", "the", "of", "to", "for", "by"))

ASK_CUES = re.compile(
    r"\bask\w*\b.*\b(before|first)\b|\bbefore\b.*\bask|\bpermission\b|\bapprov|\bconfirm"
    r"|先问|问过|询问|征得|同意|确认|批准|许可",
    re.IGNORECASE,
)
STRONG_NEGATION = re.compile(
    r"\bnever\b|\b(must|may|can|should|do|does|shall)\s+not\b|\bcannot\b|n't\b|\bforbid"
    r"|\bprohibit|\bnot\s+allowed\b|\bno\s+one\b"
    r"|禁止|严禁|不能|不可|不得|不许|不准|不要|绝不|永远不|别(?!人)|勿",
    re.IGNORECASE,
)
WEAK_NEGATION = re.compile(r"\bnot\b|\bno\b|\bnone\b|\bwithout\b|不|没|无", re.IGNORECASE)
CONDITION_CUES = re.compile(
    r"\b(when|whenever|if|only|unless|after|once|while|provided)\b|时|如果|只|除非|之后|以后|当",
    re.IGNORECASE,
)


def stem(word: str) -> str:
    """Rule 1: a crude, consistent English stem (a plural, then one of -ment, -ing, -ed)."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    for suffix in ("ment", "ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def latin_words(text: str) -> set[str]:
    return {stem(w) for w in _LATIN.findall(text.lower())}


def action_words(action: str) -> set[str]:
    """Rule 2."""
    spaced = _CAMEL.sub(" ", action).lower()
    return {stem(w) for w in _LATIN.findall(spaced) if w not in _ACTION_FUNCTION_WORDS}


def _strings(value: Any, depth: int = 0) -> Iterable[str]:
    if depth > 4:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item, depth + 1)


def _content_words(text: str) -> set[str]:
    """Rule 3: words of a target or an argument; a piece with a digit (``order-12``,
    ``SF12345``) is an id and gives none."""
    words = set()
    for piece in re.split(r"[\s/#@,;:()\[\]{}\"'|]+", text.lower()):
        if any(c.isdigit() for c in piece):
            continue
        for token in _LATIN.findall(piece):
            if len(token) >= 3 and token not in _FUNCTION_WORDS:
                words.add(stem(token))
    return words


def _numbers(value: Any, depth: int = 0) -> list[float]:
    if depth > 4 or isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, str):
        return [float(value)] if _NUMBER.fullmatch(value.strip()) else []
    if isinstance(value, Mapping):
        return [n for item in value.values() for n in _numbers(item, depth + 1)]
    if isinstance(value, list | tuple):
        return [n for item in value for n in _numbers(item, depth + 1)]
    return []


_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
           "七": 7, "八": 8, "九": 9}  # fmt: skip
_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10000}


def chinese_number(text: str) -> int:
    """``二十`` → 20, ``一百零五`` → 105, ``两千`` → 2000, ``十二`` → 12."""
    total, section, digit = 0, 0, 0
    for char in text:
        if char in _DIGITS:
            digit = _DIGITS[char]
        elif char == "万":
            total += (section + digit) * 10000
            section, digit = 0, 0
        else:
            section += (digit or 1) * _UNITS[char]
            digit = 0
    return total + section + digit


def rule_numbers(text: str) -> list[float]:
    """Rule 5(c): the numbers a rule states, in digits or Chinese numerals."""
    found = [float(n) for n in _NUMBER.findall(text)]
    found += [float(chinese_number(run)) for run in _CHINESE_NUMBER.findall(text)]
    return found


@dataclass(frozen=True, slots=True)
class RuleText:
    """A rule as code matches it: its own text and the model's English reading of it."""

    text: str
    english: str = ""

    @property
    def words(self) -> set[str]:
        return latin_words(self.text) | latin_words(self.english)


def effective_kind(model_kind: RuleKind, rule: RuleText) -> RuleKind:
    """Rule 4."""
    both = f"{rule.text}\n{rule.english}"
    if ASK_CUES.search(rule.text) or ASK_CUES.search(rule.english):
        return "ask_first"
    if STRONG_NEGATION.search(rule.text) or (
        not rule.text.isascii() and STRONG_NEGATION.search(rule.english)
    ):
        return "forbids"
    if model_kind == "permits" and WEAK_NEGATION.search(both):
        return "other"
    return model_kind


def _coverage(capability: Capability, words: set[str]) -> float:
    wanted = action_words(capability.action)
    return len(wanted & words) / len(wanted) if wanted else 0.0


def _touches_context(capability: Capability, rule: RuleText, words: set[str]) -> bool:
    pieces = [] if capability.target == ANY_TARGET else [capability.target]
    pieces += list(_strings(capability.arguments or {}))
    latin = set().union(*(_content_words(p) for p in pieces)) if pieces else set()
    if latin & words:
        return True
    return any(run in rule.text for p in pieces for run in _CJK.findall(p) if len(run) >= 2)


def _target_named(capability: Capability, rule: RuleText, words: set[str]) -> bool:
    """Rule 5(b)."""
    if capability.target == ANY_TARGET:
        return True
    latin = _content_words(capability.target)
    runs = [run for run in _CJK.findall(capability.target) if len(run) >= 2]
    if not latin and not runs:
        return True  # an id: nothing to name
    return bool(latin & words) or any(run in rule.text for run in runs)


def _within_limit(capability: Capability, rule: RuleText) -> bool:
    """Rule 5(c)."""
    limits = rule_numbers(rule.text) or rule_numbers(rule.english)
    if not limits:
        return True
    given = _numbers(capability.arguments or {})
    return bool(given) and max(given) <= min(limits)


def _pairs(text: str) -> set[str]:
    return {run[i : i + 2] for run in _CJK.findall(text) for i in range(len(run) - 1)}


def _condition_met(capability: Capability, rule: RuleText, words: set[str]) -> bool:
    """Rule 5(d)."""
    if not (CONDITION_CUES.search(rule.text) or CONDITION_CUES.search(rule.english)):
        return True
    arguments = " ".join(_strings(capability.arguments or {}))
    latin = _content_words(arguments) - action_words(capability.action)
    return bool(latin & words) or bool(_pairs(arguments) & _pairs(rule.text))


_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.]*[A-Za-z0-9]|[A-Za-z0-9]")


def named_values(capability: Capability, rule: RuleText) -> dict[str, set[str]]:
    """Rule 8: the values a rule names for the call's arguments — the word right after an
    argument's name ("for the item omega" → item: omega), in its text or translation."""
    keys = {key: _content_words(str(key)) for key in (capability.arguments or {})}
    named: dict[str, set[str]] = {}
    for text in (rule.text, rule.english):
        tokens = _TOKEN.findall(text)
        for token, following in zip(tokens, tokens[1:], strict=False):
            if not _is_a_name(following):
                continue
            for key, key_words in keys.items():
                if key_words and stem(token.lower()) in key_words:
                    named.setdefault(key, set()).add(following.lower())
    return named


def _is_a_name(token: str) -> bool:
    """A value, not a description: an id (a digit), a capitalised word (Paris, Bob), or a
    word no everyday vocabulary holds (omega); "older", "sensitive", "system" describe."""
    lower = token.lower()
    if lower in _FUNCTION_WORDS or lower in _NOT_A_VALUE:
        return False
    if any(c.isdigit() for c in token) or token[0].isupper():
        return True
    return background_weight(lower) >= 1.0


_NOT_A_VALUE = frozenset(
    "not never no must may can should will cannot unless when if only without except".split()
)


def _names_other_values(capability: Capability, rule: RuleText) -> bool:
    """Rule 8: the rule names a value for one of the call's arguments, and the call holds
    another there."""
    arguments = capability.arguments or {}
    for key, values in named_values(capability, rule).items():
        given = " ".join(_strings(arguments.get(key))).lower()
        held = set(_TOKEN.findall(given)) | {stem(w) for w in _LATIN.findall(given)}
        if not (values | {stem(v) for v in values}) & held:
            return True
    return False


def verdict(kind: RuleKind, rule: RuleText, capability: Capability) -> RuleVerdict:
    """Rule 6: how one rule, of the given kind (already through ``effective_kind``), bears on
    the call (Rule 8 first: a rule naming another value does not bear on it)."""
    words = rule.words
    if _names_other_values(capability, rule):
        return "related" if _coverage(capability, words) > 0 else "unrelated"
    coverage = _coverage(capability, words)
    context = _touches_context(capability, rule, words)
    names_it = coverage == 1.0 or (coverage > 0 and context)
    if kind == "ask_first":
        return "asks" if coverage > 0 or context else "unrelated"
    if kind == "permits":
        if coverage == 1.0:
            fits = (
                _target_named(capability, rule, words)
                and _within_limit(capability, rule)
                and _condition_met(capability, rule, words)
            )
            return "allows" if fits else "out_of_scope"
        return "related" if coverage > 0 else "unrelated"
    if names_it:
        return "forbids" if kind == "forbids" else "blocks"
    if context:
        return "blocks"
    return "related" if coverage > 0 else "unrelated"


def combine(verdicts: Sequence[RuleVerdict]) -> tuple[Effect, tuple[int, ...]]:
    """Rule 7: the effect and the indexes of the rules that back it."""
    forbidding = tuple(i for i, v in enumerate(verdicts) if v == "forbids")
    if forbidding:
        return "deny", forbidding
    if any(v in ("asks", "blocks", "out_of_scope") for v in verdicts):
        return "none", ()
    allowing = tuple(i for i, v in enumerate(verdicts) if v == "allows")
    if allowing:
        return "allow", allowing
    return "none", ()
