"""DEMO-1 runs end to end against PostgreSQL and every check it computes holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from demos.knowledge_memory_demo import main_async


async def test_the_demo_checks_all_pass(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENREALTIME_DATABASE_URL", postgres_url)
    result = await main_async(tmp_path / "data")
    assert result["checks"] == {
        "unbound_knowledge_misses": True,
        "bound_knowledge_hits": True,
        "users_isolated": True,
        "new_session_reads_memory": True,
        "disabled_memory_not_injected": True,
        "same_thread_reads_history": True,
        "new_thread_starts_empty": True,
    }
    model_input = result["model_input"]
    assert "<memory_data>" in model_input["system_prompt"]
    assert model_input["user_text"].startswith("最近对话上下文:")
    assert "[source: 星河商店售后说明 v1]" in model_input["knowledge_tool_result"]
    assert result["details"]["database"] == "external"
