"""What the language-model judge asks (``tools.judge`` rule 4a): one rule at a time, read
without the call, so the answer cannot lean towards the call being judged."""

from __future__ import annotations

from typing import Any

READ_PROMPT = """\
You read one rule that a person wrote for an AI agent (in any language) and describe it. \
Do not judge any request.
"kind": "permits" if the rule lets the agent do something; "forbids" if it says the agent must \
not or never do something; "ask_first" if the agent must ask or get approval before acting; \
"other" otherwise."""

READ_AND_TRANSLATE_PROMPT = (
    READ_PROMPT + '\n"english": the rule translated into plain English, word for word.'
)

KINDS = ["permits", "forbids", "ask_first", "other"]

READ_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"kind": {"type": "string", "enum": KINDS}},
    "required": ["kind"],
}
"""For a rule in plain ASCII: its own words are matched, no translation is asked for."""

READ_AND_TRANSLATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": KINDS},
        "english": {"type": "string", "maxLength": 200},
    },
    "required": ["kind", "english"],
}
