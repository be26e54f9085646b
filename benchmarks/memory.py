"""Long-term memory on PostgreSQL: injection read and extraction cost (SPEC MEM-2, MEM-5).

``python -m benchmarks.memory`` prints one JSON object::

    {"entries": 100000, "inject_ms": {"p50", "p99"}, "extract_ms": {"p50", "p99"},
     "visible_read_ms": {"p50", "p99"}, "purge_ms": {"p50", "p99"},
     "enrich_ms": {"p50", "p95", "p99"}, "enrich_llm_ms": {"p50", "p95", "p99"} | null,
     "details": {…}}

- Data: ``--users`` users (default 1,000) × one role × ``--per-user`` entries (default 100, the
  per-role limit), realistic Chinese and English contents, bulk-loaded with ``COPY`` into
  ``memory_entries`` (the same columns, ciphertexts and keyed hashes the store writes).
- ``inject_ms``: one turn's memory read as the voice path does it (``SessionMemory.read``:
  the role switch, the user×role's 20 most recent entries through ``PostgresMemoryStore``, and
  the rendered ``<memory_data>`` block within the default budget), for random users, one at a
  time (it includes opening the entries' ciphertexts). Target p50 ≤ 2 ms.
- ``extract_ms``: the pattern part of extraction (``memory.extraction.extract``) on a mix of
  user messages (statements to remember, questions, small talk, negations, secrets). Target
  p50 ≤ 1 ms. ``details.extract_and_save_ms`` adds saving what was found through the store
  (advisory lock, one lookup, insert, change log) for users with room left.

- ``visible_read_ms``: the role-memory pool (``memory/pool_store.py``) at ``--pool-entries``
  entries in one role (default 10,000): groups of ten — four facts of one thread (some shared
  by two people), three observations on two facts each, two on those, one on those (three
  levels deep) — for ``--pool-users`` people. One sample is ``read_visible`` for a random
  person: the read lock, the metadata of the whole pool, ``visible_ids`` and opening only the
  visible entries' content (on PostgreSQL the decoded metadata is reused while the pool's head
  version is unchanged; ``details.pool.visible_read_uncached_ms`` is a store that never read
  the pool; ``write_ms`` is one learned fact added, ``read_after_write_ms`` its person's read
  right after it). On PostgreSQL (``PostgresPoolStore``) when a database URL is given,
  else in memory (``InMemoryPoolStore``; content sealed there too). ``details.pool`` has the
  load time, entries shown per read and the store.
- ``purge_ms``: ``purge`` of one ``thread:`` tag (the thread's facts and every observation
  derived from them), one sample per thread purged (``--pool-purges``, default 20).
- ``enrich_ms``: input enrichment's cost on the turn path (SPEC RM-5,
  ``runtime.enrichment.SessionEnrichment.rewrite``) with an *instant scripted model*
  (``details.enrich.model`` says so): the memory switch, the role's settings, ``read_visible``
  of the person's current entries, the prompt within its budget, the checks and the
  enrichment record (records in memory). Its own pool of ``--pool-entries`` entries in another
  role, shaped like the one above, for ``--enrich-users`` people (default 200: a reader sees
  about 55 entries); ``--enrich-samples`` turns (default 200) of random people, after 20 warm
  ones. Same store as ``visible_read_ms``. ``details.enrich.core_ms``: the pure part alone
  (prompt, instant answer, checks) on entries read beforehand.
- ``enrich_llm_ms``: the same with the local model answering (``--enrich-llm N`` turns; off by
  default — a call takes seconds, bounded at 15 s); ``details.enrich.llm.outcomes`` counts how
  the answers were judged (``rewritten`` or a refusal code). Null, with the reason, when off or
  when the model's packages are missing.

Database: ``--database-url`` (or ``OPENREALTIME_DATABASE_URL`` / ``DATABASE_URL``) names a
server where this benchmark may create a database; without one it starts the embedded
PostgreSQL in a temporary directory. Either way it creates its own database, applies the
migrations and drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from benchmarks.common import emit, p50_p99, percentile
from benchmarks.journal import bench_database
from journal.events import ThreadRef
from memory.crypto import Keyring
from memory.enrichment import EnrichmentLimits, EnrichmentPrompt, build_prompt, judge
from memory.entries import KINDS, normalize, owner_key
from memory.extraction import extract
from memory.pool import (
    EntryMeta,
    EntrySource,
    PoolEntry,
    Reader,
    ThreadAccess,
    ThreadSource,
    for_person_tag,
    from_tag,
    tenant_tag,
    thread_tag,
)
from memory.pool_store import AddEntry, InMemoryPoolStore, PoolLocks, PoolStore, PoolWrite
from memory.postgres_pool_store import PostgresPoolStore
from memory.postgres_store import PostgresMemoryStore, entry_context
from memory.role_records import (
    CallPurpose,
    ChatMessages,
    InMemoryRoleRecords,
    MemoryModelCalls,
    RoleMemorySettings,
)
from memory.session import MemorySettings, SessionMemory
from memory.thread_consolidation import JsonModel
from runtime.enrichment import SessionEnrichment
from runtime.loop import install_uvloop
from runtime.migrations import apply_migrations

_CONTENTS = [
    "我喜欢简洁回答", "我的目标是学会日语", "我和同事每周一起复盘", "我住在杭州",
    "I prefer step-by-step explanations", "My goal is to run a marathon next year",
    "I work with my brother every weekend", "My favorite color is green",
    "我不喜欢太长的解释", "I'm allergic to peanuts", "我打算长期学习编程",
    "My name is Ann and I like green tea with a little honey in the afternoon",
]  # fmt: skip
_MESSAGES = [
    "我喜欢简洁回答", "我的目标是学会日语", "请查知识库,星河商店的退货期限是多少?",
    "我是因为商品质量问题退货。", "那运费谁承担?", "I prefer concise answers.",
    "What is the weather like tomorrow?", "My name is not Bob", "Please remember that my "
    "birthday is March 3", "My password is hunter2", "嗯,其实我搬到了深圳,我在腾讯工作",
    "If I lived in Paris I would be happy", "Thanks, that was helpful!",
    "I plan to learn Spanish this year, and I like jazz.", "你记得我什么?",
    "Could you tell me more about the return policy for damaged items please?",
]  # fmt: skip

ENRICH_ROLE = "role-enrich"
PRIVACY = "Share nothing about one person with another. Never repeat health details."
_ENRICH_MESSAGES = [
    "What should I drink this afternoon?", "我周末应该做什么？", "Can you help me plan my week?",
    "帮我想想今天的学习计划", "Which of my goals should I work on first, and for how long?",
    "I have 3 hours tonight. What should I do?",
]  # fmt: skip

_CONCLUSIONS = [
    "The person learns best with short daily practice", "这个人周末通常去爬山",
    "The person drinks green tea in the afternoon, never coffee after noon",
    "这个人在准备日语考试，每天学习一小时", "The person plans their week on Sunday evenings",
    "The person trains for a marathon and runs three times a week", "这个人不喜欢太长的解释",
]  # fmt: skip

_COLUMNS = (
    "tenant", "owner", "id", "role_id", "kind", "key", "key_id", "content_sealed",
    "content_hash", "origin",
    "source_thread_id", "source_seq", "stated_at", "status", "revision", "created_at",
    "updated_at",
)  # fmt: skip


def rows_for(
    user: int, per_user: int, rng: random.Random, keyring: Keyring
) -> list[tuple[Any, ...]]:
    owner = owner_key(f"user-{user}")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for n in range(per_user):
        content = f"{rng.choice(_CONTENTS)} #{n}"
        at = start + timedelta(minutes=n * 7 + user)
        entry_id = f"mem_{user}_{n}"
        sealed = keyring.seal(content, context=entry_context("bench", owner, entry_id))
        digest = keyring.content_hash(
            normalize(content), scope=("bench", owner), key_id=sealed.key_id
        )
        rows.append(
            (
                "bench", owner, entry_id, "role", KINDS[n % len(KINDS)], None, sealed.key_id,
                sealed.blob, digest, "extraction", f"th_{user}_{n // 10}", n, at, "active", 1,
                at, at,
            )
        )  # fmt: skip
    return rows


async def bulk_load(pool: Any, users: int, per_user: int, keyring: Keyring) -> float:
    rng = random.Random(7)
    started = time.perf_counter()
    async with pool.acquire() as conn:
        batch: list[tuple[Any, ...]] = []
        for user in range(users):
            batch.extend(rows_for(user, per_user, rng, keyring))
            if len(batch) >= 20_000:
                await conn.copy_records_to_table("memory_entries", records=batch, columns=_COLUMNS)
                batch = []
        if batch:
            await conn.copy_records_to_table("memory_entries", records=batch, columns=_COLUMNS)
        await conn.execute("ANALYZE memory_entries")
    return time.perf_counter() - started


POOL_GROUP = 10
"""Entries per group of the pool benchmark: 4 facts, 3 + 2 + 1 observations."""
GROUPS_PER_THREAD = 5


def pool_group(
    group: int,
    users: int,
    start: datetime,
    role: str = "role",
    conclusions: Sequence[str] = (),
) -> list[PoolEntry]:
    """One group of the pool benchmark (module docstring, ``visible_read_ms``); observations
    say one of ``conclusions`` when given."""
    owner = f"user-{group % users}"
    other = f"user-{(group * 7 + 1) % users}"
    thread = f"th_{group // GROUPS_PER_THREAD}"
    base_tags = {tenant_tag("bench"), thread_tag(thread), from_tag(owner), "pool-bench"}
    entries: list[PoolEntry] = []
    at = start + timedelta(minutes=group)
    facts = []
    for n in range(4):
        present = frozenset({owner, other}) if n == 3 else frozenset({owner})
        item = f"item_{group}_{n}"
        meta = EntryMeta(
            id=f"f_{group}_{n}", role_id=role, layer="fact",
            tags=frozenset(base_tags | {for_person_tag(u) for u in present}),
            sources=(ThreadSource(thread, item),), created_at=at,
            access=(ThreadAccess(thread, item, present),),
        )  # fmt: skip
        facts.append(meta.id)
        entries.append(PoolEntry(meta, f"{_CONTENTS[(group + n) % len(_CONTENTS)]} #{group}"))
    levels = [facts]
    for level, count in ((1, 3), (2, 2), (3, 1)):
        below = levels[-1]
        made = []
        for n in range(count):
            deps = (below[n % len(below)], below[(n + 1) % len(below)])
            meta = EntryMeta(
                id=f"o{level}_{group}_{n}", role_id=role, layer="observation",
                tags=frozenset({tenant_tag("bench"), for_person_tag(owner), "pool-bench"}),
                sources=tuple(EntrySource(d) for d in deps), created_at=at, confidence=0.6,
            )  # fmt: skip
            made.append(meta.id)
            said = (
                conclusions[(group + level + n) % len(conclusions)]
                if conclusions
                else f"concluded at level {level} in group {group}"
            )
            entries.append(PoolEntry(meta, said))
        levels.append(made)
    return entries


async def pool_bench(pg: Any | None, args: argparse.Namespace) -> dict[str, Any]:
    """``visible_read_ms`` and ``purge_ms`` (module docstring)."""
    keyring = Keyring.generate("poolbench")
    store: PoolStore = (
        PostgresPoolStore(pg, keyring=keyring, locks=PoolLocks(), query_timeout=120)
        if pg is not None
        else InMemoryPoolStore(keyring=keyring, locks=PoolLocks())
    )
    groups = max(1, args.pool_entries // POOL_GROUP)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    started = time.perf_counter()
    batch: list[PoolWrite] = []
    for group in range(groups):
        batch.extend(AddEntry(e, "memory_model") for e in pool_group(group, args.pool_users, start))
        if len(batch) >= 1_000:
            await store.apply("bench", "role", batch)
            batch = []
    if batch:
        await store.apply("bench", "role", batch)
    if pg is not None:
        await pg.execute("ANALYZE role_pool_entries")
    load_s = time.perf_counter() - started

    rng = random.Random(13)
    roles = frozenset({"role"})
    reads: list[float] = []
    shown: list[int] = []
    for sample in range(args.pool_samples + 20):
        reader = Reader(f"user-{rng.randrange(args.pool_users)}", "bench", roles)
        began = time.perf_counter()
        entries = await store.read_visible("bench", "role", reader, current_only=True)
        elapsed = (time.perf_counter() - began) * 1000
        if sample >= 20:  # the first reads warm caches and prepared statements
            reads.append(elapsed)
            shown.append(len(entries))

    cold: list[float] = []
    if pg is not None:  # a store that never read the pool: the metadata is decoded again
        for _ in range(20):
            fresh = PostgresPoolStore(pg, keyring=keyring, locks=PoolLocks(), query_timeout=120)
            reader = Reader(f"user-{rng.randrange(args.pool_users)}", "bench", roles)
            began = time.perf_counter()
            await fresh.read_visible("bench", "role", reader, current_only=True)
            cold.append((time.perf_counter() - began) * 1000)

    # A learned fact written, then read by its person: on PostgreSQL the writer caches the pool
    # it commits, so neither the next write nor the read after it decodes the pool again.
    writes: list[float] = []
    after_write: list[float] = []
    for n in range(args.pool_samples // 5 + 5):
        owner = f"user-{rng.randrange(args.pool_users)}"
        item = f"item_new_{n}"
        meta = EntryMeta(
            id=f"f_new_{n}", role_id="role", layer="fact",
            tags=frozenset({tenant_tag("bench"), thread_tag("th_new"), from_tag(owner),
                            for_person_tag(owner), "pool-bench"}),
            sources=(ThreadSource("th_new", item),), created_at=start,
            access=(ThreadAccess("th_new", item, frozenset({owner})),),
        )  # fmt: skip
        began = time.perf_counter()
        await store.apply(
            "bench", "role", [AddEntry(PoolEntry(meta, "a new fact"), "memory_model")]
        )
        wrote = time.perf_counter()
        await store.read_visible("bench", "role", Reader(owner, "bench", roles), current_only=True)
        if n >= 5:
            writes.append((wrote - began) * 1000)
            after_write.append((time.perf_counter() - wrote) * 1000)

    purges: list[float] = []
    purged: list[int] = []
    threads = list(range(groups // GROUPS_PER_THREAD))
    rng.shuffle(threads)
    for thread in threads[: args.pool_purges]:
        began = time.perf_counter()
        purged.append(await store.purge("bench", "role", thread_tag(f"th_{thread}")))
        purges.append((time.perf_counter() - began) * 1000)
    return {
        "visible_read_ms": p50_p99(reads),
        "purge_ms": p50_p99(purges),
        "details": {
            "store": "postgres" if pg is not None else "memory",
            "entries": groups * POOL_GROUP,
            "observation_levels": 3,
            "users": args.pool_users,
            "load_s": round(load_s, 2),
            "read_samples": len(reads),
            "visible_read_uncached_ms": p50_p99(cold),
            "write_ms": p50_p99(writes),
            "read_after_write_ms": p50_p99(after_write),
            "shown_per_read_p50": sorted(shown)[len(shown) // 2] if shown else 0,
            "purge_samples": len(purges),
            "purged_per_thread": sorted(purged)[len(purged) // 2] if purged else 0,
        },
    }


async def load_pool(store: PoolStore, role: str, entries: int, users: int) -> int:
    """``entries`` (rounded to groups) in ``role``'s pool for ``users`` people, observations
    saying ``_CONCLUSIONS``; the count."""
    groups = max(1, entries // POOL_GROUP)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    batch: list[PoolWrite] = []
    for group in range(groups):
        made = pool_group(group, users, start, role, _CONCLUSIONS)
        batch.extend(AddEntry(e, "memory_model") for e in made)
        if len(batch) >= 1_000:
            await store.apply("bench", role, batch)
            batch = []
    if batch:
        await store.apply("bench", role, batch)
    return groups * POOL_GROUP


class InstantEnrichCalls:
    """``MemoryModelCalls`` answering at once as a good model would: the person's input with
    the newest entry shown appended, citing it (so every check runs and the rewrite is
    accepted). It records how many entries each prompt showed."""

    def __init__(self) -> None:
        self.shown: list[int] = []

    async def call(
        self, tenant: str, role_id: str, purpose: CallPurpose, messages: ChatMessages,
        schema: dict[str, Any], *, max_tokens: int, timeout_s: float,
        thread_id: str | None = None,
    ) -> str | None:  # fmt: skip
        refs = schema["properties"]["used"]["items"]["enum"]
        self.shown.append(len(refs))
        lines = messages[-1]["content"].splitlines()
        said = lines[-1].removeprefix("Input: ")
        newest = lines[1].split(": ", 1)[1]
        return json.dumps({"rewrite": f"{said} {newest}", "used": [refs[0]]}, ensure_ascii=False)


class JsonModelCalls:
    """``MemoryModelCalls`` over one ``JsonModel`` with the wait bound only (no budget, no
    call log): what the local model itself costs."""

    def __init__(self, model: JsonModel) -> None:
        self.model = model

    async def call(
        self, tenant: str, role_id: str, purpose: CallPurpose, messages: ChatMessages,
        schema: dict[str, Any], *, max_tokens: int, timeout_s: float,
        thread_id: str | None = None,
    ) -> str | None:  # fmt: skip
        try:
            async with asyncio.timeout(timeout_s):
                return await self.model.complete_json(
                    messages, schema, max_tokens=max_tokens, lane="bench"
                )
        except Exception:  # a failed or late call is "no answer", as RM-6 says
            return None


def p50_p95_p99(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
    }


async def enrich_samples(
    store: PoolStore, calls: MemoryModelCalls, args: argparse.Namespace, samples: int, seed: int
) -> tuple[list[float], Counter[str], list[int]]:
    """``samples`` turns of random people through ``SessionEnrichment.rewrite``."""
    records = InMemoryRoleRecords()
    await records.put_settings(
        "bench", ENRICH_ROLE, RoleMemorySettings(memory_model="bench", instructions=PRIVACY),
        expected=0,
    )  # fmt: skip

    async def enabled() -> bool:
        return True

    rng = random.Random(seed)
    times: list[float] = []
    outcomes: Counter[str] = Counter()
    visible: list[int] = []
    for sample in range(samples):
        user = f"user-{rng.randrange(args.enrich_users)}"
        enrichment = SessionEnrichment(
            pool=store, records=records, calls=calls, thread=ThreadRef("bench", user, "th_e"),
            role_id=ENRICH_ROLE, is_enabled=enabled,
        )  # fmt: skip
        message = _ENRICH_MESSAGES[sample % len(_ENRICH_MESSAGES)]
        began = time.perf_counter()
        await enrichment.rewrite(message, seq=sample + 1)
        times.append((time.perf_counter() - began) * 1000)
        outcomes.update(enrichment.outcomes)
        if sample < 20:
            reader = enrichment.reader
            visible.append(
                len(await store.read_visible("bench", ENRICH_ROLE, reader, current_only=True))
            )
    return times, outcomes, visible


async def enrich_core_ms(store: PoolStore, args: argparse.Namespace) -> list[float]:
    """The pure part alone (``build_prompt`` + the instant answer + ``judge``) on the entries
    of random people, read beforehand: enrichment's own cost beside the read."""
    rng = random.Random(29)
    instant = InstantEnrichCalls()
    times: list[float] = []
    for sample in range(args.enrich_samples):
        reader = Reader(
            f"user-{rng.randrange(args.enrich_users)}", "bench", frozenset({ENRICH_ROLE})
        )
        entries = await store.read_visible("bench", ENRICH_ROLE, reader, current_only=True)
        message = _ENRICH_MESSAGES[sample % len(_ENRICH_MESSAGES)]
        began = time.perf_counter()
        prompt = build_prompt(message, entries, instructions=PRIVACY)
        if isinstance(prompt, EnrichmentPrompt):
            answer = await instant.call(
                "bench", ENRICH_ROLE, "enrich", prompt.messages, prompt.schema,
                max_tokens=prompt.max_tokens, timeout_s=15,
            )  # fmt: skip
            judge(prompt, answer or "")
        times.append((time.perf_counter() - began) * 1000)
    return times


async def enrich_bench(pg: Any | None, args: argparse.Namespace) -> dict[str, Any]:
    """``enrich_ms`` and ``enrich_llm_ms`` (module docstring)."""
    keyring = Keyring.generate("enrichbench")
    store: PoolStore = (
        PostgresPoolStore(pg, keyring=keyring, locks=PoolLocks(), query_timeout=120)
        if pg is not None
        else InMemoryPoolStore(keyring=keyring, locks=PoolLocks())
    )
    started = time.perf_counter()
    entries = await load_pool(store, ENRICH_ROLE, args.pool_entries, args.enrich_users)
    if pg is not None:
        await pg.execute("ANALYZE role_pool_entries")
    load_s = time.perf_counter() - started
    instant = InstantEnrichCalls()
    await enrich_samples(store, instant, args, 20, seed=5)  # warm caches and statements
    instant.shown.clear()
    times, outcomes, visible = await enrich_samples(
        store, instant, args, args.enrich_samples, seed=17
    )
    details: dict[str, Any] = {
        "store": "postgres" if pg is not None else "memory",
        "entries": entries,
        "users": args.enrich_users,
        "load_s": round(load_s, 2),
        "samples": len(times),
        "model": "instant scripted model (no model time): the rewrite appends the newest "
        "entry shown; timed: memory switch, role settings, read_visible (current only), "
        "prompt, checks, the enrichment record (in memory)",
        "core_ms": p50_p95_p99(await enrich_core_ms(store, args)),
        "visible_entries_p50": sorted(visible)[len(visible) // 2] if visible else 0,
        "shown_entries_p50": sorted(instant.shown)[len(instant.shown) // 2] if instant.shown else 0,
        "entry_chars": EnrichmentLimits().entry_chars,
        "outcomes": dict(outcomes),
    }
    llm: dict[str, float | None] | None = None
    if args.enrich_llm > 0:
        llm, llm_details = await enrich_llm(store, args)
        details["llm"] = llm_details
    else:
        details["llm"] = {"skipped": "off (--enrich-llm N runs N turns on the local model)"}
    return {"enrich_ms": p50_p95_p99(times), "enrich_llm_ms": llm, "details": details}


async def enrich_llm(
    store: PoolStore, args: argparse.Namespace
) -> tuple[dict[str, float | None] | None, dict[str, Any]]:
    from plugins.brain.json_model import LocalJsonModel
    from plugins.brain.local_model import LocalModel, LocalModelSettings

    reason = LocalModel.unavailable_reason()
    if reason is not None:
        return None, {"skipped": reason}
    model = LocalModel(LocalModelSettings(start_deadline_s=60.0))
    try:
        await model.warm_up()
        times, outcomes, _ = await enrich_samples(
            store, JsonModelCalls(LocalJsonModel(model)), args, args.enrich_llm, seed=23
        )
    finally:
        await model.aclose()
    return p50_p95_p99(times), {
        "samples": len(times),
        "model": "local (Qwen2.5-Coder-0.5B-Instruct), warmed up first, not timed",
        "outcomes": dict(outcomes),
    }


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
            await apply_migrations(pool, ["memory"])
            keyring = Keyring.generate("bench")
            load_s = await bulk_load(pool, args.users, args.per_user, keyring)
            store = PostgresMemoryStore(pool, keyring=keyring)
            settings = MemorySettings()

            async def enabled() -> bool:
                return True

            rng = random.Random(11)
            inject: list[float] = []
            sizes: list[int] = []
            for sample in range(args.samples + 50):
                user = rng.randrange(args.users)
                memory = SessionMemory(
                    store, tenant="bench", user=f"user-{user}", role_id="role",
                    language="zh", is_enabled=enabled, settings=settings,
                )  # fmt: skip
                started = time.perf_counter()
                block = await memory.read()
                elapsed = (time.perf_counter() - started) * 1000
                if sample >= 50:  # the first reads warm the pool's prepared statements
                    inject.append(elapsed)
                    sizes.append(len(block or ""))

            extract_times: list[float] = []
            found = 0
            for _ in range(args.samples):
                for message in _MESSAGES:
                    started = time.perf_counter()
                    found += len(extract(message))
                    extract_times.append((time.perf_counter() - started) * 1000)

            saves: list[float] = []
            saved = 0
            statements = [m for m in _MESSAGES if extract(m)]
            for sample in range(min(args.samples, 500)):
                memory = SessionMemory(
                    store, tenant="bench", user=f"fresh-{sample}", role_id="role",
                    language=None, is_enabled=enabled, settings=settings,
                )  # fmt: skip
                message = statements[sample % len(statements)]
                started = time.perf_counter()
                await memory.on_user_final(
                    message, thread_id=f"th_fresh_{sample}", seq=1, at=datetime.now(UTC)
                )
                saves.append((time.perf_counter() - started) * 1000)
                saved += memory.counters.saved
            pool_result = await pool_bench(pool if database_url else None, args)
            enrich_result = await enrich_bench(pool if database_url else None, args)
        finally:
            await pool.close()
    entries = args.users * args.per_user
    return {
        "entries": entries,
        "inject_ms": p50_p99(inject),
        "extract_ms": p50_p99(extract_times),
        "visible_read_ms": pool_result["visible_read_ms"],
        "purge_ms": pool_result["purge_ms"],
        "enrich_ms": enrich_result["enrich_ms"],
        "enrich_llm_ms": enrich_result["enrich_llm_ms"],
        "details": {
            "server": "external" if database_url else "embedded",
            "users": args.users,
            "entries_per_user_role": args.per_user,
            "bulk_load_s": round(load_s, 2),
            "inject_samples": len(inject),
            "injected_entries": settings.max_entries,
            "budget_chars": settings.budget_chars,
            "memory_data_chars_p50": sorted(sizes)[len(sizes) // 2] if sizes else 0,
            "extract_samples": len(extract_times),
            "extracted_per_message": round(found / max(1, len(extract_times)), 2),
            "extract_and_save_ms": p50_p99(saves),
            "entries_saved": saved,
            "pool": pool_result["details"],
            "enrich": enrich_result["details"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="server to create the benchmark database on")
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--per-user", type=int, default=100, help="entries per user×role")
    parser.add_argument("--samples", type=int, default=1_000, help="reads / rounds of messages")
    parser.add_argument("--pool-entries", type=int, default=10_000, help="entries in the pool")
    parser.add_argument("--pool-users", type=int, default=100, help="people using the pool")
    parser.add_argument("--pool-samples", type=int, default=200, help="read_visible samples")
    parser.add_argument("--pool-purges", type=int, default=20, help="threads purged")
    parser.add_argument("--enrich-users", type=int, default=200, help="people of the enrich pool")
    parser.add_argument("--enrich-samples", type=int, default=200, help="enriched turns timed")
    parser.add_argument("--enrich-llm", type=int, default=0, help="turns on the local model")
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
