from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from plugins.asr.openai_asr import OpenAIASR
from plugins.brain.local import LocalBrain
from plugins.brain.openai_brain import OpenAIBrain
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


def test_the_offline_brain_is_the_default(tmp_path: Path) -> None:
    assert isinstance(build_plugins(Settings(data_dir=tmp_path)).brain, LocalBrain)


def test_openai_itself_needs_a_key() -> None:
    with pytest.raises(ValidationError, match="OPENREALTIME_BRAIN_API_KEY"):
        Settings(brain="openai")
