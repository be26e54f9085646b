from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from plugins.asr.openai_asr import OpenAIASR
from plugins.brain.llm import LLMBrain
from plugins.brain.local import LocalBrain
from plugins.brain.local_model import LocalModel
from plugins.brain.model_files import QWEN_15B
from plugins.brain.openai_brain import OpenAIBrain
from plugins.brain.relevance import RelevanceJudge
from plugins.tts.openai_tts import OpenAITTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.plugin_factory import build_plugins


def test_each_stage_can_point_at_an_openai_compatible_server(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        brain="openai",
        brain_base_url="http://127.0.0.1:9/v1",
        brain_model="local-llm",
        asr="openai",
        asr_base_url="http://127.0.0.1:9/v1",
        tts="openai",
        tts_base_url="http://127.0.0.1:9/v1",
    )
    plugins = build_plugins(settings)
    assert isinstance(plugins.brain, OpenAIBrain)
    assert isinstance(plugins.asr, OpenAIASR)
    assert isinstance(plugins.tts, OpenAITTS)
    assert isinstance(plugins.vad, EnergyVAD)


def test_the_local_language_model_is_the_default(tmp_path: Path) -> None:
    brain = build_plugins(Settings(data_dir=tmp_path)).brain
    if LocalModel.unavailable_reason() is None:
        assert isinstance(brain, LLMBrain)
        assert not brain.model.loaded  # built lazily: loading waits for warm_up
    else:
        assert isinstance(brain, LocalBrain)


def test_the_default_brain_judges_relevance_with_the_larger_model_unless_switched_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(LocalModel, "unavailable_reason", staticmethod(lambda *a: None))
    brain = build_plugins(Settings(data_dir=tmp_path)).brain
    assert isinstance(brain, LLMBrain) and isinstance(brain.judge, RelevanceJudge)
    assert brain.judge.model.model is QWEN_15B and not brain.judge.model.loaded

    off = build_plugins(Settings(data_dir=tmp_path, llm_relevance_judge=False)).brain
    assert isinstance(off, LLMBrain) and off.judge is None

    monkeypatch.setattr(
        RelevanceJudge, "unavailable_reason", staticmethod(lambda: "packages not installed: y")
    )
    with caplog.at_level("WARNING"):
        missing = build_plugins(Settings(data_dir=tmp_path)).brain
    assert isinstance(missing, LLMBrain) and missing.judge is None
    assert "no relevance judge" in caplog.text


def test_rules_are_chosen_by_name_and_under_their_old_name(tmp_path: Path) -> None:
    for name in ("rules", "local"):
        brain = build_plugins(Settings(data_dir=tmp_path, brain=name)).brain
        assert isinstance(brain, LocalBrain)


def test_without_the_model_packages_the_llm_brain_falls_back_to_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(
        LocalModel, "unavailable_reason", staticmethod(lambda *a: "packages not installed: x")
    )
    with caplog.at_level("WARNING"):
        brain = build_plugins(Settings(data_dir=tmp_path, brain="llm")).brain
    assert isinstance(brain, LocalBrain)
    assert "packages not installed" in caplog.text and "using rules" in caplog.text


def test_openai_itself_needs_a_key() -> None:
    with pytest.raises(ValidationError, match="OPENREALTIME_BRAIN_API_KEY"):
        Settings(brain="openai")
