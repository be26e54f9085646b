"""Opening the database: embedded server shared per data directory, failures mapped."""

from __future__ import annotations

import asyncio
import fcntl
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime.database import (
    Database,
    DatabaseError,
    DatabaseUnavailable,
    describe_url,
    open_database,
)
from tests.postgres import embedded_data_dir, session_database_url, with_database


def server_running(data_dir: Path) -> bool:
    return (data_dir / "postgres" / "postmaster.pid").exists()


async def select_one(database: Database) -> int:
    value: int = await database.pool.fetchval("SELECT 1")
    return value


async def test_embedded_server_is_shared_and_stopped_by_its_last_user() -> None:
    with embedded_data_dir() as data_dir:
        first = await open_database(database_url=None, data_dir=data_dir)
        second = await open_database(database_url=None, data_dir=data_dir)
        assert first.embedded is not None and first.embedded.started
        assert second.embedded is not None and not second.embedded.started
        assert first.url == second.url
        assert await select_one(first) == await select_one(second) == 1

        await first.close()
        assert server_running(data_dir)  # the second still uses it
        assert await select_one(second) == 1
        await second.close()
        assert not server_running(data_dir)

        # Stopped cleanly, so it starts again on the same files.
        async with await open_database(database_url=None, data_dir=data_dir) as again:
            assert again.embedded is not None and again.embedded.started
            assert await select_one(again) == 1
        assert not server_running(data_dir)


async def test_another_process_reuses_the_running_server() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from runtime.database import open_database

        async def main():
            db = await open_database(database_url=None, data_dir=Path(sys.argv[1]))
            print(db.embedded.started, await db.pool.fetchval("SELECT 41 + 1"))
            await db.close()

        asyncio.run(main())
        """
    )
    with embedded_data_dir() as data_dir:
        async with await open_database(database_url=None, data_dir=data_dir) as mine:
            child = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", script, str(data_dir)],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=Path(__file__).parents[2],
            )
            assert child.returncode == 0, child.stderr
            assert child.stdout.split() == ["False", "42"]
            assert server_running(data_dir)  # the other process left it to us
            assert await select_one(mine) == 1
        assert not server_running(data_dir)


async def test_a_server_left_by_a_crashed_process_is_reused_then_stopped() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys, time
        from pathlib import Path
        from runtime.database import open_database

        async def main():
            await open_database(database_url=None, data_dir=Path(sys.argv[1]))
            print("open", flush=True)
            time.sleep(60)

        asyncio.run(main())
        """
    )
    with embedded_data_dir() as data_dir:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            str(data_dir),
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).parents[2],
        )
        try:
            assert child.stdout is not None
            assert await asyncio.wait_for(child.stdout.readline(), 60) == b"open\n"
        finally:
            child.kill()  # no cleanup at all: its locks go with it, its server stays up
            await asyncio.wait_for(child.wait(), 10)
        assert server_running(data_dir)
        async with await open_database(database_url=None, data_dir=data_dir) as db:
            assert db.embedded is not None and not db.embedded.started
            assert await select_one(db) == 1
        assert not server_running(data_dir)  # nobody else held it: stopped


async def test_a_busy_data_directory_fails_clearly() -> None:
    with embedded_data_dir() as data_dir, (data_dir / "postgres.lock").open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(DatabaseUnavailable, match="postgres.lock"):
            await open_database(database_url=None, data_dir=data_dir, lock_timeout=0.2)
        assert not server_running(data_dir)


async def test_an_unreachable_server_raises_database_unavailable(tmp_path: Path) -> None:
    url = "postgresql://app:s3cret@127.0.0.1:1/app"
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_database(database_url=url, data_dir=tmp_path, connect_timeout=2)
    assert caught.value.retryable
    assert "127.0.0.1:1" in str(caught.value)
    assert "s3cret" not in str(caught.value)


async def test_a_missing_database_is_a_configuration_error(pytestconfig: pytest.Config) -> None:
    url = with_database(session_database_url(pytestconfig), "openrealtime_no_such_database")
    with pytest.raises(DatabaseError) as caught:
        await open_database(database_url=url, data_dir=Path("unused"))
    assert not isinstance(caught.value, DatabaseUnavailable)
    assert not caught.value.retryable


def test_urls_are_described_without_password() -> None:
    assert describe_url("postgresql://app:s3cret@db:5433/x") == "postgresql://app@db:5433/x"
    assert (
        describe_url("postgresql://postgres:@/postgres?host=/tmp/pg")
        == "postgresql://postgres@/tmp/pg/postgres"
    )
