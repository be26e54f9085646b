"""What a spoken answer may say, checked sentence by sentence as the model writes it (the
``llm`` brain's Rule 5; SPEC BRAIN-3).

- ``checked_sentences`` releases the model's text a sentence at a time, without the prompt's
  markup (``unmarked``), and drops each sentence its ``faithful`` check refuses;
- ``Support`` is that check for an answer from evidence: its numbers are the evidence's or the
  question's, most of its words are, it says something the question did not, and it is not a
  bare "无"/"None";
- ``drawn_from`` picks the evidence sentence a dropped answer drew on, for code to read instead.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, Callable, Sequence

from plugins.brain.grounding import is_asked, sentences
from plugins.language import detect_language
from plugins.text import content_terms as terms

_NUMBER = re.compile(r"\d+(?:[.:：]\d+)?")


async def checked_sentences(
    pieces: AsyncGenerator[str, None], faithful: Callable[[str], bool]
) -> AsyncGenerator[str, None]:
    """Release the model's text a sentence at a time, dropping what ``faithful`` refuses (the
    evidence does not support it: Rule 5, ``Support``). The first sentence is released as
    soon as it ends. Closing this generator closes ``pieces`` (and so stops the model)."""
    buffer = ""
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            buffer += piece
            done = sentences_done(buffer)
            if done:
                ready, buffer = buffer[:done], buffer[done:]
                for sentence in sentences(unmarked(ready)):
                    if faithful(sentence):
                        yield sentence + (" " if sentence[-1] in ".!?" else "")
    rest = unmarked(buffer).strip()
    if rest and faithful(rest):
        yield rest


_MARKUP = re.compile(
    r"</?\s*(?:untrusted_knowledge|memory_data|thread_memory)\s*>|\[source:[^\]]*\]", re.I
)


def unmarked(text: str) -> str:
    """``text`` without the prompt's markup the model copied with the evidence (Rule 5): the
    ``<untrusted_knowledge>`` tags around a passage, its ``[source: …]`` label — never spoken."""
    return _MARKUP.sub("", text)


def drawn_from(said: Sequence[str], dropped: Sequence[str], question: str, source: str) -> str:
    """Rule 5: the evidence sentence the model's dropped answer drew on — the one sharing the
    most of its words that are neither the question's nor the source's ("Employees may fly
    business class…" after the economy rule and the business-class rule) — else the first."""
    if not said:
        return ""
    drew = terms(" ".join(dropped)) - terms(question) - terms(source)
    shared = [len(terms(sentence) & drew) for sentence in said]
    return said[shared.index(max(shared))]  # the first of the best


_NOTHING = re.compile(r"\W*(?:none|n/?a|null|nothing|无|暂无)\W*", re.I)


class Support:
    """What an answer sentence may say (Rule 5): every number it holds is in the evidence or
    the question; at least ``min_supported`` of its content words are; and it says something
    of the evidence the question did not (an echo of the question, or a bare "无"/"None",
    answers nothing)."""

    min_supported = 0.7

    def __init__(self, evidence_text: str, question: str) -> None:
        self.numbers = set(_NUMBER.findall(f"{evidence_text} {question}"))
        self.evidence = terms(evidence_text)
        self.question = terms(question)
        self.language = detect_language(evidence_text)

    def faithful(self, sentence: str) -> bool:
        if is_asked(sentence):
            return False  # a question is no answer (an FAQ's question line, copied)
        if _NOTHING.fullmatch(sentence):
            return False  # "无。", "None." — the model saying it has nothing is no answer
        if not all(number in self.numbers for number in _NUMBER.findall(sentence)):
            return False
        if detect_language(sentence) != self.language:
            return True  # words cannot be compared across languages; the numbers were
        said = terms(sentence)
        if not said:
            return True
        supported = said & (self.evidence | self.question)
        if len(supported) / len(said) < self.min_supported:
            return False
        return bool((said & self.evidence) - self.question)


def sentences_done(text: str) -> int:
    """Length of the prefix of ``text`` made of whole sentences."""
    end = 0
    for match in re.finditer(r"[。！？!?；;]|[.](?=\s)", text):
        end = match.end()
    return end
