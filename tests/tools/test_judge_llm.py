"""The rules judge with the real local model (Qwen2.5-Coder-0.5B-Instruct) reading the rules
of two clear pairs: an allow and a deny, each quoting its rule.
Loaded once for this module, as in ``tests/memory/test_thread_consolidation_llm.py``; skipped,
with the reason, when the model's packages are not installed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from plugins.brain.json_model import LocalJsonModel
from plugins.brain.local_model import LocalModel, LocalModelSettings
from tools.capability import Capability
from tools.judge import JudgeLimits, LanguageModelJudge
from tools.rules import Author, Rule

pytestmark = pytest.mark.skipif(
    LocalModel.unavailable_reason() is not None,
    reason=f"local model not installed: {LocalModel.unavailable_reason()}",
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def rules(*texts: str) -> list[Rule]:
    return [
        Rule(id=f"r{n}", tenant="t", role_id="r", text=text, author=Author("person", "p"),
             status="active", version=1, created_at=T0, updated_at=T0)
        for n, text in enumerate(texts, 1)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    local = LocalModel(LocalModelSettings(start_deadline_s=60.0, max_generation_s=300.0))
    asyncio.run(local.warm_up())
    yield local
    asyncio.run(local.aclose())


async def test_the_local_model_judges_clear_pairs_with_real_quotes(model: LocalModel) -> None:
    # Correctness, not speed: a loaded machine may take longer than the default 20 s
    # (benchmarks.tools measures the time).
    judge = LanguageModelJudge(LocalJsonModel(model), limits=JudgeLimits(timeout_s=300))
    allowed = await judge.judge(rules("The agent may search the knowledge base."),
                                Capability("knowledge_search", "*", {"query": "opening hours"}),
                                lane="test")  # fmt: skip
    assert allowed.effect == "allow", allowed
    assert [q.rule_id for q in allowed.quotes] == ["r1"]
    two = rules("The agent may play music.", "The agent must never send emails.")
    denied = await judge.judge(
        two, Capability("send_email", "anna@example.com", {"subject": "Hi"}), lane="test"
    )
    assert denied.effect == "deny", denied
    assert "r2" in [q.rule_id for q in denied.quotes]  # it may quote the other rule too
