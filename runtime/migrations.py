"""Schema migrations: each domain package owns its SQL.

Theory of operation
-------------------
A package ``pkg`` keeps its schema in ``pkg/migrations/NNNN_name.sql`` (four-digit version,
lower-case name), shipped as package data and found with ``importlib.resources``.
``apply_migrations(pool, ["journal", ...])`` brings the database up to date:

1. It takes a PostgreSQL session advisory lock, so processes starting at once run one after
   another; the lock goes away with the connection if a process dies.
2. It reads ``schema_migrations`` (package, version, name, checksum, applied_at) and refuses,
   before changing anything, when the database does not match the code: an applied migration
   whose file changed (``MigrationChecksumMismatch``), an applied migration the code does not
   have, or a new migration numbered below one already applied.
3. It applies each missing migration in its own transaction, together with its
   ``schema_migrations`` row, in version order per package and packages in the order given.

Running it again is a no-op. Checksums are SHA-256 of the file with line endings normalised.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from runtime.database import DatabaseUnavailable
from storage.postgres import CONNECTION_ERRORS

logger = logging.getLogger(__name__)

MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
MIGRATION_LOCK_KEY = 0x4F70_656E_5254_0001
"""The advisory lock key all OpenRealtime processes use for migrations ("OpenRT" + 1)."""

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    package     text        NOT NULL,
    version     integer     NOT NULL,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (package, version)
)
"""


class MigrationError(Exception):
    """The database schema does not match the code (a deployment problem, not retryable)."""

    code = "migration_error"
    retryable = False


class MigrationChecksumMismatch(MigrationError):
    code = "migration_checksum_mismatch"


@dataclass(frozen=True, slots=True)
class Migration:
    package: str
    version: int
    name: str
    sql: str = field(repr=False)
    checksum: str

    @property
    def label(self) -> str:
        return f"{self.package}/{self.version:04d}_{self.name}"


def discover_migrations(package: str) -> list[Migration]:
    """The package's migrations in version order (none when it has no ``migrations`` folder)."""
    folder = importlib.resources.files(package).joinpath("migrations")
    if not folder.is_dir():
        return []
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        match = MIGRATION_FILE.match(entry.name)
        if match is None:
            if entry.name.endswith(".sql"):
                raise MigrationError(f"{package}/migrations/{entry.name}: expected NNNN_name.sql")
            continue
        sql = entry.read_bytes().decode("utf-8").replace("\r\n", "\n")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(
                f"{package}: two migrations numbered {version:04d} "
                f"({found[version].name}, {match.group(2)})"
            )
        found[version] = Migration(
            package=package,
            version=version,
            name=match.group(2),
            sql=sql,
            checksum=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
        )
    return [found[v] for v in sorted(found)]


async def apply_migrations(
    pool: Any,
    packages: Sequence[str],
    *,
    lock_timeout: float = 60.0,
    statement_timeout: float = 300.0,
) -> list[Migration]:
    """Apply the packages' missing migrations (see the module docstring); returns those applied.

    ``pool`` is an asyncpg pool (or anything with the same ``acquire``). ``lock_timeout`` bounds
    the wait for another process's migrations, ``statement_timeout`` each migration.
    """
    wanted = {package: discover_migrations(package) for package in packages}
    try:
        async with pool.acquire(timeout=lock_timeout) as conn:
            try:
                await conn.execute(
                    "SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY, timeout=lock_timeout
                )
            except TimeoutError as e:
                raise MigrationError(
                    f"another process held the migration lock for more than {lock_timeout:g} s"
                ) from e
            try:
                return await _apply_locked(conn, wanted, statement_timeout=statement_timeout)
            finally:
                if not conn.is_closed():
                    await conn.execute(
                        "SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY, timeout=lock_timeout
                    )
    except MigrationError:
        raise
    except CONNECTION_ERRORS as e:
        raise DatabaseUnavailable(f"migrations interrupted: {type(e).__name__}: {e}") from e


async def _apply_locked(
    conn: Any, wanted: dict[str, list[Migration]], *, statement_timeout: float
) -> list[Migration]:
    await conn.execute(_CREATE_TABLE, timeout=statement_timeout)
    rows = await conn.fetch(
        "SELECT package, version, name, checksum FROM schema_migrations"
        " WHERE package = ANY($1::text[])",
        list(wanted),
        timeout=statement_timeout,
    )
    applied: dict[tuple[str, int], tuple[str, str]] = {
        (r["package"], r["version"]): (r["name"], r["checksum"]) for r in rows
    }
    missing = _plan(wanted, applied)
    for migration in missing:
        async with conn.transaction():
            try:
                await conn.execute(migration.sql, timeout=statement_timeout)
            except asyncpg.PostgresError as e:
                if isinstance(e, CONNECTION_ERRORS):
                    raise
                raise MigrationError(
                    f"migration {migration.label} failed and was rolled back: "
                    f"{type(e).__name__}: {e}"
                ) from e
            await conn.execute(
                "INSERT INTO schema_migrations (package, version, name, checksum)"
                " VALUES ($1, $2, $3, $4)",
                migration.package,
                migration.version,
                migration.name,
                migration.checksum,
                timeout=statement_timeout,
            )
        logger.info("applied migration %s", migration.label)
    return missing


def _plan(
    wanted: dict[str, list[Migration]], applied: dict[tuple[str, int], tuple[str, str]]
) -> list[Migration]:
    """Check the database against the code; the migrations still to apply, in order."""
    missing: list[Migration] = []
    for package, migrations in wanted.items():
        known = {m.version: m for m in migrations}
        for (pkg, version), (name, _) in sorted(applied.items()):
            if pkg == package and version not in known:
                raise MigrationError(
                    f"the database has migration {package}/{version:04d}_{name}, which this "
                    f"code does not have (was it run by a newer version?)"
                )
        newest_applied = max((v for (p, v) in applied if p == package), default=0)
        for migration in migrations:
            stored = applied.get((package, migration.version))
            if stored is None:
                if migration.version < newest_applied:
                    raise MigrationError(
                        f"migration {migration.label} is new but {package}/{newest_applied:04d} "
                        f"is already applied: renumber it after the applied ones"
                    )
                missing.append(migration)
            elif stored[1] != migration.checksum:
                raise MigrationChecksumMismatch(
                    f"migration {migration.label} was applied with checksum {stored[1][:12]}… "
                    f"but the file now has {migration.checksum[:12]}…: applied migrations "
                    f"must not change; add a new one instead"
                )
    return missing
