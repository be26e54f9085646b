"""Migrations: applied once, in order, each atomically; changed history refused; no races."""

from __future__ import annotations

import asyncio
import importlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from runtime.migrations import (
    MigrationChecksumMismatch,
    MigrationError,
    apply_migrations,
    discover_migrations,
)
from tests.postgres import session_database_url

PoolFactory = Callable[[], Awaitable[Any]]


@pytest.fixture
async def schema_pools(pytestconfig: pytest.Config) -> AsyncIterator[PoolFactory]:
    """Pools whose connections work in a fresh schema of the session database."""
    url = session_database_url(pytestconfig)
    schema = f"migrations_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(url, timeout=10)
    await admin.execute(f"CREATE SCHEMA {schema}")
    pools: list[Any] = []

    async def make_pool() -> Any:
        pool = await asyncpg.create_pool(
            url, min_size=1, max_size=2, timeout=10, server_settings={"search_path": schema}
        )
        pools.append(pool)
        return pool

    try:
        yield make_pool
    finally:
        for pool in pools:
            await pool.close()
        await admin.execute(f"DROP SCHEMA {schema} CASCADE")
        await admin.close()


class FakePackage:
    """An importable package with a ``migrations`` folder, written under ``tmp_path``."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name = f"fakepkg_{uuid.uuid4().hex[:10]}"
        self.folder = root / self.name / "migrations"
        self.folder.mkdir(parents=True)
        (root / self.name / "__init__.py").write_text("")
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()

    def write(self, filename: str, sql: str | bytes) -> None:
        data = sql.encode() if isinstance(sql, str) else sql
        (self.folder / filename).write_bytes(data)


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePackage:
    return FakePackage(tmp_path, monkeypatch)


async def columns(pool: Any, table: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
        table,
    )
    return [r["column_name"] for r in rows]


def labels(migrations: list[Any]) -> list[str]:
    return [m.label.split("/", 1)[1] for m in migrations]


def test_journal_ships_its_migrations() -> None:
    [first, *_] = discover_migrations("journal")
    assert (first.version, first.name) == (1, "journal")
    assert "CREATE TABLE journal_events" in first.sql


async def test_applies_missing_migrations_in_order_once(
    schema_pools: PoolFactory, package: FakePackage
) -> None:
    pool = await schema_pools()
    package.write("0002_name.sql", "ALTER TABLE items ADD COLUMN name text;")
    package.write("0001_items.sql", "CREATE TABLE items (id int PRIMARY KEY);")
    package.write("README.md", "not a migration")
    assert labels(await apply_migrations(pool, [package.name])) == ["0001_items", "0002_name"]
    assert await columns(pool, "items") == ["id", "name"]
    assert await apply_migrations(pool, [package.name]) == []
    package.write("0003_price.sql", "ALTER TABLE items ADD COLUMN price int;")
    assert labels(await apply_migrations(pool, [package.name])) == ["0003_price"]
    recorded = await pool.fetch("SELECT package, version FROM schema_migrations ORDER BY version")
    assert [(r["package"], r["version"]) for r in recorded] == [
        (package.name, 1),
        (package.name, 2),
        (package.name, 3),
    ]


async def test_a_changed_applied_migration_is_refused(
    schema_pools: PoolFactory, package: FakePackage
) -> None:
    pool = await schema_pools()
    package.write("0001_items.sql", "CREATE TABLE items (id int);\n")
    await apply_migrations(pool, [package.name])
    # Only line endings changed: the same migration.
    package.write("0001_items.sql", b"CREATE TABLE items (id int);\r\n")
    assert await apply_migrations(pool, [package.name]) == []
    package.write("0001_items.sql", "CREATE TABLE items (id bigint);\n")
    package.write("0002_more.sql", "CREATE TABLE more (id int);\n")
    with pytest.raises(MigrationChecksumMismatch, match="0001_items"):
        await apply_migrations(pool, [package.name])
    assert await columns(pool, "more") == []  # refused before applying anything


async def test_history_that_does_not_match_the_code_is_refused(
    schema_pools: PoolFactory, package: FakePackage
) -> None:
    pool = await schema_pools()
    package.write("0001_a.sql", "CREATE TABLE a (id int);")
    package.write("0003_c.sql", "CREATE TABLE c (id int);")
    await apply_migrations(pool, [package.name])
    package.write("0002_b.sql", "CREATE TABLE b (id int);")
    with pytest.raises(MigrationError, match="renumber"):
        await apply_migrations(pool, [package.name])
    (package.folder / "0002_b.sql").unlink()
    (package.folder / "0003_c.sql").unlink()
    with pytest.raises(MigrationError, match="does not have"):
        await apply_migrations(pool, [package.name])


async def test_bad_file_names_are_refused(package: FakePackage) -> None:
    package.write("1_items.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="NNNN_name.sql"):
        discover_migrations(package.name)


async def test_a_failing_migration_is_rolled_back_alone(
    schema_pools: PoolFactory, package: FakePackage
) -> None:
    pool = await schema_pools()
    package.write("0001_ok.sql", "CREATE TABLE ok (id int);")
    package.write("0002_bad.sql", "CREATE TABLE half (id int);\nSELECT 1 / 0;")
    with pytest.raises(MigrationError, match="0002_bad"):
        await apply_migrations(pool, [package.name])
    assert await columns(pool, "ok") == ["id"]
    assert await columns(pool, "half") == []
    assert await pool.fetchval("SELECT count(*) FROM schema_migrations") == 1
    package.write("0002_bad.sql", "CREATE TABLE half (id int);")
    assert labels(await apply_migrations(pool, [package.name])) == ["0002_bad"]


async def test_concurrent_runners_apply_each_migration_once(
    schema_pools: PoolFactory, package: FakePackage
) -> None:
    # Would fail if run twice (no IF NOT EXISTS), and is slow enough for the runners to overlap.
    package.write("0001_slow.sql", "SELECT pg_sleep(0.3);\nCREATE TABLE once (id int);")
    package.write("0002_next.sql", "ALTER TABLE once ADD COLUMN n int;")
    pools = [await schema_pools() for _ in range(3)]
    results = await asyncio.gather(*(apply_migrations(p, [package.name]) for p in pools))
    applied = sorted(labels(r) for r in results)
    assert applied == [[], [], ["0001_slow", "0002_next"]]
    assert await columns(pools[0], "once") == ["id", "n"]
