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
Rule 5. A memory question with no ``<memory_data>`` entry to answer it gets the fixed "I don't
        remember you telling me" sentence.
Rule 6. Memory in other words: what a question asks of the person and what an entry says of
        them are read as *attributes* (``attributes``: name, home, job, pet, family, birthday,
        age, allergy, goal, likes, language — "what should you call me" and "my name is Priya"
        are both *name*). ``relevant_memories`` takes the entries that share an attribute or a
        word with the question; a question about a *subject* (a pet, a family member) needs an
        entry about that subject. When the question asks for an attribute no entry has, no
        entry answers it (the "don't remember" sentence), rather than the newest one. A
        first-person question about no subject is about the person: their own entries come
        before a pet's or a child's, and one that shares only a name, an age, a birthday or a
        liking with it is not theirs ("what should you call me?" is not answered with "my cat
        is called Mochi", even when no entry has the person's name), and nor is one whose
        subject is a relative or a pet ("My sister lives in Munich" for "where do I live?";
        "I live with my wife in Leeds" is the person's own). A breed is a pet ("a golden
        retriever called Biscuit" answers "what's my dog called?": ``plugins.text.PET_WORDS``).
        A question that plainly asks about the person ("who am I", "how old am I", 「我是
        做什么工作的」, 「我是哪里人」) is a memory question even when nothing is remembered:
        the answer is that they have not said, never a document's sentence.
        ``asks_about_me`` is a first-person question whose attribute some entry has: when it
        asks *for* something ("what should you call me?", 「我是做哪一行的」) it is a memory
        question whatever its words; any other ("can I bring my dog?") is searched in the
        documents first and answered from memory only when they do not answer it; so is one
        asking what the person may or must do ("where can I park my car?", 「我可以带狗吗」:
        ``_MAY_I``), whatever an entry shares with it.
Rule 6b. Memory by rare words: an attribute said in no fixed form (a liking, a habit, a diet,
        a car: ``_FREE_FORM``) that no entry has is matched by the rare words a question
        shares with an entry ("how do I prefer to be contacted?" and "please contact me by
        email"); and when the documents do not answer a question in the first person ("we"
        and "our" too) or naming someone an entry names, an entry sharing a rare word with it
        answers it ("which anniversary are we celebrating?": ``remembered_by_words``).
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

from plugins.contracts import BrainInput, HistoryTurn, ToolResult
from plugins.language import CJK_IDEOGRAPHS, dominant_language, zh_or_en

# Part of reading a turn (Rule 1), so readers of a turn (the benchmarks) take it from here too.
from plugins.language import detect_language as detect_language
from plugins.text import (
    PET_WORDS,
    ZH_PET_WORDS,
    answer_type,
    background_weight,
    holds_answer,
    parse_query,
    stem,
    translated,
)
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
        r"|\b(?:what|how) (?:should|do|will|would) you (?:call|address|greet) me\b",
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
    "en": re.compile(r"\bwhat('?s| is| was| were| are) my\b|\bwhen is my\b", re.I),
    "zh": re.compile(rf"我的[{CJK_IDEOGRAPHS}]{{1,6}}(是什么|是哪|叫什么|在哪|是多少|是几)"),
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
_CJK_RUN = re.compile(f"[{CJK_IDEOGRAPHS}]+")
_WORD = re.compile(r"[a-z0-9]+")
_STOP_EN = frozenset(
    """a an the and or but to of in on at for with from by is are was were be been am do does did
    what when where which who how why can could will would should may might i you he she it we
    they me my your our their this that these those there here have has had not no yes please
    tell about any some much many long just also so then if than as""".split()
)
_STOP_ZH = frozenset(
    "什么 多少 多久 怎么 如何 是否 可以 一下 请问 我们 你们 他们 的是 是什".split()
)
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


def terms(text: str) -> set[str]:
    """Content terms: Chinese character bigrams and English words of 3+ letters that are not
    stop words, stemmed as the knowledge index stems them (``plugins.text.stem``)."""
    lowered = text.lower()
    out = {stem(w) for w in _WORD.findall(lowered) if len(w) >= 3 and w not in _STOP_EN}
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            continue
        out.update(b for i in range(len(run) - 1) if (b := run[i : i + 2]) not in _STOP_ZH)
    return out


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
            _ASKS_FOR[lang].search(asked) is not None
            and not _MAY_I[lang].search(asked)
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
    if not _MY_THING[lang].search(text) or _MAY_I[lang].search(text):
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


_ATTRIBUTES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.I)
    for name, pattern in {
        "name": r"\bnames?\b|\bcall(?:ed|s)?\b|\bgo by\b|\bnickname|\b(?:address|greet) me\b"
        r"|\bwho am i\b|叫|名字|称呼|姓|我是谁",
        "home": r"\bliv(?:e|es|ed)\b|(?<!for a )\bliving\b|\bmov(?:e|ed|ing)\b|\bcity\b"
        r"|\bhome(?:town)?\b|\bbased\b|\b(?:am|are|i'm|come|am i) from\b|\baddress\b(?! me\b)"
        r"|\bgr[eo]w(?:s|n|ing)? up\b|\braised\b|\bcalling from\b"
        r"|住|搬|城市|老家|家乡|哪里人|生活在|长大|家在",
        "job": r"\bjob\b|\bwork(?:s|ed|ing)?\b(?!\s+out\b)|\bfor a living\b|\bprofession"
        r"|\boccupation|\bteach|\bemploy|\bcareer|\bstudent\b|工作|职业|上班|做什么的|哪一行|公司|学生|研究生"
        r"|^\W*i(?:'m| am) an? (?!(?:vegetarian|vegan|big|huge|little|bit)\b)[a-z]+\W*$"
        r"|我是一[名位]|开了?(?:一家|家|个)?.{0,6}店",
        "pet": rf"\b(?:{PET_WORDS})\b|{ZH_PET_WORDS}",
        "family": r"\bfamily\b|\bwife\b|\bhusband\b|\bsons?\b|\bdaughters?\b|\bkids?\b|\bchild"
        r"|\bpartner\b|\bsister|\bbrother|\bmother\b|\bmom\b|\bmum\b|\bfather\b|\bdad\b"
        r"|\btwins?\b|双胞胎|\bmarried\b|\bspouse\b|\b(?:girl|boy)friend\b|\bfianc[ée]e?\b"
        r"|\bwho\b.*\b(?:travel\w*|liv(?:e|ing)|com(?:e|ing)|stay\w*)\s+with\b"
        r"|结婚|伴侣|对象|女朋友|男朋友|未婚妻|未婚夫"
        r"|\bboy\b|\bgirl\b|\bgrand(?:ma|pa|mother|father|son|daughter|kids?|children)\b"
        r"|爷爷|奶奶|外公|外婆|孙子|孙女"
        r"|家人|妻子|老婆|丈夫|老公|儿子|女儿|孩子|姐姐|妹妹|哥哥|弟弟|妈妈|爸爸|母亲|父亲",
        "birthday": r"\bbirthday|\bborn\b|生日|出生",
        "age": r"\bage\b|\bhow old\b|\b(?:years?|months?|weeks?) old\b"
        r"|\bi(?:'m| am)(?: actually| now)? \d{1,3}\b|岁|年纪|多大"
        r"|\b(?:is|'s|turned|turns) (?:\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten"
        r"|eleven|twelve|thirteen|fourteen|fifteen)(?: (?:now|already|this year))?"
        r"(?:\W*$|,|\s+and\b)",
        "allergy": r"\ballerg|\bmedic(?:ine|ation)s?\b|\bdrugs?\b"
        r"|\b(?:can'?t|cannot|shouldn'?t|should not|mustn'?t|not allowed to) eat\b"
        r"|\b(?:food|eat|drink)s?\b.*\b(?:stay|keep) away from\b|\bcan'?t i (?:eat|have)\b"
        r"|\bco?eliac|\bintoleran|\bmakes? me (?:\w+ )?(?:ill|sick)\b"
        r"|过敏|药|不能吃|不可以吃|吃不了|忌口",
        "goal": r"\bgoals?\b|\blearn|\bstudy|\bstudying\b|\bplan(?:s|ning)?\b|\btraining\b"
        r"|\bhop(?:e|ed|ing) to\b|\bpick up\b|\baim"
        r"|目标|学|打算|计划",
        "diet": r"\bdiet(?:ary)?\b|\bvegetarian|\bvegan|\bpescatarian|\bhalal\b|\bkosher\b"
        r"|\b(?:don'?t|do not|never) eat\b|\bmeat\b|\bavoid\b"
        r"|\b(?:food|eat|drink)s?\b.*\b(?:stay|keep) away from\b"
        r"|吃素|素食|饮食|清真|不吃|吃不了|口味|吃辣|忌口",
        "likes": r"\blikes?\b|\bloves?\b|\bfavou?rite|\bprefer|\benjoy|喜欢|爱|最爱|偏好",
        "vehicle": r"\bcars?\b|\bdriv(?:e|es|ing)\b|\bvehicle|\bmotor(?:bike|cycle)\b|车|辆",
        "study": r"\bstud(?:y|ies|ying|ent)\b|\bmajor(?:ing)?\b|\bdegree\b|\buniversity|\bcollege\b"
        r"|专业|学的|学什么|在读|读研|读博|大学|学生|研究生",
        "hobby": r"\bhobb|\binstrument|\bplay(?:s|ing)?\b|\bsports?\b|\b(?:free|spare) time\b"
        r"|\bfor fun\b|\borchestra|\bband\b|\bclub\b|爱好|乐器|运动|业余|弹|打球|踢球",
        "habit": r"\busual(?:ly)?\b|\balways\b|\bnormally\b|\bregular(?:ly)?\b"
        r"|平时|经常|总是|每次|每天|习惯",
        "phone": r"\b(?:phone|mobile|cell|telephone)\b|\b(?:my|your) number\b|手机|电话|号码",
        "language": r"\blanguages?\b|\bspeak\b|\bnative\b|语言|母语|(?:说|讲)什么话",
    }.items()
}
_ASKS_FOR = {
    "en": re.compile(
        r"\b(?:what|which|where|who|when|how old|how many|how much|how long)\b"
        r".*\b(?:i|me|my|i'm|we|our|us)\b"
        r"|\b(?:do|did) i (?:usually |normally )?(?:prefer|like|love|want|hate)\b"
        r"|^\W*(?:is there|are there|do i have|have i got)\b.*\b(?:i|me|my)\b"
        r"|\bremember\b|\bremind me\b|\bdo you know (?:what|where|who|when|which|how|my)\b",
        re.I,
    ),
    "zh": re.compile(
        r"我.*(?:什么|哪|几|谁|多大)|(?:什么|哪|几|谁).*我|记得|还记|知道我|怎么(?:叫|称呼|喊)我"
    ),
}
"""A question that asks for something of the person (Rule 6), in any words."""
_MAY_I = {
    "en": re.compile(
        r"\b(?:can|could|may|shall|should|must) (?:i|we)\b|\bdo (?:i|we) (?:need|have) to\b"
        r"|\bhow (?:do|can|should) (?:i|we) (?!(?:usually |normally )?(?:prefer|like|want)\b)",
        re.I,
    ),
    "zh": re.compile(r"我们?(?:可以|能|能不能|可不可以|需要|需不需要|要不要|该|应该)"),
}
"""Asking what the person may or must do ("where can I park my car?", 「我可以带狗吗」) is a
question for the documents, even when an entry shares its attribute (Rule 6): memory answers
it only when they do not."""
_ANYTHING_ABOUT_ME = re.compile(
    r"\b(?:know|remember|recall)\b.*\babout me\b|\bwhat do you (?:know|remember)\b"
    r"|\bwhat have i (?:told|said)\b|(?:记得|知道|了解).{0,4}我(?:什么|哪些|些什么)"
    r"|(?:关于我|我的事)|我(?:跟你|和你|对你)?说过(?:什么|哪些)",
    re.I,
)
"""A question for whatever memory holds, not for one thing (Rule 6)."""
_SUBJECTS = frozenset({"pet", "family"})
"""Attributes that name *who* a question is about (Rule 6): "my dog's name" is the dog's."""
_OF_A_SUBJECT = frozenset({"name", "age", "birthday", "likes"})
"""Attributes an entry about a pet or a family member says of *them* ("my cat is called
Mochi"): such an entry never answers a question about the person's own (Rule 6)."""
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've)\b|我", re.I)


_POSSESSIVE = re.compile(r"^\W*(?:(?:my|our)\s+|我(?:的|家的?|们家的?)?)", re.I)
_ONE_WORD = re.compile(r"[a-z]+\s+", re.I)


def _theirs(entry: str) -> bool:
    """The entry's subject is a relative or a pet ("My sister lives in Munich", "我妈妈的生日
    是…"), not the person ("I live with my wife in Leeds"): it says nothing of their own."""
    head = _POSSESSIVE.match(entry)
    if head is None:
        return False
    rest = entry[head.end() :]
    word = _ONE_WORD.match(rest)  # "my little sister", "our old cat"
    heads = [rest, rest[word.end() :]] if word else [rest]
    return any(_ATTRIBUTES[name].match(h) is not None for name in _SUBJECTS for h in heads)


_KINDS = {
    "dog": r"\b(?:dogs?|pupp(?:y|ies)|retrievers?|labradors?|labs?|poodles?|beagles?|terriers?"
    r"|spaniels?|collies?|huskies|husky|corgis?|dachshunds?|bulldogs?|chihuahuas?|pugs?"
    r"|schnauzers?|shepherds?|greyhounds?|whippets?)\b"
    r"|狗|犬|金毛|拉布拉多|泰迪|柯基|哈士奇|边牧|比熊|博美|萨摩|德牧",
    "cat": r"\b(?:cats?|kittens?|tabby|tabbies|siamese|ragdolls?)\b|猫|布偶|英短|美短|暹罗|狸花",
    "bird": r"\b(?:parrots?|budgies?|canar(?:y|ies)|birds?)\b|鹦鹉|鸟",
    "rabbit": r"\b(?:rabbits?|bunn(?:y|ies))\b|兔",
    "rodent": r"\b(?:hamsters?|guinea pigs?)\b|仓鼠|荷兰猪",
    "fish": r"\b(?:goldfish|fish)\b|金鱼|鱼",
    "reptile": r"\b(?:turtles?|tortoises?|lizards?|snakes?)\b|乌龟|蜥蜴|蛇",
    "horse": r"\b(?:horses?|ponies|pony)\b|马",
}
_KIND_PATTERNS = {kind: re.compile(pattern, re.I) for kind, pattern in _KINDS.items()}


def _kinds(text: str) -> set[str]:
    """The kinds of animal ``text`` names (a breed as its kind; "pet" names none)."""
    return {kind for kind, pattern in _KIND_PATTERNS.items() if pattern.search(text)}


def attributes(text: str) -> set[str]:
    """What ``text`` asks or says of a person (Rule 6)."""
    return {name for name, pattern in _ATTRIBUTES.items() if pattern.search(text)}


def asks_about_me(question: str, entries: Sequence[str]) -> bool:
    """A first-person question asking for an attribute that some entry has, or one naming
    someone an entry names ("When is Mia's birthday?" after "my daughter Mia's birthday is…")
    (Rule 6)."""
    if not entries:
        return False
    if not _FIRST_PERSON.search(question) and not _named_in(question, entries):
        return False
    return bool(relevant_memories(question, entries, limit=1, by_words=False))


_PROPER_NAME = re.compile(r"(?<=[a-z,]\s)(?-i:[A-Z][a-z]+)\b")


def _named_in(question: str, entries: Sequence[str]) -> bool:
    """The question names, not at its start, someone or something an entry names."""
    names = set(_PROPER_NAME.findall(question))
    return any(re.search(rf"\b{name}\b", entry) for name in names for entry in entries)


def relevant_memories(
    question: str,
    entries: Sequence[str],
    *,
    limit: int = 3,
    by_words: bool = True,
    best_only: bool = False,
) -> list[str]:
    """The memory entries that answer ``question`` (Rule 6), best first: sharing its subject,
    then most attributes and words (newest first among equals). A question for an attribute
    of the person's own that no entry has gets none, whatever words it shares ("which
    hospital was I born in?" and the job's hospital), nor one naming a kind of animal an
    entry's pet is not ("what's my dog called?" and the cat); one that shares no attribute
    or word with any entry gets the newest entries only when it asks for anything memory
    holds ("what do you know about me?"), else none ("what's my blood type?").
    ``by_words=False``: attributes only; ``best_only``: only the entries that share the most
    ("what do I do for a living?" is the job, not the city that shares a word)."""
    wanted = terms(question) if by_words else set()
    asked = attributes(question)
    subjects = asked & _SUBJECTS
    own = asked - _SUBJECTS
    by_rare = False
    if own and not subjects and not any(own & attributes(entry) for entry in entries):
        if own - _FREE_FORM:
            return []  # "which hospital was I born in?" is not the job's hospital
        by_rare = True  # "how do I prefer to be contacted?" and "contact me by email"
    kinds = _kinds(question)
    own_first = bool(asked) and not subjects and _FIRST_PERSON.search(question) is not None
    scored = []
    for i, entry in enumerate(entries):
        has = attributes(entry)
        if subjects and not subjects & has:
            continue  # about someone else
        if kinds and _kinds(entry) and not kinds & _kinds(entry):
            continue  # "what's my dog called?" is not the cat's name
        about_subject = own_first and bool(has & _SUBJECTS)
        if about_subject and asked & has and (asked & has <= _OF_A_SUBJECT or _theirs(entry)):
            continue  # "what should you call me?" is not the cat's name
        if by_rare:
            shared = len(rare_words(question, entry))
        else:
            shared = len(asked & has) * 2 + len(wanted & terms(entry))
        if shared:
            scored.append((not about_subject, shared, -i, entry))
    if not scored:
        return list(entries[:limit]) if by_words and _ANYTHING_ABOUT_ME.search(question) else []
    scored.sort(reverse=True)
    if best_only:
        scored = [item for item in scored if item[:2] == scored[0][:2]]
    return [entry for *_, entry in scored[:limit]]


_FREE_FORM = frozenset({"likes", "habit", "hobby", "goal", "diet", "allergy", "vehicle", "study"})
"""Attributes said in any words, with no fixed form to match (Rule 6b)."""
RARE_SHARED = 0.5
"""Rule 6b: a word at least this rare (``plugins.text.background_weight``) is shared."""
_WE = re.compile(r"\b(?:we|us|our|ours)\b|咱", re.I)
"""Rule 6b: "we" and "our" ask about the person too (我们 holds 我: ``_FIRST_PERSON``)."""


def rare_words(question: str, entry: str) -> set[str]:
    """The words a question and an entry share that say something: not everyday ones."""
    return {t for t in terms(question) & terms(entry) if background_weight(t) >= RARE_SHARED}


def remembered_by_words(question: str, entries: Sequence[str]) -> bool:
    """Rule 6b: a question in the first person (we and our too) or naming someone an entry
    names, sharing a rare word with an entry ("Which anniversary are we celebrating?" and "My
    partner and I are celebrating our tenth anniversary"), when no attribute matched it."""
    if not (_FIRST_PERSON.search(question) or _WE.search(question) or _named_in(question, entries)):
        return False
    return any(rare_words(question, entry) for entry in entries)


_SECOND_PERSON_EN = [
    (re.compile(r"\bI am\b|\bI'm\b"), "you are"),
    (re.compile(r"\bI\b"), "you"),
    (re.compile(r"\bmy\b", re.I), "your"),
    (re.compile(r"\bme\b"), "you"),
]


_LABELLED = re.compile(
    r"^(?P<label>(?:my|我的)\s*[^:：()（）]{1,12}?)\s*[:：]\s*(?P<value>.+)$", re.I
)
_A_SENTENCE = re.compile(r"^(?:i|we|my|our)\b|^我", re.I)


def second_person(entry: str) -> str:
    """A remembered first-person sentence, as said back to its speaker. An entry written as
    a label and a value ("My job: nurse", 「我的车：白色比亚迪」, ``memory.model_extraction``)
    is said as a sentence ("your job is nurse"): a colon is not spoken."""
    labelled = _LABELLED.match(entry)
    if labelled is not None and not _A_SENTENCE.match(labelled["value"]):
        zh = detect_language(entry) == "zh"
        entry = f"{labelled['label']}{'是' if zh else ' is '}{labelled['value']}"
    if detect_language(entry) == "zh":
        return entry.replace("我", "你")
    for pattern, replacement in _SECOND_PERSON_EN:
        entry = pattern.sub(replacement, entry)
    return entry


def says_dont_know(text: str) -> bool:
    lowered = text.lower().replace("’", "'")
    return any(marker in lowered for marker in DONT_KNOW_MARKERS)
