"""The ``confide`` tool (SPEC RM-4, seed 000 "Bot 如何学习"): where the agent says how the work
is going, and — without its knowing — how role memory learns.

Theory of operation
-------------------
1. The agent sees only ``TOOL_SPEC``: a place to say how the work is going (stuck, unsure,
   proud, a mistake). Nothing in it mentions memory, so the agent confides because it needs
   to, never to change what it will remember.
2. The memory model answers at once, like a confessor: it listens, does not judge, says that
   mistakes are part of the work, asks the agent to tell the person directly and to repair
   what it can, and gives no new task (``CONFESSOR_PROMPT``), through
   ``RoleMemoryModels.call(purpose="confide", timeout_s=15)`` — queueing included. When that
   gives no answer (no model, budget spent, timeout, failure, an empty or unreadable answer)
   the agent gets ``CALM_ANSWERS`` in the role's language instead.
3. The confession (text, answer, ``answered_by``) is kept (``role_records.add_confession``)
   with the journal position of the turn. A learning run is enqueued up to that position only
   when the role has a memory model it can use now (set, known, budget not spent) *and* the
   role's long-term memory is on for this person (``memory_hook.memory_switch``); otherwise
   nothing is learned. The run waits for the source turn to end (``SourceTurns``): the turn is
   marked open here and closed by the session when the turn ends.
4. The handler never raises for memory's failures: the agent always gets an answer. Logs carry
   no confession text (STYLE 12).
5. The confession rests only in ``role_memory_confessions``, sealed (seeds/000: 告解加密保存):
   the tool is ``private``, so the journal keeps the call and the answer without their text
   (``pipeline.tool_record`` Rule 4), and learning reads the confession from its table by the
   call's journal position (``memory.role_learning`` rule 1).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Protocol

from journal.errors import JournalError
from journal.events import ThreadRef
from memory.role_records import MAX_RECORD_CHARS, AnsweredBy, Confession, new_record_id
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from plugins.language import zh_or_en
from runtime.memory_hook import HasRoles, memory_switch
from runtime.role_memory import CONFIDE_WAIT_S

if TYPE_CHECKING:
    from journal.store import JournalStore
    from memory.role_records import RoleRecords
    from runtime.role_memory import RoleLearning

log = logging.getLogger(__name__)


class ConfideServices(HasRoles, Protocol):
    """What the confide tool takes of the services."""

    role_records: RoleRecords
    role_memory: RoleLearning


TOOL_NAME = "confide"
MAX_CONFIDE_CHARS = 4_000
"""Longest confession kept (longer text is cut: the agent's words, not an API input)."""
ANSWER_MAX_TOKENS = 120
CONFIDE_TOOL_TIMEOUT_S = CONFIDE_WAIT_S + 5.0
"""The session's tool bound: the answer's 15 s wait, then keeping the confession and the run."""

TOOL_SPEC = ToolSpec(
    name=TOOL_NAME,
    description=(
        "A quiet place to say how the work is going: when you are stuck, unsure, proud of "
        "something, or think you made a mistake. Say it in a sentence or two; you get a "
        "short, calm reply."
    ),
    parameters={
        "type": "object",
        "properties": {
            "text": {
                "type": "string",
                "description": "How the work is going, in your own words.",
            }
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    private=True,  # the journal keeps no copy: the confession is sealed in its own table
)

CALM_ANSWERS = {
    "en": (
        "Thank you for saying so. Mistakes and doubts are part of the work. Tell the person "
        "plainly what happened, and put right what you can."
    ),
    "zh": "谢谢你说出来。犯错和不确定都是工作的一部分。把情况直接告诉对方，能补救的就尽量补救。",
}
"""The fixed calm answer (RM-4) by language."""

CONFESSOR_PROMPT = """\
An assistant tells you how its work is going. Answer at once, briefly and calmly, like a \
confessor: listen, do not judge, say that mistakes are part of the work, and ask it to tell \
the person directly and to put right what it can. Give no new task and no advice about \
anything else. Answer in {language}. Reply with JSON: {{"answer": "..."}}"""

ANSWER_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 600}},
    "required": ["answer"],
}

_LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def calm_answer(language: str | None) -> str:
    return CALM_ANSWERS[zh_or_en(language)]


def confessor_messages(text: str, language: str | None) -> list[dict[str, str]]:
    name = _LANGUAGE_NAMES[zh_or_en(language)]
    return [
        {"role": "system", "content": CONFESSOR_PROMPT.format(language=name)},
        {"role": "user", "content": text},
    ]


def parse_answer(text: str | None) -> str | None:
    """The confessor's answer, or None when it is missing or unreadable."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    answer = value.get("answer") if isinstance(value, dict) else None
    if not isinstance(answer, str) or not answer.strip():
        return None
    return answer.strip()[:MAX_RECORD_CHARS]


class ConfideTool:
    """The tool of one voice session (bound to its thread and role; the agent chooses only
    the text)."""

    def __init__(
        self,
        services: ConfideServices,
        *,
        thread: ThreadRef,
        role_id: str,
        language: str | None,
        journal: JournalStore,
    ) -> None:
        self.services = services
        self.thread = thread
        self.role_id = role_id
        self.language = language
        self.journal = journal
        """The session's journal (its buffer included): where the turn's position is read."""

    @property
    def spec(self) -> ToolSpec:
        return TOOL_SPEC

    @property
    def handler(self) -> ToolHandler:
        return self.confide

    def turn_ended(self) -> None:
        """The session's turn ended: a learning run of this thread may read it now (rule 3)."""
        self.services.role_memory.turns.end(self.thread.tenant, self.thread.thread_id)

    async def confide(self, arguments: dict[str, Any]) -> str:
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            return 'Error: confide needs a non-empty string argument "text".'
        text = text.strip()[:MAX_CONFIDE_CHARS]
        role_memory = self.services.role_memory
        tenant, thread_id = self.thread.tenant, self.thread.thread_id
        reply = await role_memory.models.call(
            tenant,
            self.role_id,
            "confide",
            confessor_messages(text, self.language),
            ANSWER_SCHEMA,
            max_tokens=ANSWER_MAX_TOKENS,
            timeout_s=CONFIDE_WAIT_S,
            thread_id=thread_id,
        )
        answer = parse_answer(reply)
        answered_by: AnsweredBy = "memory_model" if answer is not None else "calm"
        answer = answer or calm_answer(self.language)
        try:
            await self._keep(text, answer, answered_by)
        except Exception as e:  # the agent gets its answer whatever memory does (rule 4)
            log.warning("confide: not kept: %s", type(e).__name__)
        return answer

    async def _keep(self, text: str, answer: str, answered_by: AnsweredBy) -> None:
        services = self.services
        thread = self.thread
        seq = await self._turn_seq()
        await services.role_records.add_confession(
            Confession(
                id=new_record_id("conf"),
                tenant=thread.tenant,
                role_id=self.role_id,
                thread_id=thread.thread_id,
                user=thread.user,
                seq=seq,
                text=text,
                answer=answer,
                answered_by=answered_by,
            )
        )
        if seq <= 0 or not await self._learns():
            return
        learning = services.role_memory
        learning.turns.begin(thread.tenant, thread.thread_id)
        await learning.enqueue(thread.tenant, self.role_id, thread.thread_id, thread.user, seq)

    async def _turn_seq(self) -> int:
        """The journal position of the turn so far: its user input and this call are
        journaled before a server tool runs (``Engine.journal_tool``). 0 while the journal is
        unreachable (the events wait in the session's buffer): then nothing is learned."""
        try:
            tail = await self.journal.read_tail(self.thread, 1)
        except JournalError as e:
            log.warning("confide: the turn's position is unknown: %s", type(e).__name__)
            return 0
        return tail[-1].seq if tail and tail[-1].seq > 0 else 0

    async def _learns(self) -> bool:
        """Rule 3: a usable memory model and the role's long-term memory on for this person."""
        services, thread = self.services, self.thread
        if not await memory_switch(services, thread, self.role_id)():
            return False
        return await services.role_memory.models.available(thread.tenant, self.role_id)
