"""What every brain decides in code before any model speaks (SPEC BRAIN-2, BRAIN-3, BRAIN-4).

Theory of operation
-------------------
A small model phrases; it is not trusted to decide. This module reads one turn and decides:

Rule 1. Language: the current input's (Chinese when it has a Chinese character, else English:
        ``plugins.language.detect_language``); an empty input falls back to the role's
        language.
Rule 2. Intent, in this order: *social* (greetings, thanks, goodbyes, "who are you", "stop": a
        fixed reply), *recall* ("what did I just say": the thread's history), *memory* (a
        question about the person themself — "我之前说过的学习目标是什么?", "what's my name?",
        "do you remember where I live?" — answered from ``<memory_data>``), *question*
        (anything asked or requested: searched in the documents) and *statement* (everything
        else: acknowledged by code, ``ACKNOWLEDGED``, never answered with "I don't know").
Rule 3. The knowledge query is written from the current input and the recent turns: a follow-up
        ("那运费谁承担?", "what about weekends?", a pronoun, a very short question) is searched
        together with the person's previous message, so it is found in the context of that turn.
Rule 4. Evidence: a knowledge result counts only through its ``<untrusted_knowledge>`` blocks
        (the retrieval's own relevance gate decided which passages came back); a list item is
        a sentence of its own, without its marker; the block's ``[closest: …]`` line names the
        sentence nearest the query in meaning (``Passage.closest``). With no block,
        the answer is the fixed "the documents don't say" sentence in the person's language;
        the model is never asked to abstain. What may be quoted is the passages' best sentences
        (``best_sentences``), never the whole document.
Rule 4c. A rare English word the question asks about ("a monthly pass", "a motorbike", "the
        airport shuttle": in a noun phrase it names, not a place it sets the asking in, "on
        my balcony", nor a verb, "can I vape", nor a word ranking the thing, "the earliest
        boat"; a phrase ends before a preposition) that no passage found holds — in text,
        headings or document name, synonyms counted — means the documents do not say, when
        every passage is in the question's language and they hold under ``HELD_SHARE`` of
        its telling words (``missing_focus``). On a probe of 22 unanswerable and 10
        answerable questions over dev documents, written before the rule
        (``dev_unanswerable.json``): unanswerable answered 10 → 6 (its Chinese questions
        untouched), false "don't know" 4 → 4. On the 238 turns of the dev sets on unseen
        documents, after the ranking words and the phrase's end: 1 answerable question
        refused (4 before), the same 4 unanswerable ones caught.
Rules 5, 6 and 6b (memory: which ``<memory_data>`` entries answer a question about the
        person) are ``plugins.brain.memory_match``'s.
Rule 7. The document in focus: a conversation is about one business's documents at a time.
        The passages kept are those of the documents the question names (``brand``: a title's
        first word or first two Chinese characters — "Bluecoast", 「云雀」), else, for a
        follow-up (Rule 3), of those named like the one the last answers quoted. Every other
        passage is dropped, so a question the focused documents do not answer gets "the
        documents don't say", not another business's rule that shares its words ("Is there a
        gym?" after the apartments' rules, answered with a kindergarten's hours). A new question
        that names no document may turn to any of them (a travel claim after the office's
        Wi-Fi).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from plugins.brain.memory_match import ASKS_FOR, MAY_I, asks_about_me, attributes
from plugins.contracts import BrainInput, HistoryTurn, ToolResult
from plugins.language import CJK_IDEOGRAPHS, dominant_language, zh_or_en

# Part of reading a turn (Rule 1), so readers of a turn (the benchmarks) take it from here too.
from plugins.language import detect_language as detect_language
from plugins.text import (
    answer_type,
    background_weight,
    holds_answer,
    parse_query,
    stem,
    translated,
)
from plugins.text import content_terms as terms
from plugins.text import terms as index_terms

KNOWLEDGE_TOOL = "knowledge_search"


class Intent(enum.Enum):
    SOCIAL = "social"
    RECALL = "recall"
    MEMORY = "memory"
    QUESTION = "question"
    STATEMENT = "statement"


@dataclass(frozen=True, slots=True)
class Reading:
    """How one turn was read: its language, intent and (for questions) the knowledge query."""

    language: str
    intent: Intent
    text: str
    reply: str | None = None
    """The fixed reply of a social turn."""
    query: str | None = None
    """What to search for (Rule 3); set for questions."""


@dataclass(frozen=True, slots=True)
class Passage:
    source: str
    text: str
    topic: str = ""
    """The headings over the passage's text (its section), not quoted but matched."""
    closest: str = ""
    """The passage's sentence the search found closest in meaning to the query (Rule 4)."""


# ---------------------------------------------------------------- fixed sentences

NOT_IN_DOCUMENTS = {
    "en": "I am sorry, I do not know: my documents do not say.",
    "zh": "抱歉,我不知道:资料里没有提到这一点。",
}
NOT_REMEMBERED = {
    "en": "I am sorry, I do not remember you telling me that.",
    "zh": "抱歉,我不记得你跟我说过这件事。",
}
NOTHING_EARLIER = {
    "en": "You have not said anything before this in our conversation.",
    "zh": "在这次对话里你之前还没有说过什么。",
}
DONT_KNOW_MARKERS = (
    "不知道",
    "没有提到",
    "没有找到",
    "没有相关",
    "不记得",
    "没有说明",
    "don't know",
    "do not know",
    "don't say",
    "do not say",
    "do not remember",
    "doesn't say",
    "don't remember",
    "no information",
    "not mentioned",
)

ACKNOWLEDGED = {"en": "Okay, got it.", "zh": "好的，我知道了。"}
"""The answer to a statement (Rule 2): said by code, so it never adds a fact of its own."""

# Words of assent before a thanks or a goodbye ("Great, thanks a lot!", 「好的，明白了，谢谢！」).
_EN_OKAY = (
    r"(?:(?:ok(?:ay)?|great|perfect|cool|alright|all right|fine|good|nice|wonderful|excellent"
    r"|awesome|got it|understood|sounds good)\b[\s,.!-]*)*"
)
_ZH_OKAY = r"(?:(?:好的|好嘞|好|行|嗯|明白了?|知道了|了解了?|收到)[\s，,。.!！]*)*"

_SOCIAL: list[tuple[str, re.Pattern[str], str]] = [
    ("en", re.compile(r"^\W*(wait|stop|hold on)\b", re.I), "Okay, I stopped. Go ahead."),
    (
        "en",
        re.compile(
            r"^\W*(hello|hi|hey|good (morning|afternoon|evening))\b[\s,!.]*(there)?[\s!.]*$", re.I
        ),
        "Hello! How can I help you?",
    ),
    ("en", re.compile(rf"^\W*{_EN_OKAY}(thanks|thank you)\b[^?]*$", re.I), "You're welcome."),
    (
        "en",
        re.compile(rf"^\W*{_EN_OKAY}(bye|goodbye|see you)\b[^?]*$", re.I),
        "Goodbye! Talk to you soon.",
    ),
    (
        "en",
        re.compile(
            r"\bhow are you\b|^\W*(?:(?:hey|hi|hello)(?: there)?[\s,!.]*)?"
            r"(?:how(?:'?s| is) (?:it going|your day(?: going)?|everything|life)"
            r"|how (?:are things|have you been))[\s?!.]*$",
            re.I,
        ),
        "I'm fine, thank you. How can I help?",
    ),
    (
        "en",
        re.compile(r"\b(who|what) are you\b|\bwhat'?s your name\b|\byour name\?", re.I),
        "I'm the OpenRealtime assistant. I answer from the documents I've been given.",
    ),
    (
        "en",
        re.compile(r"\bwhat (can|could) you (do|help( me)? with)\b|\bhow can you help\b", re.I),
        "I can answer questions from the documents I've been given and remember what you tell "
        "me about yourself.",
    ),
    ("zh", re.compile(r"^\W*(等一下|停一下|停|等等)\W*$"), "好的，我停下了，你说。"),
    (
        "zh",
        re.compile(r"你(能|可以|会)(帮我)?(做|干)(些)?什么|你有什么(用|功能)"),
        "我可以根据已有资料回答问题，也会记住你告诉我的关于你自己的事。",
    ),
    (
        "zh",
        re.compile(r"^\W*(你好|您好|早上好|晚上好|下午好|嗨|哈喽)(呀|啊)?\W*$"),
        "你好！有什么可以帮你？",
    ),
    ("zh", re.compile(rf"^\W*{_ZH_OKAY}(谢谢|多谢|感谢)[^?？吗]*$"), "不客气。"),
    ("zh", re.compile(rf"^\W*{_ZH_OKAY}(再见|拜拜)[^?？吗]*$"), "再见！"),
    (
        "zh",
        re.compile(r"你是谁|你叫什么|你是什么"),
        "我是 OpenRealtime 助手，根据已有资料回答问题。",
    ),
]

_RECALL = {
    "en": re.compile(
        r"\bwhat did i (?:just )?(?:say|ask)(?: you)?"
        r"(?: (?:before|earlier|last|just now|first))?\W*$"
        r"|\bmy (last|previous) (question|message)\b",
        re.I,
    ),
    "zh": re.compile(r"我(刚才|刚刚|上一句)(说|问)了?什么"),
}

# A question about the person themself (Rule 2). The first pattern needs no memory to match;
# the second ("my …", "我的 …") only counts when a memory entry shares a word with the question.
_ABOUT_ME = {
    "en": re.compile(
        r"\bwhat did i (tell|say to|mention to) you\b|\bdid i (tell|mention)\b"
        r"|\b(do|did) you (still )?(remember|recall|know) "
        r"(what|which|where|who|when|how|my|me|about me)\b"
        r"|\bremember (what|where|who|my)\b|\bwhat do you (know|remember) about me\b"
        r"|\bwho am i\b|\bwhere do i (live|work|come from)\b"
        r"|\bwhat do i (like|prefer|do|study|want)\b|\bwhat am i (learning|studying|doing)\b"
        r"|\bhow (do|did) i (like|prefer)\b|\bmy preferences\b"
        r"|\bwhat (do|did) you know about me\b|\babout me\b.*\?"
        r"|\bhow old am i\b|\bwhat am i allergic\b|\bwhere am i (?:calling )?from\b"
        r"|\b(?:what|how) (?:should|do|will|would) you (?:be )?(?:call|address|greet)(?:ing)? me\b"
        r"|\bwho i am\b",
        re.I,
    ),
    "zh": re.compile(
        r"我(之前|以前|上次|刚才|曾经|早先|先前)?(跟你|和你|对你)?(说过|提过|讲过|告诉过?你|提到过?)"
        r"|(你|您)(还)?记(得|不记得)|记不记得|关于我|我是谁|我叫什么|我的名字"
        r"|我.{0,2}(住|生活|工作)在哪|我.{0,2}(喜欢|爱|偏好)什么|我在学什么|我(想|要)学什么"
        r"|我.{0,4}(打算|计划|目标|梦想)"
        r"|我是?(?:做什么|干什么|做哪一?行)|我是哪(?:里|儿)的?人|我(?:今年)?(?:多大|几岁)"
        r"|我对什么过敏|怎么(?:叫|称呼|喊)我|我(?:家)?养(?:的是|了|的)?(?:什么|哪种|几只)"
    ),
}
_WHAT_IS_MY = {
    "en": re.compile(r"\bwhat('?s| is| was| were| are) (?:my|our)\b|\bwhen is my\b", re.I),
    "zh": re.compile(
        rf"我(?:的|家的?|们家的?)[{CJK_IDEOGRAPHS}]{{1,6}}(是什么|是哪|叫什么|在哪|是多少|是几)"
    ),
}
"""A question for something of the person's ("what's my name?", 「我的生日是哪天?」) — when it
names an attribute of a person (``attributes``): "What are my options?" after a cancelled boat,
「我的包裹在哪?」 ask the documents."""
_MY_THING = {
    "en": re.compile(r"\bmy\s+\w+|\bi\s+(live|like|prefer|work|study)\b", re.I),
    "zh": re.compile(r"我的|我.{0,2}(住|喜欢|偏好|在学|想学|打算|计划)"),
}

_QUESTION = {
    "en": re.compile(
        r"\?|^\W*(what|what's|whats|how|when|where|which|who|whom|whose|why|is|are|am|was|"
        r"were|can|could|do|does|did|will|would|should|shall|may|might|have|has|any)\b"
        r"|\b(tell me|remind me|explain|i('d| would) like to know|i want to know|i wonder|"
        r"let me know|look up|find out|please check)\b"
        # a request in the imperative ("Check the status of order 123.", "Book a table.")
        r"|^\W*(please\s+)?(check|book|find|show|give|cancel|reserve|schedule|order|search|"
        r"list|get|send|call(?!\s+me\b)|help me|compare|describe|summari[sz]e)\b",
        re.I,
    ),
    "zh": re.compile(
        r"[?？]|吗(?:\W|$)|呢\W*$|什么|多少|多久|多长|几[个天点次号岁年月]|谁|哪|怎么|怎样|如何|为什么|"
        r"为啥|是否|能不能|可不可以|会不会|有没有|是不是|要不要|请查|查一下|查查|告诉我|介绍一下|"
        r"说说|讲讲|解释一下|请解释|想知道|想了解|想问|请问"
        r"|^\W*(请)?(帮我|给我|查|预约|预订|订一|取消|搜索|找一下|列出|比较)"
    ),
}

_FOLLOW_UP = {
    "en": re.compile(
        r"^\W*(and|what about|how about|then|so|also|but|what if|or)\b"
        r"|\b(its|that|this|they|them|those|these)\b"
        # "there" and "it" point back, but not as a dummy subject: "Is there an app for…?",
        # "Are there charging spots…?", "Is it possible to…?", "How long does it take to…?"
        r"|(?<!\bis )(?<!\bare )(?<!\bwas )(?<!\bwere )\bthere\b(?! (?:is|are|'s|was|were)\b)"
        r"|\bit\b(?! (?:possible|allowed|okay|ok|necessary|required|mandatory|true|worth"
        r"|free to|safe to|normal to|takes?|cost to|costs? to)\b)",
        re.I,
    ),
    "zh": re.compile(
        r"^\W*(那|那么|那如果|还有|另外|而且|如果|要是|它)|它|这个|那个|这样|那样|这种|那种|呢\W*$"
    ),
}

_CJK = re.compile(f"[{CJK_IDEOGRAPHS}]")
_WORD = re.compile(r"[a-z0-9]+")
_KNOWLEDGE_BLOCK = re.compile(
    r"(?:\[source:\s*(?P<source>[^\]\n]*)\]\s*)?"
    r"<untrusted_knowledge>(?P<body>.*?)</untrusted_knowledge>"
    r"(?:[ \t]*\n?[ \t]*\[closest:\s*(?P<closest>[^\]\n]*)\])?",
    re.S,
)
# A semicolon joins the clauses of one sentence: "…free until 48 hours before arrival; after
# that, the first night is charged" cut there leaves a fragment to quote (issue 31 item 7).
_SENTENCE = re.compile(r".+?(?:[.!?](?=\s|$)|[。!?！？]|$)", re.S)
_ENDS_SENTENCE = re.compile(r"[.!?。！？;；:：]\s*$|[.!?。！？;；]\s")
_MEMORY_BLOCK = re.compile(r"<memory_data>(.*?)</memory_data>", re.S)


def turn_language(request: BrainInput) -> str:
    """The language the person spoke this turn: Chinese when it has at least as many Chinese
    characters as Latin words (``dominant_language``: an English question naming 星河商店 is
    English, 「Tidewater Inn 几点退房?」 Chinese), else English; the role's for no letters."""
    return dominant_language(request.current_input) or zh_or_en(request.language)


def memory_entries(system: str) -> list[str]:
    """The entries of the ``<memory_data>`` block in the system prompt."""
    match = _MEMORY_BLOCK.search(system)
    if match is None:
        return []
    lines = (line.strip(" -•\t") for line in match.group(1).splitlines())
    return [line for line in lines if line]


def earlier_user_inputs(history: Sequence[HistoryTurn]) -> list[str]:
    """The person's earlier messages in the conversation's history, oldest first."""
    return [turn.text for turn in history if turn.role == "user"]


def is_question(text: str, language: str) -> bool:
    return bool(_QUESTION[language].search(text))


def read_turn(request: BrainInput) -> Reading:
    """Read the current input (Rules 1–3)."""
    text = request.current_input.strip()
    lang = turn_language(request)
    for rule_lang, pattern, reply in _SOCIAL:
        if rule_lang == lang and pattern.search(text):
            return Reading(lang, Intent.SOCIAL, text, reply=reply)
    if _RECALL[lang].search(text):
        return Reading(lang, Intent.RECALL, text)
    question = is_question(text, lang)
    entries = memory_entries(request.system)
    asked = asked_part(text)
    if question and (
        _is_about_me(asked, lang, entries)
        or (
            ASKS_FOR[lang].search(asked) is not None
            and not MAY_I[lang].search(asked)
            and asks_about_me(asked, entries)
        )
    ):
        return Reading(lang, Intent.MEMORY, text)
    if question:
        return Reading(lang, Intent.QUESTION, text, query=knowledge_query(request, text, lang))
    return Reading(lang, Intent.STATEMENT, text)


def asked_part(text: str) -> str:
    """The sentences of ``text`` that end in a question mark, when others surround them (a
    question with a statement beside it, as input enrichment writes: "退款多久到账？我喜欢简洁
    回答。" asks about refunds, not about the person); else ``text``."""
    parts = sentences(text)
    asked = [part for part in parts if is_asked(part)]
    if not asked or len(asked) == len(parts):
        return text
    return " ".join(part.strip() for part in asked)


def _is_about_me(text: str, lang: str, entries: Sequence[str]) -> bool:
    if _ABOUT_ME[lang].search(text):
        return True
    if _WHAT_IS_MY[lang].search(text) and attributes(text):
        return True
    if not _MY_THING[lang].search(text) or MAY_I[lang].search(text):
        return False
    wanted = terms(text)
    return any(wanted & terms(entry) for entry in entries)


def knowledge_query(request: BrainInput, text: str, lang: str) -> str:
    """The current input, with the person's previous message in front when it is a follow-up
    (Rule 3)."""
    if not is_follow_up(text, lang):
        return text
    return with_previous(request, text) or text


_CHAIN = 3
"""How many of the person's earlier messages a follow-up's search may carry (Rule 3)."""


def with_previous(request: BrainInput, text: str) -> str | None:
    """``text`` with the person's previous message (not a greeting or thanks) in front — and,
    while that one is itself a follow-up, the message before it, up to ``_CHAIN``: "What if
    she were only 4?" after "And for my 10-year-old?" is still about the adult ticket asked
    first. None when the person said nothing before. (The last answer's words, when it quoted
    a document, were tried in the query too: follow-ups then found the sentence already said —
    "Does it cover water damage?" after the warranty's length — and lost 6 turns of 296.)"""
    earlier = [
        message for message in earlier_user_inputs(request.history) if not _is_social(message)
    ]
    if not earlier:
        return None
    chain = [earlier.pop()]
    while earlier and len(chain) < _CHAIN:
        if not is_follow_up(chain[0], detect_language(chain[0])):
            break
        chain.insert(0, earlier.pop())
    return " ".join([*chain, text])


_FAREWELLS = (
    re.compile(
        rf"^\W*{_EN_OKAY}(?:(?:thanks|thank you)\b[\s,.!]*)?"
        r"(?:bye|bye-bye|goodbye|see you)\b[^?]*$",
        re.I,
    ),
    re.compile(r"\b(?:hang up|end (?:the|this) call)\b", re.I),
    re.compile(rf"^\W*{_ZH_OKAY}(?:(?:谢谢|多谢)[\s，,。.!！]*)?(?:再见|拜拜)[^?？吗]*$"),
    re.compile(r"挂(?:了|断|掉)(?:吧|电话)?"),
)
_NOT = re.compile(r"\b(?:don'?t|do not|never|not yet)\b|不要|别|先不", re.I)


def is_farewell(text: str) -> bool:
    """The speaker takes leave ("bye", "thanks, goodbye", 「好的，再见」) or asks to hang up
    ("please hang up", 「挂了吧」) — and does not say the opposite ("don't hang up yet"): a phone
    call may end after the answer (``runtime.telephony``)."""
    return not _NOT.search(text) and any(p.search(text) for p in _FAREWELLS)


_TRANSFER = (
    re.compile(
        r"\b(?:speak|talk|chat)\s+(?:to|with)\s+(?:a|an|the|some|one of your|your)?\s*"
        r"(?:real\s+|live\s+|actual\s+)?(?:person|human|agent|someone|somebody|representative"
        r"|operator|manager|supervisor|staff)\b",
        re.I,
    ),
    re.compile(
        r"\b(?:put|patch)\s+me\s+through\b|\btransfer\s+(?:me|my call|this call|the call)\b"
        r"|\bconnect\s+me\s+(?:to|with)\b|\bforward\s+(?:me|my call)\b",
        re.I,
    ),
    re.compile(
        r"^\W*(?:a\s+)?(?:real\s+|live\s+)?(?:human|person|agent|operator|representative)"
        r"(?:,?\s*please)?\W*$",
        re.I,
    ),
    re.compile(
        r"转人工|人工(?:客服|服务)|找(?:个)?(?:真人|人工)|真人客服|转接|(?:帮我|给我)转(?:到|给)"
        r"|(?:找|跟|和)(?:你们)?(?:的)?(?:经理|主管|客服人员)(?:说|谈|讲)"
    ),
)
_KEYS = {
    "zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "star": "*", "pound": "#", "hash": "#",
    "零": "0", "〇": "0", "一": "1", "幺": "1", "二": "2", "两": "2", "三": "3", "四": "4",
    "五": "5", "六": "6", "七": "7", "八": "8", "九": "9", "星号": "*", "井号": "#", "星": "*",
    "井": "#",
}  # fmt: skip
_EN_KEY = r"(?:[0-9*#]|(?:zero|oh|one|two|three|four|five|six|seven|eight|nine|star|pound|hash)\b)"
_PRESS = (
    re.compile(
        r"\b(?:press|dial|hit|push|punch in|key in)\s+(?:the\s+)?(?:keys?\s+|buttons?\s+"
        rf"|numbers?\s+|digits?\s+)?(?P<keys>{_EN_KEY}(?:(?:[\s,-]|then|and)*{_EN_KEY})*)",
        re.I,
    ),
    re.compile(
        r"(?:按|拨)(?:一下)?键?(?P<keys>(?:[0-9*#零〇一幺二两三四五六七八九]|星号?|井号?)+)"
    ),
)
_KEY_TOKEN = re.compile(r"[0-9*#]|星号|井号|[零〇一幺二两三四五六七八九星井]|[a-z]+", re.I)
"""The keys of a ``_PRESS`` match one by one ("then"/"and" are no key and are left out)."""


def asks_for_transfer(text: str) -> bool:
    """The caller asks for a person or to be put through ("can I speak to someone?", 「转人工」)
    and does not say the opposite: a phone line's ``transfer_call`` (``runtime.telephony``)."""
    return not _NOT.search(text) and any(p.search(text) for p in _TRANSFER)


def keypad_request(text: str) -> str | None:
    """The keys the speaker tells the agent to press ("press one", "dial 4711 pound", 「按1」),
    as digits, or None: a phone line's ``send_dtmf``."""
    if _NOT.search(text):
        return None
    for pattern in _PRESS:
        found = pattern.search(text)
        if found is not None:
            keys = [_KEYS.get(t.lower(), t) for t in _KEY_TOKEN.findall(found.group("keys"))]
            digits = "".join(k for k in keys if len(k) == 1 and k in "0123456789*#")
            return digits[:32] or None
    return None


def _is_social(text: str) -> bool:
    lang = detect_language(text)
    return any(rule_lang == lang and p.search(text) for rule_lang, p, _ in _SOCIAL)


_ZH_PARTICLES = re.compile(r"[吗呢吧啊呀么的了]")
_ELLIPTICAL_SIZE = {"zh": 8, "en": 3}
"""Most Chinese characters (particles aside) or English content words of a question short
enough to leave its subject to the turn before ("周末有人吗?", "晚上几点关门?")."""


def is_elliptical(text: str, lang: str) -> bool:
    """A question short enough that its subject may be the previous turn's (``llm`` Rule 3
    searches it again with the previous message when it found nothing alone); one that
    names its own ("阳光健身中心有游泳池吗?") is longer."""
    if lang == "zh":
        size = len(_ZH_PARTICLES.sub("", "".join(_CJK.findall(text))))
    else:
        size = len(terms(text))
    return size <= _ELLIPTICAL_SIZE.get(lang, 3)


def points_back(text: str, lang: str) -> bool:
    """The question's words point back at an earlier turn ("what about…", "that", 「那…呢」):
    it is a follow-up whatever its length."""
    return _FOLLOW_UP[lang].search(text) is not None


def is_follow_up(text: str, lang: str) -> bool:
    """A follow-up, searched with the previous message (Rule 3): its words point back, or it
    is too short to name its own subject."""
    if points_back(text, lang):
        return True
    content = terms(text)
    return len(content) <= (2 if lang == "en" else 3)


# ---------------------------------------------------------------- evidence


_ARTICLES = frozenset({"the", "a", "an", "our", "my", "your"})
_CITED = re.compile(r'^(?:According to "?(?P<en>[^":,]+)"?[,:] |根据《(?P<zh>.+?)》)')
"""How both brains open an answer from a document (``llm``: "According to X, " or "…X: ",
``local``: 'According to "X": '; 根据《X》)."""
_CITATIONS_BACK = 3
"""How many of the assistant's last answers are looked at for the document in focus."""


def brand(title: str) -> str:
    """A document title's name for the business or thing it is about (Rule 7): its first two
    Chinese characters (「云雀」通信套餐常见问题), else its first word after an article,
    lowercased ("bluecoast" Car Rental Terms)."""
    title = title.strip()
    if re.match(f"[{CJK_IDEOGRAPHS}]{{2}}", title):
        return title[:2]
    words = [w.lower() for w in re.findall(r"[A-Za-z][\w-]*", title)]
    words = words[1:] if len(words) > 1 and words[0] in _ARTICLES else words
    return words[0] if words else ""


def _names(text: str, name: str) -> bool:
    if not name:
        return False
    if name.isascii():  # a whole word, also between Chinese characters: 「你是Northline渡轮的」
        found = re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text, re.I)
        return found is not None
    return name in text


def cited_source(history: Sequence[HistoryTurn]) -> str | None:
    """The document the assistant's latest answers quoted (``According to X, …``), if any of
    the last few did."""
    answers = [turn.text for turn in history if turn.role == "assistant"]
    for text in reversed(answers[-_CITATIONS_BACK:]):
        match = _CITED.match(text)
        if match:
            return match["en"] or match["zh"]
    return None


def in_focus(
    question: str,
    language: str,
    history: Sequence[HistoryTurn],
    found: list[Passage],
    instructions: str = "",
) -> list[Passage]:
    """The passages of the documents the conversation is about (Rule 7): those whose name the
    question says, else, for a follow-up (Rule 3), those named like the document the last
    answers quoted ("And on Sundays?" stays with the library it asked about). A passage of
    another business's document, however close in words, answers no question about this one.
    A new question that names none keeps to the documents of the business the role's
    ``instructions`` name ("You are the front desk of Tidewater Inn": "When do I have to be
    out of the room?" is the inn's, not the piano school's) when the search found some of
    them, else may turn to any of the person's documents; so does a follow-up when no answer
    quoted a document yet. A short one naming no subject (``is_elliptical``: "最多会收多少?")
    keeps to the quoted document's passages when the search found some."""
    names = {brand(p.source) for p in found if p.source}
    named = {name for name in names if _names(question, name)}
    if not named:
        follow_up = is_follow_up(question, language)
        cited = cited_source(history) if follow_up or is_elliptical(question, language) else None
        if cited is None:
            role = _role_named(instructions, found)
            kept = [p for p in found if brand(p.source) in role]
            return kept or found  # else any of the person's documents
        named = {brand(cited)} - {""}
        if not named:
            return found
        if not follow_up:
            # Short, naming no subject ("最多会收多少?" after the parcel station's fee): the
            # document the last answers quoted when the search found it too, else any.
            kept = [p for p in found if brand(p.source) in named]
            return kept or found
    return [p for p in found if brand(p.source) in named]


def _role_named(instructions: str, found: Sequence[Passage]) -> set[str]:
    """The names (``brand``) of the documents found whose business the role's instructions
    name: an English title's first word, a Chinese title's first three characters (two, such
    as 「安心」, are too often words of their own)."""
    out = set()
    for title in {p.source for p in found if p.source}:
        name = brand(title)
        said = title.strip()[:3] if name and not name.isascii() else name
        if said and _names(instructions, said):
            out.add(name)
    return out


def knowledge_results(request: BrainInput) -> list[ToolResult]:
    return [r for r in request.tool_results if r.name == KNOWLEDGE_TOOL and not r.is_error]


def passages(results: Sequence[ToolResult]) -> list[Passage]:
    """The knowledge blocks of ``results``, best-ranked first (Rule 4). A block's leading lines
    without sentence punctuation are its section headings (``plugins.text.chunk_text`` puts
    them on lines of their own): they become the passage's ``topic``."""
    out: list[Passage] = []
    for result in results:
        for match in _KNOWLEDGE_BLOCK.finditer(result.content):
            lines = [line.strip() for line in match["body"].strip().splitlines() if line.strip()]
            headings: list[str] = []
            while (
                len(lines) > 1
                and not _ENDS_SENTENCE.search(lines[0])
                and not _LIST_MARK.match(lines[0])  # a list item is said, not a heading
            ):
                headings.append(lines.pop(0).lstrip("#").strip())
            body = " ".join(" ".join(map(_spoken_line, lines)).split())
            if body:
                passage = Passage((match["source"] or "").strip(), body, " / ".join(headings))
                out.append(
                    dataclasses.replace(passage, closest=_sentence_of(passage, match["closest"]))
                )
    return out


_LIST_MARK = re.compile(r"^(?:[-*]\s+|[•·]\s*|\d{1,2}(?:[.)]\s+|、))")


def _spoken_line(line: str) -> str:
    """A document line as a sentence (Rule 4): a list item without its marker, ended like a
    sentence when it is not, so it is quoted and read whole, never run into the next item."""
    mark = _LIST_MARK.match(line)
    if mark is None:
        return line
    item = line[mark.end() :]
    if not item or _ENDS_SENTENCE.search(item):
        return item
    return item + ("。" if _CJK.search(item) else ".")


def _squash(text: str) -> str:
    return re.sub(r"[\s\[\]()（）]+", "", _LIST_MARK.sub("", text.strip())).rstrip("。.")


def _sentence_of(passage: Passage, closest: str | None) -> str:
    """The passage's own sentence that the search named closest (Rule 4), or ''."""
    if not closest:
        return ""
    wanted = _squash(closest)
    for sentence in sentences(passage.text):
        if wanted and (wanted in _squash(sentence) or _squash(sentence) in wanted):
            return sentence
    return ""


def sentences(text: str) -> list[str]:
    """``text``'s sentences, a list item's marker left off ("- 拔智齿：…" is said "拔智齿：…")."""
    out = []
    for found in _SENTENCE.findall(" ".join(text.split())):
        sentence = _LIST_MARK.sub("", found.strip()).strip()
        if sentence:
            out.append(sentence)
    return out


def is_asked(sentence: str) -> bool:
    """A sentence that asks (ends in a question mark)."""
    return sentence.rstrip().endswith(("?", "？"))


NAME_WEIGHT = 0.25
"""What a word of the documents' names counts for in a sentence's score (``best_sentences``),
when the question has other words: the name says which document, not which sentence."""
ANSWER_KIND_BONUS = 1.0
"""What holding the kind of answer a question asks for adds to a sentence's score: as much
as one word of the question no other sentence holds."""


def fits_answer(question: str, sentence: str) -> bool | None:
    """Whether ``sentence`` holds the kind of answer ``question`` asks for; None when the
    question asks for no particular kind."""
    kind = answer_type(question)
    return None if kind is None else holds_answer(sentence, kind)


def asked_terms(question: str, found: Sequence[Passage]) -> set[str]:
    """``question``'s content terms without the words of the documents' names (when it has
    others): the name says which document, not which sentence."""
    names = set().union(*(terms(p.source) for p in found)) if found else set()
    return terms(question) - names or terms(question)


def best_sentences(question: str, found: Sequence[Passage], *, limit: int = 3) -> list[Passage]:
    """The sentences of ``found`` that best cover ``question``'s content terms, each term
    weighted by how few of the sentences hold it (the words every passage shares, such as the
    shop's name, count little), ties going to the better-ranked passage; at most ``limit``.
    The first passage's first sentence when none shares a term (the retrieval judged it
    relevant by meaning). A document's own question (an FAQ's "用超了怎么收费？") is never
    quoted: its words count for the sentences that answer it, up to the next question. A
    question that asks for a kind of answer (a clock time, a duration, a number:
    ``plugins.text.answer_type``) ranks the sentences holding one first: "几点开始上班？"
    is answered by the hours line, not by the holiday line that shares more words. The words
    of the documents' names count for little when the question has others (``NAME_WEIGHT``:
    「星河商店退货需要满足什么条件？」 names the shop, and asks for the conditions)."""
    wanted = terms(question)
    named = wanted - asked_terms(question, found)
    kind = answer_type(question)
    candidates = []
    for rank, passage in enumerate(found):
        topic = terms(passage.topic)
        asked: set[str] = set()
        for sentence in sentences(passage.text):
            if is_asked(sentence):
                asked = terms(sentence)
                continue
            shared = (terms(sentence) | topic | asked) & wanted
            candidates.append((rank, Passage(passage.source, sentence), shared))
    holding: dict[str, int] = {}
    for _, _, shared in candidates:
        for term in shared:
            holding[term] = holding.get(term, 0) + 1
    scored = [
        (
            sum((NAME_WEIGHT if t in named else 1.0) / holding[t] for t in shared)
            - 0.01 * rank
            + (ANSWER_KIND_BONUS if kind and holds_answer(passage.text, kind) else 0.0),
            -order,
            passage,
        )
        for order, (rank, passage, shared) in enumerate(candidates)
        if shared
    ]
    if not scored:
        if not found:
            return []
        first = [sentence for sentence in sentences(found[0].text) if not is_asked(sentence)]
        return [Passage(found[0].source, first[0] if first else found[0].text)]
    scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return distinct([item[2] for item in scored])[:limit]


def distinct(evidence: Sequence[Passage]) -> list[Passage]:
    """``evidence`` without repeats: a sentence found again (two hits holding it, or the
    passage it came from) is shown once, where it first came. The weak-evidence check was
    shown "The daily meal allowance is 45 euros." twice and nothing else."""
    kept: list[Passage] = []
    for passage in evidence:
        text = passage.text.strip()
        if any(text in other.text for other in kept):
            continue
        inside = [other for other in kept if other.text.strip() in text]
        if inside:
            at = kept.index(inside[0])
            kept = [other for other in kept if other not in inside]
            kept.insert(at, passage)  # every item before ``at`` stays
            continue
        kept.append(passage)
    return kept


def coverage(question: str, evidence: Sequence[Passage]) -> float:
    """The share of ``question``'s content units (``plugins.text.parse_query``: English
    words and Chinese characters, filler left out, synonyms and translations counted) that the
    evidence's
    terms cover (its sentences and their section's heading); 1.0 when the question has none.
    A unit only the document's name covers is left out of the count: it says the question is
    on the document's topic ("Is there a gym at the inn?" of the Tidewater Inn's guide), not
    that these sentences answer it."""
    units = translated(parse_query(question)).units
    body = set(index_terms(" ".join(f"{p.topic} {p.text}" for p in evidence)))
    names = set(index_terms(" ".join(p.source for p in evidence)))
    counted = [unit for unit in units if unit & body or not unit & names]
    if not counted:
        return 1.0
    return sum(1 for unit in counted if unit & body) / len(counted)


FOCUS_WEIGHT = 0.85
"""Rule 4c: an English word at least this rare (``plugins.text.background_weight``: Zipf 4.5
or less — monthly, kettle, motorbike; not boat, beer, pool) that no passage found holds is
what the question is about."""
_STEM_PREFIX = 5
TELLING_WEIGHT = 0.5
HELD_SHARE = 0.75
"""Rule 4c: a question whose words of at least ``TELLING_WEIGHT`` the passages hold for this
share misses none: it names several things, and they speak of most ("Can guests use the
lockers, towels, sauna and pool?" over lockers, sauna and pool)."""


def missing_focus(question: str, found: Sequence[Passage]) -> list[str]:
    """Rule 4c: the rare English words of ``question`` that no passage found holds — in its
    text, its headings or its document's name, synonyms and translations counted, a word
    sharing its first five letters with a held one held ("cancel" and "cancelled"): "motorbike"
    of "How much does it cost to take a motorbike across?" over a car's fare, "monthly" of
    "How much is a monthly pass?" over the single and return fares. The passages speak of the
    question's topic, not of what it asks. None when the passages hold ``HELD_SHARE`` of its
    telling words. Chinese is not read so: its frequency list cannot tell a rare word from
    two characters that make none."""
    parsed = translated(parse_query(question))
    held = set(index_terms(" ".join(f"{p.source} {p.topic} {p.text}" for p in found)))
    prefixes = {t[:_STEM_PREFIX] for t in held if len(t) >= _STEM_PREFIX}
    words = [
        (word, bool(unit & held) or len(word) >= _STEM_PREFIX and word[:_STEM_PREFIX] in prefixes)
        for unit, word in zip(parsed.units, parsed.words, strict=False)
        if word.isascii() and word.isalpha() and len(word) >= 3
    ]
    telling = [is_held for word, is_held in words if background_weight(word) >= TELLING_WEIGHT]
    if telling and sum(telling) / len(telling) >= HELD_SHARE:
        return []  # "lockers, towels, sauna and pool": most of what it names is there
    named = _named_things(question)
    return [
        word
        for word, is_held in words
        if not is_held and background_weight(word) >= FOCUS_WEIGHT and word[:4] in named
    ]


_PLACE = r"on|in|at|inside|outside|near|onto|into|during|from|of|with|by"
_DETERMINER = re.compile(
    rf"\b(?:(?P<place>{_PLACE})\s+)?"
    r"(?:a|an|the|any|some|my|our|your|this|that|there(?: is| are)?|(?:is|are) there)\s+"
    rf"(?P<phrase>[a-z]+(?:[\s-](?!(?:{_PLACE}|for|to|and|or)\b)[a-z]+)?)",
    re.I,
)
_SUPERLATIVE = re.compile(r"[a-z]{2,}(?:iest|est)$|first|last|next", re.I)
"""Rule 4c: a word that ranks what is asked for ("the earliest boat", "the next ferry") is
not a thing asked about: the passages name the boat and its times, not "earliest"."""
_NOT_SUPERLATIVE = frozenset(
    "guest request interest forest contest protest harvest chest honest modest priest arrest "
    "digest quest conquest inquest suggest invest tempest manifest".split()
)
"""Words ending in -est that rank nothing."""


def _named_things(question: str) -> set[str]:
    """Rule 4c: the first four letters of the words of the noun phrases a question asks about
    ("a monthly pass", "the airport shuttle", "are there cabins"), not of those it places the
    asking in ("on my balcony", "in the middle of a term", "my car at the inn overnight": a
    phrase ends before a preposition), nor of its verbs ("can I vape"), nor of a word ranking
    the thing ("the earliest boat")."""
    out: set[str] = set()
    for match in _DETERMINER.finditer(question.lower()):
        if match["place"] is None:
            out.update(
                stem(w)[:4]
                for w in re.split(r"[\s-]", match["phrase"])
                if not _SUPERLATIVE.fullmatch(w) or w in _NOT_SUPERLATIVE
            )
    return out


def quote_is_from(quote: str, evidence: Sequence[Passage], *, at_least: float = 0.8) -> bool:
    """Whether ``quote`` is (nearly) made of the evidence's own words: at least ``at_least`` of
    its Chinese characters and English words (and numbers) occur in the evidence."""
    text = " ".join(p.text for p in evidence).lower()
    units = _CJK.findall(quote) + _WORD.findall(quote.lower())
    if not units:
        return False
    words = set(_WORD.findall(text))
    present = sum(1 for u in units if (u in words if u.isascii() else u in text))
    return present / len(units) >= at_least


def says_dont_know(text: str) -> bool:
    lowered = text.lower().replace("’", "'")
    return any(marker in lowered for marker in DONT_KNOW_MARKERS)
