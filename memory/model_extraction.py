"""Facts the patterns missed, read by the model (SPEC MEM-2, MEM-5; issue 31 item 5).

Theory of operation
-------------------
``memory.extraction`` stores what a message says in the words its patterns know ("my name is",
"我住在"). People say more than that: "I'm a nurse at the Royal Free", "我们家狗叫豆豆",
"peanuts make me ill". This module is the pure core of a second reader, run only where the
patterns found nothing; ``memory.fact_reader`` runs it in the background.

Rule 1. Only a message with a first-person statement in it is read (``stated_clauses``: no
        question, hypothetical, reported speech or secret; the statement's clauses are what
        the model sees). A question is never stored as a fact; the statement before one in
        the same sentence is read ("I'm coming with my husband Jakob next week, is there
        parking?": ``memory.extraction`` makes it a clause of its own).
Rule 1b. A message the patterns found nothing in: each stated clause is read alone, but one
        too short to say what it is about goes with the one before (``_read_apart``). A
        message the patterns read only in part (``unread``): each stated clause they left
        is read alone — "I'm Priya and I teach maths at a secondary school" gave the name to
        the patterns and the job to no one (the model, shown both, answered "hometown") —
        unless it shares a rare word with their entries or starts with a pronoun (whom "he"
        means is theirs to know); at most ``MAX_READS_PER_MESSAGE``.
Rule 2. The model answers by grammar-constrained JSON (``SCHEMA``): one ``attribute`` from a
        fixed list (or ``"none"``) and its ``value`` copied from the person's words.
Rule 3. Code checks the answer: an attribute on the list, a value of at most
        ``MAX_VALUE_CHARS`` that is found in the statement (case and spacing aside) and is not
        a secret, and a statement that holds a word of that attribute (its ``cue``: a city
        needs "live", "home", "住"… — "我下个月要去日本旅游" is a trip, and the small model
        calls it a city). Anything else stores nothing: a wrong memory is worse than none —
        but for Rule 3b.
Rule 3b. A statement the model misread — "none" for "I drive a red Honda Civic", a value not
        in the person's words ("白色比亚迪"), an attribute whose word the statement lacks — is
        kept as the person said it when it holds a word of the attribute the model named or,
        failing that, of one of the attributes a word shows alone (a car, a study, what they
        do not eat, a hobby, a habit, an allergy: ``_AS_SAID``). Measured on a memory set
        written for it (``dev_memory_new.json``): the model named "none" for the car, the usual
        coffee and 「我不吃辣」, "job" for the cello, and dropped 的 from 「白色的比亚迪」. A
        "none" for a relative named by name ("my husband Jakob") keeps it as theirs, and a diet
        word (vegetarian, coeliac, "can't have") shows a diet (``dev_memory3.json``,
        ``dev_memory4.json``).
Rule 3c. A job given up and the one done now, in one statement ("I'm not a teacher any more,
        I run a bakery now", 「我已经不做会计了，现在开咖啡店」), read as "none" by the model, is
        stored by code as the job now under the job's key: it replaces the one given up.
Rule 3d. How the person wants to be reached ("Please contact me by email rather than phone")
        and the occasion of their visit ("My partner and I are celebrating our tenth
        anniversary"), read as none or as a hobby by the model, are kept as said
        (``_CONTACT``, ``_OCCASION``). On a memory probe written for this round
        (``dev_memory5.json``, 18 conversations in words not used before), memory recall
        was 0.64 before it, the phone-number pattern (``memory.extraction``) and the cues
        for "driving", "makes me ill" and 「吃不了」; 1.0 after.
Rule 3e. Any other statement the model reads as none (or misreads) is kept as said when it
        tells something lasting of the person (``_says_something``): an English clause of two
        content words or more with a rare one, a Chinese clause of four characters or more,
        or a number ("My partner and I cycle just about everywhere", 「我们一共五个人」,
        "…should roll in around six"). Not what is the conversation's ("Before I forget",
        「我记错了」, a greeting) nor the thread's (a purchase, a return, a trip, how they feel
        today: ``_PASSING_STATE``). Rules 3b–3d had been written one probe at a time and
        kept only their words: on a memory set written blind for this rule
        (``dev_memory6.json``, 24 conversations) memory recall was 0.51; with Rule 3e, Rule
        1b's clause-by-clause reading and ``memory.extraction``'s clauses after a dash and
        Chinese clauses whose subject goes on, 0.62 (the matching of ``plugins.brain.
        memory_match`` unchanged).
Rule 4. Code writes the entry, in the statement's language, from a template per attribute
        ("My job: nurse at the Royal Free" / "我的工作：护士"), so the brain's memory rules match
        it by attribute (``plugins.brain.memory_match`` Rule 6). Attributes a person has one of
        (name, city, job, birthday, age…) carry the patterns' key, so a later statement of the
        same attribute replaces the older one — a correction replaces what it corrects.
        A statement about a family member or a pet ("我妈妈的生日是十月一号") is kept as it
        was said, as theirs, whatever attribute the model names; a pet or a relative whose
        value lost what they are ("团团" of "我家有只猫，叫团团") is kept whole too.
Rule 5. A correction that gives only the new value ("Sorry, I got that wrong, it's the 13th
        of May") is read by code, not the model, right after a message whose patterns stated
        an attribute a person has one of (``put_right``): the attribute is restated with the
        new value under the same key, so it replaces the wrong one. The model read such a
        message as a birthday with no word of birthdays in it, which Rule 3 refuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from memory.entries import MAX_ENTRY_CHARS, MemoryKind, is_sensitive
from memory.extraction import EN_RELATIONS, ZH_RELATIONS, Extracted, extract, stated_clauses
from plugins.language import has_cjk
from plugins.text import PET_WORDS, ZH_PET_WORDS, background_weight, content_terms, terms

MAX_VALUE_CHARS = 60
MAX_TOKENS = 48


class _Attribute:
    __slots__ = ("cue", "en", "key", "kind", "zh")

    def __init__(self, kind: MemoryKind, key: str | None, en: str, zh: str, cue: str) -> None:
        self.kind, self.key, self.en, self.zh = kind, key, en, zh
        self.cue = re.compile(cue, re.I)


_HOME = r"\bliv(?:e|es|ed|ing)\b|\bhome\b|\bmov(?:e|ed)\b|\bbased\b|\bfrom\b|\bgrew up\b|住|搬|家在|老家|家乡|来自|长大"  # noqa: E501
_FROM = r"\bfrom\b|\bgrew up\b|\bhometown|\bborn in\b|老家|家乡|来自|长大|出生"
_WORK = r"\bwork|\bjob\b|\bteach|\bi (?:run|own|manage)\b|\bwhat i do\b|\bfor a living\b|\bi(?:'m| am) an? \b|\bprofession|\bemploy|工作|上班|职业|公司|当|是一名|是个"  # noqa: E501
ATTRIBUTES: dict[str, _Attribute] = {
    "name": _Attribute(
        "fact", "name", "My name is {}", "我叫{}", r"\bnamed?\b|\bcall|\bgo by\b|叫|名字|称呼|姓"
    ),
    "current_city": _Attribute("fact", "current_city", "I live in {}", "我住在{}", _HOME),
    "hometown": _Attribute("fact", "hometown", "I am from {}", "我来自{}", _FROM),
    "job": _Attribute("fact", "job", "My job: {}", "我的工作：{}", _WORK),
    "employer": _Attribute("fact", "employer", "I work at {}", "我在{}工作", _WORK),
    "birthday": _Attribute(
        "fact", "birthday", "My birthday is {}", "我的生日是{}", r"\bbirthday|\bborn\b|生日|出生"
    ),
    "age": _Attribute(
        "fact",
        "age",
        "My age: {}",
        "我的年纪：{}",
        r"\bage\b|\byears? old\b|\bturn(?:ed|ing)? \d+|岁|年纪",
    ),
    "native_language": _Attribute(
        "fact",
        "native_language",
        "My native language is {}",
        "我的母语是{}",
        r"\blanguage|\bspeak|\bnative\b|\btongue\b|语|母语",
    ),
    "allergy": _Attribute(
        "fact",
        None,
        "I am allergic to {}",
        "我对{}过敏",
        r"\ballerg|\bmakes? me (?:\w+ )?(?:ill|sick)\b|\breacts? badly\b"
        r"|过敏|吃了(?:就|会)?(?:不舒服|难受)",
    ),
    "pet": _Attribute(
        "relation",
        None,
        "My pet: {}",
        "我的宠物：{}",
        r"\b(?:dog|cat|pet|pupp|kitten|parrot|rabbit|hamster|fish)|狗|猫|宠物|鹦鹉|兔|仓鼠|鱼",
    ),
    "family": _Attribute(
        "relation",
        None,
        "My family: {}",
        "我的家人（孩子、伴侣）：{}",
        r"\b(?:wife|husband|sons?|daughters?|kids?|child|children|partner|sisters?|brothers?|mother|mom|mum|father|dad|family|twins)\b|妻子|老婆|丈夫|老公|儿子|女儿|孩子|姐|妹|哥|弟|妈|爸|家人",
    ),
    "vehicle": _Attribute(
        "fact",
        "vehicle",
        "My car: {}",
        "我的车：{}",
        r"\b(?:driv(?:e|es|ing)|drove|car|motorbike|motorcycle|scooter|bike|van|truck)\b|车|辆",
    ),
    "study": _Attribute(
        "fact",
        "study",
        "I study {}",
        "我学的是{}",
        r"\bstud(?:y|ying|ent)\b|\bmajor|\bdegree\b|\bat (?:university|college|school)\b"
        r"|专业|读研|读博|大学|学的|在读|学生",
    ),
    "diet": _Attribute(
        "preference",
        None,
        "I don't eat {}",
        "我不吃{}",
        r"\b(?:don'?t|do not|never|can'?t|cannot) (?:eat|have)\b|\bvegetarian|\bvegan\b"
        r"|\bpescatarian|\bco?eliac|\bintoleran"
        r"|\bhalal\b|\bkosher\b|不吃|吃不了|不能吃|吃不得|忌口|吃素|素食",
    ),
    "hobby": _Attribute(
        "preference",
        None,
        "My hobby: {}",
        "我的爱好：{}",
        r"\bplay\b|\bhobb|\bin my (?:free|spare) time\b|\borchestra|\bband\b|\bclub\b"
        r"|爱好|业余|弹|打球|踢球",
    ),
    "habit": _Attribute(
        "preference",
        None,
        "I usually have {}",
        "我一般要{}",
        r"\b(?:always|usually|normally|every (?:day|morning|time))\b|总是|经常|每天|每次|平时",
    ),
    "likes": _Attribute(
        "preference",
        None,
        "I like {}",
        "我喜欢{}",
        r"\blik(?:e|es)\b|\blove|\benjoy|\bfavou?rite|\bprefer|\bfan of\b|喜欢|爱|偏好",
    ),
    "goal": _Attribute(
        "goal",
        None,
        "My goal: {}",
        "我的目标：{}",
        r"\bgoal|\bplan|\bwant to\b|\bhop(?:e|ing)\b|\blearn|\bstudy|\btrain|\baim"
        r"|目标|打算|计划|想|学",
    ),
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "attribute": {"enum": [*ATTRIBUTES, "none"]},
        "value": {"type": "string", "maxLength": MAX_VALUE_CHARS},
    },
    "required": ["attribute", "value"],
}

_PROMPT = (
    "What does the person say about themself? Answer with the attribute it is ("
    + ", ".join(ATTRIBUTES)
    + ", or none) and its value, copied from their words."
)
_EXAMPLES = (
    ("I teach piano to kids three days a week.", '{"attribute": "job", "value": "teach piano"}'),
    ("我养的鹦鹉叫小绿。", '{"attribute": "pet", "value": "鹦鹉叫小绿"}'),
    ("Traffic was awful today.", '{"attribute": "none", "value": ""}'),
)
_SPACE = re.compile(r"\s+")


def statement(text: str) -> str:
    """Rule 1: the first-person statement of a message, or "" (nothing to read)."""
    return " ".join(stated_clauses(text))


MAX_READS_PER_MESSAGE = 3
_HELD_WEIGHT = 0.7
"""Rule 1b: a clause shares a word at least this rare (``plugins.text.background_weight``: a
name, a value — not "call", "my", "school") with an entry the patterns wrote: it is theirs."""
_PRONOUN_START = re.compile(r"^(?:he|she|it|they|his|her|its|their)\b|^[他她它]", re.I)


def unread(text: str, found: Sequence[Extracted]) -> list[str]:
    """Rule 1b: what the model reads of a message. Its whole statement when the patterns found
    nothing in it; else each stated clause they left ("I'm Priya and I teach maths at a
    secondary school": the name is the patterns', the job the model's), but for a clause that
    shares a rare word with their entries ("He's called Max" after "I have a dog") or starts
    with a pronoun (whom it means is the patterns' to know); at most ``MAX_READS_PER_MESSAGE``."""
    if not found:
        return _read_apart(stated_clauses(text))[:MAX_READS_PER_MESSAGE]
    held = {t for e in found for t in terms(e.content) if background_weight(t) >= _HELD_WEIGHT}
    out = [
        clause
        for clause in stated_clauses(text)
        if not _PRONOUN_START.match(clause)
        and not extract(clause)
        and not held & set(terms(clause))
    ]
    return out[:MAX_READS_PER_MESSAGE]


_OWN_TERMS = 2
"""Rule 1b: a clause with fewer content terms ("I'm allergic") is read with the one before."""


def _read_apart(clauses: list[str]) -> list[str]:
    """Rule 1b: each clause of a statement the patterns found nothing in is read alone (the
    model names one attribute per read: 「我是小学语文老师，周末喜欢去爬山」 is two), but a
    clause too short to say what it is about goes with the one before ("Peanuts make me ill,
    I'm allergic")."""
    out: list[str] = []
    for clause in clauses:
        if out and not has_cjk(clause) and len(content_terms(clause)) < _OWN_TERMS:
            out[-1] = f"{out[-1]} {clause}"
        else:
            out.append(clause)
    return out


def messages(stated: str) -> list[dict[str, str]]:
    """Rule 2's prompt: three worked examples, then the statement."""
    out = [{"role": "system", "content": _PROMPT}]
    for said, answer in _EXAMPLES:
        out += [{"role": "user", "content": said}, {"role": "assistant", "content": answer}]
    out.append({"role": "user", "content": stated})
    return out


def read_answer(answer: str, stated: str) -> Extracted | None:
    """Rules 3–4: the entry the model's answer gives, or None."""
    try:
        data = json.loads(answer)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    name = str(data.get("attribute"))
    if name == "hometown" and not ATTRIBUTES[name].cue.search(stated):
        name = "current_city"  # "my home is Valencia now": where they live, not come from
    attribute = ATTRIBUTES.get(name)
    value = _SPACE.sub(" ", str(data.get("value") or "")).strip(" .。,，;；!！")
    if attribute is None or not attribute.cue.search(stated):
        # "我下个月要去日本旅游" is no city the person lives in; "none" for "I drive a Civic"
        return _as_said(stated, None)
    if (
        not value
        or len(value) > MAX_VALUE_CHARS
        or _fold(value) not in _fold(stated)
        or is_sensitive(value)
    ):
        return _as_said(stated, attribute)  # "白色比亚迪" of "一辆白色的比亚迪"
    if attribute.kind != "relation" and _OF_SOMEONE.search(stated):
        # "我妈妈的生日是十月一号" is the mother's birthday: said as it was said, as theirs.
        return Extracted("relation", stated) if len(stated) <= MAX_ENTRY_CHARS else None
    template = attribute.zh if has_cjk(stated) else attribute.en
    content = template.format(value)
    if attribute.kind == "relation" and not attribute.cue.search(value):
        content = stated  # "我的宠物：团团" would lose that 团团 is a cat
    if len(content) > MAX_ENTRY_CHARS:
        return None
    return Extracted(attribute.kind, content, attribute.key)


_AS_SAID = ("vehicle", "study", "diet", "hobby", "habit", "allergy")
"""Rule 3b: the attributes whose word alone shows a statement says what the person has, does
or avoids ("I always order an oat flat white", 「我不吃辣」) when the model named no attribute."""


def _as_said(stated: str, attribute: _Attribute | None) -> Extracted | None:
    """Rule 3b: the statement kept in the person's own words when the model's answer fails the
    checks but the statement holds a word of the attribute it named (or, for none, of one of
    ``_AS_SAID``); None when it holds neither. It carries no key: the model's value was not
    read, so it replaces nothing."""
    if len(stated) > MAX_ENTRY_CHARS or is_sensitive(stated):
        return None
    if attribute is None:
        changed = _job_now(stated)
        if changed is not None:
            return changed
        cued = [ATTRIBUTES[name] for name in _AS_SAID if ATTRIBUTES[name].cue.search(stated)]
        attribute = cued[0] if cued else None
        if attribute is None and _NAMED_SOMEONE.search(stated):
            return Extracted("relation", stated)  # "I'm coming with my husband Jakob"
    if attribute is None:
        if _CONTACT.search(stated):
            return Extracted("preference", stated)
        if _OCCASION.search(stated):
            return Extracted("relation" if _OF_SOMEONE.search(stated) else "fact", stated)
        if not _says_something(stated):
            return None
        return Extracted("relation" if _OF_SOMEONE.search(stated) else "fact", stated)
    if _OF_SOMEONE.search(stated):
        return Extracted("relation", stated)  # "My mum always cooks fish" is hers (Rule 4)
    return Extracted(attribute.kind, stated)


_SAYS_WEIGHT = 0.6
"""Rule 3e: an English word at least this rare (``plugins.text.background_weight``) says
something."""
_SAYS_ZH_CHARS = 4
"""Rule 3e: a Chinese clause of at least this many characters (我, particles and punctuation
aside) says something: the word table has too few Chinese words to weigh them."""
_NUMBER = re.compile(
    r"\d|[一二两三四五六七八九十百]|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\b",
    re.I,
)
_PASSING = re.compile(
    r"^(?:i\s+)?(?:want|need|would like|'d like|wonder|think|guess|hope|see|understand|agree"
    r"|forget|forgot|remember|have a question|was wondering|remind|got\b.*\bwrong)\b"
    r"|^(?:small |quick )?update\b|^change of plans?\b|^(?:sorry|my mistake|my bad)\b"
    r"|^(?:correction|hi|hiya|hey|hello|morning|evening|good (?:morning|afternoon|evening))\b"
    r"|^我?(?:想问|想知道|问一下|请问|觉得|记得|忘了|明白|知道了|同意|看看|试试|先说|说一下)"
    r"|^我?(?:想|要|得|需要)(?:订|预订|预约|约|买|问|咨询|退|换|取消)",
    re.I,
)
"""Rule 3e: what a person says of the conversation, not of themself ("I need to ask…",
"Before I forget", 「我想问一下」)."""


_PASSING_STATE = re.compile(
    r"\b(?:today|tonight|yesterday|this (?:morning|afternoon|evening)|right now|at the moment"
    r"|confused|tired|bought|ordered|returned|refund(?:ed)?|trip|holiday|vacation"
    r"|think|let me)\b"
    r"|今天|今晚|昨天|刚才|刚刚|退货|退款|买了|下单|旅游|出差|去.{1,6}玩|知道了|累了|困了",
    re.I,
)
"""Rule 3e: what is the thread's, not the person's — a purchase, a return, a trip, how they
feel today ("I just bought the Nova headphones", 「我下个月要去日本旅游」, "My husband is
tired today")."""


def _says_something(stated: str) -> bool:
    """Rule 3e: a stated clause the model read as none that still tells something lasting of
    the person — a rare word or a number in it ("My partner and I cycle just about
    everywhere", 「我们一共五个人」) — rather than of the conversation ("Before I forget")."""
    body = re.sub(r"^\W*(?:before|so|and|but|also|well|just)\s+", "", stated, flags=re.I)
    if _PASSING.search(body) or _PASSING_STATE.search(body):
        return False
    if has_cjk(stated):
        return len(re.sub(r"[\W我们了的吧呢啊]", "", stated)) >= _SAYS_ZH_CHARS
    said = content_terms(stated)
    rare = [t for t in said if background_weight(t) >= _SAYS_WEIGHT]
    return (bool(rare) and len(said) >= _OWN_TERMS) or bool(_NUMBER.search(stated))


_CONTACT = re.compile(
    r"\bcontact(?:ed)? me\b|\b(?:reach|text|email|e-mail|ring) me\b"
    r"|\bcall me (?:on|at|after|before)\b"
    r"|联系我|给我打电话|给我发(?:短信|邮件|微信)",
    re.I,
)
"""Rule 3d: how the person wants to be reached ("Please contact me by email rather than
phone"), which the model reads as none: kept as said."""
_OCCASION = re.compile(
    r"\b(?:anniversary|honeymoon|wedding|graduation|celebrat(?:e|es|ing)|retirement)\b"
    r"|纪念日|蜜月|婚礼|毕业|庆祝|退休",
    re.I,
)
"""Rule 3d: the occasion of a visit ("our tenth anniversary"), which the model reads as a
hobby: kept as said."""


_OF_SOMEONE = re.compile(
    rf"\b(?:my|our)\s+(?:{EN_RELATIONS}|{PET_WORDS})\b|我(?:的|家的?|们家的?)?(?:{ZH_RELATIONS}|{ZH_PET_WORDS})",
    re.I,
)
"""A statement about a family member or a pet (Rule 4: theirs, not the person's)."""
_NAMED_SOMEONE = re.compile(
    rf"\b(?:my|our)\s+(?:{EN_RELATIONS}|{PET_WORDS}),?\s+(?-i:[A-Z][a-z]+)\b"
    rf"|我(?:的|家的?|们家的?)?(?:{ZH_RELATIONS}|{ZH_PET_WORDS})(?:的名字)?(?:叫|名叫)",
    re.I,
)
"""Rule 3b: a relative or a pet named by name ("my husband Jakob", 「我老公叫小李」)."""
_LEFT = {
    False: re.compile(
        r"\b(?:no longer|not\b.*\bany ?more|quit|left|stopped|retired from|gave up)\b", re.I
    ),
    True: re.compile(r"不再|不(?:做|当|干)|辞(?:职|掉|了)|退休了|转行"),
}
_NOW = {
    False: re.compile(
        r"(?:\bnow,?\s+)?\bI(?:'m| am)?\s+(?:now\s+)?(?P<now>(?:run|own|work|manage|teach|opened|"
        r"an?\s)[^,.;!?]{1,40}?)(?:\s+now)?\W*$",
        re.I,
    ),
    True: re.compile(r"(?:现在|目前|如今)(?P<now>[^，,。！!？?]{2,20}?)(?:了)?\W*$"),
}


def _job_now(stated: str) -> Extracted | None:
    """Rule 3c: a job given up and the one done now, in one statement ("I'm not a teacher
    any more, I run a bakery now", 「我已经不做会计了，现在开咖啡店」), which the model reads as
    none: the job now, under the job's key, so it replaces the one given up."""
    zh = has_cjk(stated)
    left = _LEFT[zh].search(stated)
    now = _NOW[zh].search(stated, left.end()) if left is not None else None
    if now is None:
        return None
    value = now["now"].strip()
    if zh and not re.search(r"开|做|当|干|在|是", value):
        return None
    job = ATTRIBUTES["job"]
    return Extracted(job.kind, (job.zh if zh else job.en).format(value), job.key)


_PUT_RIGHT = {
    False: re.compile(
        r"(?:\bsorry\b|\boops\b|\bmy (?:mistake|bad)\b|\b(?:got|had) (?:that|it) wrong\b"
        r"|\bthat(?:'s| was) wrong\b|\bi meant\b|\bcorrection\b|\bscratch that\b|\bno,? wait\b)"
        r"[^.!?]*?(?:\bit'?s|\bit is|\bit was|\bi meant|\bmake (?:that|it))\s+"
        r"(?P<value>[^,.!?;]{1,40}?)\W*$",
        re.I,
    ),
    True: re.compile(
        r"(?:不对|说错了|错了|搞错了|更正一下|纠正一下)\W*(?:应该|其实)?是"
        r"(?P<value>[^，。！？,.!?；;]{1,20}?)\W*$"
    ),
}
MAX_PUT_RIGHT_WORDS = 6


def put_right(text: str, previous: Extracted | None) -> Extracted | None:
    """Rule 5: a bare value put right ("Sorry, I got that wrong, it's the 13th of May";
    「说错了，应该是五月十三号」) right after a message that stated an attribute a person has
    one of: that attribute restated with the new value, under its key, so it replaces the
    wrong one. None for anything else."""
    if previous is None or previous.key is None:
        return None
    attribute = next((a for a in ATTRIBUTES.values() if a.key == previous.key), None)
    zh = has_cjk(text)
    match = _PUT_RIGHT[zh].search(text)
    if attribute is None or match is None:
        return None
    value = match["value"].strip()
    if not value or len(value.split()) > MAX_PUT_RIGHT_WORDS or is_sensitive(value):
        return None
    if zh != has_cjk(previous.content):
        return None
    return Extracted(
        attribute.kind, (attribute.zh if zh else attribute.en).format(value), previous.key
    )


def _fold(text: str) -> str:
    return _SPACE.sub(" ", text).casefold()
