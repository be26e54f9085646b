"""The PostgreSQL journal: append throughput and per-turn projection cost (SPEC J-2, J-3, J-5).

``python -m benchmarks.journal`` prints one JSON object::

    {"append_events_per_s": {"one_thread": …, "fifty_threads": …},
     "append_latency_ms": {"one_thread": {"p50", "p99"}, "fifty_threads": {…}},
     "projection_ms": {"100": {"p50", "p99"}, "10000": {…}, "100000": {…}},
     "budget_tokens": 4000, "details": {…}}

Database: ``--database-url`` (or ``DATABASE_URL``) names a server where this benchmark may
create a database; without one it starts the embedded PostgreSQL in a temporary directory
(``runtime.database.open_database``). Either way it creates its own uniquely named database,
applies the journal migrations, and drops it at the end.

- Appends: single-event ``append`` calls through ``PostgresJournalStore``, as the voice engine
  makes them (one user input, then one assistant output). ``one_thread``: one writer, one
  thread, back to back. ``fifty_threads``: 50 writers, one thread each, concurrently on a
  50-connection pool. The store group-commits (``journal/group_commit.py``); latency is per
  ``append`` call, queueing included. ``details.without_group_commit`` repeats both runs with
  ``group_commit=False`` (one transaction per append, as before group commit) for comparison.
- Projection: threads of 100 / 10,000 / 100,000 events of realistic turns (Chinese and English
  user inputs and answers, some interrupted, a tool call with its result every few turns),
  bulk-loaded with ``COPY`` — same rows, seqs, fingerprints and head as ``journal_append``
  writes. Each thread is then compacted as the runtime would keep it (``ThreadCompactor``,
  default policy), and ``project_thread`` is timed with a ``ContextBudget`` whose history
  budget is ``--budget`` tokens, on one long-lived projector (as an engine holds one, so a
  checkpoint is verified once; the first, cold projection is reported in ``details``).
  Targets: p50 ≤ 5 ms, and the 100,000-event thread within 1.5× of the 100-event one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from benchmarks.common import emit, p50_p99
from journal.checkpoints import CheckpointStore
from journal.compaction import CompactionPolicy, ThreadCompactor
from journal.events import EventKind, NewEvent, ThreadRef, canonical_json
from journal.postgres_checkpoints import PostgresCheckpointStore
from journal.postgres_store import PostgresJournalStore
from journal.projector import BudgetedConversationContextProjector, ContextBudget
from runtime.database import open_database
from runtime.loop import install_uvloop
from runtime.migrations import apply_migrations

SIZES = (100, 10_000, 100_000)

_USER_EN = [
    "How long do I have to return the shoes I bought last week?",
    "The order number is {n}. Who pays for the return shipping?",
    "Can you check whether my refund for order {n} has gone through?",
    "I prefer short answers, please.",
    "What are your opening hours on weekends?",
]
_USER_ZH = [
    "我刚签收了星河商店的商品，想退货。",
    "订单号是 {n}，那运费谁承担？",
    "退款多久到账？我之前说过的学习目标是什么？",
    "请记住我喜欢简洁回答。",
]
_ASSISTANT_EN = [
    "You can return unused items within 7 days of delivery, in their original packaging, with "
    "the order number. If the product is defective the shop pays for return shipping; "
    "otherwise the buyer does.",
    "Your refund for order {n} was issued yesterday and usually arrives within 3 to 5 business "
    "days, depending on your bank.",
    "We are open from 9:00 to 18:00 on weekdays; on weekends the support line answers by email.",
]
_ASSISTANT_ZH = [
    "资料规定签收后 7 天内可以退货，商品未使用、包装完整，并提供订单号。"
    "商品质量问题由商店承担运费，其他情况由买家承担。",
    "订单 {n} 的退款已经发起，通常 3 到 5 个工作日到账，具体取决于银行。",
]


def realistic_events(count: int, *, seed: int) -> list[NewEvent]:
    """``count`` events of a realistic conversation (deterministic)."""
    rng = random.Random(seed)
    events: list[NewEvent] = []
    turn = 0
    while len(events) < count:
        zh = rng.random() < 0.5
        n = rng.randint(10_000, 99_999)
        user = rng.choice(_USER_ZH if zh else _USER_EN).format(n=n)
        events.append(
            NewEvent(f"t{turn}:user", EventKind.USER_INPUT, {"text": user, "source": "voice"})
        )
        if turn % 6 == 5:
            call = f"call-{turn}"
            arguments = {"query": user[:40]}
            content = "[source: 星河商店售后说明 v1] <untrusted_knowledge>退货期限为签收后 7 天。"
            events.append(
                NewEvent(
                    f"t{turn}:call",
                    EventKind.TOOL_CALL,
                    {"call_id": call, "name": "knowledge_search", "arguments": arguments},
                )
            )
            events.append(
                NewEvent(
                    f"t{turn}:result",
                    EventKind.TOOL_RESULT,
                    {
                        "call_id": call,
                        "name": "knowledge_search",
                        "content": content + "</untrusted_knowledge>",
                    },
                )
            )
        text = rng.choice(_ASSISTANT_ZH if zh else _ASSISTANT_EN).format(n=n)
        interrupted = rng.random() < 0.15
        heard = text[: len(text) // 3] if interrupted else text
        events.append(
            NewEvent(
                f"t{turn}:assistant",
                EventKind.ASSISTANT_OUTPUT,
                {"text": text, "heard_text": heard, "interrupted": interrupted, "generation": turn},
            )
        )
        turn += 1
    return events[:count]


async def bulk_load(pool: Any, thread: ThreadRef, events: Sequence[NewEvent]) -> None:
    """Write ``events`` as seqs 1…n with ``COPY``: the rows ``journal_append`` would write."""
    records = [
        (
            thread.tenant,
            thread.user,
            thread.thread_id,
            seq,
            e.event_id,
            e.kind.value,
            canonical_json(e.payload),
            e.fingerprint(),
            e.voice_session_id,
        )
        for seq, e in enumerate(events, start=1)
    ]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO journal_threads (tenant, user_id, thread_id, head_seq)"
            " VALUES ($1, $2, $3, $4)",
            thread.tenant,
            thread.user,
            thread.thread_id,
            len(events),
        )
        await conn.copy_records_to_table(
            "journal_events",
            records=records,
            columns=[
                "tenant",
                "user_id",
                "thread_id",
                "seq",
                "event_id",
                "kind",
                "payload",
                "fingerprint",
                "voice_session_id",
            ],
            timeout=300,
        )
        await conn.execute("ANALYZE journal_events")


async def append_rate(
    pool: Any, *, writers: int, events_per_writer: int, batch: int = 1, group_commit: bool = True
) -> tuple[float, list[float]]:
    """Events appended per second, and each ``append`` call's latency in ms."""
    store = PostgresJournalStore(pool, group_commit=group_commit)
    latencies: list[float] = []
    run = uuid.uuid4().hex[:8]

    def event(i: int) -> NewEvent:
        if i % 2 == 0:
            payload: dict[str, Any] = {
                "text": f"question {i}: how long do returns take?",
                "source": "voice",
            }
            return NewEvent(f"e{i}", EventKind.USER_INPUT, payload, "vs-bench")
        answer = f"answer {i}: within 7 days."
        payload = {"text": answer, "heard_text": answer, "interrupted": False, "generation": i}
        return NewEvent(f"e{i}", EventKind.ASSISTANT_OUTPUT, payload, "vs-bench")

    async def writer(w: int) -> None:
        thread = ThreadRef("bench", f"writer{w}", f"append-{run}-{batch}")
        for i in range(0, events_per_writer, batch):
            events = [event(j) for j in range(i, i + batch)]
            called = time.perf_counter()
            await store.append(thread, events)
            latencies.append((time.perf_counter() - called) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return writers * events_per_writer / (time.perf_counter() - started), latencies


async def projection_times(
    pool: Any,
    checkpoints: CheckpointStore,
    thread: ThreadRef,
    budget: ContextBudget,
    *,
    samples: int,
) -> dict[str, Any]:
    store = PostgresJournalStore(pool)
    projector = BudgetedConversationContextProjector()
    started = time.perf_counter()
    first = await projector.project_thread(
        store, thread, budget=budget, language="zh", checkpoints=checkpoints
    )
    cold_ms = (time.perf_counter() - started) * 1000
    times: list[float] = []
    result = first
    for _ in range(samples):
        started = time.perf_counter()
        result = await projector.project_thread(
            store, thread, budget=budget, language="zh", checkpoints=checkpoints
        )
        times.append((time.perf_counter() - started) * 1000)
    # The same thread without its checkpoints: the raw tail walk alone (J-5 without a summary).
    raw_times: list[float] = []
    raw = first
    for _ in range(samples // 3):
        started = time.perf_counter()
        raw = await projector.project_thread(store, thread, budget=budget, language="zh")
        raw_times.append((time.perf_counter() - started) * 1000)
    return {
        "times": times,
        "without_checkpoints_ms": p50_p99(raw_times),
        "without_checkpoints_rows_read": raw.rows_read,
        "without_checkpoints_tokens": raw.tokens,
        "cold_ms": round(cold_ms, 3),
        "cold_rows_read": first.rows_read,
        "rows_read": result.rows_read,
        "tokens": result.tokens,
        "events_included": result.events_included,
        "summary_used": result.summary_used,
        "summary_to_seq": result.summary_to_seq,
    }


@contextlib.asynccontextmanager
async def bench_database(database_url: str | None) -> AsyncIterator[str]:
    """A fresh database for this run (on ``database_url``'s server, or an embedded one)."""
    data_dir: Path | None = None
    embedded = None
    if database_url is None:
        data_dir = Path(tempfile.mkdtemp(prefix="openrealtime-bench-pg-"))
        embedded = await open_database(database_url=None, data_dir=data_dir, max_size=1)
        admin_url = embedded.url
    else:
        admin_url = database_url
    name = f"openrealtime_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        conn = await asyncpg.connect(admin_url, timeout=10)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        try:
            yield urlunsplit(urlsplit(admin_url)._replace(path="/" + name))
        finally:
            conn = await asyncpg.connect(admin_url, timeout=10)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                await conn.close()
    finally:
        if embedded is not None:
            await embedded.close()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    database_url = args.database_url or os.environ.get("DATABASE_URL") or None
    async with bench_database(database_url) as url:
        pool = await asyncpg.create_pool(url, min_size=2, max_size=55, command_timeout=300)
        try:
            await apply_migrations(pool, ["journal"])
            one, one_ms = await append_rate(pool, writers=1, events_per_writer=args.appends_one)
            fifty, fifty_ms = await append_rate(
                pool, writers=50, events_per_writer=args.appends_each
            )
            fifty_pairs, _ = await append_rate(
                pool, writers=50, events_per_writer=args.appends_each, batch=2
            )
            plain_one, plain_one_ms = await append_rate(
                pool, writers=1, events_per_writer=args.appends_one, group_commit=False
            )
            plain_fifty, plain_fifty_ms = await append_rate(
                pool, writers=50, events_per_writer=args.appends_each, group_commit=False
            )

            checkpoints = PostgresCheckpointStore(pool)
            journal = PostgresJournalStore(pool)
            # Nothing else reserved: the history budget is exactly --budget tokens.
            budget = ContextBudget(context_window=args.budget, reserved_output=0)
            policy = CompactionPolicy.for_budget(budget.history)
            compactor = ThreadCompactor(journal, checkpoints, policy=policy)
            projection: dict[str, dict[str, float | None]] = {}
            details: dict[str, Any] = {}
            for size in SIZES:
                thread = ThreadRef("bench", "reader", f"thread-{size}")
                started = time.perf_counter()
                await bulk_load(pool, thread, realistic_events(size, seed=size))
                load_s = time.perf_counter() - started
                started = time.perf_counter()
                rounds = checkpointed = 0
                while True:
                    done = await compactor.compact(thread, language="zh")
                    rounds += done.rounds
                    if done.rounds == 0:
                        break
                    checkpointed = done.checkpoint.to_seq if done.checkpoint else 0
                compact_s = time.perf_counter() - started
                measured = await projection_times(
                    pool, checkpoints, thread, budget, samples=args.samples
                )
                projection[str(size)] = p50_p99(measured.pop("times"))
                details[str(size)] = {
                    "bulk_load_s": round(load_s, 2),
                    "compaction_s": round(compact_s, 2),
                    "checkpoints": rounds,
                    "summarized_through_seq": checkpointed,
                    **measured,
                }
        finally:
            await pool.close()
    small, large = projection["100"]["p50"], projection["100000"]["p50"]
    return {
        "append_events_per_s": {"one_thread": round(one), "fifty_threads": round(fifty)},
        "append_latency_ms": {"one_thread": p50_p99(one_ms), "fifty_threads": p50_p99(fifty_ms)},
        "projection_ms": projection,
        "budget_tokens": args.budget,
        "details": {
            "server": "external" if database_url else "embedded",
            "events_per_append": 1,
            "fifty_threads_two_events_per_append": round(fifty_pairs),
            "without_group_commit": {
                "append_events_per_s": {
                    "one_thread": round(plain_one),
                    "fifty_threads": round(plain_fifty),
                },
                "append_latency_ms": {
                    "one_thread": p50_p99(plain_one_ms),
                    "fifty_threads": p50_p99(plain_fifty_ms),
                },
            },
            "compaction_policy": {
                "threshold_tokens": policy.threshold_tokens,
                "keep_recent_tokens": policy.keep_recent_tokens,
                "max_segment_events": policy.max_segment_events,
                "max_summary_tokens": policy.max_summary_tokens,
            },
            "projection_samples": args.samples,
            "ratio_100000_vs_100_p50": round(large / small, 2) if small and large else None,
            "threads": details,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="server to create the benchmark database on")
    parser.add_argument("--budget", type=int, default=4000, help="history budget in tokens")
    parser.add_argument("--samples", type=int, default=300, help="projections per thread")
    parser.add_argument("--appends-one", type=int, default=2000, help="events, one writer")
    parser.add_argument("--appends-each", type=int, default=200, help="events per writer of 50")
    args = parser.parse_args()
    install_uvloop()
    emit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
