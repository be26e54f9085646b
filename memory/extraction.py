"""Rule-based extraction of long-term memories from a final user message (SPEC MEM-2/3/4).

Theory of operation
-------------------
A message is split into clauses (sentence ends; a comma or "and"/"but"/"但是" followed by a new
first-person start; a dash, which sets off a statement before a question: "I'm Deepak — could
you arrange a cake?"). Chinese drops a subject that goes on: after a clause whose subject is the
speaker, each comma piece with none of its own is a clause with 我 put back (「我叫周敏，
习惯坐靠窗的位子」 → 「我叫周敏」, 「我习惯坐靠窗的位子」); a relative's clauses and a
correction stay whole. A clause that only leads into a question ("Given the car I've got, …?",
「按我女儿的身高，…？」) states nothing. Each clause, with leading fillers and discourse markers
("well,", "actually", "no,", "sorry, I mean", "嗯", "其实", "不对", "我说错了"…) and stress
adverbs inside it ("I actually live…", "我其实住在…") removed, is matched against one table of
anchored patterns per language (Chinese when the clause has CJK characters). A pattern only
matches at the start of the clause, in the first person, so statements about third parties ("my
friend likes…", "他喜欢…") and reported speech never match. The first person includes
"we"/"our"/"我们" ("we moved to Bristol", "at home we speak Portuguese", "our cat is called
Mochi"): what a person says of their household is theirs to have remembered. "I'm a/an …" is a
job only when what follows ends in a job word and is not one of the words that only look like
one ("a pharmacist", "a bus driver"; not "a member", "a big fan"). "My <relative or pet> …" and
"我妈妈的生日是…" are relations, said as they were said: never the person's own name, age or
birthday. The first matching rule gives the kind (preference, goal, correction, relation, fact)
and, for stable facts, a key (``name``, ``birthday``, ``current_city``, ``hometown``, ``job``,
``employer``, ``native_language``, ``phone``, ``favorite:<thing>``, ``relation:<who>``): a newer
statement with the same key replaces the older one in the store. A phone number is the person's
when a phone word or "my/the wrong/the new number" stands beside it and no relative owns it ("My
mobile is 07700 900123"; "Sorry, I gave you the wrong number earlier, it's 07700 900321"
replaces it); a flight or booking number is not. Card-length numbers (13 digits or more) stay
secrets (``is_sensitive``).

A clause is *not* stored when it is a question (ends with ``?``/``？``, or is a Chinese question
by its particles and question words), hypothetical (if/suppose/would…, 如果/假如/要是…),
reported speech, negated after the matched stem ("my name is not…", "我喜欢的不是…"), longer
than ``MAX_ENTRY_CHARS``, or sensitive (passwords, keys, access links: ``is_sensitive``).
"Remember that …"/"请记住…" and "correction: …"/"纠正一下…" store what follows: as a stable fact
when it is one, else as a correction.

Spoken corrections: a trailing contrastive negation names the old value and is dropped before
matching ("Actually my birthday is June 5, not May 5" → ``birthday``: "my birthday is June 5";
"不对，我住在上海，不是北京" → ``current_city``: "我住在上海"); English needs a comma or dash before
the "not". "X is not A, (but/it's) B" and "…不是A，(而)是B" are read as "X is B" / "…是B". A tail
where "not" qualifies instead of contrasting ("not only…", "not far from…", "不是因为…", "不是很…")
is no contrast, so the clause stays negated. Nothing else changes: a negation without a
corrected value ("my name is not Anne", "I don't live in Berlin", "我不住在北京") stores nothing,
and the question, hypothetical, reported-speech and first-person checks apply to the corrected
statement as to any other. Under a stable key the correction replaces the older value in the
store; unkeyed corrections keep the kind of the statement they make.

A pronoun at the start of a clause ("He's three", "She loves swimming", "它三岁了") stands for
the relative or pet the person last spoke of (``Subject``: an earlier clause of the message, or
the message before, ``next_subject``): "We've got a beagle called Max." then "He's three."
stores "My beagle Max is three". "It" stands only for a pet; "he"/"she"/"他"/"她" for either;
once "he" was used, "it" means someone else. Their name, when it was said, stands for them
too ("Max loves the beach" → "My beagle Max loves the beach"; 「团团三岁了」 after 「我家有只猫叫
团团」 → 「我家的猫三岁了」). A message that neither names nor refers back to
one ends the subject, so "It's too expensive" later is nobody's.

Weak goal stems ("I plan to…", "我打算…") need a learning/long-term word after them, so "I plan
to return this" is not a goal.

The content stored is the clause as said (fillers, stress adverbs, a contrastive tail and
trailing punctuation removed). Matching is deliberately conservative: complex sentences,
indirect phrasing and several facts in one clause may not be stored. Everything here is pure
and fast (well under a millisecond for a normal message); saving is the store's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from memory.entries import MAX_ENTRY_CHARS, MemoryKind, is_sensitive
from plugins.language import CJK_IDEOGRAPHS, has_cjk
from plugins.text import PET_WORDS, ZH_PET_WORDS

MAX_MESSAGE_CHARS = 2_000
"""Longer messages are not scanned at all (bounded work per message)."""
MAX_PER_MESSAGE = 5
"""Most memories one message yields."""


@dataclass(frozen=True, slots=True)
class Extracted:
    kind: MemoryKind
    content: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Subject:
    """A relative or a pet the person spoke of, whom a following "he"/"she"/"it" means."""

    words: str
    """How the clause is restarted: "My beagle Max", "我家的狗", "我女儿"."""
    pet: bool
    zh: bool
    pronoun: str = ""
    """The pronoun the person used for them so far: only that one means them after."""
    name: str = ""
    """Their name, when it was said ("…called Max", "…叫团团"): a clause may start with it."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: MemoryKind
    pattern: re.Pattern[str]
    key: str | None = None
    """A stable key; ``{what}`` / ``{rel}`` are filled from the match."""
    gate: re.Pattern[str] | None = None
    """The rest of the clause must contain this (weak stems)."""
    inner: bool = False
    """Store what follows the stem (remember/correction commands)."""
    refuse: re.Pattern[str] | None = None
    """The rest of the clause must not contain this ("I'm a member" is no job)."""
    says: str | None = None
    """The entry in words that name what it is ("I'm a pharmacist, so…" → "I work as a
    pharmacist"), ``{rest}`` filled from the match; None: the clause as said."""


_EN_GOAL_WORDS = re.compile(
    r"\b(learn|become|study|practi[cs]e|improve|master|get better|run|lose|save|finish|start|"
    r"train|build|write|read|speak|pass|graduate|long[- ]term|every (day|week)|daily|weekly|"
    r"next year|this year)\b",
    re.I,
)
_ZH_GOAL_WORDS = re.compile(r"学|成为|考|坚持|长期|每天|每周|将来|以后|明年|今年|练|提高|掌握|减肥")

EN_RELATIONS = (
    r"wife|husband|partner|boyfriend|girlfriend|son|daughter|mother|mom|mum|father|dad|"
    r"brother|sister|boss|manager|dog|cat|baby|kid|child|children|kids|twins|parents|"
    r"grandmother|grandma|grandfather|grandpa|fianc[eé]e?|puppy|kitten"
)
ZH_RELATIONS = (
    r"妻子|老婆|丈夫|老公|儿子|女儿|妈妈|母亲|爸爸|父亲|哥哥|姐姐|弟弟|妹妹|男朋友|女朋友|"
    r"老板|领导|狗|猫|孩子|宝宝|爷爷|奶奶|外公|外婆|姥姥|姥爷|未婚妻|未婚夫|爱人|对象"
)
_ZH_SURNAMES = (
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁"
    "任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴"
    "莫孔向汤欧"
)
_NOT_NAMES = (
    r"Sorry|Fine|Good|Okay|Ok|Back|Here|Done|Ready|Happy|Glad|Sure|New|Not|Just|So|Very|Really"
    r"|Still|Also|Calling|Looking|Trying|Going|Interested|Curious|Afraid|Thinking|Wondering"
    r"|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|February|March|April"
    r"|May|June|July|August|September|October|November|December|Christmas|Today|Tomorrow"
)
_EN_INTRODUCTION = re.compile(
    rf"(?i:i'm|i am|this is|it's|it is)\s+(?!(?:{_NOT_NAMES})\b)"
    r"(?P<rest>[A-Z][a-z]+(?:[ -][A-Z][a-z]+)?)(?i:\s+(?:here|speaking|again|calling))?$"
    rf"|(?!(?:{_NOT_NAMES})\b)(?P<rest2>[A-Z][a-z]+)(?i:\s+(?:here|speaking))$"
)
"""An introduction by name alone ("I'm Sam", "This is Ana Lopez speaking"): a capitalised word
that is not one of the few that follow "I'm" as adjectives."""
_EN_JOB_WORDS = re.compile(
    r"^(?:[a-z-]+ ){0,3}(?:[a-z-]*(?:ist|ian|eer|ant|ent|or|er|man|woman|person)|nurse|chef"
    r"|cook|doctor|lawyer|judge|pilot|clerk|barista|midwife|vet|surgeon|medic|tutor|coach"
    r"|nanny|(?:un)?employed|retired|freelance|self-employed)\b",
    re.I,
)
"""The rest of "I'm a/an …" names a job: it ends in a job word (a pharmacist, a bus driver)."""
_EN_NOT_JOBS = re.compile(
    r"\b(?:member|customer|user|beginner|fan|newcomer|subscriber|owner|holder|passenger"
    r"|travell?er|visitor|caller|buyer|player|runner|swimmer|lover|person|patient|student"
    r"|resident|tenant|parent|mother|father|bit|lot|little|big|huge|regular|first|second"
    r"|last|other|number|order|letter|winner|loser|sucker|dreamer|talker|worrier|vegetarian"
    r"|vegan|early|late)\b",
    re.I,
)
"""Words that end like jobs but say something else ("I'm a member", "I'm a big fan")."""
_ZH_PEOPLE = (
    r"同事|朋友|家人|妻子|老婆|丈夫|老公|孩子|儿子|女儿|父母|妈妈|爸爸|男朋友|女朋友|室友|"
    r"同学|老板|领导|团队|队友|邻居|哥哥|姐姐|弟弟|妹妹"
)


def _en(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.I)


# One rule per line reads best for pattern tables.
# fmt: off
_EN_RULES: tuple[_Rule, ...] = (
    _Rule("correction", _en(r"(?:please\s+)?(?:remember|keep in mind|note)\s*(?:that\s*)?[:,]?\s*(?P<rest>.+)"), inner=True),  # noqa: E501
    _Rule("correction", _en(r"(?:correction|to correct myself|let me correct (?:that|myself)|i misspoke)\s*[:,]?\s*(?P<rest>.+)"), inner=True),  # noqa: E501
    _Rule("fact", _en(rf"(?!.*\b(?:my|our) (?:{EN_RELATIONS})\b)(?!.*\b(?:old|wrong|previous|former|work|office)\s+(?:phone |mobile )?(?:number|phone|mobile)\b(?:\s+(?:is|was))?\W*\+?\d)(?=.*(?:\b(?:phone|mobile|cell|telephone)\b|\b(?:my|wrong|right|correct|new) number\b|\bcall me (?:on|at)\b)).*?(?P<rest>\+?\d(?:[ ()-]{{0,2}}\d){{6,14}})\D*$"), key="phone", says="My phone number is {rest}"),  # noqa: E501
    _Rule("fact", _en(r"(?:my name is|(?:please |you can |just )?call me|i'm called|i am called|my name's|i go by|the name's|(?:people|everyone|friends|my friends|most people) (?:usually |just |all )?calls? me)\s+(?P<rest>.+)"), key="name"),  # noqa: E501
    _Rule("fact", _EN_INTRODUCTION, key="name", says="My name is {rest}"),
    _Rule("fact", _en(r"(?:my birthday is|my birthday's|i was born on)\s+(?P<rest>.+)"), key="birthday"),  # noqa: E501
    _Rule("fact", _en(r"(?:(?:i|we) (?:currently |now |still )?live in|(?:i'm|i am|we're|we are) (?:currently |now )?living in|(?:i|we)(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) (?:to|over to)|(?:i'm|i am|we're|we are) (?:now )?based in|my (?:current )?city is|(?:my|our) home is(?: in| now in|(?: now)?)?)\s+(?P<rest>.+)"), key="current_city"),  # noqa: E501
    _Rule("fact", _en(r"(?:i(?:'m| am) (?:originally )?from|i come from|my hometown is|i grew up in|i was (?:born and )?(?:born|raised) in|i(?:'m| am) a native of)\s+(?P<rest>.+)"), key="hometown"),  # noqa: E501
    _Rule("fact", _en(r"(?:i work as|i(?:'m| am) working as|my job is|my profession is|my occupation is|i(?:'m| am) employed as|i do (?:[a-z]+ ){1,3}for a living)\s*(?P<rest>.*)"), key="job"),  # noqa: E501
    _Rule("fact", _en(r"i(?:'m| am) (?P<rest>an? [a-z -]{2,40})"), key="job", gate=_EN_JOB_WORDS, refuse=_EN_NOT_JOBS, says="I work as {rest}"),  # noqa: E501
    _Rule("fact", _en(r"(?:i work (?:at|for)|my employer is|my company is)\s+(?P<rest>.+)"), key="employer"),  # noqa: E501
    _Rule("fact", _en(r"(?:my (?:native|first|mother) (?:language|tongue) is|i(?:'m| am) a native speaker of)\s+(?P<rest>.+)"), key="native_language"),  # noqa: E501
    _Rule("fact", _en(r"(?:(?:at home|at work|with my [a-z]+),? )?(?:i|we) (?:mostly |usually |mainly |only |also )?speak\s+(?P<rest>.+)")),  # noqa: E501
    _Rule("fact", _en(r"(?:i(?:'m| am) allergic to|i(?:'m| am) (?:a )?(?:vegetarian|vegan)|i (?:don't|do not|can't|cannot|can not) eat|i have an? (?:[a-z]+ )?allergy)(?P<rest>.*)")),  # noqa: E501
    _Rule("preference", _en(r"my (?:favou?rite) (?P<what>[a-z][a-z ]{0,28}?) is\s+(?P<rest>.+)"), key="favorite:{what}"),  # noqa: E501
    _Rule("relation", _en(rf"my (?P<rel>{EN_RELATIONS})(?:'s name is| is called| is named)\s+(?P<rest>.+)"), key="relation:{rel}"),  # noqa: E501
    _Rule("relation", _en(rf"(?:(?:(?:i|we) (?:have|'ve got|have got|own|(?:just |recently )?adopted|'ve adopted|have adopted)|(?:my|our) family (?:has|owns)) (?:an? |one |two |three |four |\d+ )?(?:{EN_RELATIONS}|{PET_WORDS})s?\b|i (?:work|live|study|train|play|meet|travel|cook|run) with my\b|i(?:'m| am) married\b)(?P<rest>.*)")),  # noqa: E501
    _Rule("relation", _en(r"(?:i|we)(?:'ve| have)?(?: got| own| have)? (?:an? |one |two |\d+ )(?P<rest>[a-z -]{2,40}? (?:called|named) .+)")),  # noqa: E501
    _Rule("relation", _en(rf"(?:my|our) (?P<rel>{EN_RELATIONS}|{PET_WORDS})\b(?P<rest>.+)")),  # noqa: E501
    _Rule("goal", _en(r"my (?:main |long[- ]term |big |biggest |personal )?(?:goal|aim|dream|objective|plan) is\s+(?P<rest>.+)")),  # noqa: E501
    _Rule("goal", _en(r"(?:i(?:'m| am)|we(?:'re| are)) (?:training|preparing|saving(?: up)?|studying|practi[cs]ing) for\s+(?P<rest>.+)")),  # noqa: E501
    _Rule("goal", _en(r"(?:i(?:'m| am) (?:planning|trying|hoping|aiming|working) to|i plan to|i intend to|i want to|i hope to|i(?:'m| am) learning|i(?:'m| am) studying)\s+(?P<rest>.+)"), gate=_EN_GOAL_WORDS),  # noqa: E501
    _Rule("preference", _en(r"i (?:really |much |also |generally |usually |always |strongly |definitely |honestly |still |actually )?(?:prefer|like|love|enjoy|hate|dislike|can't stand|cannot stand|don't like|do not like|don't enjoy|do not enjoy|am a fan of)\s+(?P<rest>.+)")),  # noqa: E501
    _Rule("preference", _en(r"i'm a fan of\s+(?P<rest>.+)")),
)

_ZH_RULES: tuple[_Rule, ...] = (
    _Rule("correction", re.compile(r"(?:请|麻烦)?(?:你)?(?:帮我)?(?:记住|要记住|记下|记一下)(?:一下)?[,，:：]?\s*(?P<rest>.+)"), inner=True),  # noqa: E501
    _Rule("correction", re.compile(r"(?:纠正一下|更正一下|我纠正一下|我更正一下|更正|纠正)[,，:：]?\s*(?P<rest>.+)"), inner=True),  # noqa: E501
    _Rule("fact", re.compile(r"(?:我的名字是|我的名字叫|我叫|你可以叫我|叫我|我的名字|(?:大家|朋友们?|别人|同事们?)(?:都|一般|平时)?(?:叫我|喊我|称呼我)|我姓)(?P<rest>.+)"), key="name"),  # noqa: E501
    _Rule("fact", re.compile(rf"我是(?P<rest>(?:小|老|大)?[{_ZH_SURNAMES}][\u4e00-\u9fff]{{0,2}})$"), key="name", says="我叫{rest}"),  # noqa: E501
    _Rule("fact", re.compile(r"我的?生日(?:是|在)(?P<rest>.+)"), key="birthday"),
    _Rule("fact", re.compile(rf"(?!.*我(?:的|家的?)?(?:{ZH_RELATIONS}))(?=.*(?:手机|电话|号码)).*?(?P<rest>\+?\d(?:[ ()-]{{0,2}}\d){{6,14}})\W*$"), key="phone", says="我的手机号是{rest}"),  # noqa: E501
    _Rule("fact", re.compile(r"我们?(?:一家|全家)?(?:现在|目前|如今|已经|上个月|去年|刚)?(?:住在|生活在|定居在|居住在|常住在|搬到了|搬到|搬去了|搬去|搬家到)(?P<rest>.+)"), key="current_city"),  # noqa: E501
    _Rule("fact", re.compile(r"(?:我来自|我老家是|我老家在|我的家乡是|我的老家是)(?P<rest>.+?)(?:长大的?)?$"), key="hometown"),  # noqa: E501
    _Rule("fact", re.compile(r"我是在(?P<rest>.+?)(?:长大|出生)的?$"), key="hometown"),
    _Rule("fact", re.compile(r"(?:我的工作是|我的职业是|我从事|我是一名|我是一位|我的工作是做)(?P<rest>.+)"), key="job"),  # noqa: E501
    _Rule("fact", re.compile(r"我(?:现在|目前)?(?:是)?在(?P<rest>[^，,]+?)(?:工作|上班|上班的|工作的)(?:[，,].*)?$"), key="employer"),  # noqa: E501
    _Rule("fact", re.compile(r"我的母语是(?P<rest>.+)"), key="native_language"),
    _Rule("fact", re.compile(r"我们?(?:在)?(?:家里?|平时)(?:一般|都|主要)?(?:说|讲)(?P<rest>.+)")),
    _Rule("fact", re.compile(r"我(?:对)(?P<rest>.+?)过敏|我(?:是)?吃素的?(?P<rest2>.*)")),
    _Rule("preference", re.compile(r"我最喜欢的(?P<what>.{1,8}?)是(?P<rest>.+)"), key="favorite:{what}"),  # noqa: E501
    _Rule("relation", re.compile(rf"我(?:的|家的?)?(?P<rel>{ZH_RELATIONS})(?:的名字)?叫(?P<rest>.+)"), key="relation:{rel}"),  # noqa: E501
    _Rule("relation", re.compile(rf"我(?:们)?(?:家)?(?:里)?(?:养了?|有)(?:一只|一条|一个|两只|只|条|[0-9]+只)?(?:小)?(?:{ZH_PET_WORDS})(?P<rest>.*)")),  # noqa: E501
    _Rule("relation", re.compile(rf"我(?:的|家的?|们家的?)?(?P<rel>{ZH_RELATIONS}|{ZH_PET_WORDS})(?P<rest>(?:今年|已经|现在|刚)?[0-9零一二两三四五六七八九十]+(?:岁|个月)(?:大)?.*)"), key="relation:{rel}:age"),  # noqa: E501
    _Rule("relation", re.compile(rf"我(?:和|跟|与)(?:我的)?(?:{_ZH_PEOPLE})(?P<rest>.+)")),
    _Rule("relation", re.compile(rf"我(?:的|家的?|们家的?)?(?P<rel>{ZH_RELATIONS}|{ZH_PET_WORDS})的?(?P<rest>(?:很|也|最|特别|非常|比较|一直|总是)?(?:生日|名字|工作|职业|今年|是|叫|在|喜欢|爱|住|过敏|对|不能|会|读|上).+)")),  # noqa: E501
    _Rule("relation", re.compile(rf"我有(?:一个|两个|三个|四个|[0-9]+个)?(?:{ZH_RELATIONS}|{_ZH_PEOPLE})(?P<rest>.*)")),  # noqa: E501
    _Rule("goal", re.compile(r"我的(?:目标|梦想|计划|愿望|长期目标|学习目标)是(?P<rest>.+)")),
    _Rule("goal", re.compile(r"我(?:打算|计划|准备|想要|希望|正在|在准备|正在准备|在备考)(?P<rest>.+)"), gate=_ZH_GOAL_WORDS),  # noqa: E501
    _Rule("preference", re.compile(r"我(?:很|也|最|比较|更|真的|一直|特别|非常|还是|平时|一般|向来)?(?:喜欢|爱吃|爱喝|爱看|爱听|偏好|偏爱|讨厌|不喜欢|不太喜欢|不爱|习惯|倾向于|更倾向于)(?P<rest>.+)")),  # noqa: E501
)
_COMMAND_ONLY = re.compile(
    r"\s*(?:请|麻烦你?)?(?:记住|纠正一下|更正一下)\s*|\s*(?:please )?remember(?: that)?\s*", re.I
)
# fmt: on

# A "." only ends a sentence before a space or the end ("3.5", "example.com" stay whole).
_SENTENCE = re.compile(r"(?:[^.!?。！？;；\n]|\.(?=[^\s.!?]))+[.!?。！？;；]*")
# A new clause starts at a comma (optionally followed by a connective such as "but"/"但是",
# which stays with the clause and is stripped as a filler) or a bare "and"/"but" before a
# first-person start: "I said Berlin earlier, but I actually live in Munich" is two clauses.
_CLAUSE_SPLIT = re.compile(
    r"[,，]\s*(?=(?:(?:[Bb]ut|[Aa]nd|[Ss]o|[Aa]ctually)[\s,]+)?(?:I\b|I'|[Mm]y\b))"
    r"|\s+(?:and|but)\s+(?=I\b|I'|[Mm]y\b)"
    r"|[,，]\s*(?=(?:但是|可是|不过|其实|实际上|事实上|而且|所以)?我)"
    r"|(?:而且|并且|但是|可是|不过)(?=我)"
    # A question after a statement in one sentence: "I'm coming with my husband Jakob next
    # week, is there parking?" states something before it asks (the question is refused).
    r"|,\s*(?=(?i:is|are|do|does|can|could|will|would|should|what|where|when|how|which|who)\b"
    r"[^,]*\?\s*$)"
    r"|[，,](?=[^，,]*[\u4e00-\u9fff][^，,]*(?:[吗呢][？?]?|[？?])\s*$)"
    # 「我老公叫陈志远，他生日是九月十二号」: a pronoun starts a clause about whom it means.
    r"|[，,]\s*(?=[他她它](?![们的]))"
    # 「我是张伟，在一家医院当护士」: the speaker goes on with a new verb — a clause of its own.
    r"|[，,](?=(?:在|当|做|从事)[\u4e00-\u9fff])"
    # A dash sets off a clause of its own, in speech as in writing: "I'm Deepak, by the way —
    # could you arrange a cake?" states a name before it asks; "my little girl Maisie is three
    # — do they pay?" too.
    r"|\s+[—–-]{1,2}\s+|\s*(?:—|——)\s*"
)
# Leading fillers and discourse markers, corrective ones included ("no,", "sorry, I mean",
# "不对", "我说错了"): what follows them is matched as an ordinary statement.
_EN_FILLER = re.compile(
    r"^(?:(?:well|so|oh|ok|okay|actually|also|and|but|by the way|btw|just so you know|fyi|hey|"
    r"hi|hello|yes|yeah|um|uh|hmm|no|nope|oh and|sorry|wait|oops|in fact|to be clear|"
    r"i mean(?: to say)?|i meant(?: to say)?|scratch that|let me rephrase)\b[\s,!.:-]*)+",
    re.I,
)
_ZH_FILLER = re.compile(
    r"^(?:(?:顺便说一下|顺便说|对了|另外|还有|然后|而且|那个|其实|实际上|事实上|好的|是的|不过|但是|可是|"
    r"所以|你好|您好|不对|不是的|我刚才说错了|刚才说错了|我说错了|说错了|我(?:记|搞|弄)错了|(?:记|搞|弄)错了|错了|"
    r"准确地说|确切地说|嗯|啊|哦|呃|对)"
    r"[\s,，!！。:：]*|不是[\s,，!！。:：]+)+"
)
# Trailing asides say nothing of the fact ("I'm Priya, by the way.").
_EN_TRAILING_FILLER = re.compile(
    r"[\s,]+(?:by the way|btw|fyi|just so you know|for the record)[\s.!]*$", re.I
)
# "actually"/"其实" inside a clause only stress it: "I actually live in…" reads "I live in…".
_EN_ADVERB = re.compile(r"\s+(?:actually|in fact)\b,?(?=\s)", re.I)
_ZH_ADVERB = re.compile(r"其实|实际上|事实上")
# A trailing contrastive negation names the old value of a correction ("…Munich now, not
# Berlin", "…上海，不是北京"): it is dropped and what comes before it is matched. Tails where
# "not" qualifies rather than contrasts ("not only…", "not because…", "不是因为…") are not
# contrasts: they stay, and the clause counts as negated. English needs the comma/dash.
_EN_CONTRAST = re.compile(
    r"(?:\s*[,;]|\s+[-–—])\s*(?:and\s+|but\s+)?(?:not|no longer)\s+"
    r"(?!(?:only|just|because|that|to mention|to say|sure|really|at all|bad|much|many|anymore|"
    r"any|yet|always|ever|even|so|too|very|quite|far|near|close|exactly|necessarily|entirely|"
    r"completely|fully|all|every|everyone|everything|if|when|unless|since|until|while|i|me|we|"
    r"you|he|she|they|it|this|like|a lot)\b)[^,;:!?]{1,40}$",
    re.I,
)
_ZH_CONTRAST = re.compile(
    r"[，,；;]?\s*(?:而|但)?(?:不是|并不是|而不是|而非|不再是|不在|不叫)"
    r"(?!因为|为了|说|很|太|特别|非常|真的|所有|每|一直|只|故意|我|你|他|她|它|什么|谁|哪|吗|那么|这么|"
    r"一般|经常|总|常)[^，,。；;！!？?]{1,20}$"
)
# "X is not A, (but/it's) B" and "…不是A，(而)是B" state B: read as "X is B" / "…是B".
_EN_NOT_BUT = re.compile(
    r"(?P<stem>.+?)\s+(?:is not|isn't|is no longer)\s+[^,;]{1,40}?(?:\s*,\s*|\s+)"
    r"(?:but(?: it's| it is)?|it's|it is)\s+(?P<new>[^,;]{1,60})",
    re.I,
)
_ZH_NOT_BUT = re.compile(
    r"(?P<stem>我[^，,]{0,12}?)(?:不是|并不是)[^，,是]{1,20}[，,]?\s*(?:而|但)?是(?P<new>[^，,]{1,40})"
)
_ZH_EMPTY_REST = re.compile(r"[的了是在呢吧啊呀\s,，]*")
_TRAILING = " \t.。!！?？;；,，、\"'“”"
_EN_QUESTION = re.compile(
    r"^(?:do|does|did|is|are|am|can|could|would|should|will|what|why|how|when|where|who|which)\b",
    re.I,
)
_ZH_QUESTION = re.compile(r"[吗呢么]$|什么|为什么|怎么|哪里|哪儿|哪个|是不是|有没有|多少|几个|谁")
_EN_HYPOTHETICAL = re.compile(
    r"\b(?:if|suppose|supposing|imagine|pretend|hypothetically|would|wish|maybe|perhaps|might|"
    r"unless)\b|\bi'd\b",
    re.I,
)
_EN_LEAD = re.compile(
    r"^(?:given|considering|based on|going by|according to|for|with|about|as for)\b", re.I
)
_ZH_LEAD = re.compile(r"^(?:按照?|根据|依照?|照|就|以|对于|关于)")
"""A clause that only leads into a question ("Given the car I've got, which spaces…?",
「按我女儿的身高，…怎么收费？」) states nothing."""
_ZH_HYPOTHETICAL = re.compile(r"如果|假如|假设|要是|万一|假装|想象|也许|可能|或许|的话|假若|倘若")
_EN_REPORTED = re.compile(r"\b(?:said|says|told|tells|thinks|claims)\b", re.I)
_ZH_REPORTED = re.compile(r"(?:他|她|他们|她们|别人|朋友|同事)(?:说|认为|觉得|告诉)")
_DIET = re.compile(
    r"\b(?:can't|cannot|can not|doesn't|does not|don't|do not|shouldn't|should not|mustn't)"
    r" (?:eat|have|drink|digest|tolerate)\b|不能吃|不可以吃|不能喝",
    re.I,
)
"""What someone may not eat is a fact, not a negation of one ("my cat can't eat chicken")."""
_EN_NEGATION = re.compile(r"\b(?:not|never|no longer|nothing|none|no)\b|n't\b", re.I)
_ZH_NEGATION = re.compile(r"不是|没有|并不|不再|从不|从来不|从没|不会|不想|不叫|不在|不住|没")
_FIRST_PERSON = re.compile(
    r"我|家里|咱|\bi\b|\bi'|\bmy\b|\bme\b|\bwe\b|\bwe'|\bour\b|\bus\b|\bremember\b|\bcorrection\b"
    r"|\b(?:this is|it's|it is) \w+(?: \w+)? (?:here|speaking|again|calling)\b|记住|纠正|更正",
    re.I,
)


_WHO_ALONE = re.compile(r"\s*(?:(?:[Mm]y|[Oo]ur)\s+[a-z]+(?:\s+[A-Z][a-z]+)?|[A-Z][a-z]+)\s*")
"""A clause that is only someone ("my wife", "my partner Sam", "Tom"): the first half of "…
and I" (the split before "and I" cut a subject of two; the model reads them together)."""


def _clauses(text: str) -> list[str]:
    out: list[str] = []
    for sentence in _SENTENCE.findall(text):
        parts = _CLAUSE_SPLIT.split(sentence)
        merged: list[str] = []
        for part in parts:
            # "请记住，我…" / "remember, I…": the command and what follows belong together.
            if merged and _COMMAND_ONLY.fullmatch(merged[-1]):
                merged[-1] = merged[-1] + "，" + part
            else:
                merged.append(part)
        out.extend(_speaker_goes_on([p.strip() for p in merged if p.strip()]))
    return out


_ZH_SPEAKER = re.compile(r"^(?:我们?)(?![的家])")
_ZH_HAS_SUBJECT = re.compile(r"我|你|您|他|她|它|咱")
_ZH_BIDDING = re.compile(r"请|别|不要|麻烦|帮我|给我")
_ZH_COMMA = re.compile(r"[，,]")
_ZH_SOMEONE = re.compile(f"{ZH_RELATIONS}|{ZH_PET_WORDS}")
"""「我有两个儿子，大的叫明明」: after a relative or a pet is named, who goes on is not sure."""
_ZH_PUTS_RIGHT = re.compile(r"错了|不对|纠正|更正|(?:^|[，,])\s*(?:其实|实际上)?不?是")
"""A correction (「我记错了，其实是七个人，不是五个」) says what it corrects as a whole."""


def _speaker_goes_on(parts: list[str]) -> list[str]:
    """Chinese drops a subject that goes on: in 「我叫周敏，习惯坐靠窗的位子」 and
    「我是从杭州来的，在一家电商公司上班」 the person still speaks of themself. After a
    clause whose subject is the speaker (我, 我们 — not 我家的狗, 我女儿: whose the rest
    is, is theirs to say), each comma piece with no subject of its own is a clause of its own
    with 我 put back; a request in it (「有事请发微信给我」, 「别打电话」) stays as said, and a
    correction (「我记错了，其实是七个人」) stays whole. English keeps its subjects."""
    out: list[str] = []
    speaker = ""
    for part in parts:
        if not has_cjk(part):
            out.append(part)
            speaker = ""
            continue
        pieces = [piece.strip() for piece in _ZH_COMMA.split(part) if piece.strip()]
        if _ZH_PUTS_RIGHT.search(part):
            out.append(part)
            speaker = ""
            continue
        head = _ZH_SPEAKER.match(pieces[0]) if pieces else None
        if head is not None and _ZH_SOMEONE.search(pieces[0]) is None:
            speaker = head.group()
        elif not (speaker and not _ZH_HAS_SUBJECT.search(part)):
            out.append(part)
            speaker = ""
            continue
        for i, piece in enumerate(pieces):
            if (i or head is None) and not _ZH_HAS_SUBJECT.search(piece):
                if _ZH_BIDDING.search(piece) or len(piece) < 2:
                    if out and i:
                        out.append(piece)
                        continue
                else:
                    piece = speaker + piece
            out.append(piece)
    return out


def _strip(clause: str, zh: bool) -> str:
    """The clause without fillers and stress adverbs, "X is not A but B" read as "X is B"."""
    if zh:
        body = _ZH_ADVERB.sub("", _ZH_FILLER.sub("", clause.strip())).strip()
        rewrite = _ZH_NOT_BUT.fullmatch(body.strip(_TRAILING))
        return f"{rewrite['stem']}是{rewrite['new']}" if rewrite else body
    body = _EN_ADVERB.sub("", _EN_FILLER.sub("", clause.strip())).strip()
    body = _EN_TRAILING_FILLER.sub("", body)
    rewrite = _EN_NOT_BUT.fullmatch(body.strip(_TRAILING))
    return f"{rewrite['stem']} is {rewrite['new']}" if rewrite else body


def _refused(clause: str, zh: bool) -> bool:
    """Questions, hypotheticals and reported speech (whole clause)."""
    body = clause.rstrip(" \t.。!！;；,，")
    if body.endswith(("?", "？")):
        return True
    if zh:
        return bool(
            _ZH_QUESTION.search(body)
            or _ZH_HYPOTHETICAL.search(body)
            or _ZH_REPORTED.search(body)
            or _ZH_LEAD.match(body)
        )
    return bool(
        _EN_QUESTION.match(body)
        or _EN_HYPOTHETICAL.search(body)
        or _EN_REPORTED.search(body)
        or _EN_LEAD.match(body)
    )


def _match(clause: str, zh: bool, *, nested: bool = False) -> Extracted | None:
    tail = (_ZH_CONTRAST if zh else _EN_CONTRAST).search(clause)
    if tail is not None:
        # "…June 5, not May 5": the statement before the contrast, when it is one on its own.
        head = clause[: tail.start()].strip(_TRAILING)
        if head and not _refused(head, zh):  # "我住在上海吗，不是北京" asks
            found = _match_rules(head, zh, nested=nested, contrast=True)
            if found is not None:
                return found
    return _match_rules(clause, zh, nested=nested, contrast=False)


def _match_rules(clause: str, zh: bool, *, nested: bool, contrast: bool) -> Extracted | None:
    for rule in _ZH_RULES if zh else _EN_RULES:
        match = rule.pattern.match(clause)
        if match is None:
            continue
        groups = match.groupdict()
        rest = (groups.get("rest") or groups.get("rest2") or "").strip()
        if rule.inner:
            if nested:
                return None
            inner = _strip(rest, zh).strip(_TRAILING)
            if not inner:
                return None
            found = _match(inner, zh, nested=True)
            if found is not None and found.key is not None:
                return found
            return Extracted("correction", found.content if found is not None else inner)
        if contrast and rest and _ZH_EMPTY_REST.fullmatch(rest):
            return None  # "我喜欢的｜不是咖啡": the contrast is the whole statement
        if (_ZH_NEGATION if zh else _EN_NEGATION).search(_DIET.sub("", rest)):
            return None
        if rule.gate is not None and not rule.gate.search(rest):
            continue
        if rule.refuse is not None and rule.refuse.search(rest):
            continue
        key = rule.key
        if key is not None:
            what = (groups.get("what") or "").strip().lower()
            rel = (groups.get("rel") or "").strip().lower()
            key = key.format(what=what, rel=rel)
        content = rule.says.format(rest=rest.strip(_TRAILING)) if rule.says else clause
        return Extracted(rule.kind, content, key)
    return None


def stated_clauses(text: str) -> list[str]:
    """The clauses of a message that state something in the first person (what ``extract``
    would match against its patterns): no question, hypothetical, reported speech or secret."""
    if not text or len(text) > MAX_MESSAGE_CHARS or not _FIRST_PERSON.search(text):
        return []
    out: list[str] = []
    raws: list[str] = []
    for raw in _clauses(text):
        if raws and _WHO_ALONE.fullmatch(raws[-1]) and raw.startswith("I "):
            raws[-1] += " and " + raw  # "My partner and I are…": one subject, one clause
        else:
            raws.append(raw)
    for raw in raws:
        zh = has_cjk(raw)
        if _refused(raw, zh):
            continue
        clause = _strip(raw, zh).strip(_TRAILING)
        tail = (_ZH_CONTRAST if zh else _EN_CONTRAST).search(clause)
        if tail is not None and tail.start() > 0:
            clause = clause[: tail.start()].strip(_TRAILING)  # "…York now, not Leeds"
        if clause and len(clause) <= MAX_ENTRY_CHARS and not is_sensitive(clause):
            out.append(clause)
    return out


_NEGATION = re.compile(
    r"^\W*(?:and\s+|but\s+)?(?:not|no longer)\s+(?:the\s+|a\s+|an\s+|in\s+|on\s+|at\s+)?"
    r"|^\W*(?:而|但)?(?:不是|并不是|而不是|而非|不再是|不在|不叫)",
    re.I,
)


def corrected_values(text: str) -> list[str]:
    """The old values a message's corrections name in a contrastive tail ("I've moved to
    York, not Leeds" → "Leeds"; 「其实是七个人，不是五个」 → 「五个」): what an entry said that
    is no longer true."""
    out: list[str] = []
    for raw in _clauses(text):
        zh = has_cjk(raw)
        clause = _strip(raw, zh).strip(_TRAILING)
        tail = (_ZH_CONTRAST if zh else _EN_CONTRAST).search(clause)
        if tail is None or tail.start() == 0:
            continue
        old = _NEGATION.sub("", tail.group().strip(" ,，;；-–—")).strip(_TRAILING)
        if old:
            out.append(old)
    return out


_EN_PRONOUN = re.compile(r"(?P<who>he|she|it)(?:'s\b(?P<be>)|\s+(?=\S))", re.I)
_ZH_PRONOUN = re.compile(r"(?P<who>他|她|它)(?![们的])")
_EN_SUBJECT = re.compile(
    rf"\b(?:[Mm]y|[Oo]ur|[Aa]n?|[Oo]ne)\s+(?:[a-z]+\s+)?(?P<who>(?i:{EN_RELATIONS}|{PET_WORDS}))\b"
    r"(?:(?:,?\s+(?:(?:who is |who's |that is |that's |is )?(?:called|named)\s+)?|'s name is\s+)"
    r"(?P<name>[A-Z][a-z]+)\b)?"
)
_ZH_SUBJECT = re.compile(
    rf"我(?:们)?(?:家)?(?:的|里)?(?:养了?|有)?(?:一只|一条|一个|只|条|个)?(?:小)?"
    rf"(?P<who>{ZH_RELATIONS}|{ZH_PET_WORDS})"
    rf"(?:[，,]?(?:它|他|她)?(?:的名字)?(?:叫|名叫|叫做)(?P<name>[{CJK_IDEOGRAPHS}]{{1,3}}?)(?=[，,。.!！\s]|$))?"
)
_EN_PET = re.compile(PET_WORDS, re.I)
_ZH_PET = re.compile(ZH_PET_WORDS)


def _subject_in(clause: str) -> Subject | None:
    """The last relative or pet a clause speaks of as the person's, if any."""
    zh = has_cjk(clause)
    found = list((_ZH_SUBJECT if zh else _EN_SUBJECT).finditer(clause))
    if not found:
        return None
    who, name = found[-1]["who"], found[-1]["name"] or ""
    if zh:
        pet = bool(_ZH_PET.fullmatch(who))
        return Subject(f"我家的{who}" if pet else f"我{who}", pet, zh, name=name)
    words = f"My {who.lower()}" + (f" {name}" if name else "")
    return Subject(words, bool(_EN_PET.fullmatch(who)), zh, name=name)


def _referred(clause: str, subject: Subject | None, zh: bool) -> tuple[str, Subject] | None:
    """The clause with its leading pronoun replaced by the subject it stands for, and the
    subject with that pronoun; None when it starts with no pronoun that can stand for it."""
    if subject is None or subject.zh != zh:
        return None
    if subject.name and clause.startswith(subject.name):
        rest = clause[len(subject.name) :]
        if zh or re.match(r"(?:'s\b|\s)", rest):  # "Max is three", "Max's bowl"; not "Maxine"
            return subject.words + rest, subject
    match = (_ZH_PRONOUN if zh else _EN_PRONOUN).match(clause)
    if match is None:
        return None
    pronoun = match["who"].lower()
    if pronoun in ("it", "它") and not subject.pet or subject.pronoun not in ("", pronoun):
        return None
    if zh:
        said = subject.words + clause[match.end() :]
    else:
        said = subject.words + (" is" if match["be"] is not None else " ") + clause[match.end() :]
    return said, replace(subject, pronoun=pronoun)


_EN_RENAMED = re.compile(r"(?P<new>[A-Z][a-z]+),?\s+not\s+(?P<old>[A-Z][a-z]+)")
_ZH_RENAMED = re.compile(
    rf"(?:是)?(?P<new>[{CJK_IDEOGRAPHS}]{{1,3}})[，,]?\s*不是(?P<old>[{CJK_IDEOGRAPHS}]{{1,3}})"
)


def _renamed(clause: str, subject: Subject | None, zh: bool) -> tuple[str, Subject] | None:
    """A bare name put right ("Sorry, I meant Ellie, not Ella" after "My daughter's name is
    Ella"; "是圆圆，不是团团"): the subject's name restated, so the entry under the same key
    replaces the old one; None when the old name is not the subject's."""
    if subject is None or not subject.name or subject.zh != zh:
        return None
    match = (_ZH_RENAMED if zh else _EN_RENAMED).fullmatch(clause)
    if match is None or match["old"].lower() != subject.name.lower():
        return None
    new = match["new"]
    if zh:
        return f"{subject.words}叫{new}", replace(subject, name=new)
    who = subject.words.removesuffix(f" {subject.name}")
    return f"{who}'s name is {new}", replace(subject, words=f"{who} {new}", name=new)


def _follow(clause: str, subject: Subject | None, zh: bool) -> tuple[str, Subject | None, bool]:
    """The clause as matched (a leading pronoun replaced by whom it means; a bare name put
    right restated, ``_renamed``), the subject after it, and whether the clause named or
    referred to one."""
    renamed = _renamed(clause, subject, zh)
    if renamed is not None:
        return renamed[0], renamed[1], True
    referred = _referred(clause, subject, zh)
    if referred is not None:
        return referred[0], referred[1], True
    named = _subject_in(clause)
    return clause, named or subject, named is not None


def next_subject(text: str, subject: Subject | None) -> Subject | None:
    """Whom a pronoun in the message after ``text`` means: the last relative or pet ``text``
    names or refers to by a pronoun (``subject``, whom the message before left); else none."""
    touched = False
    for raw in _clauses(text) if text and len(text) <= MAX_MESSAGE_CHARS else []:
        zh = has_cjk(raw)
        _, subject, touching = _follow(_strip(raw, zh).strip(_TRAILING), subject, zh)
        touched = touched or touching
    return subject if touched else None


def extract(text: str, subject: Subject | None = None) -> list[Extracted]:
    """The memories a final user message states (see the module docstring), in order;
    ``subject``: whom a leading pronoun means (``next_subject`` of the message before)."""
    if not text or len(text) > MAX_MESSAGE_CHARS:
        return []
    if subject is None and not _FIRST_PERSON.search(text):
        return []
    found: list[Extracted] = []
    seen: set[str] = set()
    for raw in _clauses(text):
        zh = has_cjk(raw)
        if _refused(raw, zh):
            continue
        clause, subject, _ = _follow(_strip(raw, zh).strip(_TRAILING), subject, zh)
        if not clause or len(clause) > MAX_ENTRY_CHARS or is_sensitive(clause):
            continue
        item = _match(clause, zh)
        if item is None or item.content in seen:
            continue
        if is_sensitive(item.content) or len(item.content) > MAX_ENTRY_CHARS:
            continue
        seen.add(item.content)
        found.append(item)
        if len(found) >= MAX_PER_MESSAGE:
            break
    return found
