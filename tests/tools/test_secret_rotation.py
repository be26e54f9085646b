"""``openrealtime memory rotate-key`` moves the tool secrets too: they are one of the sealed
stores (``runtime/cli/memory.py`` rule 4), re-encrypted and retired with the memory rows."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from memory.crypto import KEY_FILE_NAME, load_key_file
from runtime.cli import memory as cli_memory
from runtime.config import Settings
from tools.postgres_catalog import PostgresToolSecrets


def _rotate(*, retire: bool = False) -> argparse.Namespace:
    return argparse.Namespace(action="rotate-key", retire=retire, batch=2, data_dir=None)


async def test_rotate_key_reseals_the_tool_secrets_and_retires_the_old_key(
    pg_pool: Any, postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings(database_url=postgres_url, data_dir=tmp_path)
    path = tmp_path / KEY_FILE_NAME
    first = load_key_file(path, create=True)
    for n in range(3):
        await PostgresToolSecrets(pg_pool, keyring=first).set("t", f"key{n}", f"sk-value-{n}")

    assert await cli_memory.run(_rotate(), settings) == 0
    rotated = load_key_file(path, create=False)
    out = capsys.readouterr().out
    assert f"re-encrypted\t{rotated.active_id}\t3" in out
    assert "sk-value" not in out
    assert await cli_memory.run(_rotate(retire=True), settings) == 0
    assert f"retired\t{first.active_id}\t0" in capsys.readouterr().out
    final = load_key_file(path, create=False)
    assert final.key_ids == (rotated.active_id,)
    secrets = PostgresToolSecrets(pg_pool, keyring=final)
    assert [await secrets.get("t", f"key{n}") for n in range(3)] == [
        "sk-value-0",
        "sk-value-1",
        "sk-value-2",
    ]
