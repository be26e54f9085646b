"""Text handling for the knowledge base: sentence-preserving chunking and lexical terms.

Chunking
--------
A document is split into sentences — after Chinese ``。！？；`` (and their ASCII forms when a
space, a line end or CJK text follows), and at every line break — then sentences are packed into
chunks of about ``target_chars`` characters. A sentence is never cut unless it alone is longer
than ``max_chars`` (then it is cut at a comma or space if possible, else hard). A Markdown
heading (``# …``) or a blank line closes the current chunk, so sections stay apart.

Terms (SPEC KB-2)
-----------------
Chinese (CJK) runs become overlapping character bigrams (a lone character stays a unigram);
other runs of letters and digits become whole words, case-folded and lightly stemmed (plural
``-s``/``-es``/``-ies``, ``-ing``, ``-ed``). ``query_terms`` also drops filler — English stop
words and Chinese question bigrams such as 怎么 / 什么 / 多少 — unless nothing else is left, so
filler never decides a match; bigrams across a particle, pronoun or the copula (店的, 的退,
限是, 我换) and bigrams overlapping filler (足什 in 满足什么) — those span two words. A query
word with synonyms (``SYNONYMS``: a small general-purpose table — 邮费/运费, warranty/guarantee,
Saturday/weekend) also looks for them. The coverage gate in ``knowledge.retrieval`` counts the
rest, weighing words the documents lack by how common they are in everyday language
(``background_weight``, from the word frequencies in ``plugins/data/common_words.tsv``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from dataclasses import dataclass
from importlib import resources

from plugins.language import (
    CJK_IDEOGRAPHS,
    dominant_language,
    is_cjk_ideograph,
    joins_without_space,
)

_TOKEN = re.compile(rf"[{CJK_IDEOGRAPHS}]+|[^\W_]+", re.UNICODE)
# Sentence ends: CJK punctuation always; ASCII . ! ? ; only before whitespace, the end or CJK
# text (so 3.5, e.g. and URLs stay whole).
# No cut at a semicolon: its clauses belong to one sentence (``grounding._SENTENCE`` too).
_SENTENCE_END = re.compile(rf"[。！？!?…]+[”’」』)）]*|\.(?=\s|$|[{CJK_IDEOGRAPHS}])")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_HEADING_MARK = "\x00h"  # marks a heading among a chunk's parts while it is being built

STOP_WORDS = frozenset(
    """a an the is are was were be been am do does did doing done have has had of to in on at
    for from by with about as into than then this that these those it its i me my we our you your
    he she they them their what which who whom whose when where why how can could should would
    will shall may might must please tell know want need get there here and or but if so not no
    any some all just also very much many more most s t""".split()
)
"""English words that never decide a match (after case folding, before stemming)."""

FILLER_BIGRAMS = frozenset(
    """怎么 怎样 什么 多少 多久 如何 是否 是不 不是 请问 问一 一下 可以 能不 不能 能否 的是 是什
    么是 有没 没有 有什 哪些 哪个 哪里 为什 知道 告诉 告诉 我们 你们 他们 吗 呢 我想 想知 想问
    一个 这个 那个 要怎 该怎 需要 能够 应该 一般 时候 的话 这样 那样 还是 或者 几个 多长 多大
    多远 多高 多重 关于 有关 麻烦 帮我 请你 是否""".split()
)
"""Chinese question and filler bigrams that never decide a match."""


_STOP_CHARS = frozenset("的了吗呢吧啊呀么几谁啥哪是我你他她它把被让和与或也都就才又很")
"""Particles, pronouns, the copula and question characters: a query bigram holding one (店的,
的退, 几点, 限是, 我换) spans a word boundary or asks rather than names, and is dropped."""

SYNONYMS: tuple[tuple[str, ...], ...] = (
    # English (whole words; stemmed like any other word)
    ("warranty", "guarantee"),
    ("headphones", "headset", "earphones"),
    ("weekend", "saturday", "sunday"),
    ("visitor", "guest"),
    ("clean", "wash", "wipe"),
    ("meal", "food"),
    ("cost", "price", "fee"),
    ("buy", "purchase"),
    ("reimburse", "refund", "repay"),
    # Chinese (two-character words: one bigram each)
    ("运费", "邮费"),
    ("毛巾", "浴巾"),
    ("价格", "价钱"),
    ("购买", "购物"),
    ("上班", "工作"),
    ("营业", "开门"),
    ("手机", "电话"),
)
"""Groups of words that mean the same in everyday use, general-purpose (not fitted to one
document). A query word in a group also looks for the other words of its group."""


TRANSLATIONS: tuple[tuple[str, ...], ...] = (
    # time
    ("open", "开放", "营业", "开门"),
    ("closed", "关门", "打烊", "店休", "闭馆"),
    ("monday", "周一"),
    ("tuesday", "周二"),
    ("wednesday", "周三"),
    ("thursday", "周四"),
    ("friday", "周五"),
    ("saturday", "周六"),
    ("sunday", "周日"),
    ("weekend", "周末"),
    ("weekday", "平日"),
    ("holiday", "假日", "节日"),
    ("morning", "早上", "上午"),
    ("afternoon", "下午"),
    ("evening", "晚上"),
    ("noon", "中午"),
    ("winter", "冬季", "冬天"),
    ("summer", "夏季", "夏天"),
    ("early", "提前"),
    ("late", "迟到", "逾期"),
    ("delay", "延误", "延迟"),
    ("schedule", "班次", "时刻"),
    ("departure", "出发", "发车", "开船"),
    ("arrival", "到达", "抵达"),
    # money
    ("price", "价格", "收费", "费用"),
    ("free", "免费"),
    ("discount", "优惠", "折扣"),
    ("deposit", "押金", "订金"),
    ("refund", "退款", "退还"),
    ("pay", "付款", "支付"),
    ("cash", "现金"),
    ("credit", "信用"),
    ("invoice", "发票"),
    ("receipt", "收据"),
    ("fine", "罚款"),
    ("tip", "小费"),
    ("tax", "税费"),
    ("bill", "账单"),
    ("tuition", "学费"),
    # booking and service
    ("book", "预约", "预订", "订位"),
    ("cancel", "取消"),
    ("reschedule", "改约", "改期"),
    ("return", "退货", "归还"),
    ("exchange", "换货"),
    ("complaint", "投诉"),
    ("warranty", "保修", "质保"),
    ("repair", "维修", "修理"),
    ("damage", "损坏"),
    ("lost", "遗失", "丢失"),
    ("insurance", "保险"),
    ("contract", "合同"),
    ("account", "账号", "账户"),
    ("password", "密码"),
    ("member", "会员"),
    ("points", "积分"),
    ("rent", "租赁", "出租", "租用", "租借"),
    ("delivery", "配送", "送货"),
    ("parcel", "包裹"),
    ("storage", "保管", "存放", "寄存"),
    ("locker", "储物"),
    ("print", "打印"),
    ("copy", "复印"),
    ("appointment", "预约"),
    # people
    ("child", "儿童", "孩子", "小孩"),
    ("adult", "成人", "大人"),
    ("student", "学生"),
    ("senior", "老人", "长者"),
    ("baby", "婴儿", "宝宝"),
    ("passenger", "乘客", "旅客"),
    ("staff", "员工", "职员"),
    ("teacher", "老师", "教师"),
    ("coach", "教练"),
    ("doctor", "医生"),
    ("dentist", "牙医"),
    ("guest", "客人", "住客"),
    # places and things
    ("parking", "停车"),
    ("car", "汽车", "车辆"),
    ("bicycle", "单车", "自行"),
    ("bike", "单车", "自行"),
    ("helmet", "头盔"),
    ("boat", "船只"),
    ("ferry", "渡轮", "轮渡"),
    ("island", "海岛", "岛上"),
    ("ticket", "门票", "车票", "船票", "机票"),
    ("fare", "票价"),
    ("luggage", "行李"),
    ("baggage", "行李"),
    ("suitcase", "箱子"),
    ("wheelchair", "轮椅"),
    ("elevator", "电梯"),
    ("lift", "电梯"),
    ("stairs", "楼梯"),
    ("room", "房间", "客房", "包间"),
    ("bed", "床位"),
    ("shower", "淋浴"),
    ("pool", "泳池"),
    ("gym", "健身"),
    ("library", "图书"),
    ("museum", "博物"),
    ("exhibition", "展览"),
    ("clinic", "诊所"),
    ("apartment", "公寓"),
    ("address", "地址"),
    ("window", "窗户", "玻璃"),
    ("pet", "宠物"),
    ("vaccine", "疫苗"),
    ("phone", "手机", "电话"),
    ("email", "邮件", "邮箱"),
    ("internet", "网络", "宽带"),
    ("router", "路由"),
    ("data", "流量"),
    ("plan", "套餐"),
    ("lesson", "课程", "上课"),
    ("class", "课程", "上课"),
    ("trial", "试听", "试用", "体验"),
    ("course", "课程"),
    ("borrow", "借阅"),
    ("renew", "续借", "续费"),
    ("overdue", "逾期", "超期"),
    # food and conduct
    ("food", "食物", "饮食", "餐饮"),
    ("eat", "用餐", "吃饭", "饮食"),
    ("drink", "饮料", "饮品"),
    ("alcohol", "酒水", "饮酒"),
    ("wine", "红酒"),
    ("beer", "啤酒"),
    ("breakfast", "早餐", "早饭"),
    ("lunch", "午餐", "午饭", "午市"),
    ("dinner", "晚餐", "晚饭", "晚市"),
    ("allergy", "过敏"),
    ("vegetarian", "素食"),
    ("smoking", "吸烟", "抽烟"),
    ("noise", "噪音"),
    ("clean", "清洁", "保洁", "打扫"),
    ("wash", "清洗", "洗护"),
    ("weather", "天气"),
    ("wind", "大风", "风力"),
    ("minimum", "最低", "起订", "最少"),
    ("extra", "另外", "额外", "另收"),
    ("charge", "收钱", "收取"),
    ("return", "往返"),
    ("kayak", "划艇"),
    ("board", "上船", "登船"),
    ("request", "申请"),
    ("apply", "申请"),
    ("allowed", "允许"),
    ("bring", "携带", "自带"),
    ("inside", "室内", "店内"),
    ("outside", "室外", "户外"),
    ("desk", "座位", "桌子"),
    ("card", "卡片"),
    ("maximum", "最高", "上限"),
)
"""Words and their everyday translations (English word, two-character Chinese words): a
question in one language also looks for the other's words, so it can match a document in the
other language (issue 31 item 3: "both languages are searched where the documents differ in
language"). General service vocabulary, not fitted to one document."""


def _synonym_map(groups: tuple[tuple[str, ...], ...]) -> dict[str, tuple[str, ...]]:
    """Each term's other words in ``groups``; a term in two groups takes both groups' words."""
    out: dict[str, dict[str, None]] = {}
    for group in groups:
        keys = [terms(word)[0] for word in group]
        assert all(terms(word) == [key] for word, key in zip(group, keys, strict=True)), group
        for key in keys:
            known = out.setdefault(key, {})
            for other in keys:
                if other != key:
                    known.setdefault(other, None)
    return {key: tuple(others) for key, others in out.items()}


def normalize(text: str) -> str:
    """NFKC (full-width to half-width) and case folding."""
    return unicodedata.normalize("NFKC", text).casefold()


_SHORT_CVC = re.compile(r"[^aeiou]*[aeiou][^aeiouwxy]")
"""A stem of one syllable ending consonant, vowel, consonant (not w, x, y): its word ends in a
silent e that -ing and -ed dropped (smok-ing, vap-ing, clos-ed; not show-ing, fix-ed)."""


def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed. Short words and numbers stay as they are."""
    if len(word) <= 3 or not word.isalpha() or not word.isascii():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if len(base) >= 2 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]  # stopped -> stop
            elif (
                base.endswith(("at", "iv", "ur", "bl", "pl"))
                or (suffix == "ing" and base.endswith("c"))
                or _SHORT_CVC.fullmatch(base)
            ):
                base += "e"  # rated -> rate, arriving -> arrive, smoking -> smoke, vaping -> vape
            return base
    return word


_CONTENT_STOP_EN = frozenset(
    """a an the and or but to of in on at for with from by is are was were be been am do does did
    what when where which who how why can could will would should may might i you he she it we
    they me my your our their this that these those there here have has had not no yes please
    tell about any some much many long just also so then if than as""".split()
)
_CONTENT_STOP_ZH = frozenset(
    "什么 多少 多久 怎么 如何 是否 可以 一下 请问 我们 你们 他们 的是 是什".split()
)
_LATIN_WORD = re.compile(r"[a-z0-9]+")
_CJK_RUN = re.compile(f"[{CJK_IDEOGRAPHS}]+")


def content_terms(text: str) -> set[str]:
    """Content terms, as a set, for comparing two short texts (a question and a sentence or a
    memory entry): Chinese character bigrams and English words of 3+ letters that are not stop
    words, stemmed as the knowledge index stems them (``stem``)."""
    lowered = text.lower()
    out = {
        stem(w) for w in _LATIN_WORD.findall(lowered) if len(w) >= 3 and w not in _CONTENT_STOP_EN
    }
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            continue
        out.update(b for i in range(len(run) - 1) if (b := run[i : i + 2]) not in _CONTENT_STOP_ZH)
    return out


def terms(text: str) -> list[str]:
    """Every lexical term of ``text``, in order, repeats kept (for term frequencies)."""
    out: list[str] = []
    for token in _TOKEN.findall(normalize(text)):
        if is_cjk_ideograph(token[0]):
            if len(token) == 1:
                out.append(token)
            else:
                out.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            out.extend(_split_mixed(token))
    return out


def _split_mixed(token: str) -> list[str]:
    # "v1" stays one word; "7天" was already split by the CJK class. Kana etc. are words.
    return [stem(token)]


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query's lexical side: ``terms`` (distinct, filler removed) rank chunks; ``units`` are
    what the coverage gate counts — one per English word and one per content character of a
    Chinese run, each the set of query terms that would cover it (for a character: the kept
    bigrams it is part of). So 积分的有效期是多久 has the units 积 分 有 效 期 是, and a chunk
    with 积分 and 有效期 covers five of six even though the bigram 期是 appears nowhere."""

    terms: tuple[str, ...]
    units: tuple[frozenset[str], ...]
    words: tuple[str, ...] = ()
    """Per unit, what it stands for: the English word (stemmed) or the Chinese character — a
    character may be a word on its own (带, 买), so a unit no document bigram covers weighs no
    more than that word (``knowledge.retrieval``)."""
    language: str = ""
    """``plugins.language.dominant_language(query)``: "zh" or "en" ("" when unknown)."""
    answer: AnswerType | None = None
    """``answer_type(query)``: the kind of answer the question asks for, if it says."""


def parse_query(text: str) -> ParsedQuery:
    """The query's terms and coverage units (see ``ParsedQuery`` and the module doc).

    A bigram that overlaps a filler bigram (足什 in 满足什么) straddles a word boundary and is
    dropped like the filler itself. A term with synonyms (``SYNONYMS``) brings them along: each
    is a query term, and covers the same unit. When the query holds nothing but filler, the
    filler is kept."""
    terms_seen: dict[str, None] = {}
    units: list[frozenset[str]] = []
    words: list[str] = []
    fallback: dict[str, None] = {}
    for token in _TOKEN.findall(normalize(text)):
        if not is_cjk_ideograph(token[0]):
            word = stem(token)
            fallback.setdefault(word, None)
            if token not in STOP_WORDS:
                covering = frozenset((word, *_SYNONYMS.get(word, ())))
                for term in covering:
                    terms_seen.setdefault(term, None)
                units.append(covering)
                words.append(word)
            continue
        if len(token) == 1:
            fallback.setdefault(token, None)
            continue
        grams = [token[i : i + 2] for i in range(len(token) - 1)]
        for gram in grams:
            fallback.setdefault(gram, None)
        filler_positions = {
            i + k for i, g in enumerate(grams) if g in FILLER_BIGRAMS for k in (0, 1)
        }
        kept = [
            _content_gram(g) and i not in filler_positions and i + 1 not in filler_positions
            for i, g in enumerate(grams)
        ]
        expanded = [
            (gram, *_SYNONYMS.get(gram, ())) if keep else ()
            for gram, keep in zip(grams, kept, strict=True)
        ]
        for group in expanded:
            for term in group:
                terms_seen.setdefault(term, None)
        for position, char in enumerate(token):
            if char in _STOP_CHARS or position in filler_positions:
                continue
            covering = frozenset(
                term
                for i in (position - 1, position)
                if 0 <= i < len(grams)
                for term in expanded[i]
            )
            if covering:
                units.append(covering)
                words.append(char)
    lang, answer = dominant_language(text), answer_type(text)
    if not terms_seen:
        every = tuple(fallback)
        return ParsedQuery(every, tuple(frozenset((t,)) for t in every), every, lang, answer)
    return ParsedQuery(tuple(terms_seen), tuple(units), tuple(words), lang, answer)


def _content_gram(gram: str) -> bool:
    return gram not in FILLER_BIGRAMS and _STOP_CHARS.isdisjoint(gram)


def translated(query: ParsedQuery) -> ParsedQuery:
    """``query`` with each unit also covered by its terms' translations (``TRANSLATIONS``):
    how it is matched against a passage in the other language."""
    units = tuple(
        frozenset(unit | {t for term in unit for t in _TRANSLATIONS.get(term, ())})
        for unit in query.units
    )
    found = dict.fromkeys(query.terms)
    for unit in units:
        found.update(dict.fromkeys(sorted(unit)))
    return dataclasses.replace(query, terms=tuple(found), units=units)


def query_terms(text: str) -> list[str]:
    """The distinct terms of a query that can decide a match (``parse_query(text).terms``)."""
    return list(parse_query(text).terms)


# ------------------------------------------------------------ answer types
#
# A question that asks how long, what time or how many/much needs a sentence holding that kind
# of answer: a duration (a number with a time unit), a clock time, a number. The rule is used on
# the semantic side only (``knowledge.retrieval``, Rule 4d): a chunk that is merely close in
# meaning but holds no such answer ("How many vacation days…" against a sentence about flights
# under six hours) does not count. Time units come in two classes, so "how many days" wants days,
# weeks, months or years ("2 weeks" answers it), and "how many hours" hours or minutes.

_NUMERAL = (
    r"(?:\d+(?:[.,]\d+)?|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|fifteen|twenty|thirty|forty|fifty|sixty|hundred|several|few|half|single"
    r"|[零一二两三四五六七八九十百千万半几]+)"
)
_LONG_UNITS = r"(?:days?|weeks?|months?|years?|天|日|周|星期|礼拜|个月|月|年)"
_SHORT_UNITS = r"(?:hours?|hrs?|minutes?|mins?|seconds?|小时|钟头|分钟|秒)"
_UNIT_CLASS = {"long": _LONG_UNITS, "short": _SHORT_UNITS}
_DURATION_IN = {
    cls: re.compile(rf"{_NUMERAL}\s*(?:-|个)?\s*{units}(?![a-z])", re.IGNORECASE)
    for cls, units in (*_UNIT_CLASS.items(), ("any", f"(?:{_LONG_UNITS}|{_SHORT_UNITS})"))
}
_CLOCK_IN = re.compile(
    r"\d{1,2}[:：]\d{2}|\d{1,2}\s*(?:am|pm|a\.m\.|p\.m\.|o'clock)|[\d零一二两三四五六七八九十]+\s*点",
    re.IGNORECASE,
)
_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
    r"|forty|fifty|sixty|hundred|thousand|once|twice|dozen"
)
_NUMBER_IN = re.compile(
    rf"\d|\b(?:{_NUMBER_WORDS})\b|[零一二两三四五六七八九十百千万半]+\s*"
    r"(?:个|次|张|份|件|位|名|元|块|分|点|倍|天|日|周|月|年|小时|分钟)",
    re.IGNORECASE,
)

_ASKS_CLOCK = re.compile(r"what time|几点|什么时间开|几时", re.IGNORECASE)
_ASKS_UNIT = re.compile(
    rf"how many\s+(?:\w+\s+)?(?P<en>{_LONG_UNITS}|{_SHORT_UNITS})(?![a-z])"
    rf"|(?:几|多少)\s*(?:个)?\s*(?P<zh>{_LONG_UNITS}|{_SHORT_UNITS})",
    re.IGNORECASE,
)
_ASKS_DURATION = re.compile(r"how long|多久|多长时间|多长|多少时间|多少天", re.IGNORECASE)
_ASKS_NUMBER = re.compile(r"how many|how much|多少|几(?:次|个|张|份|件|位|名|倍)", re.IGNORECASE)
_ASKS_PRICE = re.compile(
    r"\bwhat (?:do|does|did|will|would|should) (?:i|we|you|they|he|she|it) (?:pay|owe)\b"
    r"|\bwhat(?:'s| is| are| was) (?:the |their |its |your )?(?:price|cost|fee|charge|rate)s?\b"
    r"|\bhow much (?:does|do|did|will|would|is|are)\b.*\b(?:cost|charge|pay)\b"
    r"|多少钱|什么价|啥价|收多少|交多少|付多少",
    re.IGNORECASE,
)
_PRICE_IN = re.compile(
    r"[$€£¥]\s*\d|\d+(?:[.,]\d+)?\s*(?:元|块|角|(?:dollars?|euros?|pounds?|yuan|rmb|usd|eur|gbp)(?![a-z]))"
    r"|\bfree\b|\bno (?:extra )?charge\b|免费|不收费|不收",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class AnswerType:
    kind: str
    """"duration", "clock", "price" (an amount of money, or free) or "number"."""
    unit_class: str = "any"
    """For a duration: "long" (days…years), "short" (hours, minutes) or "any"."""


def answer_type(question: str) -> AnswerType | None:
    """The kind of answer ``question`` asks for (see above), or None when it does not say."""
    text = normalize(question)
    if _ASKS_CLOCK.search(text):
        return AnswerType("clock")
    unit = _ASKS_UNIT.search(text)
    if unit is not None:
        named = unit.group("en") or unit.group("zh") or ""
        long = re.fullmatch(_LONG_UNITS, named, re.IGNORECASE) is not None
        return AnswerType("duration", "long" if long else "short")
    if _ASKS_DURATION.search(text):
        return AnswerType("duration")
    if _ASKS_PRICE.search(text):
        return AnswerType("price")
    if _ASKS_NUMBER.search(text):
        return AnswerType("number")
    return None


def holds_answer(text: str, answer: AnswerType) -> bool:
    """Whether ``text`` holds an answer of that kind (a duration, a clock time, a number)."""
    text = normalize(text)
    if answer.kind == "clock":
        return _CLOCK_IN.search(text) is not None
    if answer.kind == "duration":
        return _DURATION_IN[answer.unit_class].search(text) is not None
    if answer.kind == "price":
        return _PRICE_IN.search(text) is not None
    return _NUMBER_IN.search(text) is not None


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (each keeps its punctuation); line breaks end sentences."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            out.append("")  # a paragraph break, kept so chunking can close a chunk there
            continue
        start = 0
        for match in _SENTENCE_END.finditer(line):
            piece = line[start : match.end()].strip()
            if piece:
                out.append(piece)
            start = match.end()
        rest = line[start:].strip()
        if rest:
            out.append(rest)
    return out


def chunk_text(text: str, *, target_chars: int = 160, max_chars: int = 400) -> list[str]:
    """``text`` cut into chunks of whole sentences (see the module doc)."""
    if target_chars < 1 or max_chars < target_chars:
        raise ValueError("need 1 <= target_chars <= max_chars")
    chunks: list[str] = []
    current: list[str] = []
    section: list[str] = []  # the headings over the current text, repeated in each chunk
    size = 0

    def flush(keep_section: bool = False) -> None:
        nonlocal current, size
        if current and not _only_heading(current):
            chunks.append(_join(current))
        elif current and not keep_section:
            return  # headings with no text yet: they open the next chunk
        current = list(section) if keep_section else []
        size = sum(len(h) for h in current)

    for sentence in sentences(text):
        if not sentence:
            flush()
            continue
        if _HEADING.match(sentence):
            heading = _HEADING_MARK + _HEADING.sub("", sentence).strip().strip("#").strip()
            if not _only_heading(current):
                flush()
                section = []
            section.append(heading)
            current.append(heading)
            size += len(heading)
            continue
        for piece in _cut_long(sentence, max_chars):
            if size + len(piece) > target_chars and not _only_heading(current):
                flush(keep_section=True)
            current.append(piece)
            size += len(piece) + 1
    flush()
    return chunks


def _only_heading(parts: list[str]) -> bool:
    return bool(parts) and all(p.startswith(_HEADING_MARK) for p in parts)


def _join(parts: list[str]) -> str:
    """Headings on their own lines (without their ``#``), then the sentences."""
    out = ""
    for part in parts:
        if part.startswith(_HEADING_MARK):
            out += part[len(_HEADING_MARK) :] + "\n"
            continue
        if out and not out.endswith("\n"):
            out += "" if joins_without_space(out[-1]) and joins_without_space(part[0]) else " "
        out += part
    return out.strip()


def _cut_long(sentence: str, max_chars: int) -> list[str]:
    pieces: list[str] = []
    while len(sentence) > max_chars:
        window = sentence[:max_chars]
        cut = max(window.rfind(c) for c in ",，、 ")
        cut = cut + 1 if cut > max_chars // 2 else max_chars
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        pieces.append(sentence)
    return pieces


_SYNONYMS = _synonym_map(SYNONYMS)
_TRANSLATIONS = _synonym_map(TRANSLATIONS)


COMMON_ZIPF = 5.5
"""A word at least this frequent in general text (Zipf scale: 5.5 ≈ three per ten thousand
words — way, right, 需要, 自己) weighs ``COMMON_WEIGHT`` when the documents lack it."""
RARE_ZIPF = 4.3
"""A word at most this frequent (or not in ``plugins/data/common_words.tsv``) weighs 1."""
COMMON_WEIGHT = 0.2


@functools.cache
def _common_words() -> dict[str, float]:
    data = resources.files("plugins").joinpath("data/common_words.tsv").read_text("utf-8")
    out: dict[str, float] = {}
    for line in data.splitlines():
        if line and not line.startswith("#"):
            word, zipf = line.split("\t")
            out[word] = int(zipf) / 10
    return out


def background_weight(term: str) -> float:
    """How much a query term the documents lack says about the question, from 1 (a rare word —
    the question asks about something the documents do not name) down to ``COMMON_WEIGHT`` (an
    everyday word — someone, while, 满足 — that a paraphrase brings along). Linear in the term's
    Zipf frequency between ``RARE_ZIPF`` and ``COMMON_ZIPF``."""
    zipf = _common_words().get(term, 0.0)
    share = min(1.0, max(0.0, (COMMON_ZIPF - zipf) / (COMMON_ZIPF - RARE_ZIPF)))
    return COMMON_WEIGHT + (1 - COMMON_WEIGHT) * share


MIN_SENTENCE_CHARS = 8
"""Shorter sentences (headings, "Yes.") get no vector of their own."""


def sentence_units(chunk: str) -> list[str]:
    """The sentences of ``chunk`` that get a vector of their own beside the whole chunk's
    (``plugins.embedding``), in order; none when it has fewer than two."""
    found = [s for s in sentences(chunk) if len(s) >= MIN_SENTENCE_CHARS]
    return found if len(found) > 1 else []


PET_WORDS = (
    r"dogs?|cats?|pets?|pupp(?:y|ies)|kittens?|parrots?|rabbits?|bunn(?:y|ies)|hamsters?"
    r"|guinea pigs?|goldfish|fish|turtles?|tortoises?|lizards?|snakes?|horses?|ponies|pony"
    r"|budgies?|canar(?:y|ies)|ferrets?|retrievers?|labradors?|labs?|poodles?|beagles?"
    r"|terriers?|spaniels?|collies?|huskies|husky|corgis?|dachshunds?|bulldogs?|chihuahuas?"
    r"|pugs?|schnauzers?|shepherds?|greyhounds?|whippets?|tabby|tabbies|siamese|ragdolls?"
)
"""Animals and the commonest breeds a person says they have: ``memory.extraction`` stores "we've
got a golden retriever called Biscuit" as a pet, and ``plugins.brain.memory_match`` Rule 6 reads it
as one for "what's my dog called?"."""
ZH_PET_WORDS = (
    r"狗|猫|宠物|鹦鹉|兔|仓鼠|金鱼|乌龟|蜥蜴|荷兰猪|金毛|拉布拉多|泰迪|柯基|哈士奇|柴犬"
    r"|边牧|比熊|博美|萨摩|德牧|布偶|英短|美短|暹罗|橘猫|狸花"
)
