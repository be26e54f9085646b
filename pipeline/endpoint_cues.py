"""Endpoint cues: what the transcript says about the end of a turn, and how the cues combine.

Theory of operation
-------------------
Three signals judge whether a pause ends the user's turn: the silence itself, the end-of-turn
model's verdict on the audio (Smart Turn: complete / incomplete / no opinion) and the words said
so far (the speculative transcript made at the pause). This module is pure: ``transcript_cue``
reads a transcript, ``endpoint_delay`` turns the three signals into the wait after the end of
speech. The coordinator calls ``endpoint_delay`` again whenever a signal arrives and moves its
deadline to ``speech end + delay`` (a deadline already passed commits at once).

Rule 1 — the transcript cue. ``transcript_cue(text, language)`` is one of:

- ``INCOMPLETE``: the speaker is mid-thought. The text ends with a comma, colon, dash or
  ellipsis (ASR writes "…" when a voice trails off); or with a word that cannot end a clause —
  a conjunction, article or determiner, filler, or (outside a wh-question ending in "?", where
  English strands them: "who did you talk to?") a preposition; or with a copula after a noun
  ("my number is", "我的电话是"); or with an open number or spelled sequence being dictated:
  two or more separately spoken digits, or three letters ("0 1 7 6", "zero one seven",
  "四 五 六", "S M I"), an alphanumeric code ("A10086"), or a number shortly after a word that
  announces one ("my number is 0176", "the code is four", "验证码是四"). A finished dictation
  looks the same as a paused one, so it also gets the long wait: the price of not cutting a
  caller off mid-number.
- ``COMPLETE``: clearly finished. A short acknowledgement ("thanks", "okay", "好的", "谢谢") as
  the last phrase; a question mark; a wh-question of three words or more ("what time is it"); a
  Chinese question or sentence-final particle ("吗", "呢", "吧", "了", "是不是"); a full stop or
  exclamation mark after at least three words whose last word can end a clause.
- ``NEUTRAL``: nothing either way (including empty text).

The first rule that matches decides, in this order: trailing punctuation, acknowledgement,
trailing word or copula, dictation, question mark, question shape, full stop. So "thanks, and"
is INCOMPLETE (its last phrase, "and", is no acknowledgement) and "what's the best way to" too.
The word lists are the ``_EN_*`` and ``_ZH_*`` constants below: short, closed-class words of
English and Mandarin (Chinese lists carry traditional forms too, since Whisper often writes
them), not phrases chosen for any test set. ``language`` "en" reads the English lists only;
"zh" or anything else reads both (Mandarin speakers code-switch into English: "然后 OK").
Punctuation, digits and codes are read the same in every language.

Rule 2 — combination. Each signal is known or still ``PENDING`` (the model still judging,
the transcript still being made); a verdict of ``None`` is the model's "no opinion" (the
silence endpointer always says so), a NEUTRAL cue the transcript's. INCOMPLETE vetoes: a
trailing "and" outweighs the audio model. COMPLETE confirms: it shortens the wait when the
model agrees or has no opinion, never against it and never before it has spoken. While one
signal says finished and the other is pending, the wait is the silence delay: a late transcript
can still veto a cut-off, and one that never comes costs no more than the silence rule. Waits
at medium eagerness, by (verdict, cue):

    =============  ==========  =======  ========  =======
    verdict / cue  INCOMPLETE  NEUTRAL  COMPLETE  PENDING
    =============  ==========  =======  ========  =======
    complete       LONG        SHORT    SHORT     SILENCE
    incomplete     LONG        LONG     LONG      LONG
    no opinion     LONG        SILENCE  SHORT     SILENCE
    PENDING        LONG        SILENCE  SILENCE   SILENCE
    =============  ==========  =======  ========  =======

SHORT is ``complete_delay``, SILENCE ``silence_delay``, LONG ``incomplete_delay``, all counted
from the end of speech. Without transcript cues the caller passes NEUTRAL for the cue, and the
NEUTRAL column is the coordinator's rule before cues (Rule 2 of ``pipeline.turns``).

Eagerness. ``medium`` (and ``auto``) is the table. ``low`` shortens the wait only when both
signals say finished (complete + NEUTRAL and no opinion + COMPLETE become SILENCE). ``high``
trusts one signal: complete + PENDING and PENDING + COMPLETE become SHORT, incomplete +
COMPLETE becomes SILENCE. Then every wait is scaled by ``EAGERNESS_SCALE`` (low ×1.6, medium
×1.0, high ×0.6), so pass unscaled delays: ``TurnSettings`` keeps them unscaled, with the
eagerness (the server's ``OPENREALTIME_EAGERNESS`` or a session's ``semantic_vad`` one) beside.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Literal, Protocol

from plugins.language import is_cjk_ideograph

# ---------------------------------------------------------------- the cue


class Cue(enum.Enum):
    INCOMPLETE = "incomplete"
    NEUTRAL = "neutral"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class CueReading:
    """A transcript's cue and the rule that decided it (``"none"`` for NEUTRAL)."""

    cue: Cue
    rule: str


# English closed-class words. A word here at the very end means more is coming.
_EN_CONJUNCTIONS = frozenset(
    {"and", "but", "or", "nor", "so", "because", "cause", "if", "than", "unless", "whether"}
)
_EN_DETERMINERS = frozenset({"the", "a", "an", "my", "your", "our", "their", "every"})
_EN_FILLERS = frozenset({"uh", "um", "uhm", "umm", "erm", "er", "like"})
_EN_PREPOSITIONS = frozenset(
    {"to", "for", "of", "with", "about", "from", "at", "into", "onto", "toward", "towards"}
)
_EN_COPULAS = frozenset({"is", "are", "was", "were"})
_EN_SO_ENDS_AFTER = frozenset({"think", "hope", "guess", "believe", "suppose", "said", "told"})
"""Verbs after which "so" ends the clause ("I think so")."""
_EN_COPULA_ENDS_AFTER = frozenset(
    {"it", "he", "she", "this", "that", "they", "we", "you", "there", "here", "what", "who",
     "where", "which", "how", "i"}
)  # fmt: skip
"""A copula ends a clause after a pronoun or wh-word ("here it is", "I know who he is")."""
_EN_WH_WORDS = frozenset(
    {"what", "what's", "when", "when's", "where", "where's", "who", "who's", "whom", "whose",
     "why", "how", "how's", "which"}
)  # fmt: skip
_EN_DANGLING = frozenset(
    {"can", "could", "would", "will", "should", "must", "might", "may", "do", "does", "did",
     "have", "has", "had", "be", "been", "am", "i", "we", "he", "she", "they", "that", "which",
     "who", "what", "where", "when", "why", "how", "not", "very", "really", "just"}
)  # fmt: skip
"""Words after which a full stop does not make the clause look finished (ASR puts full stops
at pauses): the cue stays NEUTRAL."""
_EN_ACKNOWLEDGEMENTS = frozenset(
    {"thanks", "thank you", "thank you very much", "thanks a lot", "ok", "okay", "yes", "yeah",
     "yep", "no", "nope", "sure", "got it", "bye", "goodbye", "that's all", "that's it",
     "perfect", "great", "alright", "all right", "sounds good", "never mind"}
)  # fmt: skip
_EN_DIGIT_WORDS = frozenset(
    {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}
)
_EN_NUMBER_KEYWORDS = frozenset(
    {"number", "code", "phone", "card", "account", "id", "pin", "zip", "postcode", "extension"}
)
"""Words that announce a digit string being dictated."""

# Mandarin, simplified and traditional forms. Matched as suffixes of the text.
_ZH_INCOMPLETE_ENDINGS = (
    "然后", "然後", "但是", "可是", "不过", "不過", "因为", "因為", "所以", "还有", "還有",
    "而且", "如果", "或者", "还是", "還是", "就是", "那个", "那個", "这个", "這個", "关于",
    "關於", "和", "跟", "把", "给", "給", "从", "從", "嗯", "呃", "额", "額",
)  # fmt: skip
_ZH_DE = "的"
"""Counts as INCOMPLETE only without a closing full stop or question mark ("我要大的。")."""
_ZH_COPULA = "是"
_ZH_COPULA_ENDS_AFTER = frozenset("不也都还還就可真")
""""是" ends a clause after these ("不是", "也是")."""
_ZH_QUESTION_ENDINGS = (
    "吗", "嗎", "么", "麼", "呢", "几点", "幾點", "多少", "什么", "什麼", "哪里", "哪裡",
    "哪儿", "哪兒", "怎么样", "怎麼樣", "为什么", "為什麼",
)  # fmt: skip
_ZH_FINAL_PARTICLES = frozenset("吧了啦呀嘛哦")
_ZH_DANGLING = frozenset("我你他她它在要想会會能很被让讓比向往")
_ZH_ACKNOWLEDGEMENTS = frozenset(
    {"好", "好的", "好吧", "好了", "行", "可以", "对", "對", "是的", "没问题", "沒問題", "谢谢",
     "謝謝", "谢谢你", "謝謝你", "多谢", "多謝", "不用了", "再见", "再見", "拜拜", "知道了",
     "明白了", "没事了", "沒事了", "就这样", "就這樣"}
)  # fmt: skip
_ZH_DIGITS = frozenset("零〇一二三四五六七八九幺两兩")
_ZH_NUMBER_KEYWORDS = ("号", "號", "码", "碼", "电话", "電話", "手机", "手機")

_OPENING_PUNCTUATION = frozenset(",，、;；:：-–—…")
_TERMINAL_PUNCTUATION = frozenset(".。!！")
_QUESTION_MARKS = frozenset("?？")
_TRAILING_PUNCTUATION = _OPENING_PUNCTUATION | _TERMINAL_PUNCTUATION | _QUESTION_MARKS
_QUOTES = "\"'“”‘’「」『』()（）[]"
_WORD_OR_CHARACTER = re.compile(r"[0-9a-z]+(?:'[a-z]+)?|\S")
_SEGMENT_BREAK = re.compile(r"[,，、;；:：.。!！?？…]+")


def _tokens(text: str) -> list[str]:
    """Latin words and digit runs, and each CJK ideograph on its own (lower-case text)."""
    return [
        t
        for t in _WORD_OR_CHARACTER.findall(text)
        if (t[0].isascii() and t[0].isalnum()) or is_cjk_ideograph(t[0])
    ]


def transcript_cue(text: str, language: str | None) -> Cue:
    """What the (speculative) transcript ``text`` says about the end of the turn (Rule 1)."""
    return read_cue(text, language).cue


def read_cue(text: str, language: str | None) -> CueReading:
    """``transcript_cue`` with the name of the rule that decided it."""
    chinese = language != "en"
    cleaned = text.strip().strip(_QUOTES).strip().replace("’", "'").lower()
    body = cleaned.rstrip("".join(_TRAILING_PUNCTUATION) + " ." + _QUOTES)
    tail = cleaned[len(body) :]
    if not body:
        return _NEUTRAL
    if any(c in _OPENING_PUNCTUATION for c in tail) or tail.endswith(".."):
        return CueReading(Cue.INCOMPLETE, "trailing_punctuation")
    question = any(c in _QUESTION_MARKS for c in tail)
    terminal = question or any(c in _TERMINAL_PUNCTUATION for c in tail)
    tokens = _tokens(body)
    if not tokens:
        return _NEUTRAL
    segment = _SEGMENT_BREAK.split(body)[-1].strip()
    if " ".join(_tokens(segment)) in _EN_ACKNOWLEDGEMENTS or (
        chinese and segment.replace(" ", "") in _ZH_ACKNOWLEDGEMENTS
    ):
        return CueReading(Cue.COMPLETE, "acknowledgement")
    last = tokens[-1]
    if is_cjk_ideograph(last[0]):  # a token longer than one character is ASCII
        if chinese:
            reading = _chinese_ending(body.replace(" ", ""), terminal)
            if reading is not None:
                return reading
    else:
        reading = _english_ending(tokens, question)
        if reading is not None:
            return reading
    if not question and _dictating(tokens, body):
        return CueReading(Cue.INCOMPLETE, "dictation")
    if question:
        return CueReading(Cue.COMPLETE, "question_mark")
    if is_cjk_ideograph(last[0]):
        if chinese and (body.endswith(_ZH_QUESTION_ENDINGS) or _a_not_a(body)):
            return CueReading(Cue.COMPLETE, "question")
        if chinese and len(body) >= 2 and last in _ZH_FINAL_PARTICLES:
            return CueReading(Cue.COMPLETE, "final_particle")
        if terminal and len(tokens) >= 3 and last not in _ZH_DANGLING:
            return CueReading(Cue.COMPLETE, "full_stop")
        return _NEUTRAL
    if tokens[0] in _EN_WH_WORDS and len(tokens) >= 3 and last not in _EN_DANGLING:
        return CueReading(Cue.COMPLETE, "question")
    if terminal and len(tokens) >= 3 and last not in _EN_DANGLING:
        return CueReading(Cue.COMPLETE, "full_stop")
    return _NEUTRAL


_NEUTRAL = CueReading(Cue.NEUTRAL, "none")


def _english_ending(tokens: list[str], question: bool) -> CueReading | None:
    last = tokens[-1]
    before = tokens[-2] if len(tokens) >= 2 else ""
    if last in _EN_CONJUNCTIONS and not (last == "so" and before in _EN_SO_ENDS_AFTER):
        return CueReading(Cue.INCOMPLETE, "trailing_word")
    if last in _EN_DETERMINERS or (last in _EN_FILLERS and not (last == "like" and question)):
        return CueReading(Cue.INCOMPLETE, "trailing_word")
    if last in _EN_PREPOSITIONS or last == "like":
        if question and tokens[0] in _EN_WH_WORDS:
            return _NEUTRAL  # "who did you talk to?": English strands prepositions in questions
        return CueReading(Cue.INCOMPLETE, "trailing_word")
    if last in _EN_COPULAS and len(tokens) >= 2 and before not in _EN_COPULA_ENDS_AFTER:
        return CueReading(Cue.INCOMPLETE, "trailing_copula")
    return None


def _chinese_ending(body: str, terminal: bool) -> CueReading | None:
    if body.endswith(_ZH_INCOMPLETE_ENDINGS):
        return CueReading(Cue.INCOMPLETE, "trailing_word")
    if body.endswith(_ZH_DE) and not terminal:
        return CueReading(Cue.INCOMPLETE, "trailing_word")
    if (
        body.endswith(_ZH_COPULA)
        and len(body) >= 3
        and body[-2] not in _ZH_COPULA_ENDS_AFTER
        and not _a_not_a(body)
    ):
        return CueReading(Cue.INCOMPLETE, "trailing_copula")
    return None


def _a_not_a(body: str) -> bool:
    """A Chinese A-not-A question tag at the end: "是不是", "好不好", "要不要"."""
    return (
        len(body) >= 3 and body[-2] == "不" and body[-1] == body[-3] and is_cjk_ideograph(body[-1])
    )


def _is_spoken_digit(token: str) -> bool:
    return (token.isdigit() and len(token) == 1) or token in _EN_DIGIT_WORDS or token in _ZH_DIGITS


def _dictating(tokens: list[str], body: str) -> bool:
    """An open sequence of digits or letters at the end of the text (see Rule 1)."""
    run = 0
    has_digit = False
    for token in reversed(tokens):
        if _is_spoken_digit(token):
            has_digit = True
        elif not (len(token) == 1 and token.isascii() and token.isalpha()):
            break
        run += 1
    if run >= 3 or (run >= 2 and has_digit):
        return True
    last = tokens[-1]
    if last.isascii() and last.isalnum() and len(last) >= 4:
        if not last.isdigit() and not last.isalpha():
            return True  # a code mixing letters and digits: "a10086"
    if last.isdigit() or _is_spoken_digit(last):
        # A number right after a word announcing one: "the code is 4", "验证码是四".
        if any(t in _EN_NUMBER_KEYWORDS for t in tokens[-5:-1]):
            return True
        return any(k in body[-12:] for k in _ZH_NUMBER_KEYWORDS)
    return False


# ---------------------------------------------------------------- the combination


class Pending(enum.Enum):
    """A signal that has not arrived yet."""

    PENDING = "pending"


PENDING = Pending.PENDING

Verdict = bool | None | Pending
"""The end-of-turn model's verdict: True complete, False incomplete, None no opinion, or
``PENDING``."""

CueState = Cue | Pending
"""The transcript's cue, or ``PENDING``."""


class Wait(enum.Enum):
    SHORT = "short"
    """``complete_delay``: the turn is judged finished."""
    SILENCE = "silence"
    """``silence_delay``: no judgement either way."""
    LONG = "long"
    """``incomplete_delay``: the speaker is expected to go on."""


Eagerness = Literal["low", "medium", "high", "auto"]

EAGERNESS_SCALE: dict[str, float] = {"low": 1.6, "medium": 1.0, "auto": 1.0, "high": 0.6}
"""How eagerness scales every wait (the factors of ``semantic_vad``)."""

W, INC, NEU, COM = Wait, Cue.INCOMPLETE, Cue.NEUTRAL, Cue.COMPLETE
WAITS: dict[tuple[Verdict, CueState], Wait] = {
    (True, INC): W.LONG, (True, NEU): W.SHORT, (True, COM): W.SHORT, (True, PENDING): W.SILENCE,
    (False, INC): W.LONG, (False, NEU): W.LONG, (False, COM): W.LONG, (False, PENDING): W.LONG,
    (None, INC): W.LONG, (None, NEU): W.SILENCE, (None, COM): W.SHORT, (None, PENDING): W.SILENCE,
    (PENDING, INC): W.LONG, (PENDING, NEU): W.SILENCE, (PENDING, COM): W.SILENCE,
    (PENDING, PENDING): W.SILENCE,
}  # fmt: skip
"""Rule 2's table at medium eagerness: (verdict, cue) → wait."""

EAGERNESS_CHANGES: dict[str, dict[tuple[Verdict, CueState], Wait]] = {
    "low": {(True, NEU): W.SILENCE, (None, COM): W.SILENCE},
    "medium": {},
    "auto": {},
    "high": {(True, PENDING): W.SHORT, (PENDING, COM): W.SHORT, (False, COM): W.SILENCE},
}
"""The cells of ``WAITS`` that another eagerness changes."""
del W, INC, NEU, COM


class EndpointDelays(Protocol):
    """The three delays, in seconds after the end of speech (``TurnSettings`` has them)."""

    @property
    def silence_delay(self) -> float: ...

    @property
    def complete_delay(self) -> float: ...

    @property
    def incomplete_delay(self) -> float: ...


def endpoint_wait(verdict: Verdict, cue: CueState, eagerness: str = "medium") -> Wait:
    """The cell of Rule 2's table for ``eagerness`` (``ValueError`` for an unknown one)."""
    changes = EAGERNESS_CHANGES.get(eagerness)
    if changes is None:
        raise ValueError(f"eagerness must be one of {sorted(EAGERNESS_CHANGES)}, not {eagerness!r}")
    return changes.get((verdict, cue), WAITS[(verdict, cue)])


def endpoint_delay(
    verdict: Verdict,
    cue: CueState,
    *,
    eagerness: str = "medium",
    delays: EndpointDelays,
) -> float:
    """Seconds after the end of speech at which the turn ends, given what is known so far.

    Args:
        verdict: the end-of-turn model's verdict (True complete, False incomplete, None no
            opinion) or ``PENDING`` while it is judging.
        cue: ``transcript_cue`` of the speculative transcript, ``PENDING`` while it is being
            made, NEUTRAL when transcript cues are off (or the transcription failed).
        eagerness: "low", "medium", "high" or "auto" (= medium).
        delays: the unscaled delays (eagerness scales them here).
    """
    wait = endpoint_wait(verdict, cue, eagerness)
    base = {
        Wait.SHORT: delays.complete_delay,
        Wait.SILENCE: delays.silence_delay,
        Wait.LONG: delays.incomplete_delay,
    }[wait]
    return base * EAGERNESS_SCALE[eagerness]
