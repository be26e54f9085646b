"""Brains from installed packages (SPEC BRAIN-6): a package that declares an entry point in
``openrealtime.brains`` is chosen by its name, with no change to our code; unknown names and
an agent without its URL fail at start with a clear message. The package here is installed
the way pip leaves one (a module and its ``.dist-info`` on the path), not imitated."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from plugins.brain.http_agent import HttpAgentBrain
from plugins.contracts import BrainInput
from runtime.config import Settings, plugin_brains
from runtime.plugin_factory import build_brain

PACKAGE = """
from plugins.contracts import BrainDelta


class ShoutingBrain:
    def __init__(self, settings):
        self.settings = settings

    async def stream(self, request):
        yield BrainDelta(text=request.current_input.upper() + "!")


def create(settings):
    return ShoutingBrain(settings)


def pretender(settings):
    raise AssertionError("a built-in name is never taken")
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_brain.py").write_text(PACKAGE)
    info = tmp_path / "my_brain-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-brain\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""\
            [openrealtime.brains]
            shouting = my_brain:create
            llm = my_brain:pretender
            """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


async def test_an_installed_packages_brain_is_chosen_by_its_name(
    installed: Path, tmp_path: Path
) -> None:
    assert "shouting" in plugin_brains() and "llm" not in plugin_brains()
    settings = Settings(brain="shouting", data_dir=tmp_path / "data", storage="memory")
    brain = build_brain(settings)
    deltas = [
        d async for d in brain.stream(BrainInput(system="", model_text="", current_input="hi"))
    ]
    assert [d.text for d in deltas] == ["HI!"]
    # The built-in keeps its name: the package's "llm" is ignored.
    assert type(build_brain(Settings(brain="rules"))).__name__ == "LocalBrain"


def test_an_unknown_brain_or_an_agent_without_a_url_fails_at_start() -> None:
    with pytest.raises(ValidationError, match="'nobody' is not a brain here"):
        Settings(brain="nobody")
    with pytest.raises(ValidationError, match="needs OPENREALTIME_AGENT_URL"):
        Settings(brain="http")


async def test_the_http_brain_is_built_from_the_settings() -> None:
    settings = Settings(brain="http", agent_url="http://127.0.0.1:9/turn", agent_token="t0k")
    brain = build_brain(settings)
    assert isinstance(brain, HttpAgentBrain) and brain.url == "http://127.0.0.1:9/turn"
    assert "t0k" not in repr(settings)
    await brain.aclose()
