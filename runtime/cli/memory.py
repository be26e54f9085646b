"""``openrealtime memory rotate-key``: move the memory at rest to a new key (SPEC RM-8).

Rules:

1. ``rotate-key`` with the key file: a new key is added to the file and made active (the old
   keys stay, to read rows not moved yet), then every row is re-encrypted under it in batches.
   With ``OPENREALTIME_MEMORY_KEYS`` the command cannot edit the configuration: it re-encrypts
   every row under the variable's first key and says how to put a new key first.
2. Rows stay readable throughout; a server that meets a row under a key it does not know
   re-reads the key file. A running server seals new rows under the key it started with until
   it restarts, so restart servers after ``rotate-key``.
3. ``rotate-key --retire`` first moves any row still under an old key (rows a running server
   wrote meanwhile), then removes from the key file every key no row uses; it keeps a key that
   rows still use (a concurrent save held them) and says so, with exit status 1.
4. Every table that holds sealed memory moves together (``sealed_stores``: the rows of the
   per-user store of before, the role pools, thread memory, role memory's records — settings,
   confessions, enrichments, the call log — and the tool secrets); the counts are their sums,
   and every key any of them uses is in use for ``--retire``.
5. Output is tab-separated with a header line (``action``, ``key_id``, ``rows``); key material
   is never printed. Errors go to stderr as ``openrealtime: <code>: <message>``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from memory.crypto import Keyring, load_key_file, write_key_file
from memory.errors import MemoryStoreError
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_role_records import PostgresRoleRecords
from memory.postgres_store import SEAL_BATCH, PostgresMemoryStore
from memory.postgres_thread_store import PostgresThreadMemoryStore
from runtime.config import Settings
from runtime.database import DatabaseError, open_database
from runtime.migrations import MigrationError, apply_migrations
from tools.errors import ToolError
from tools.postgres_catalog import PostgresToolSecrets

HEADER = "action\tkey_id\trows"


class SealedStore(Protocol):
    """A store whose rows are sealed with the memory keyring (rule 4)."""

    keyring: Keyring

    async def seal_plaintext(self, *, batch: int = ...) -> int: ...

    async def rotate(self, *, batch: int = ...) -> int: ...

    async def key_ids_in_use(self) -> dict[str, int]: ...


def sealed_stores(pool: Any, keyring: Keyring) -> list[SealedStore]:
    """Every store of sealed memory on ``pool``, under ``keyring``."""
    return [
        PostgresMemoryStore(pool, keyring=keyring),
        PostgresThreadMemoryStore(pool, keyring=keyring),
        PostgresRoleRecords(pool, keyring=keyring),
        PostgresPoolStore(pool, keyring=keyring),
        PostgresToolSecrets(pool, keyring=keyring),
    ]


class SealedStores:
    """The stores of rule 4 as one: every call on each, the counts summed."""

    def __init__(self, stores: list[SealedStore], keyring: Keyring) -> None:
        self.stores = stores
        self.keyring = keyring

    async def seal_plaintext(self, *, batch: int) -> int:
        return sum([await s.seal_plaintext(batch=batch) for s in self.stores])

    async def rotate(self, *, batch: int) -> int:
        return sum([await s.rotate(batch=batch) for s in self.stores])

    async def key_ids_in_use(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for store in self.stores:
            total.update(await store.key_ids_in_use())
        return dict(total)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    memory = sub.add_parser("memory", help="long-term memory at rest")
    memory_sub = memory.add_subparsers(dest="action", required=True)
    rotate = memory_sub.add_parser(
        "rotate-key", help="add a new active memory key and re-encrypt every entry under it"
    )
    rotate.add_argument(
        "--retire",
        action="store_true",
        help="finish moving rows to the active key, then drop the keys no row uses",
    )
    rotate.add_argument("--batch", type=int, default=SEAL_BATCH, help="rows per transaction")
    rotate.add_argument("--data-dir", type=Path)


async def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run ``memory rotate-key``; the exit status."""
    if settings.storage != "postgres":
        return _fail("storage_memory", "memory commands need PostgreSQL (OPENREALTIME_STORAGE)")
    if not 1 <= args.batch <= 100_000:
        print("openrealtime: --batch: 1 to 100000", file=sys.stderr)
        return 2
    from runtime.services import MIGRATED_PACKAGES, memory_key_source

    source = memory_key_source(settings)
    try:
        keyring = source.load()
        database = await open_database(
            database_url=settings.database_url,
            data_dir=settings.data_dir,
            max_size=2,
            application_name="openrealtime-cli",
        )
    except (MemoryStoreError, DatabaseError) as e:
        return _fail(e.code, str(e))
    try:
        await apply_migrations(database.pool, MIGRATED_PACKAGES)
        if not args.retire and not source.from_config:
            keyring = keyring.with_new_active_key()
            write_key_file(source.path, keyring)
        store = SealedStores(sealed_stores(database.pool, keyring), keyring)
        sealed = await store.seal_plaintext(batch=args.batch)
        moved = await store.rotate(batch=args.batch)
        print(HEADER)
        print(f"active\t{keyring.active_id}\t-")
        if sealed:
            print(f"sealed_plaintext\t{keyring.active_id}\t{sealed}")
        print(f"re-encrypted\t{keyring.active_id}\t{moved}")
        usage = await store.key_ids_in_use()
        for key_id in keyring.key_ids:
            print(f"in_use\t{key_id}\t{usage.get(key_id, 0)}")
        if not args.retire:
            if source.from_config:
                print(
                    "# keys come from OPENREALTIME_MEMORY_KEYS: to rotate, put a new key first"
                    " (id:base64 of 32 random bytes, e.g. `openssl rand -base64 32`), restart,"
                    " and run this again",
                    file=sys.stderr,
                )
            else:
                print("# restart running servers, then run: openrealtime memory rotate-key"
                      " --retire", file=sys.stderr)  # fmt: skip
            return 0
        return _retire(keyring, source.from_config, source.path, usage)
    except (MemoryStoreError, ToolError) as e:
        return _fail(e.code, str(e))
    except (DatabaseError, MigrationError) as e:
        return _fail(e.code, str(e))
    finally:
        await database.close()


def _retire(keyring: Keyring, from_config: bool, path: Path, usage: dict[str, int]) -> int:
    old = {k for k in keyring.key_ids if k != keyring.active_id}
    idle = {k for k in old if not usage.get(k)}
    busy = old - idle
    if from_config:
        for key_id in sorted(idle):
            print(f"unused\t{key_id}\t0")
        if idle:
            print("# remove the unused keys from OPENREALTIME_MEMORY_KEYS", file=sys.stderr)
    elif idle:
        # Re-read the file: another rotation may have changed it since this command began.
        current = load_key_file(path, create=False)
        write_key_file(path, current.without(idle & set(current.key_ids) - {current.active_id}))
        for key_id in sorted(idle):
            print(f"retired\t{key_id}\t0")
    if busy:
        names = ", ".join(sorted(busy))
        return _fail("memory_key_in_use", f"rows are still sealed under {names}; run again")
    return 0


def _fail(code: str, message: str) -> int:
    print(f"openrealtime: {code}: {message}", file=sys.stderr)
    return 1
