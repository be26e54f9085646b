"""Input enrichment (SPEC RM-5): at turn start the memory model may rewrite the person's input
with the role-memory entries the person may see; this module is its pure core — the prompt, the
schema, the parse and every check — with no I/O (``runtime/enrichment.py`` runs it).

Theory of operation
-------------------
The runtime reads the entries the reader may see and that still hold (``read_visible`` with
``current_only``), hands them here with the person's words and the role's privacy
instructions, sends the messages this module builds to the memory model, and hands the answer
back here to be judged. The rules:

1. Only a person's words are rewritten: the caller passes the input of a turn the person spoke
   or typed, never a continuation after a tool, a client's out-of-band input or a system
   notice (memory notes, summaries, deletion marks are journal events, never a turn's input).
   An empty input, or one longer than ``max_input_chars``, is not rewritten
   (``skip_reason``).
2. No visible current entry (``hasEntries`` false): no prompt, so no model call. Entries are
   shown newest first, one line each, within ``entry_chars``; the first entry past the budget
   ends the list (later ones are not shown, even if short). No entry fits: no call. Each
   entry is shown under a short reference (``e1``, ``e2`` …) rather than its id; the schema
   allows only those references.
3. The prompt asks for a complete rewrite that keeps everything the person said and asked,
   using the entries only where they help, following the role's privacy instructions (shown
   in the system prompt, escaped like the entries so neither can open or close a block). It
   never says the rewrite will be shown as coming from memory, and the brain is never told.
4. The answer is parsed defensively: anything but a JSON object with a string ``rewrite`` and
   a list of string references ``used`` is ``unparsable`` (a cut answer cannot be salvaged:
   a half rewrite would drop the person's words).
5. Checks in code, in this order, each refusal a stable reason code — a refusal leaves the
   input unchanged:
   - ``unknown_entry``: a reference that was not shown. The entries shown were the reader's
     visible, current ones, so anything else drops the whole rewrite.
   - ``empty``; ``too_long``: longer than ``growth`` × the input plus the entry text shown
     (capped by ``max_rewrite_chars``). The check bounds it, with ``max_tokens``; the schema
     does not (llama.cpp turns a ``maxLength`` into one grammar rule per character).
   - ``unchanged``: the same text (whitespace and Unicode width aside) — nothing to record.
   - ``no_entry_used``: a changed text that cites no entry (a rewording memory did not cause).
   - ``dropped_number``, ``dropped_question``, ``dropped_words``: what the person said must
     survive (``dropped``): every number, every question mark, every word and every CJK
     character of the input, counted (the rewrite must hold each at least as often).
   - ``unsupported``: what the rewrite adds must come from the entries it cites
     (``unsupported``): every number it adds is in one of them, and of the words of four
     letters or more and the CJK characters it adds, at most ``max(2, a quarter)`` are in
     none of them (room for the person's voice: "I" for "the person", 我 for 这个人). A small
     model that copies the prompt's example, or cites one entry while using another, is
     refused here.
6. The survival check (``dropped``) is language-independent and deliberately strict: text is
   NFKC-normalised and case-folded; numbers are runs of digits; questions are ``?``, ``？``,
   ``¿`` and ``؟``; Han, kana and Hangul count character by character (those scripts need no
   spaces); other letters count as words (letters joined by apostrophes). Its limits, said
   plainly: it proves the person's words are *present*, not that their meaning is kept — a
   rewrite may reorder them, add a negation or a contradicting clause and still pass; a number
   written out in words ("three" for "3") or an inflected word ("likes" for "like") is
   refused although harmless; scripts written without spaces other than CJK (Thai, Lao,
   Khmer) count as one long word, so any insertion inside a run refuses the rewrite. Strict
   errs on the side of the person's words: a refusal costs only the enrichment. The
   support check is looser by design (rewording needs some room): it catches additions the
   cited entries do not contain, not a wrong conclusion drawn from words they do.
7. ``validate_references``: a stored answer (an ``Enrichment`` record) holds only while every
   entry it used is still visible to the reader and current — decided from the pool's
   metadata alone (``memory/pool.py`` rules 1–7), never its content. An entry pushed out of
   the text budget by newer ones does not invalidate it; an invalidated entry, a retracted
   one, or a source whose access is gone does.

Logs carry reason codes and counts, never the input, the entries or the rewrite (STYLE 12).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from memory.injection import escape_block_text
from memory.pool import EntryMeta, PoolEntry, Reader, visible_ids
from memory.role_records import MAX_RECORD_CHARS, ChatMessages

SkipReason = Literal["empty_input", "input_too_long", "no_entries", "no_entry_fits"]
RefusalReason = Literal[
    "unparsable",
    "unknown_entry",
    "empty",
    "too_long",
    "unchanged",
    "no_entry_used",
    "dropped_number",
    "dropped_question",
    "dropped_words",
    "unsupported",
]
REFUSAL_REASONS: tuple[RefusalReason, ...] = get_args(RefusalReason)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnrichmentLimits:
    entry_chars: int = 2_000
    """Characters of entry lines shown (rule 2)."""
    max_input_chars: int = 1_000
    """Longer inputs are not rewritten (rule 1)."""
    growth: int = 4
    """A rewrite holds at most ``growth`` × the input plus the entry text shown (rule 5)."""
    max_rewrite_chars: int = 8_000
    max_tokens: int = 1_024
    timeout_s: float = 15.0
    """The whole enrichment of one turn, the model's queueing included (RM-6)."""
    read_timeout_s: float = 2.0
    """The visibility read (within ``timeout_s``)."""
    save_timeout_s: float = 1.0
    """Saving the enrichment record (after the model answered)."""

    def __post_init__(self) -> None:
        if self.entry_chars < 1 or self.max_input_chars < 1 or self.growth < 1:
            raise ValueError("enrichment limits must be positive")
        if not 0 < self.max_rewrite_chars <= MAX_RECORD_CHARS:
            raise ValueError(f"max_rewrite_chars must be between 1 and {MAX_RECORD_CHARS}")


@dataclass(frozen=True, slots=True)
class EnrichmentPrompt:
    """What one model call is asked (rules 2–3) and what its answer is judged against."""

    original: str
    messages: ChatMessages
    schema: dict[str, Any]
    refs: tuple[tuple[str, str], ...]
    """(reference shown, entry id), newest entry first."""
    contents: Mapping[str, str]
    """The content shown under each reference (what the support check reads)."""
    shown_chars: int
    """Characters of entry content shown."""
    max_chars: int
    """Longest rewrite accepted (rule 5)."""
    max_tokens: int

    @property
    def entry_ids(self) -> tuple[str, ...]:
        return tuple(entry_id for _, entry_id in self.refs)


@dataclass(frozen=True, slots=True)
class Rewrite:
    """An accepted rewrite and the ids of the entries it used (in the order cited)."""

    text: str
    entry_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Refused:
    reason: RefusalReason


SYSTEM_PROMPT = """\
You help an assistant understand the person it talks to. You get the person's input and \
entries: things learned earlier about this person and their work.
Rewrite the person's input completely, using these entries where they help; you may change \
the wording but must keep everything the person said and asked: every word, every name, every \
number and every question stays in the rewrite. Add only what the entries say and what helps \
to answer this input. Write in the person's language, as the person speaking ("I", "my").
Use only the entries below, never the facts of the example. If no entry helps, give the \
input back as it is with "used" empty.
"used" lists the references (e1, e2 …) of the entries the rewrite uses.
Example. Entries:
- e1: The person is vegetarian.
- e2: The person lives in Porto.
Input: Can you suggest a restaurant for Friday?
Answer: {"rewrite": "Can you suggest a restaurant for Friday? I am vegetarian and I live in \
Porto.", "used": ["e2", "e1"]}"""

PRIVACY_HEADING = "The role's rules about privacy and sharing (follow them):"


def skip_reason(original: str, limits: EnrichmentLimits) -> SkipReason | None:
    """Why ``original`` is not rewritten at all (rule 1), or None."""
    if not original.strip():
        return "empty_input"
    if len(original) > limits.max_input_chars:
        return "input_too_long"
    return None


def newest_first(entries: Sequence[PoolEntry]) -> list[PoolEntry]:
    return sorted(entries, key=lambda e: (e.meta.created_at, e.meta.id), reverse=True)


def _line(ref: str, content: str) -> str:
    return f"- {ref}: {escape_block_text(' '.join(content.split()))}"


def build_prompt(
    original: str,
    entries: Sequence[PoolEntry],
    *,
    instructions: str = "",
    limits: EnrichmentLimits | None = None,
) -> EnrichmentPrompt | SkipReason:
    """The prompt for ``original`` with ``entries`` (the reader's visible current entries, in
    any order), or why there is none (rules 1–3)."""
    limits = limits or EnrichmentLimits()
    skipped = skip_reason(original, limits)
    if skipped is not None:
        return skipped
    if not entries:
        return "no_entries"
    lines: list[str] = []
    refs: list[tuple[str, str]] = []
    contents: dict[str, str] = {}
    used = shown = 0
    for entry in newest_first(entries):
        ref = f"e{len(refs) + 1}"
        line = _line(ref, entry.content)
        if used + len(line) + 1 > limits.entry_chars:
            break  # rule 2: the first entry past the budget ends the list
        lines.append(line)
        refs.append((ref, entry.meta.id))
        contents[ref] = entry.content
        used += len(line) + 1
        shown += len(entry.content)
    if not refs:
        return "no_entry_fits"
    max_chars = min(limits.max_rewrite_chars, limits.growth * len(original) + shown)
    system = SYSTEM_PROMPT
    if instructions.strip():
        system = f"{system}\n{PRIVACY_HEADING}\n{escape_block_text(instructions.strip())}"
    user = "\n".join(["Entries:", *lines, f"Input: {escape_block_text(original.strip())}"])
    return EnrichmentPrompt(
        original=original,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        schema=answer_schema([r for r, _ in refs]),
        refs=tuple(refs),
        contents=contents,
        shown_chars=shown,
        max_chars=max_chars,
        max_tokens=limits.max_tokens,
    )


def answer_schema(refs: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of an answer: the rewrite first, then the references it used (a model
    that has written the rewrite cites what it used; constrained decoding keeps the order)."""
    return {
        "type": "object",
        "properties": {
            "rewrite": {"type": "string"},
            "used": {
                "type": "array",
                "maxItems": len(refs),
                "items": {"type": "string", "enum": list(refs)},
            },
        },
        "required": ["rewrite", "used"],
    }


def parse_answer(text: str) -> tuple[str, list[str]] | None:
    """The rewrite and the references of an answer, or None (rule 4)."""
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(answer, dict):
        return None
    rewrite, used = answer.get("rewrite"), answer.get("used")
    if not isinstance(rewrite, str) or not isinstance(used, list):
        return None
    if not all(isinstance(ref, str) for ref in used):
        return None
    return rewrite, list(dict.fromkeys(used))


def judge(prompt: EnrichmentPrompt, answer: str) -> Rewrite | Refused:
    """The model's ``answer`` to ``prompt``, accepted or refused (rules 4–5)."""
    parsed = parse_answer(answer)
    if parsed is None:
        return Refused("unparsable")
    rewrite, used = parsed
    by_ref = dict(prompt.refs)
    if any(ref not in by_ref for ref in used):
        return Refused("unknown_entry")
    rewrite = rewrite.strip()
    if not rewrite:
        return Refused("empty")
    if len(rewrite) > prompt.max_chars:
        return Refused("too_long")
    if _plain(rewrite) == _plain(prompt.original):
        return Refused("unchanged")
    if not used:
        return Refused("no_entry_used")
    lost = dropped(prompt.original, rewrite)
    if lost is not None:
        return Refused(lost)
    cited = [prompt.contents[ref] for ref in used]
    if unsupported(prompt.original, rewrite, cited):
        return Refused("unsupported")
    return Rewrite(rewrite, tuple(by_ref[ref] for ref in used))


# ------------------------------------------------------------------ what must survive (rule 6)

_DIGITS = re.compile(r"\d+")
_QUESTION_MARKS = frozenset("?？¿؟")
_CJK = re.compile(
    "[\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\U00020000-\U0003ffff]"
)
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


def _plain(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True, slots=True)
class _Said:
    numbers: Counter[str]
    questions: int
    words: Counter[str]


def _said(text: str) -> _Said:
    text = unicodedata.normalize("NFKC", text).casefold()
    numbers = Counter(_DIGITS.findall(text))
    questions = sum(1 for c in text if c in _QUESTION_MARKS)
    words: Counter[str] = Counter(_CJK.findall(text))
    words.update(_WORD.findall(_CJK.sub(" ", text)))
    return _Said(numbers, questions, words)


def dropped(original: str, rewrite: str) -> RefusalReason | None:
    """What of ``original`` the rewrite lost (rule 6): ``dropped_number``,
    ``dropped_question``, ``dropped_words``, or None when everything survives."""
    before, after = _said(original), _said(rewrite)
    if before.numbers - after.numbers:
        return "dropped_number"
    if after.questions < before.questions:
        return "dropped_question"
    if before.words - after.words:
        return "dropped_words"
    return None


SUPPORT_MIN_LETTERS = 4
"""Added words shorter than this are the person's voice (pronouns, articles), not claims."""
UNSUPPORTED_SLACK = 2


def unsupported(original: str, rewrite: str, cited: Sequence[str]) -> bool:
    """Whether ``rewrite`` adds what none of the ``cited`` entry contents holds (rule 5)."""
    before, after = _said(original), _said(rewrite)
    support = _said(" ".join(cited))
    if any(number not in support.numbers for number in after.numbers - before.numbers):
        return True
    added = [
        token
        for token, count in (after.words - before.words).items()
        if _CJK.fullmatch(token) or len(token) >= SUPPORT_MIN_LETTERS
        for _ in range(count)
    ]
    missing = sum(1 for token in added if token not in support.words)
    return missing > max(UNSUPPORTED_SLACK, len(added) // 4)


# ------------------------------------------------------------------ stored answers (rule 7)


def validate_references(
    pool_meta: Mapping[str, EntryMeta], reader: Reader, entry_ids: Collection[str]
) -> bool:
    """Whether a stored answer that used ``entry_ids`` still holds for ``reader``: every one
    visible and current in ``pool_meta`` (metadata only, rule 7)."""
    if not entry_ids:
        return True
    shown = visible_ids(reader, pool_meta, current_only=True)
    return all(entry_id in shown for entry_id in entry_ids)
