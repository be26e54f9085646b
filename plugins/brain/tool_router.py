"""Tool routing by grammar-constrained JSON (SPEC BRAIN-2): the model picks one of the role's
tools with its arguments, or "none"; code parses and checks the choice.

The schema is one option per tool (``{"tool": <name>, "arguments": <its parameters>}``) plus
``{"tool": "none"}``, sent as ``response_format`` json_schema, so llama.cpp's grammar only lets
the model write one of them. A choice naming no offered tool, or arguments that are not an
object, counts as "none".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from plugins.contracts import ToolSpec

log = logging.getLogger(__name__)

ROUTER_PROMPT = (
    "Pick the one tool that serves the person's last message, with its arguments, or "
    '"none" when no tool is needed. Reply with JSON only.'
)


def tool_list(tools: Sequence[ToolSpec]) -> str:
    return "\n".join(f"- {tool.name}: {tool.description}" for tool in tools)


def router_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """JSON schema of a routing decision: one of the tools with its arguments, or none."""
    options: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {"tool": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["tool", "arguments"],
        }
        for tool in tools
    ]
    options.append(
        {"type": "object", "properties": {"tool": {"const": "none"}}, "required": ["tool"]}
    )
    return {"anyOf": options}


def parse_route(text: str, tools: Sequence[ToolSpec]) -> tuple[str, dict[str, Any]] | None:
    """The (tool, arguments) the router chose, or None for "none" or anything unusable."""
    try:
        value = json.loads(text)
    except ValueError:
        log.warning("tool router returned no JSON")
        return None
    if not isinstance(value, dict):
        return None
    name = value.get("tool")
    arguments = value.get("arguments", {})
    if name not in {tool.name for tool in tools} or not isinstance(arguments, dict):
        return None
    return str(name), arguments
