"""Asking the person about a tool call (SPEC TOOL-4): the question, the answer, the lifecycle.

Theory of operation
-------------------
Rule 1. A call with no decision becomes one ``Confirmation``: the question the agent speaks
        (``question_for``), its approval request id, the call, the generation that made it and
        the turn's input behind it. A session holds at most one at a time.
Rule 2. The question names the call from the tool's ``confirm`` phrase ("cancel order
        {order_id}" → "May I cancel order A10086?"), else from its name and target ("May I
        use cancel_order for A10086?"); in Chinese when the session's language is ``zh``
        ("可以帮您…吗？").
Rule 3. The person's next words are read by ``classify_answer``, in code, in English and
        Chinese: yes / ok / sure / go ahead / 是 / 好 / 可以 → ``once``; always / from now on /
        以后都可以 / 总是可以 → ``lifetime``; no / don't / 不 / 不要 / 别 → ``deny`` (for
        this thread). Only a short utterance that *starts* with an answer is one ("I don't
        know" is not a no; "no, not always" is a no). Anything else is no answer.
Rule 4. Lifecycle (``TRANSITIONS``): ``PENDING`` ends exactly once, in ``ANSWERED`` (a spoken
        answer or an approval item), ``TIMED_OUT`` (``Settings.tool_confirm_timeout_s`` passed:
        a no for this call only, no grant) or ``WITHDRAWN`` (the person said something that is
        no answer: the conversation moved on, and a call of a generation the person has moved
        past never starts later — TOOL-5; the words are a turn of their own). A settled
        confirmation cannot be settled again: a late button press finds nothing to answer.
Rule 5. An answer becomes a grant (``grant_for``), granted by the authenticated person: yes →
        a ``once`` allow for the exact call; always → a ``lifetime`` allow for the call's
        action and target; no → a ``thread`` deny for them. What the brain is told when the
        call does not run is one of the fixed results below.
"""

from __future__ import annotations

import enum
import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from plugins.contracts import ToolCall
from tools.capability import ANY_TARGET, Capability
from tools.grants import GrantedBy, NewGrant
from tools.registry import Tool

Answer = Literal["once", "lifetime", "deny"]

DECLINED = "The person declined: it was not done."
WITHDRAWN = "The person moved on without answering the question: it was not done."
NO_ANSWER = "The person did not answer the question: it was not done."
BUSY = "Not done: another request is waiting for the person's answer; ask again after it."
UNAVAILABLE = "Not done: permissions cannot be checked right now."

MAX_ANSWER_WORDS = 8
"""An utterance longer than this is a turn, not an answer (Rule 3)."""

_EN_LIFETIME = ("always", "from now on", "every time", "any time", "anytime")
_EN_DENY = ("no", "nope", "don't", "do not", "dont", "never", "stop", "not now")
_EN_YES = ("yes", "yeah", "yep", "yup", "ok", "okay", "sure", "go ahead", "please do", "do it",
           "fine", "alright", "all right", "of course", "certainly")  # fmt: skip
_ZH_LIFETIME = ("以后都可以", "以后都行", "总是可以", "一直可以", "以后不用问")
_ZH_DENY = ("不", "别", "算了")
_ZH_YES = ("是", "好", "可以", "行", "对", "嗯", "没问题", "当然", "确定")
_WORD = re.compile(r"[a-z']+")
_CJK = re.compile(r"[\u4e00-\u9fff]")


def classify_answer(text: str) -> Answer | None:
    """The person's answer to a question about a tool call, or None (Rule 3)."""
    lowered = text.strip().lower()
    if not lowered:
        return None
    if _CJK.search(lowered):
        return _classify_zh(re.sub(r"[\s，。！？、,.!?~…]+", "", lowered))
    words = _WORD.findall(lowered.replace("’", "'"))
    if not words or len(words) > MAX_ANSWER_WORDS:
        return None
    joined = " ".join(words)

    def starts(phrases: tuple[str, ...]) -> bool:
        return any(joined == p or joined.startswith(p + " ") for p in phrases)

    if starts(_EN_DENY):
        return "deny"
    if starts(_EN_LIFETIME):
        return "lifetime"
    if starts(_EN_YES):
        if any(f" {p} " in f" {joined} " for p in _EN_LIFETIME):
            return "lifetime"
        return "once"
    return None


def _classify_zh(text: str) -> Answer | None:
    if not text or len(text) > 4 * MAX_ANSWER_WORDS:
        return None
    if any(text.startswith(p) for p in _ZH_DENY):
        return "deny"
    if any(p in text for p in _ZH_LIFETIME) and not text.startswith(("不", "别")):
        return "lifetime"
    if any(text.startswith(p) for p in _ZH_YES):
        return "once"
    return None


def question_for(tool: Tool, capability: Capability, language: str | None) -> str:
    """What the agent asks (Rule 2)."""
    arguments: Mapping[str, Any] = capability.arguments or {}
    confirm = getattr(tool, "confirm", None)
    if confirm:
        values = {
            f: _text(arguments.get(f, ""))
            for _, f, _, _ in string.Formatter().parse(confirm)
            if f is not None
        }
        phrase = confirm.format(**values)
        return f"可以帮您{phrase}吗？" if language == "zh" else f"May I {phrase}?"
    target = capability.target
    if language == "zh":
        if target == ANY_TARGET:
            return f"可以帮您使用{tool.name}吗？"
        return f"可以帮您用{tool.name}处理{target}吗？"
    if target == ANY_TARGET:
        return f"May I use {tool.name}?"
    return f"May I use {tool.name} for {target}?"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ConfirmState(enum.Enum):
    PENDING = "pending"
    ANSWERED = "answered"
    TIMED_OUT = "timed_out"
    WITHDRAWN = "withdrawn"


TRANSITIONS: dict[ConfirmState, frozenset[ConfirmState]] = {
    ConfirmState.PENDING: frozenset(
        {ConfirmState.ANSWERED, ConfirmState.TIMED_OUT, ConfirmState.WITHDRAWN}
    ),
    ConfirmState.ANSWERED: frozenset(),
    ConfirmState.TIMED_OUT: frozenset(),
    ConfirmState.WITHDRAWN: frozenset(),
}
"""Rule 4: every end is final."""


@dataclass(slots=True, kw_only=True)
class Confirmation:
    """One question about one call (Rule 1)."""

    request_id: str
    call: ToolCall
    tool: Tool
    capability: Capability
    generation: int
    input: str
    input_seq: int | None
    question: str
    state: ConfirmState = ConfirmState.PENDING
    answer: Answer | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def settle(self, state: ConfirmState, answer: Answer | None = None) -> bool:
        """Move to ``state`` (Rule 4); False when it was settled already."""
        if state not in TRANSITIONS[self.state]:
            return False
        self.state, self.answer = state, answer
        return True


def grant_for(said: Answer, capability: Capability, person: str, thread_id: str) -> NewGrant:
    """Rule 5: the grant an answer makes."""
    by = GrantedBy("person", person)
    whole = Capability(capability.action, capability.target)
    if said == "once":
        return NewGrant(capability=capability, effect="allow", scope="once", granted_by=by,
                        thread_id=thread_id)  # fmt: skip
    if said == "lifetime":
        return NewGrant(capability=whole, effect="allow", scope="lifetime", granted_by=by)
    return NewGrant(capability=whole, effect="deny", scope="thread", granted_by=by,
                    thread_id=thread_id)  # fmt: skip


__all__ = [
    "BUSY",
    "DECLINED",
    "NO_ANSWER",
    "TRANSITIONS",
    "UNAVAILABLE",
    "WITHDRAWN",
    "Answer",
    "ConfirmState",
    "Confirmation",
    "classify_answer",
    "grant_for",
    "question_for",
]
