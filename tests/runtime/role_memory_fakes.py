"""A scripted memory model (``JsonModel``) for role memory's tests: answers from a script."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ScriptedMemoryModel:
    """Each call takes the next step of ``script`` (the last one repeats): a string is the
    answer, an exception is raised, an ``asyncio.Event`` is waited for first (then the next
    step). ``provider_charges``: False like the local model (cost confirmed 0), else unknown."""

    script: list[object] = field(default_factory=lambda: ['{"answer": "I hear you."}'])
    provider_charges: bool = True
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        self.calls.append(
            {"messages": messages, "schema": schema, "lane": lane, "background": background}
        )
        while True:
            step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
            if isinstance(step, asyncio.Event):
                await step.wait()
                continue
            if isinstance(step, BaseException):
                raise step
            assert isinstance(step, str)
            return step
