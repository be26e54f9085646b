"""Per-user memory over the role pool on PostgreSQL: injection read and extraction save
(SPEC MEM-2, MEM-5 over RM-1; ``memory/pool_memory.py``).

``python -m benchmarks.pool_memory`` prints one JSON object::

    {"entries": 100000, "inject_ms": {"p50", "p99"}, "save_ms": {"p50", "p99"}, "details": {…}}

- Data: ``--users`` users (default 1,000) × one role × ``--per-user`` entries (default 100, the
  per-role limit): every user's entries in the one pool of the role, as ``PoolMemoryStore``
  writes them (``pool_entry_from``: facts citing a message, sealed content, ``personal_*``),
  bulk-loaded with ``COPY``.
- ``inject_ms``: one turn's memory read as the voice path does it (``SessionMemory.read``: the
  user's 20 most recent entries through ``PoolMemoryStore`` — ``read_tagged`` by
  ``from:<user>``, so it reads the user's entries, not the pool — and the rendered block).
- ``save_ms``: ``SessionMemory.on_user_final`` of a statement for a user with room left (the
  owner's lock, the user's entries, the pool write with its own checks, the ledger's line).

Database: ``--database-url`` (or ``OPENREALTIME_DATABASE_URL`` / ``DATABASE_URL``) names a
server where this benchmark may create a database; without one it starts the embedded
PostgreSQL in a temporary directory. It creates its own database and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from benchmarks.common import emit, p50_p99
from benchmarks.journal import bench_database
from memory.crypto import Keyring
from memory.entries import MemoryEntry, owner_key
from memory.pool import EntrySource, pool_entry_from
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import PoolLocks, content_context
from memory.postgres_pool_memory import PostgresMemoryLedger
from memory.postgres_pool_store import PostgresPoolStore
from memory.session import MemorySettings, SessionMemory
from runtime.loop import install_uvloop
from runtime.migrations import apply_migrations
from runtime.services import MIGRATED_PACKAGES

_COLUMNS = [
    "tenant", "role_id", "id", "layer", "tags", "sources", "source_entries", "access",
    "confidence", "created_at", "invalidated_at", "retracted", "version", "key_id",
    "content_sealed", "personal_kind", "personal_key", "personal_origin", "personal_stated_at",
    "personal_updated_at",
]  # fmt: skip
_STATEMENTS = ("I like green tea", "我喜欢爬山", "My goal is to run a marathon", "我住在上海")


def _rows(users: int, per_user: int, keyring: Keyring) -> list[tuple[Any, ...]]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for u in range(users):
        user = f"user-{u}"
        for n in range(per_user):
            at = base + timedelta(minutes=n)
            entry = MemoryEntry(
                id=f"mem_{u}_{n}", tenant="bench", owner=owner_key(user), role_id="role",
                kind="preference", key=None, content=f"用户 {u} 喜欢第 {n} 种茶 (tea #{n})",
                origin="extraction", source_thread_id=f"th_{u}_{n // 10}", source_seq=n,
                stated_at=at, status="active", revision=1, created_at=at, updated_at=at,
            )  # fmt: skip
            made = pool_entry_from(entry, user)
            assert made is not None and made.meta.personal is not None
            m, p = made.meta, made.meta.personal
            sealed = keyring.seal(made.content, context=content_context("bench", "role", m.id))
            sources = [{"thread": s.thread_id, "item": s.item_id} for s in m.sources]  # type: ignore[union-attr]
            access = [
                {"thread": a.thread_id, "item": a.item_id, "users": sorted(a.users)}
                for a in m.access
            ]
            rows.append((
                "bench", "role", m.id, m.layer, sorted(m.tags), json.dumps(sources),
                [s.entry_id for s in m.sources if isinstance(s, EntrySource)],
                json.dumps(access), None, m.created_at, None, False, 1, sealed.key_id,
                sealed.blob, p.kind, p.key, p.origin, p.stated_at, p.updated_at,
            ))  # fmt: skip
    return rows


async def run(args: argparse.Namespace) -> dict[str, Any]:
    database_url = (
        args.database_url
        or os.environ.get("OPENREALTIME_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or None
    )
    async with bench_database(database_url) as url:
        pool = await asyncpg.create_pool(url, min_size=2, max_size=4, command_timeout=300)
        try:
            await apply_migrations(pool, MIGRATED_PACKAGES)
            keyring = Keyring.generate("bench")
            started = time.perf_counter()
            rows = _rows(args.users, args.per_user, keyring)
            async with pool.acquire() as conn:
                await conn.copy_records_to_table(
                    "role_pool_entries", records=rows, columns=_COLUMNS
                )
                await conn.execute("VACUUM ANALYZE role_pool_entries")
            load_s = time.perf_counter() - started
            pools = PostgresPoolStore(pool, keyring=keyring, locks=PoolLocks())
            store = PoolMemoryStore(pools, PostgresMemoryLedger(pool))
            # Timeouts far above any sample, so every sample is measured, never cut short.
            settings = MemorySettings(read_timeout_s=60.0, save_timeout_s=120.0)

            async def enabled() -> bool:
                return True

            def session(user: str) -> SessionMemory:
                return SessionMemory(
                    store, tenant="bench", user=user, role_id="role", language="zh",
                    is_enabled=enabled, settings=settings,
                )  # fmt: skip

            rng = random.Random(11)
            inject: list[float] = []
            for sample in range(args.samples + 20):
                memory = session(f"user-{rng.randrange(args.users)}")
                started = time.perf_counter()
                await memory.read()
                if sample >= 20:  # the first reads warm the prepared statements
                    inject.append((time.perf_counter() - started) * 1000)
            saves: list[float] = []
            for sample in range(args.saves):
                memory = session(f"fresh-{sample}")
                started = time.perf_counter()
                await memory.on_user_final(
                    _STATEMENTS[sample % len(_STATEMENTS)],
                    thread_id=f"th_fresh_{sample}", seq=1, at=datetime.now(UTC),
                )  # fmt: skip
                saves.append((time.perf_counter() - started) * 1000)
        finally:
            await pool.close()
    return {
        "entries": args.users * args.per_user,
        "inject_ms": p50_p99(inject),
        "save_ms": p50_p99(saves),
        "details": {
            "server": "external" if database_url else "embedded",
            "users": args.users,
            "entries_per_user_role": args.per_user,
            "bulk_load_s": round(load_s, 2),
            "inject_samples": len(inject),
            "save_samples": len(saves),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="server to create the benchmark database on")
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--per-user", type=int, default=100, help="entries per user×role")
    parser.add_argument("--samples", type=int, default=300, help="injection reads")
    parser.add_argument("--saves", type=int, default=30, help="extraction saves")
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
