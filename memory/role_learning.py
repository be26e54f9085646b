"""Learning a role's memory from a thread (SPEC RM-1…RM-4): the real ``LearningProcedure``.

Theory of operation
-------------------
A learning run (``memory/learning_runs.py``) names a thread and a journal position; the
``Learner`` (``memory/learner.py``) gives this procedure the read position and a durable
``step``. The procedure reads, asks the memory model once, and turns its answer into pool writes
(``memory/pool_store.py``) inside the run's finishing transaction. Its rules:

1. Evidence (``read_evidence``) is the thread's journal events after the read position up to
   ``run.up_to_seq`` (at most ``MAX_EVIDENCE_EVENTS``, the newest kept), each as an
   ``EvidenceItem`` whose ``speaker`` code decides: ``person`` only for a ``user_input`` the
   person typed or said (source ``voice`` or ``text``) that was not deleted in the evidence;
   ``agent`` for the agent's words, ``confide`` for what the agent said through ``confide``
   (the journal keeps that call without its text: it is read from the sealed confession kept
   at the call's journal position, ``runtime/confide.py`` rule 5),
   ``tool`` for tool calls and results, ``notice`` for everything the system wrote (memory
   notes, summaries, deleted/truncated markers). Only a person's words are a person's words.
2. No person's words in the evidence: nothing can be learned, and no model is called (an agent
   that confides about nothing the person said learns nothing).
3. The request (``learn``) is deterministic for the same evidence, settings and pool, so a
   recovered run reuses its stored step: the person's words and the agent's words as numbered
   items (ids shown), the confessions as hints of where to look (never facts), the role's
   privacy instructions, and the person's current visible entries (at most ``MAX_KNOWN_ENTRIES``
   in memory order, each cut, within ``known_chars``) for dedup and invalidation. The model is
   asked for JSON (``learning_schema``): ``facts`` (content, topics, sources among the person's
   item ids), ``observations`` (content, confidence, sources among the shown entry ids) and
   ``invalidations`` (shown entry ids).
4. An answer that is not a JSON object with those lists fails the run with
   ``learning_unparsable`` (no writes; the read position stays). A malformed element is dropped.
5. ``apply`` (``plan_learning``, pure) enforces in code what no prompt can promise:
   a fact keeps only sources that are items of this evidence spoken by the person; a fact left
   with none is dropped (the agent's words, tool results, confide text and notices never make a
   fact on their own); so is a fact that shares no content word with the person's items it
   cites (``supported``: the agent's words passed off under the person's item id), unless the
   two are in different languages and cannot be compared. An observation keeps only sources
   the person can see now and that are current, and is dropped unless every source it named
   passes. An invalidation names an entry the person can see and that is current. A fact that
   repeats a current entry's text, or holds a password, key or access link, is dropped. System
   tags are set by code only (``from:``, ``for:person:`` the thread's owner, ``tenant:``,
   ``thread:``; the model's topics are cleaned, so it can write none), and each fact records
   who was present for its sources (``ThreadAccess``: the thread's owner).
6. Logs carry counts and codes, never content (STYLE 12).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from journal.events import EventKind, JournalEvent, ThreadRef
from memory.entries import is_sensitive
from memory.injection import escape_block_text
from memory.learning_runs import LearningRun, LearningRunError
from memory.pool import (
    EntryMeta,
    EntrySource,
    PoolEntry,
    Reader,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    merge_tags,
    tenant_tag,
    thread_tag,
    visible_ids,
)
from memory.pool_store import AddEntry, InvalidateEntry, PoolStore, PoolWrite
from plugins.language import detect_language
from plugins.text import content_terms as terms

if TYPE_CHECKING:
    from journal.store import JournalStore
    from memory.role_records import RoleRecords

log = logging.getLogger(__name__)

Speaker = Literal["person", "agent", "confide", "tool", "notice"]

CONFIDE_TOOL = "confide"
MAX_EVIDENCE_EVENTS = 400
"""Most journal events one run reads (the newest kept)."""
MAX_KNOWN_ENTRIES = 300
"""Most of the person's entries shown to the model (RM: "the first 300 valid entries")."""
MAX_FACT_CHARS = 300
MAX_FACTS = 4
MAX_OBSERVATIONS = 2
MAX_INVALIDATIONS = 4
LEARN_MAX_TOKENS = 256
"""The answer's bound (the local model has a 4k context)."""


class UnparsableAnswer(LearningRunError):
    """Rule 4: the memory model's answer is not the JSON asked for."""

    code = "learning_unparsable"


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One journal event of the evidence (rule 1)."""

    id: str
    seq: int
    speaker: Speaker
    text: str


@dataclass(frozen=True, slots=True)
class LearnedFact:
    content: str
    topics: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LearnedObservation:
    content: str
    confidence: float
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Learned:
    """What the model proposed (rule 3), before code's rules (rule 5)."""

    facts: tuple[LearnedFact, ...] = ()
    observations: tuple[LearnedObservation, ...] = ()
    invalidations: tuple[str, ...] = ()
    malformed: int = 0


@dataclass(frozen=True, slots=True)
class LearningRequest:
    """A learning step's request as the text ``DurableSteps`` digests: the role it is for
    (so the model step can find the role's model), the messages and the schema."""

    tenant: str
    role_id: str
    thread_id: str
    messages: list[dict[str, str]]
    schema: dict[str, Any]

    def to_text(self) -> str:
        return json.dumps(
            {
                "tenant": self.tenant,
                "role_id": self.role_id,
                "thread_id": self.thread_id,
                "messages": self.messages,
                "schema": self.schema,
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_text(cls, text: str) -> LearningRequest:
        value = json.loads(text)
        return cls(
            value["tenant"], value["role_id"], value["thread_id"], value["messages"],
            value["schema"],
        )  # fmt: skip


# ------------------------------------------------------------------ evidence (rule 1)


def evidence_of(
    events: Sequence[JournalEvent], confided: Mapping[int, str] | None = None
) -> list[EvidenceItem]:
    """The events as evidence items, the speaker decided by code (rule 1); ``confided``: the
    thread's sealed confessions by the journal position of their call."""
    confided = confided or {}
    deleted = {
        str(e.payload.get("item_id"))
        for e in events
        if e.kind is EventKind.ITEM_DELETED and e.payload.get("item_id") is not None
    }
    items: list[EvidenceItem] = []
    for event in events:
        payload = event.payload
        speaker: Speaker
        if event.kind is EventKind.USER_INPUT:
            text = str(payload.get("text", ""))
            said = payload.get("source") in ("voice", "text")
            item_id = payload.get("item_id")
            speaker = "person" if said and text.strip() and item_id not in deleted else "notice"
        elif event.kind is EventKind.ASSISTANT_OUTPUT:
            speaker = "agent"
            interrupted = payload.get("interrupted") and "heard_text" in payload
            text = str(payload["heard_text"] if interrupted else payload.get("text", ""))
        elif event.kind is EventKind.TOOL_CALL:
            arguments = payload.get("arguments")
            if payload.get("name") == CONFIDE_TOOL and payload.get("private") is True:
                speaker, text = "confide", confided.get(event.seq, "")
            elif payload.get("name") == CONFIDE_TOOL and isinstance(arguments, dict):
                speaker, text = "confide", str(arguments.get("text", ""))  # kept before sealing
            else:
                speaker = "tool"
                text = f"{payload.get('name', '')}({json.dumps(arguments, ensure_ascii=False)})"
        elif event.kind is EventKind.TOOL_RESULT:
            if payload.get("private") is True:
                continue  # a private tool's answer (the confessor's): kept without its text
            speaker, text = "tool", f"{payload.get('name', '')}: {payload.get('content', '')}"
        else:
            speaker, text = "notice", str(payload.get("text", payload.get("op", event.kind)))
        items.append(EvidenceItem(event.event_id, event.seq, speaker, text))
    return items


# ------------------------------------------------------------------ the request (rule 3)

SYSTEM_PROMPT = """\
You keep the long-term memory of an assistant about the people it talks to.
Read the conversation and list what is worth remembering about the person for later \
conversations, as JSON:
- "facts": durable things the person said about themself, their work, plans or preferences. \
Each has "content" (one short sentence), "topics" (one to three lowercase words) and \
"sources" (the ids of the person's items that say it).
- "observations": careful conclusions drawn only from known entries, each with "content", \
"confidence" (0 to 1) and "sources" (the ids of those entries).
- "invalidations": the ids of known entries that the person's new words show no longer hold.
Only the person's own words can be facts. The assistant's words and notes only show where to \
look. Greetings and questions are not facts. Never keep passwords, keys, tokens or links. \
Follow the privacy rules. When nothing is worth keeping, answer with empty lists.
Example. Items:
person: I moved to Porto last month and I work as a nurse. (id p-2)
Answer: {"facts": [{"content": "The person lives in Porto.", "topics": ["home"], \
"sources": ["p-2"]}, {"content": "The person works as a nurse.", "topics": ["work"], \
"sources": ["p-2"]}], "observations": [], "invalidations": []}"""

_SPEAKER_LABEL = {"person": "person", "agent": "assistant"}


@dataclass(frozen=True, slots=True, kw_only=True)
class LearningLimits:
    item_chars: int = 3_000
    """Characters of conversation items shown (the newest kept)."""
    max_item_chars: int = 500
    known_chars: int = 2_000
    """Characters of the person's known entries shown."""
    max_entry_chars: int = 200
    hint_chars: int = 600


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def learning_schema(person_ids: Sequence[str], entry_ids: Sequence[str]) -> dict[str, Any]:
    """The answer's JSON schema: fact sources among ``person_ids``, observation sources and
    invalidations among ``entry_ids`` (an empty list where none are shown)."""
    fact_sources: dict[str, Any] = {
        "type": "array",
        "minItems": 1,
        "maxItems": 2,
        "items": {"type": "string", "enum": list(person_ids)},
    }
    entry_list: dict[str, Any] = (
        {"type": "array", "items": {"type": "string", "enum": list(entry_ids)}}
        if entry_ids
        else {"type": "array", "maxItems": 0}
    )
    return {
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "maxItems": MAX_FACTS,
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "maxLength": MAX_FACT_CHARS},
                        "topics": {"type": "array", "maxItems": 3, "items": {"type": "string"}},
                        "sources": fact_sources,
                    },
                    "required": ["content", "topics", "sources"],
                },
            },
            "observations": {
                "type": "array",
                "maxItems": MAX_OBSERVATIONS if entry_ids else 0,
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "maxLength": MAX_FACT_CHARS},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "sources": entry_list,
                    },
                    "required": ["content", "confidence", "sources"],
                },
            },
            "invalidations": {**entry_list, "maxItems": MAX_INVALIDATIONS if entry_ids else 0},
        },
        "required": ["facts", "observations", "invalidations"],
    }


def build_messages(
    evidence: Sequence[EvidenceItem],
    known: Sequence[PoolEntry],
    *,
    instructions: str,
    limits: LearningLimits,
) -> tuple[list[dict[str, str]], list[str], list[str]]:
    """The messages (rule 3), the person's item ids and the entry ids they show."""
    shown: list[str] = []
    person_ids: list[str] = []
    used = 0
    for item in reversed(evidence):
        if item.speaker not in _SPEAKER_LABEL:
            continue
        text = escape_block_text(_cut(item.text, limits.max_item_chars))
        line = f"{_SPEAKER_LABEL[item.speaker]}: {text} (id {item.id})"
        if shown and used + len(line) + 1 > limits.item_chars:
            break
        shown.append(line)
        used += len(line) + 1
        if item.speaker == "person":
            person_ids.append(item.id)
    shown.reverse()
    person_ids.reverse()
    hints: list[str] = []
    used = 0
    for item in evidence:
        if item.speaker == "confide":
            line = f"- {escape_block_text(_cut(item.text, 300))}"
            if used + len(line) + 1 > limits.hint_chars:
                break
            hints.append(line)
            used += len(line) + 1
    entry_lines: list[str] = []
    entry_ids: list[str] = []
    used = 0
    for entry in known[:MAX_KNOWN_ENTRIES]:
        content = escape_block_text(_cut(entry.content, limits.max_entry_chars))
        line = f"- {content} (id {entry.meta.id})"
        if used + len(line) + 1 > limits.known_chars:
            break
        entry_lines.append(line)
        entry_ids.append(entry.meta.id)
        used += len(line) + 1
    parts = [
        "Privacy rules:",
        escape_block_text(instructions.strip()) or "(none)",
        "",
        "Known entries about the person:",
        *(entry_lines or ["(none)"]),
        "",
        "The assistant's notes (only where to look, never facts):",
        *(hints or ["(none)"]),
        "",
        "Items:",
        *shown,
    ]
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "\n".join(parts)},
    ]
    return messages, person_ids, entry_ids


# ------------------------------------------------------------------ the answer (rule 4)


def _strings(value: object, limit: int) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(dict.fromkeys(value))[:limit]


def parse_learned(text: str) -> Learned:
    """The model's answer (rule 4); ``UnparsableAnswer`` when it is not the object asked for."""
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        raise UnparsableAnswer("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise UnparsableAnswer("the answer is not an object")
    lists = [answer.get(k, []) for k in ("facts", "observations", "invalidations")]
    if not all(isinstance(v, list) for v in lists) or "facts" not in answer:
        raise UnparsableAnswer("the answer does not hold the lists asked for")
    raw_facts, raw_observations, raw_invalidations = lists
    malformed = 0
    facts: list[LearnedFact] = []
    for raw in raw_facts[:MAX_FACTS]:
        content = raw.get("content") if isinstance(raw, dict) else None
        sources = _strings(raw.get("sources"), 4) if isinstance(raw, dict) else None
        topics = raw.get("topics", []) if isinstance(raw, dict) else None
        if not isinstance(content, str) or not content.strip() or sources is None:
            malformed += 1
            continue
        listed = topics if isinstance(topics, list) else []
        topic_list = tuple(t for t in listed if isinstance(t, str))
        facts.append(LearnedFact(_cut(content, MAX_FACT_CHARS), topic_list[:8], sources))
    observations: list[LearnedObservation] = []
    for raw in raw_observations[:MAX_OBSERVATIONS]:
        content = raw.get("content") if isinstance(raw, dict) else None
        sources = _strings(raw.get("sources"), 8) if isinstance(raw, dict) else None
        confidence = raw.get("confidence") if isinstance(raw, dict) else None
        if (
            not isinstance(content, str)
            or not content.strip()
            or not sources
            or isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0.0 <= float(confidence) <= 1.0
        ):
            malformed += 1
            continue
        observations.append(
            LearnedObservation(_cut(content, MAX_FACT_CHARS), float(confidence), sources)
        )
    invalidations = _strings(raw_invalidations, MAX_INVALIDATIONS)
    if invalidations is None:
        malformed += 1
        invalidations = ()
    malformed += max(0, len(raw_facts) - MAX_FACTS) + max(
        0, len(raw_observations) - MAX_OBSERVATIONS
    )
    return Learned(tuple(facts), tuple(observations), invalidations, malformed)


# ------------------------------------------------------------------ the writes (rule 5)


@dataclass(frozen=True, slots=True)
class LearningPlan:
    writes: tuple[PoolWrite, ...]
    dropped: Mapping[str, int] = field(default_factory=dict)
    """Proposals refused by code, by reason (counts only: logs carry no content)."""


_GENERIC_TERMS = frozenset(terms("the person user people someone they their 用户 这个人 对方"))


def supported(fact: str, sources: Sequence[str]) -> bool:
    """Whether ``fact`` shares a content word with the person's words it cites (rule 5);
    True when they are in different languages (words cannot be compared across them)."""
    said = " ".join(sources)
    if detect_language(fact) != detect_language(said):
        return True
    return bool((terms(fact) - _GENERIC_TERMS) & terms(said))


def _same_text(a: str) -> str:
    return re.sub(r"\W+", " ", a.casefold()).strip()


def plan_learning(
    run: LearningRun,
    evidence: Sequence[EvidenceItem],
    learned: Learned,
    pool: Mapping[str, EntryMeta],
    contents: Mapping[str, str],
    *,
    now: datetime,
    new_id: Callable[[], str] = lambda: "mem_" + uuid.uuid4().hex,
) -> LearningPlan:
    """The pool writes ``learned`` may make (rule 5). ``pool``: the role's pool as it is;
    ``contents``: the text of the person's current visible entries (for dedup)."""
    person = run.user
    reader = Reader(person, run.tenant, frozenset({run.role_id}))
    seen = visible_ids(reader, pool, current_only=True)
    spoken = {item.id: item.text for item in evidence if item.speaker == "person"}
    known_texts = {_same_text(contents[i]) for i in seen if i in contents}
    dropped: dict[str, int] = {}

    def drop(reason: str) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1

    system = {from_tag(person), for_person_tag(person), tenant_tag(run.tenant)}
    writes: list[PoolWrite] = []
    for fact in learned.facts:
        sources = tuple(s for s in fact.sources if s in spoken)
        if not sources:
            drop("no_person_source")
            continue
        if not supported(fact.content, [spoken[s] for s in sources]):
            drop("unsupported")
            continue
        if is_sensitive(fact.content):
            drop("sensitive")
            continue
        text = _same_text(fact.content)
        if text in known_texts:
            drop("duplicate")
            continue
        known_texts.add(text)
        meta = EntryMeta(
            id=new_id(),
            role_id=run.role_id,
            layer="fact",
            tags=merge_tags(fact.topics, system | {thread_tag(run.thread_id)}),
            sources=tuple(ThreadSource(run.thread_id, s) for s in sources),
            created_at=now,
            access=tuple(ThreadAccess(run.thread_id, s, frozenset({person})) for s in sources),
        )
        writes.append(AddEntry(PoolEntry(meta, fact.content), "memory_model"))
    for observation in learned.observations:
        if not all(s in seen for s in observation.sources):
            drop("source_not_visible")
            continue
        if is_sensitive(observation.content):
            drop("sensitive")
            continue
        meta = EntryMeta(
            id=new_id(),
            role_id=run.role_id,
            layer="observation",
            tags=merge_tags((), system),
            sources=tuple(EntrySource(s) for s in observation.sources),
            created_at=now,
            confidence=observation.confidence,
        )
        writes.append(AddEntry(PoolEntry(meta, observation.content), "memory_model"))
    for entry_id in learned.invalidations:
        if entry_id not in seen:
            drop("not_visible")
            continue
        writes.append(
            InvalidateEntry(entry_id, now, "memory_model", expected_version=pool[entry_id].version)
        )
    return LearningPlan(tuple(writes), dropped)


# ------------------------------------------------------------------ the procedure


@dataclass(frozen=True, slots=True)
class LearningResult:
    """What ``learn`` hands to ``apply``: the model's proposals (none when no model ran)."""

    learned: Learned = Learned()


class RoleLearningProcedure:
    """``LearningProcedure`` of role memory (module rules 1–6).

    ``model_request`` turns a ``LearningRequest`` into the step's text (the default is its JSON);
    ``before_reading`` is awaited before the evidence is read (the server waits there for the
    source turn to end); ``concurrency_seen`` is told each role's concurrency when a run reads
    its settings (the learner's per-role bound)."""

    def __init__(
        self,
        *,
        journal: JournalStore,
        pool: PoolStore,
        records: RoleRecords,
        limits: LearningLimits | None = None,
        before_reading: Callable[[LearningRun], Awaitable[None]] | None = None,
        concurrency_seen: Callable[[str, str, int | None], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.journal = journal
        self.pool = pool
        self.records = records
        self.limits = limits or LearningLimits()
        self.before_reading = before_reading
        self.concurrency_seen = concurrency_seen
        self.clock = clock

    def _reader(self, run: LearningRun) -> Reader:
        return Reader(run.user, run.tenant, frozenset({run.role_id}))

    async def read_evidence(self, run: LearningRun, after_seq: int) -> Sequence[EvidenceItem]:
        if self.before_reading is not None:
            await self.before_reading(run)
        thread = ThreadRef(run.tenant, run.user, run.thread_id)
        start = max(after_seq, run.up_to_seq - MAX_EVIDENCE_EVENTS)
        events = [
            e
            for e in await self.journal.read(
                thread, after_seq=start, limit=max(0, run.up_to_seq - start)
            )
            if e.seq <= run.up_to_seq
        ]
        confided: dict[int, str] = {}
        if any(e.kind is EventKind.TOOL_CALL and e.payload.get("private") for e in events):
            for confession in await self.records.confessions(run.tenant, run.thread_id):
                if confession.seq > start:
                    joined = f"{confided.get(confession.seq, '')} {confession.text}"
                    confided[confession.seq] = joined.strip()
        return evidence_of(events, confided)

    async def learn(
        self,
        run: LearningRun,
        evidence: Sequence[EvidenceItem],
        step: Callable[[str], Awaitable[str]],
    ) -> LearningResult:
        if not any(item.speaker == "person" for item in evidence):
            return LearningResult()  # rule 2
        settings = await self.records.settings(run.tenant, run.role_id)
        if self.concurrency_seen is not None:
            self.concurrency_seen(run.tenant, run.role_id, settings.concurrency)
        known = await self.pool.read_visible(
            run.tenant, run.role_id, self._reader(run), current_only=True
        )
        messages, person_ids, entry_ids = build_messages(
            evidence, known, instructions=settings.instructions, limits=self.limits
        )
        request = LearningRequest(
            run.tenant, run.role_id, run.thread_id, messages, learning_schema(person_ids, entry_ids)
        )
        answer = await step(request.to_text())
        return LearningResult(parse_learned(answer))

    async def apply(
        self, tx: Any, run: LearningRun, evidence: Sequence[EvidenceItem], result: LearningResult
    ) -> None:
        learned = result.learned
        if not (learned.facts or learned.observations or learned.invalidations):
            return
        pool = await self.pool.load_meta(run.tenant, run.role_id)
        known = await self.pool.read_visible(
            run.tenant, run.role_id, self._reader(run), current_only=True
        )
        plan = plan_learning(
            run,
            evidence,
            learned,
            pool,
            {entry.meta.id: entry.content for entry in known},
            now=self.clock(),
        )
        if plan.writes:
            await self.pool.apply_in(tx, run.tenant, run.role_id, list(plan.writes))
        log.info(
            "role memory learning run %s: %d writes, %d malformed, dropped %s",
            run.id,
            len(plan.writes),
            learned.malformed,
            ",".join(f"{k}={v}" for k, v in sorted(plan.dropped.items())) or "-",
        )
