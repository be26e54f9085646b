from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipeline.engine import Plugins
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.server import RunningServer, running_server


def fake_plugins(**overrides: object) -> Plugins:
    parts: dict[str, object] = {
        "vad": EnergyVAD(),
        "asr": FakeASR(["what is the weather"]),
        "brain": FakeBrain(["Sure. Here is the answer. Anything else?"]),
        "tts": FakeTTS(ms_per_char=10.0),
    }
    parts.update(overrides)
    return Plugins(**parts)  # type: ignore[arg-type]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        port=0, data_dir=tmp_path / "data", silence_ms=300, min_interrupt_ms=300, storage="memory"
    )


@pytest.fixture
async def server(settings: Settings) -> AsyncIterator[RunningServer]:
    async with running_server(settings, plugins=fake_plugins()) as running:
        yield running
