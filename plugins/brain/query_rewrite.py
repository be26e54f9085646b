"""The question rewritten as search queries, in English and in Chinese (``llm.py`` Rule 9).

Theory of operation
-------------------
Code's own query is the person's words (with the previous message for a follow-up). A
paraphrase ("Can I test-drive it before I pay?" for a 21-day trial) or a question in the other
language than the document's shares too little with the passage that answers it. When that
query found nothing, the model gets one constrained-JSON call:

Rule 1. ``REWRITE_SCHEMA``: ``{"english": …, "chinese": …}``, each a short query of the words a
        policy or guide would use for what the question asks. Two worked examples show the shape.
Rule 2. ``rewritten_queries`` keeps each query that is non-empty, within ``MAX_QUERY_CHARS``,
        in its language (an "english" query with Chinese characters is dropped, and the
        reverse), and not the question already searched; unparsable JSON gives none.
Rule 3. The queries only search. What they find is judged as any evidence is (weak-evidence
        check, the answer's support check): a rewrite widens what is found, never what is
        said.
"""

from __future__ import annotations

import json
from typing import Any

from plugins.language import detect_language

MAX_QUERY_CHARS = 80

REWRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "english": {"type": "string", "maxLength": MAX_QUERY_CHARS},
        "chinese": {"type": "string", "maxLength": MAX_QUERY_CHARS},
    },
    "required": ["english", "chinese"],
}

_PROMPT = (
    "Rewrite the question as a short search query for a policy document, once in English and "
    "once in Chinese. Use the plain words such a document would use for the thing asked about."
)
_EXAMPLES = (
    (
        "Is there somewhere I can leave the pram while we're inside?",
        '{"english": "stroller storage", "chinese": "婴儿车 存放"}',
    ),
    (
        "能不能刷信用卡？",
        '{"english": "payment methods credit card", "chinese": "支付方式 信用卡"}',
    ),
)


def rewrite_messages(question: str) -> list[dict[str, str]]:
    """Rule 1's prompt."""
    messages = [{"role": "system", "content": _PROMPT}]
    for asked, answer in _EXAMPLES:
        messages += [{"role": "user", "content": asked}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": question})
    return messages


def rewritten_queries(
    answer: str, searched: str, *, other_language_only: bool = False
) -> list[str]:
    """Rule 2: the model's queries worth a search, English first; ``other_language_only``:
    only the one in the language the question is not in (a translation, not a paraphrase)."""
    try:
        data = json.loads(answer)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    out: list[str] = []
    for key, language in (("english", "en"), ("chinese", "zh")):
        query = " ".join(str(data.get(key) or "").split())
        if not query or len(query) > MAX_QUERY_CHARS or query == searched.strip():
            continue
        if detect_language(query) != language or query in out:
            continue
        if other_language_only and language == detect_language(searched):
            continue
        out.append(query)
    return out
