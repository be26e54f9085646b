"""A turn's token budget (SPEC J-3): what the conversation context may use.

A turn's prompt holds the instructions (with memory), the tool schemas, the conversation
context, the current input and room for the answer. ``ContextBudget`` takes what the model
accepts (``context_window``) and reserves the output, the tool schemas, the instructions, the
current input (with the ``最近对话上下文:``/``当前用户输入:`` framing) and a safety margin for
the token estimate's error; what is left, ``history``, is the conversation context's budget
(``journal/projector.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from journal.events import canonical_json
from journal.tokens import EstimatingTokenCounter, TokenCounter

__all__ = ["FRAMING_TOKENS", "TOOL_SCHEMA_OVERHEAD_TOKENS", "ContextBudget", "ToolSchema"]

FRAMING_TOKENS = 24
"""Reserved for the ``最近对话上下文:`` … ``当前用户输入:`` framing (either language)."""
TOOL_SCHEMA_OVERHEAD_TOKENS = 8
"""Per tool, what a provider's function-calling format adds around name, description, schema."""


class ToolSchema(Protocol):
    """What a tool schema needs to be counted (``plugins.contracts.ToolSpec`` fits)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextBudget:
    """Token budget of one turn: ``history`` is what the conversation context may use."""

    context_window: int
    reserved_output: int = 1024
    instructions: int = 0
    tool_schemas: int = 0
    current_input: int = 0
    safety_margin: int = 0

    def __post_init__(self) -> None:
        parts = (
            self.context_window,
            self.reserved_output,
            self.instructions,
            self.tool_schemas,
            self.current_input,
            self.safety_margin,
        )
        if any(p < 0 for p in parts):
            raise ValueError("token budgets cannot be negative")

    @property
    def history(self) -> int:
        reserved = (
            self.reserved_output
            + self.instructions
            + self.tool_schemas
            + self.current_input
            + self.safety_margin
        )
        return max(0, self.context_window - reserved)

    @classmethod
    def for_turn(
        cls,
        *,
        context_window: int,
        current_input: str,
        instructions: str = "",
        tools: Sequence[ToolSchema] = (),
        reserved_output: int = 1024,
        safety_ratio: float = 0.1,
        min_safety_margin: int = 64,
        counter: TokenCounter | None = None,
    ) -> ContextBudget:
        """Count a turn's parts. The safety margin is ``safety_ratio`` of the window (at least
        ``min_safety_margin``): room for the token estimate's error and the chat format."""
        counter = counter or EstimatingTokenCounter()
        schema_tokens = sum(
            counter.count(
                canonical_json(
                    {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    }
                )
            )
            + TOOL_SCHEMA_OVERHEAD_TOKENS
            for t in tools
        )
        return cls(
            context_window=context_window,
            reserved_output=reserved_output,
            instructions=counter.count(instructions),
            tool_schemas=schema_tokens,
            current_input=counter.count(current_input) + FRAMING_TOKENS,
            safety_margin=max(min_safety_margin, int(context_window * safety_ratio)),
        )
