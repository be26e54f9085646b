"""What a tool call asks for (SPEC TOOL-1): a ``Capability``.

Theory of operation
-------------------
1. ``action`` is the tool's name; ``target`` the value of the tool's declared target argument
   (as text), or ``"*"`` when the tool declares none; ``arguments`` the call's exact arguments,
   or ``None`` for "any arguments" (a grant that does not pin them).
2. Arguments compare by their canonical JSON (sorted keys, no whitespace, non-ASCII kept), so
   two dicts built in another order are the same arguments; ``arguments_key`` is that text.
3. ``matches(grant_capability, call)``: action equal; target equal or the grant's ``"*"``;
   arguments equal when the grant has them. A grant never matches by a broader action.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ANY_TARGET = "*"
MAX_ACTION_CHARS = 64
MAX_TARGET_CHARS = 512
MAX_ARGUMENTS_CHARS = 16_384
"""Of a capability's canonical arguments (a grant pins at most this much)."""


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True, eq=False)
class Capability:
    """Equal and hashed by ``key()`` (rule 2)."""

    action: str
    target: str = ANY_TARGET
    arguments: Mapping[str, Any] | None = None

    @property
    def arguments_key(self) -> str | None:
        """The arguments' canonical JSON (rule 2), or None."""
        return None if self.arguments is None else canonical_json(dict(self.arguments))

    def key(self) -> str:
        """The whole capability as canonical JSON (the judgement cache's key part)."""
        return canonical_json([self.action, self.target, self.arguments_key])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Capability):
            return NotImplemented
        return self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())


def matches(granted: Capability, call: Capability) -> bool:
    """Whether a grant's capability covers a call's (rule 3)."""
    if granted.action != call.action:
        return False
    if granted.target != ANY_TARGET and granted.target != call.target:
        return False
    return granted.arguments is None or granted.arguments_key == call.arguments_key


def check_capability(capability: Capability) -> str | None:
    """What is wrong with a capability's shape (None when it is fine)."""
    if not capability.action or len(capability.action) > MAX_ACTION_CHARS:
        return f"action must be 1–{MAX_ACTION_CHARS} characters"
    if not capability.target or len(capability.target) > MAX_TARGET_CHARS:
        return f"target must be 1–{MAX_TARGET_CHARS} characters"
    key = capability.arguments_key
    if key is not None and len(key) > MAX_ARGUMENTS_CHARS:
        return f"arguments must be at most {MAX_ARGUMENTS_CHARS} characters as JSON"
    return None
