"""TurnContent: everything the brain is given for one response, and how it is rendered.

``conversation_context`` is the projected history *before* the current input (from the journal,
never from client-uploaded transcripts), and ``history`` the same as turns; ``model_text`` puts
history and current input into one user message the way the product guide shows it
(``最近对话上下文: … 当前用户输入: …``).
"""

from __future__ import annotations

from dataclasses import dataclass

from plugins.contracts import BrainInput, HistoryTurn, ToolChoice, ToolSpec
from plugins.language import zh_or_en

_LABELS = {
    "zh": ("最近对话上下文:", "当前用户输入:"),
    "en": ("Recent conversation context:", "Current user input:"),
}


def labels_for(language: str | None) -> tuple[str, str]:
    return _LABELS[zh_or_en(language)]


@dataclass(frozen=True, slots=True)
class TurnContent:
    instructions: str
    conversation_context: str
    current_input: str
    language: str | None = None
    memory_data: str | None = None
    thread_memory: str | None = None
    """The thread's learned facts (``<thread_memory>``), after ``memory_data``."""
    tools: tuple[ToolSpec, ...] = ()
    history: tuple[HistoryTurn, ...] = ()
    """``conversation_context`` as turns (``journal.projection``), for the brain."""
    tool_choice: ToolChoice = ToolChoice()
    """How the function tools among ``tools`` may be called (GA ``tool_choice``)."""
    max_output_tokens: int | None = None
    role_id: str = ""
    thread_id: str = ""

    @property
    def model_text(self) -> str:
        context_label, input_label = labels_for(self.language)
        if not self.conversation_context:
            return f"{input_label}{self.current_input}"
        return f"{context_label}\n{self.conversation_context}\n{input_label}{self.current_input}"

    @property
    def system_prompt(self) -> str:
        parts = [self.instructions, self.memory_data, self.thread_memory]
        return "\n".join(p for p in parts if p)

    def to_brain_input(self, *, session: str = "") -> BrainInput:
        return BrainInput(
            system=self.system_prompt,
            model_text=self.model_text,
            current_input=self.current_input,
            language=self.language,
            tools=self.tools,
            conversation_context=self.conversation_context,
            history=self.history,
            session=session,
            tool_choice=self.tool_choice,
            max_output_tokens=self.max_output_tokens,
            instructions=self.instructions,
            memory_data=self.memory_data or "",
            thread_memory=self.thread_memory or "",
            role_id=self.role_id,
            thread_id=self.thread_id,
        )
