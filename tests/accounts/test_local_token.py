"""The local user's token file (``runtime.accounts``): made once, whole, whoever starts first."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runtime import accounts
from runtime.accounts import InMemoryAccountStore, ensure_local_token


async def test_the_token_is_made_once_private_and_read_back_after(tmp_path: Path) -> None:
    store = InMemoryAccountStore()
    token = await ensure_local_token(store, tmp_path / "data")
    path = tmp_path / "data" / "local-token"
    assert path.read_text() == token + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert await ensure_local_token(store, tmp_path / "data") == token
    assert os.listdir(tmp_path / "data") == ["local-token"]  # no draft left behind


async def test_a_process_that_made_it_first_wins_and_its_token_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers of a fleet started on one data directory: the other linked its file between
    this one's look and its link (CI: ``FileExistsError`` and a fleet test failed to start)."""
    real_link = os.link

    def other_first(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        Path(target).write_text("the-other-process-token\n")
        real_link(source, target)  # raises FileExistsError, as the kernel would

    monkeypatch.setattr(accounts.os, "link", other_first)
    store = InMemoryAccountStore()
    assert await ensure_local_token(store, tmp_path) == "the-other-process-token"
    assert await store.authenticate("the-other-process-token") is not None
    assert os.listdir(tmp_path) == ["local-token"]
