"""Every page draws in a real browser without script errors or error banners, at laptop and
phone width, and nothing is wider than the phone (the capture behind docs/screenshots/)."""

from __future__ import annotations

from pathlib import Path

from tests.web.conftest import ServerFactory
from tests.web.screenshots import capture


async def test_every_page_draws_without_script_errors(
    tmp_path: Path, silence_wav: Path, fake_server: ServerFactory
) -> None:
    problems: list[str] = []
    async with fake_server() as server:
        shots = await capture(server, tmp_path, silence_wav, problems)
    assert problems == []
    assert [p.name for p in shots] == [
        "talk.png",
        "talk-phone.png",
        "history.png",
        "history-detail.png",
        "history-view-only.png",
        "memory.png",
        "knowledge.png",
        "roles.png",
        "tools.png",
        "system.png",
        "signin.png",
        "history-phone.png",
        "memory-phone.png",
        "knowledge-phone.png",
        "roles-phone.png",
        "system-phone.png",
    ]
    for path in shots:
        assert 5_000 < path.stat().st_size < 400_000
