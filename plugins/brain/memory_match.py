"""Which remembered facts answer a question about the person (SPEC MEM-5): the memory half of
what every brain decides in code (``plugins.brain.grounding`` reads the turn and its evidence).

Theory of operation
-------------------
The entries are the ``<memory_data>`` block's lines (``grounding.memory_entries``), each a
fact the person stated, in the first person ("My dog is called Biscuit", 「我对花生过敏」) or as
a label and a value ("My job: nurse"). A question and an entry are compared by what they say
of a person, not by their words alone:

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
        retriever called Biscuit" answers "what's my dog called?": ``plugins.text.PET_WORDS``);
        a relative is of their kind ("what's my daughter called?" is not the son's name), a
        friend or a colleague is a subject too, and an entry about the subject asked about
        must say what is asked of them (the partner's name is not "my partner and I cycle
        everywhere": ``_says_of_them``). A question for a number or a price is not answered
        by an entry without one (「我的门禁卡卡号是多少?」 and 「我门禁卡好像丢了」). A
        liking asked finds a habit or a hobby said, a diet an allergy, a way to reach the
        person their phone, when no entry has the attribute itself (``_RELATED``).
        A question that plainly asks about the person ("who am I", "how old am I", 「我是
        做什么工作的」, 「我是哪里人」) is a memory question even when nothing is remembered:
        the answer is that they have not said, never a document's sentence.
        ``asks_about_me`` is a first-person question whose attribute some entry has: when it
        asks *for* something ("what should you call me?", 「我是做哪一行的」) it is a memory
        question whatever its words; any other ("can I bring my dog?") is searched in the
        documents first and answered from memory only when they do not answer it; so is one
        asking what the person may or must do ("where can I park my car?", 「我可以带狗吗」:
        ``MAY_I``), whatever an entry shares with it.
Rule 6b. Memory by rare words: an attribute said in no fixed form (a liking, a habit, a diet,
        a car: ``_FREE_FORM``) that no entry has is matched by the rare words a question
        shares with an entry ("how do I prefer to be contacted?" and "please contact me by
        email"); and when the documents do not answer a question in the first person ("we"
        and "our" too) or naming someone an entry names, an entry sharing a rare word with it
        answers it ("which anniversary are we celebrating?": ``remembered_by_words``).
Rule 6c. Memory by meaning: a first-person question no attribute or word matched, asking for
        no attribute the rules read but a liking, a habit, a hobby or a goal
        (``may_match_by_meaning``: 「我的生日是哪天？」 is not the wife's, 「我对什么过敏？」 not a
        booking), is answered by the entry closest to it in meaning (multilingual-e5-small,
        the knowledge index's embedder), when that clears the question's everyday baseline
        (``closest_in_meaning``): "What time did I say I'd get there?" and "I'm driving down
        from Leeds and should roll in around six". A question that only starts from the
        person ("given what I'm bringing", "if…", what it costs: ``_NOT_ABOUT_ME``) asks the
        documents. e5-small cannot tell when no entry answers: "What's my blood type?" is
        answered with "I can't have gluten" (0.039 above the baseline, above most right
        answers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from plugins.language import detect_language
from plugins.text import (
    PET_WORDS,
    ZH_PET_WORDS,
    AnswerType,
    answer_type,
    background_weight,
    holds_answer,
)
from plugins.text import content_terms as terms

_ATTRIBUTES: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.I)
    for name, pattern in {
        "name": r"\bnames?\b|\bcall(?:ed|s)?\b|\bcalling me\b|\bgo by\b|\bnickname"
        r"|\b(?:address|greet) me\b|\bto be (?:addressed|called)\b|\bwho (?:am i|i am)\b"
        r"|叫|名字|称呼|姓|我是谁|单名|双名",
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
        "likes": r"\blikes?\b|\bloves?\b|\bfavou?rite|\bprefer|\benjoy|\bdislike|\bhate"
        r"|\bcan'?t stand\b|喜欢|爱|最爱|偏好|讨厌",
        "vehicle": r"\bcars?\b|\bdriv(?:e|es|ing)\b|\bvehicle|\bmotor(?:bike|cycle)\b|车|辆"
        r"|怎么(?:过)?来的",
        "study": r"\bstud(?:y|ies|ying|ent)\b|\bmajor(?:ing)?\b|\bdegree\b|\buniversity|\bcollege\b"
        r"|专业|学的|学什么|在读|读研|读博|大学|学生|研究生",
        "hobby": r"\bhobb|\binstrument|\bplay(?:s|ing)?\b|\bsports?\b|\b(?:free|spare) time\b"
        r"|\bfor fun\b|\borchestra|\bband\b|\bclub\b|爱好|乐器|运动|业余|弹|打球|踢球",
        "habit": r"\busual(?:ly)?\b|\balways\b|\bnormally\b|\bregular(?:ly)?\b"
        r"|平时|经常|总是|每次|每天|习惯",
        "phone": r"\b(?:phone|mobile|cell|telephone)\b|\b(?:my|your) number\b"
        r"|\bwhat number\b.*\b(?:me|my)\b|手机|电话|号码",
        "contact": r"\b(?:reach|contact(?:ed)?|text|email|e-mail|ring) me\b"
        r"|\bget (?:hold of|in touch with) me\b|\bcall me (?:on|at|after|before)\b"
        r"|联系我|找我|发微信|打电话|发短信|发邮件",
        "others": r"\bfriends?\b|\bcolleagues?\b|\bco-?workers?\b|\bboss\b|\bneighbou?rs?\b"
        r"|\broom-?mates?\b|朋友|同事|同学|老板|领导|邻居|室友",
        "language": r"\blanguages?\b|\bspeak\b|\bnative\b|语言|母语|方言"
        r"|(?:说|讲)(?:什么|哪些|哪几种|几种)(?:话|语)|(?:粤|国|英|日|韩|法|德)语|普通话",
    }.items()
}
ASKS_FOR = {
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
MAY_I = {
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
_SUBJECTS = frozenset({"pet", "family", "others"})
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
_KINDS.update(
    {
        "daughter": r"\bdaughters?\b|\b(?:little |baby |eldest |youngest )?girl\b|女儿|闺女",
        "son": r"\bsons?\b|\b(?:little |baby |eldest |youngest )?boy\b|儿子",
        "wife": r"\bwife\b|老婆|妻子|太太|媳妇",
        "husband": r"\bhusband\b|老公|丈夫",
        "mother": r"\bm(?:um|om|other)\b|妈|母亲",
        "father": r"\bdad\b|\bfather\b|爸|父亲",
        "sister": r"\bsisters?\b|姐|妹",
        "brother": r"\bbrothers?\b|哥|弟",
        "partner": r"\bpartner\b|\b(?:boy|girl)friend\b|\bfianc[ée]e?\b|对象|男朋友|女朋友|未婚",
    }
)
"""Kinds of relative, as of animal: "what's my daughter called?" is not the son's name."""
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
        # "我喜欢坐什么位置?" and "我习惯坐靠窗的位子": a liking asked, a habit said
        related = set().union(*(_RELATED.get(name, ()) for name in own))
        if any(related & attributes(entry) for entry in entries):
            asked, own = asked | related, own | related
    if own and not subjects and not any(own & attributes(entry) for entry in entries):
        if own - _FREE_FORM:
            return []  # "which hospital was I born in?" is not the job's hospital
        by_rare = True  # "how do I prefer to be contacted?" and "contact me by email"
    kinds = _kinds(question)
    own_first = bool(asked) and not subjects and _FIRST_PERSON.search(question) is not None
    counted = _counted(question)
    scored = []
    for i, entry in enumerate(entries):
        if counted is not None and not holds_answer(entry, counted):
            continue  # "我的门禁卡卡号是多少?" is not "我门禁卡好像丢了"
        has = attributes(entry)
        if subjects and not subjects & has:
            continue  # about someone else
        if kinds and _kinds(entry) and not kinds & _kinds(entry):
            continue  # "what's my dog called?" is not the cat's name
        if subjects and not _says_of_them(asked & _OF_A_SUBJECT, has, entry):
            continue  # "what's my partner's name?" is not "my partner and I cycle"
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


_EN_NAMED = re.compile(r"(?<=\w)[\s,]+(?-i:[A-Z][a-z]+)\b")
_ZH_NAMED = re.compile(
    r"(?:叫|名叫|名字)|(?:女儿|儿子|老婆|老公|妻子|丈夫|爸爸|妈妈|孩子|狗|猫)"
    r"(?!生日|今年|工作|喜欢|名字|过)[\u4e00-\u9fff]{1,3}?(?:[0-9一二两三四五六七八九十]|今年|是|在|岁)"
)


def _says_of_them(wanted: set[str], has: set[str], entry: str) -> bool:
    """An entry about the relative or pet a question asks about says what it asks for: their
    name ("my little girl Maisie is three", 「我女儿朵朵五岁了」), age, birthday or liking.
    "My partner and I cycle everywhere" does not say the partner's name."""
    for attribute in wanted:
        if attribute in has:
            continue
        if attribute == "name" and (_EN_NAMED.search(entry) or _ZH_NAMED.search(entry)):
            continue
        return False
    return True


_RELATED = {
    "contact": ("phone",),
    "phone": ("contact",),
    "likes": ("habit", "hobby"),
    "hobby": ("likes", "habit"),
    "habit": ("likes",),
    "diet": ("allergy",),
    "allergy": ("diet",),
}
"""Rule 6: attributes a question may ask in the other's words when no entry has its own: a
liking for a habit or a hobby, a diet for an allergy and back."""
_FREE_FORM = frozenset(
    {"likes", "habit", "hobby", "goal", "diet", "allergy", "vehicle", "study", "contact"}
)
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


_ZH_WHICH_NUMBER = re.compile(r"几[号台扇只条辆间层楼口套座]|多少[号台扇只条辆间层套]")


def _counted(question: str) -> AnswerType | None:
    """A number or a price the question asks for (``plugins.text.answer_type``): an entry
    without one does not answer it (Rule 6). Times and durations are said in too many ways
    ("around six in the evening") to ask the same of them."""
    wanted = answer_type(question)
    if wanted is not None and wanted.kind in ("number", "price"):
        return wanted
    return AnswerType("number") if _ZH_WHICH_NUMBER.search(question) else None


def entries_of_the_kind_asked(question: str, entries: Sequence[str]) -> list[str]:
    """The entries that hold a number or a price when the question asks for one (Rule 6)."""
    counted = _counted(question)
    return [e for e in entries if counted is None or holds_answer(e, counted)]


_NOT_ABOUT_ME = re.compile(
    r"(?:if|given|going by|based on|how much|cost|price|fee|pay)"
    r"|如果|要是|假如|按照?|像我这|根据|多少钱|费用|收费|[交付]多少",
    re.I,
)
"""Rule 6c: a question that only starts from the person (a condition, "given what I'm
bringing", what it costs them) asks the documents, not memory."""


_CUED = frozenset({"allergy", "diet", "vehicle", "study", "contact"})
"""Rule 6c: attributes said in words an entry shows (an allergy, a car): asked with no entry
holding one, the question is not remembered, not answered by the nearest entry."""


def may_match_by_meaning(question: str, entries: Sequence[str]) -> bool:
    """Rule 6c: whether the entry closest in meaning may answer a question no attribute or
    word matched — one in the first person ("we" too) that asks about no relative or pet and
    for no attribute the rules read ("when's my birthday?", 「我对什么过敏？」 with none stay
    unremembered; 「我的生日是哪天？」 is not the wife's): "What time did I say I'd get
    there?" and "…roll in around six"; "what do I like doing in my spare time?" and "my
    partner and I cycle just about everywhere"."""
    if not entries or not (_FIRST_PERSON.search(question) or _WE.search(question)):
        return False
    if _NOT_ABOUT_ME.search(question):
        return False
    asked = attributes(question)
    return not asked & (_SUBJECTS | _CUED) and not asked - _FREE_FORM


MEANING_MARGIN = 0.0
"""Rule 6c: how far above the question's everyday baseline (``plugins.embedding``'s
reference sentences) the closest entry's similarity must be."""


def closest_in_meaning(
    entries: Sequence[str], similarities: Sequence[float], baseline: float
) -> str | None:
    """Rule 6c: the entry most similar to the question, when it clears the baseline."""
    if not entries:
        return None
    best = max(range(len(entries)), key=lambda i: similarities[i])
    return entries[best] if similarities[best] - baseline >= MEANING_MARGIN else None


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
