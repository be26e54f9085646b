"""PostgreSQL for tests: one fresh database per test session, a migrated pool per test.

With ``OPENREALTIME_TEST_DATABASE_URL`` set (CI), a uniquely named database is created on that
server for this session and dropped at its end, so parallel or stale runs never share tables.
Without it, one embedded PostgreSQL is started for the session in a temporary directory (the
same code path as a user's machine, ``runtime.database.EmbeddedPostgres``; as root the wheel
runs the server as a system user) and stopped at the end.

Fixtures (register them in a folder's ``conftest.py`` by importing them from here):

- ``postgres_url`` (session, sync): URL of the session's database, ``MIGRATED_PACKAGES``
  migrated.
- ``pg_pool`` (function, async): an asyncpg pool on the test's own event loop with every table
  emptied first; closed after the test, so no task or connection outlives it.

The database is made once per pytest session whichever folder asks first
(``session_database_url``), and torn down when pytest ends. Session work runs on a private
event loop in a worker thread, so it never touches the loops pytest-asyncio gives tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from runtime.database import EmbeddedPostgres, open_database
from runtime.migrations import apply_migrations
from runtime.services import MIGRATED_PACKAGES

T = TypeVar("T")

TEST_DATABASE_URL_ENV = "OPENREALTIME_TEST_DATABASE_URL"
APPLICATION_NAME = "openrealtime-test"
"""The ``application_name`` of ``pg_pool``'s connections (fault tests find them by it)."""

_SESSION_URL = pytest.StashKey[str]()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a private loop in a worker thread."""
    result: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as e:  # handed to the caller's thread
            errors.append(e)

    thread = threading.Thread(target=target, name="postgres-test-setup")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + database))


@contextlib.contextmanager
def embedded_data_dir() -> Iterator[Path]:
    """A data directory for an embedded server, removed afterwards.

    Not under pytest's ``tmp_path``: every pytest session on the machine (another run, an xdist
    worker) resets ``/tmp/pytest-of-<user>`` to mode 0700. As root that locks out the system
    user the embedded server runs as, and the server PANICs mid-run.
    """
    path = Path(tempfile.mkdtemp(prefix="openrealtime-test-pg-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _admin(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await conn.execute(sql, timeout=60)
    finally:
        await conn.close(timeout=10)


async def _migrate(url: str) -> None:
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1, timeout=10)
    try:
        await apply_migrations(pool, MIGRATED_PACKAGES)
    finally:
        await pool.close()


def session_database_url(config: pytest.Config) -> str:
    """This pytest session's database (made on first call, dropped when pytest ends)."""
    url = config.stash.get(_SESSION_URL, None)
    if url is not None:
        return url
    cleanup = contextlib.ExitStack()
    config.add_cleanup(cleanup.close)
    admin_url = os.environ.get(TEST_DATABASE_URL_ENV)
    if not admin_url:
        server = EmbeddedPostgres.attach(cleanup.enter_context(embedded_data_dir()))
        cleanup.callback(server.detach)
        admin_url = server.url
    name = f"openrealtime_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    run_sync(_admin(admin_url, f'CREATE DATABASE "{name}"'))
    cleanup.callback(
        lambda: run_sync(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    )
    url = with_database(admin_url, name)
    run_sync(_migrate(url))
    config.stash[_SESSION_URL] = url
    return url


@pytest.fixture(scope="session")
def postgres_url(pytestconfig: pytest.Config) -> str:
    """The session's database, with ``MIGRATED_PACKAGES`` migrated."""
    return session_database_url(pytestconfig)


async def truncate_all(pool: Any) -> None:
    """Empty every table but ``schema_migrations`` in the ``public`` schema."""
    async with pool.acquire() as conn:
        tables = await conn.fetch(
            "SELECT quote_ident(tablename) AS name FROM pg_tables"
            " WHERE schemaname = 'public' AND tablename <> 'schema_migrations'"
        )
        if tables:
            names = ", ".join(t["name"] for t in tables)
            await conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE", timeout=30)


@pytest.fixture
async def pg_pool(postgres_url: str) -> AsyncIterator[Any]:
    """A pool on the session database, tables emptied, closed after the test."""
    database = await open_database(
        database_url=postgres_url,
        data_dir=Path("unused-with-a-url"),
        max_size=10,
        application_name=APPLICATION_NAME,
    )
    try:
        await truncate_all(database.pool)
        yield database.pool
    finally:
        await database.close()
