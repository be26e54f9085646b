"""The offline default brain: rule-based, deterministic, honest.

It is not a language model. It answers simple social turns (greetings, thanks, goodbyes, "who are
you"), can repeat what the user said earlier in the thread (it reads the same ``model_text`` a
model would, so it proves the history reached the brain), and otherwise says plainly that it does
not know — in the user's language (Chinese when the input has CJK characters, else English).

Knowledge goes through the same tool path a model uses (``plugins.brain.tool_loop``): when
``request.tools`` offers ``knowledge_search`` and no rule answers the input, it calls
``knowledge_search({"query": <input>})``; called again with that result, it answers with the
sentence of the ``<untrusted_knowledge>`` blocks that shares most words with the question (else
the first block's first sentences), naming its ``[source: …]``, or says it does not know when
the result holds no knowledge.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from journal.projection import speakers_for
from pipeline.content import labels_for
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolResult

KNOWLEDGE_TOOL = "knowledge_search"
"""The tool ``LocalBrain`` calls for questions its rules do not answer."""

_RULES: list[tuple[str, re.Pattern[str], str]] = [
    (
        "en",
        re.compile(r"\b(hello|hi|hey|good (morning|afternoon|evening))\b", re.I),
        "Hello! I am the offline assistant. How can I help you?",
    ),
    ("en", re.compile(r"\b(thanks|thank you)\b", re.I), "You are welcome."),
    ("en", re.compile(r"\b(bye|goodbye|see you)\b", re.I), "Goodbye! Talk to you soon."),
    ("en", re.compile(r"\bhow are you\b", re.I), "I am fine, thank you. How can I help?"),
    (
        "en",
        re.compile(r"\b(who|what) are you\b|\byour name\b", re.I),
        "I am the OpenRealtime offline assistant. I answer from what I have been given.",
    ),
    ("en", re.compile(r"^\W*(wait|stop|hold on)\b", re.I), "Okay, I stopped. Go ahead."),
    ("zh", re.compile(r"^\W*(等一下|停|等等)"), "好的,我停下了,你说。"),
    ("zh", re.compile(r"你好|您好|早上好|晚上好|嗨"), "你好!我是离线助手,有什么可以帮你?"),
    ("zh", re.compile(r"谢谢|多谢"), "不客气。"),
    ("zh", re.compile(r"再见|拜拜"), "再见!"),
    ("zh", re.compile(r"你是谁|你叫什么"), "我是 OpenRealtime 离线助手,根据已有资料回答。"),
]
_RECALL = {
    "en": re.compile(
        r"\bwhat did i (just )?(say|ask)\b|\bmy (last|previous) (question|message)\b", re.I
    ),
    "zh": re.compile(r"我(刚才|之前|上一句)(说|问)了什么"),
}
_UNKNOWN = {
    "en": "I am sorry, I do not know the answer to that.",
    "zh": "抱歉,我不知道这个问题的答案。",
}
_NOT_FOUND = {
    "en": "I am sorry, I do not know: I found nothing about that in my documents.",
    "zh": "抱歉,我不知道:资料里没有找到相关内容。",
}
_FROM_SOURCE = {"en": 'According to "{}": {}', "zh": "根据《{}》:{}"}
_KNOWLEDGE = re.compile(
    r"(?:\[source:\s*(?P<source>[^\]\n]*)\]\s*)?"
    r"<untrusted_knowledge>(?P<body>.*?)</untrusted_knowledge>",
    re.S,
)
_SENTENCE = re.compile(r".+?(?:[.!?](?=\s|$)|[。!?]|$)", re.S)
_ANSWER_CHARS = 200  # read sentences up to about this length: a spoken answer stays short
_RECALL_ANSWER = {"en": 'You said: "{}"', "zh": "你刚才说:“{}”"}
_NOTHING_EARLIER = {
    "en": "You have not said anything before this in our conversation.",
    "zh": "在这次对话里你之前还没有说过什么。",
}


def detect_language(text: str) -> str:
    return "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en"


def earlier_user_inputs(model_text: str) -> list[str]:
    """The user's earlier messages, read back from the rendered context (either language)."""
    out: list[str] = []
    for lang in ("en", "zh"):
        context_label, input_label = labels_for(lang)
        user_prefix, _ = speakers_for(lang)
        if not model_text.startswith(context_label):
            continue
        body = model_text[len(context_label) :]
        body = body[: body.rfind(input_label)] if input_label in body else body
        out = [
            line[len(user_prefix) :] for line in body.splitlines() if line.startswith(user_prefix)
        ]
    return out


class LocalBrain:
    """Deterministic answers; streams word by word like a model would."""

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        call = self.tool_call(request)
        if call is not None:
            yield BrainDelta(tool_call=call)
            return
        for piece in _pieces(self.answer(request)):
            yield BrainDelta(text=piece)

    def tool_call(self, request: BrainInput) -> ToolCall | None:
        """The knowledge search to make before answering, if any (see the module doc)."""
        text = request.current_input.strip()
        if not text or _knowledge_results(request):
            return None
        if not any(tool.name == KNOWLEDGE_TOOL for tool in request.tools):
            return None
        if _rule_answer(request, text, _language(request, text)) is not None:
            return None
        return ToolCall(
            call_id=f"local_{KNOWLEDGE_TOOL}_{len(request.tool_calls) + 1}",
            name=KNOWLEDGE_TOOL,
            arguments={"query": text},
        )

    def answer(self, request: BrainInput) -> str:
        """The whole text answer (what ``stream`` speaks when it makes no tool call)."""
        text = request.current_input.strip()
        lang = _language(request, text)
        reply = _rule_answer(request, text, lang)
        if reply is not None:
            return reply
        results = _knowledge_results(request)
        if results:
            return _answer_from_knowledge(results, lang, text)
        return _UNKNOWN[lang]


def _language(request: BrainInput, text: str) -> str:
    if text:
        return detect_language(text)
    return request.language if request.language in ("zh", "en") else "en"


_ABOUT_ME = {
    "en": re.compile(
        r"\bwhat do you (know|remember) about me\b|\bwhat do you remember\b|\bmy preferences\b",
        re.I,
    ),
    "zh": re.compile(r"(你|您)(记得|知道)(关于)?我(的)?什么|关于我你知道什么|你记得我吗"),
}
_MEMORY_ANSWER = {"en": "From our earlier conversations I remember: {}", "zh": "我记得:{}"}
_NO_MEMORY = {
    "en": "I do not remember anything about you from earlier conversations.",
    "zh": "我没有记住之前对话中关于你的内容。",
}
_MEMORY_BLOCK = re.compile(r"<memory_data>(.*?)</memory_data>", re.S)


def memory_entries(system: str) -> list[str]:
    """The entries of the ``<memory_data>`` block the runtime put in the system prompt."""
    match = _MEMORY_BLOCK.search(system)
    if match is None:
        return []
    lines = (line.strip(" -•\t") for line in match.group(1).splitlines())
    return [line for line in lines if line]


def _rule_answer(request: BrainInput, text: str, lang: str) -> str | None:
    if _ABOUT_ME[lang].search(text):
        entries = memory_entries(request.system)
        if not entries:
            return _NO_MEMORY[lang]
        separator = "; " if lang == "en" else "；"
        return _MEMORY_ANSWER[lang].format(separator.join(entries[:5]))
    if _RECALL[lang].search(text):
        earlier = earlier_user_inputs(request.model_text)
        if earlier:
            return _RECALL_ANSWER[lang].format(earlier[-1])
        return _NOTHING_EARLIER[lang]
    for rule_lang, pattern, reply in _RULES:
        if rule_lang == lang and pattern.search(text):
            return reply
    return None


def _knowledge_results(request: BrainInput) -> list[ToolResult]:
    return [result for result in request.tool_results if result.name == KNOWLEDGE_TOOL]


def _answer_from_knowledge(results: list[ToolResult], lang: str, question: str) -> str:
    """The sentence of the knowledge blocks that shares most words with the question (the
    best-ranked block wins ties), else the first sentence(s) of the first block; or "not
    found" when no block holds text."""
    wanted = _terms(question)
    best: tuple[int, str, str] | None = None  # (overlap, source, sentence)
    fallback: tuple[str, str] | None = None
    for result in results:
        if result.is_error:
            continue
        for match in _KNOWLEDGE.finditer(result.content):
            body = " ".join(match["body"].split())
            source = (match["source"] or "").strip()
            if fallback is None and body:
                fallback = (source, _first_sentences(body))
            for sentence in _SENTENCE.findall(body):
                overlap = len(wanted & _terms(sentence))
                if overlap and (best is None or overlap > best[0]):
                    best = (overlap, source, sentence.strip())
    if best is not None:
        source, summary = best[1], best[2]
    elif fallback is not None:
        source, summary = fallback
    else:
        return _NOT_FOUND[lang]
    return _FROM_SOURCE[lang].format(source, summary) if source else summary


_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
_WORD = re.compile(r"[a-z0-9]{3,}")
_STOP = frozenset(
    "the and for are was were you your does what when where which with how many much can".split()
)


def _terms(text: str) -> set[str]:
    """Chinese character bigrams and English words (3+ letters, no stop words; cut to five
    letters, a crude stem: "charging" and "charge" meet) of ``text``."""
    lowered = text.lower()
    terms = {w[:5] for w in _WORD.findall(lowered) if w not in _STOP}
    for run in _CJK_RUN.findall(lowered):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def _first_sentences(text: str) -> str:
    text = " ".join(text.split())
    out = ""
    for sentence in _SENTENCE.findall(text):
        if out and len(out) + len(sentence) > _ANSWER_CHARS:
            break
        out += sentence
    return out.strip()


def _pieces(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)
