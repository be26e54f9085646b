"""Summarizers (SPEC J-4): what writes the rolling summary a checkpoint holds.

``Summarizer`` is the protocol compaction calls: given the summary so far and the events to fold
in (a ``SummaryRequest``), return the new summary, at most ``max_tokens``, with the name of who
wrote it. Two implementations:

- ``ExtractiveSummarizer`` (the default): deterministic and offline, Chinese and English. It
  keeps the key sentences of user inputs and assistant outputs (see its docstring for how
  they are chosen) as ``speaker: sentence`` lines, oldest first.
- ``ModelSummarizer``: the hook for a real model — any async ``prompt -> text`` callable. Its
  answer is clipped to the bound; if it fails or times out, the extractive summarizer writes
  the summary instead, so compaction never waits on or fails with the model.

Summaries never carry text the user did not hear: an interrupted output contributes only its
heard prefix.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from journal.checkpoints import MAX_SUMMARY_CHARS
from journal.events import EventKind, JournalEvent
from journal.projection import event_line, one_line, speakers_for
from journal.tokens import EstimatingTokenCounter, TokenCounter
from plugins.language import detect_language, has_cjk, is_cjk_ideograph, zh_or_en

logger = logging.getLogger(__name__)

__all__ = [
    "ExtractiveSummarizer",
    "ModelSummarizer",
    "Summarizer",
    "Summary",
    "SummaryRequest",
    "summary_prompt",
]


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    previous: str | None
    """The summary so far (the latest checkpoint's), or None for a thread's first."""
    events: Sequence[JournalEvent]
    """The segment to fold in, oldest first, as amended (deleted items out, truncations in:
    ``journal/amendments.py``)."""
    language: str | None
    max_tokens: int

    def summary_language(self) -> str:
        """The language to summarise in: ``language``, or else that of the segment's latest
        texts and the summary so far."""
        if self.language:
            return self.language
        sample = " ".join(str(e.payload.get("text", "")) for e in self.events[-20:])
        return detect_language(sample + (self.previous or ""))


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    summarizer: str
    """Which summarizer wrote it (recorded in the checkpoint)."""


class Summarizer(Protocol):
    async def summarize(self, request: SummaryRequest) -> Summary: ...


_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=[.])(?=\s)")
_DIGIT = re.compile(r"\d")
_NORMALISE = re.compile(r"[\W_]+")
_KEY_MARKERS = re.compile(
    r"记住|目标|喜欢|偏好|名字|我叫|订单|地址|电话|需要|想要|必须|不要|计划|决定|预算|日期|截止"
    r"|\b(?:remember|prefer|preference|goal|my name|i like|i don't like|i want|i need|must"
    r"|order|address|deadline|budget|plan|decided|important|never|always)\b",
    re.IGNORECASE,
)
_BACKCHANNEL = re.compile(
    r"^(?:好的?|嗯+|哦+|对|是的?|行|可以|谢谢|谢了|ok(?:ay)?|yes|yeah|yep|no|sure|thanks?"
    r"(?: you)?|right|got it|hmm+|uh+|mm+)$",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class _Candidate:
    position: int
    speaker: str
    sentence: str
    score: float

    @property
    def item(self) -> str:
        return f"{self.speaker}{self.sentence}"


class ExtractiveSummarizer:
    """Deterministic, offline: the key sentences of the conversation, within ``max_tokens``.

    Candidates are the sentences of user inputs, assistant outputs (the heard prefix when
    interrupted) and the items of the previous summary. Each is scored — user sentences above
    assistant ones, more for digits, for sentences that state preferences, goals, names, orders
    and decisions ("记住", "我喜欢", "my goal", "I prefer", …) and for user questions; less for
    very short ones; backchannels ("好的", "ok", "thanks") and repeats are left out. The best
    are kept, newest first among equals, while they fit, then written oldest first, one
    ``speaker: sentence`` item per line. A sentence longer than ``max_sentence_chars`` is
    clipped with "…".
    """

    name = "extractive-v1"

    def __init__(
        self, *, counter: TokenCounter | None = None, max_sentence_chars: int = 240
    ) -> None:
        self.counter = counter or EstimatingTokenCounter()
        self.max_sentence_chars = max_sentence_chars

    async def summarize(self, request: SummaryRequest) -> Summary:
        return Summary(self.summarize_now(request), self.name)

    def summarize_now(self, request: SummaryRequest) -> str:
        """The summary, synchronously (it does no I/O)."""
        language = request.summary_language()
        user, assistant = speakers_for(language)
        candidates: list[_Candidate] = []
        position = 0
        for item in (request.previous or "").splitlines():
            item = one_line(item)
            speaker = next((s for s in (user, assistant) if item.startswith(s)), "")
            sentence = item[len(speaker) :]
            if sentence:
                base = 2.0 if speaker == user else 1.0 if speaker == assistant else 1.5
                candidates.append(
                    _Candidate(position, speaker, sentence, self._score(sentence, base, user=False))
                )
                position += 1
        for event in request.events:
            if event.kind is EventKind.USER_INPUT:
                speaker, text, base = user, str(event.payload.get("text", "")), 2.0
            elif event.kind is EventKind.ASSISTANT_OUTPUT:
                key = "heard_text" if event.payload.get("interrupted") else "text"
                speaker, text, base = assistant, str(event.payload.get(key, "")), 1.0
            else:
                continue
            for sentence in _sentences(text):
                sentence = self._clip(sentence)
                candidates.append(
                    _Candidate(
                        position,
                        speaker,
                        sentence,
                        self._score(sentence, base, user=speaker == user),
                    )
                )
                position += 1
        chosen: list[_Candidate] = []
        seen: set[str] = set()
        used = 0
        for candidate in sorted(candidates, key=lambda c: (-c.score, -c.position)):
            if candidate.score <= 0:
                continue
            key = _NORMALISE.sub("", candidate.sentence.lower())
            if not key or key in seen:
                continue
            cost = self.counter.count(candidate.item) + 1
            if used + cost > request.max_tokens:
                continue
            seen.add(key)
            chosen.append(candidate)
            used += cost
        text = "\n".join(c.item for c in sorted(chosen, key=lambda c: c.position))
        return text[:MAX_SUMMARY_CHARS]

    def _clip(self, sentence: str) -> str:
        if len(sentence) <= self.max_sentence_chars:
            return sentence
        cut = sentence[: self.max_sentence_chars - 1]
        if not has_cjk(cut) and " " in cut:
            cut = cut.rsplit(" ", 1)[0]
        return cut.rstrip() + "…"

    @staticmethod
    def _score(sentence: str, base: float, *, user: bool) -> float:
        bare = _NORMALISE.sub(" ", sentence).strip()
        if not bare or _BACKCHANNEL.match(bare):
            return 0.0
        score = base
        if _DIGIT.search(sentence):
            score += 1.0
        score += min(2, len(_KEY_MARKERS.findall(sentence))) * 1.0
        if user and ("?" in sentence or "？" in sentence):
            score += 0.5
        size = sum(map(is_cjk_ideograph, sentence)) + len(sentence.split())
        if size < 4:
            score -= 1.0
        score += min(size, 30) / 60
        return score


def _sentences(text: str) -> list[str]:
    return [s for s in (one_line(part) for part in _SENTENCE_END.split(text)) if s]


_PROMPTS = {
    "zh": (
        "请把下面的对话压缩成一份简洁的摘要，供助手以后参考。保留事实、用户的偏好与目标、"
        "已做的决定和未解决的问题；不要编造。每条一行，以“用户:”或“助手:”开头，"
        "总长度不超过 {max_tokens} 个 token。\n"
    ),
    "en": (
        "Condense the conversation below into a short summary the assistant can rely on later. "
        "Keep facts, the user's preferences and goals, decisions made and open questions; "
        "invent nothing. One item per line, starting with 'User: ' or 'Assistant: ', at most "
        "{max_tokens} tokens in all.\n"
    ),
}
_PROMPT_PREVIOUS = {"zh": "已有摘要:\n", "en": "Summary so far:\n"}
_PROMPT_EVENTS = {"zh": "新的对话:\n", "en": "New conversation:\n"}


def summary_prompt(request: SummaryRequest, *, max_line_chars: int = 2000) -> str:
    """The prompt ``ModelSummarizer`` sends: instructions, the summary so far, the segment."""
    language = request.summary_language()
    key = zh_or_en(language)
    parts = [_PROMPTS[key].format(max_tokens=request.max_tokens)]
    if request.previous:
        parts.append(_PROMPT_PREVIOUS[key] + request.previous + "\n")
    lines = (event_line(e, language) for e in request.events)
    parts.append(_PROMPT_EVENTS[key] + "\n".join(line[:max_line_chars] for line in lines if line))
    return "\n".join(parts)


class ModelSummarizer:
    """A model writes the summary: ``complete`` is any async ``prompt -> text`` callable.

    The answer is clipped to ``max_tokens`` at line or sentence boundaries. If the call raises
    or takes longer than ``timeout`` seconds, the ``fallback`` summarizer (extractive by
    default) writes it instead, so compaction never waits on or fails with the model.
    """

    def __init__(
        self,
        complete: Callable[[str], Awaitable[str]],
        *,
        name: str = "model",
        timeout: float = 30.0,
        counter: TokenCounter | None = None,
        fallback: Summarizer | None = None,
    ) -> None:
        self._complete = complete
        self.name = name
        self.timeout = timeout
        self.counter = counter or EstimatingTokenCounter()
        self.fallback = fallback or ExtractiveSummarizer(counter=self.counter)

    async def summarize(self, request: SummaryRequest) -> Summary:
        try:
            async with asyncio.timeout(self.timeout):
                text = await self._complete(summary_prompt(request))
        except Exception as e:  # any model failure: the summary still gets written
            logger.warning("model summarizer failed (%s), using the fallback", type(e).__name__)
            return await self.fallback.summarize(request)
        return Summary(self._clip(text, request.max_tokens), self.name)

    def _clip(self, text: str, max_tokens: int) -> str:
        kept: list[str] = []
        used = 0
        for line in (one_line(x) for x in text.splitlines()):
            for sentence in _sentences(line) or ([line] if line else []):
                cost = self.counter.count(sentence) + 1
                if used + cost > max_tokens:
                    return "\n".join(kept)[:MAX_SUMMARY_CHARS]
                kept.append(sentence)
                used += cost
        return "\n".join(kept)[:MAX_SUMMARY_CHARS]
