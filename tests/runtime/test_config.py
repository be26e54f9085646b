"""Settings (``runtime/config.py``): the end-of-turn eagerness and transcript cues."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.config import Settings


def test_eagerness_defaults_to_medium_with_transcript_cues_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENREALTIME_EAGERNESS", raising=False)
    monkeypatch.delenv("OPENREALTIME_TRANSCRIPT_CUES", raising=False)
    settings = Settings()
    assert (settings.eagerness, settings.transcript_cues) == ("medium", True)


def test_eagerness_and_transcript_cues_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENREALTIME_EAGERNESS", "low")
    monkeypatch.setenv("OPENREALTIME_TRANSCRIPT_CUES", "false")
    settings = Settings()
    assert (settings.eagerness, settings.transcript_cues) == ("low", False)


@pytest.mark.parametrize("value", ["auto", "max", ""])
def test_a_bad_eagerness_fails_naming_the_key(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OPENREALTIME_EAGERNESS", value)
    with pytest.raises(ValidationError, match="eagerness"):
        Settings()
