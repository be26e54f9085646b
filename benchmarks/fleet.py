"""The load and fault suite (SPEC OPS-4): a fleet behind nginx, sessions conversing through faults.

``python -m benchmarks.fleet`` prints one JSON object with ``processes``, ``sessions``,
``seconds``, ``drops``, ``killed``, ``drained``, ``postgres_restarts``, ``lost_events``,
``duplicated_events``, ``failed_continuations``, ``server_errors``, ``resume_ms`` (p50/p99) and
``rss_slope_mb_per_min`` (with ``--soak-minutes`` > 0), and the counts they are made of.

Topology (loopback only): an embedded PostgreSQL in a temporary directory (the same wheel and
code path as a user's machine, ``runtime.database.EmbeddedPostgres``), ``--processes`` server
processes on it (``benchmarks.fake_server --brain queued``: instant fake ASR/TTS, the fake brain
behind the real fair model queue, saturated on purpose), and nginx with the shipped
``deploy/nginx/openrealtime.conf`` in front (``tests/fleet.py``). Every client connects to nginx.

Load: ``--sessions`` conversing users at once (``runtime.client.RealtimeClient``), each taking
typed turns one after another with a random think time, ending its session after
``--turns-per-session`` turns (close 1000) and starting a new one (a new thread) — so a soak
sees sessions come and go, as a server does, not a few threads growing for ten minutes.

Faults during the ``--seconds`` run, at fixed fractions:

- random drops: after sending a turn a client cuts its own connection with ``--drop-p`` and
  resumes through nginx (wherever it lands);
- at 20 % one process is SIGKILLed (restarted on its port 3 s later); at 40 % PostgreSQL is
  restarted (``pg_ctl restart -m fast``: every connection cut); at 60 % one process is sent
  SIGTERM and drains (restarted after it exits);
- the model queue is saturated throughout (each process's fake model takes ``model_ms`` = 100 ms
  a request, one at a time, at most 16 waiting, and the sessions ask more than that):
  ``model_busy`` answers are retried (``model_busy_retries``).

A client's turn is done when its answer arrives; when the session had to be continued from the
journal (``replayed`` false), the resume's ``reconcile`` says whether the turn reached the journal
and was answered, so the client re-sends it, asks for the answer (``response.create``), or
moves on — never taking a turn twice. The journal's account replaces the old stream's, so what
that stream said and the client had not read yet is skipped (``RealtimeClient.skip_through``):
a ``response.done`` of a request refused ``model_busy`` just before the drop is not the answer
to the request sent after the resume (taking it for one made the client ask twice, and then
take that second answer for its next turn's). At the end, per client:

- ``lost_events``: ``seq`` gaps in what the client received (``RealtimeClient.gaps``), ranges a
  resume reported ``missing``, turns never answered, and answered turns the journal lacks (no
  ``user_input``, or no ``assistant_output`` after it);
- ``duplicated_events``: journal events stored twice (event id), a turn's ``user_input``
  journaled twice, a turn answered twice (two ``assistant_output`` after one input), and a
  response the client saw completed twice;
- ``failed_continuations``: sessions whose resume failed (refused, or no process took it within
  the retries);
- ``server_errors``: ``error`` events other than the expected retryable ``model_busy`` and
  ``journal_unavailable`` (the PostgreSQL restart), failed responses for any other reason, and
  tracebacks in the servers' stderr.

After the run, ``--soak-minutes`` keeps the load on (drops only) and samples each server's RSS
every ``--rss-every-s``; ``rss_slope_mb_per_min`` is the largest least-squares slope over the
processes, from the soak's second minute on.

``--explain`` prints, for every session with a lost or duplicated event, what its client did
and saw and the thread's journal (stderr); ``--keep-dir`` keeps the servers' logs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from websockets import ConnectionClosed

from benchmarks.common import emit, p50_p99
from journal.events import EventKind, JournalEvent, ThreadRef
from journal.postgres_store import PostgresJournalStore
from runtime.accounts import LOCAL_PRINCIPAL
from runtime.client import ClientClosed, RealtimeClient, Received
from runtime.database import EmbeddedPostgres, open_database
from runtime.loop import install_uvloop
from tests.fleet import ROOT, Nginx, ServerProcess

EXPECTED_ERRORS = frozenset({"model_busy", "journal_unavailable"})
"""Retryable errors the suite causes on purpose (a saturated queue, a PostgreSQL restart)."""
TURN_TIMEOUT_S = 20.0
GIVE_UP_S = 180.0
"""A turn not answered in this time counts as lost (``unanswered``)."""
RAMP_S = 5.0
"""Sessions start at random moments over the first seconds, as users arrive."""
CONNECT_ATTEMPTS = 6
RESUME_ATTEMPTS = 12


@dataclass
class Tally:
    drops: int = 0
    resumes: int = 0
    continued: int = 0
    resume_ms: list[float] = field(default_factory=list)
    model_busy: int = 0
    failed_continuations: int = 0
    unexpected: Counter[str] = field(default_factory=Counter)
    missing: int = 0
    unanswered: int = 0
    outage_retries: int = 0
    slow_turns: int = 0
    cancelled: int = 0
    """Responses of a turn cancelled by a newer one of the same turn (waited past)."""
    connect_retries: int = 0
    superseded: int = 0
    """Messages of an old stream left unread when a resume's reconcile replaced it."""
    sessions_ended: int = 0
    connect_timeouts: int = 0
    """Sessions that never opened: every attempt timed out (not an answer of the server)."""
    lost: Counter[str] = field(default_factory=Counter)
    duplicated: Counter[str] = field(default_factory=Counter)
    """Waits for an answer that took longer than ``TURN_TIMEOUT_S`` (then waited on)."""
    """Responses that failed ``journal_unavailable`` (the PostgreSQL restart) and were asked
    for again: documented, retryable, expected here."""


@dataclass
class Segment:
    """One voice session of a conversation: its client and the turns it had answered."""

    client: RealtimeClient
    answered: list[str] = field(default_factory=list)
    response_ids: Counter[str] = field(default_factory=Counter)
    unanswered: str | None = None
    """The turn this session gave up on (``GIVE_UP_S`` without an answer), if any."""
    trace: list[str] | None = None
    """With ``--explain``: what the client did and saw (sends, asks, drops, resumes, answers)."""

    def note(self, what: str) -> None:
        if self.trace is not None:
            self.trace.append(f"{datetime.now().time()} {what}")


class Conversation:
    """One user's sessions, one after another, each taking turns through drops, kills,
    drains and restarts (module doc)."""

    def __init__(
        self,
        index: int,
        url: str,
        token: str,
        rng: random.Random,
        tally: Tally,
        *,
        turns_per_session: int,
        explain: bool = False,
    ):
        self.name = f"s{index}"
        self.url = url
        self.token = token
        self.rng = rng
        self.tally = tally
        self.turns_per_session = turns_per_session
        self.explain = explain
        self.segments: list[Segment] = []
        self.failed = False

    @property
    def client(self) -> RealtimeClient:
        return self.segments[-1].client

    async def run(self, stop_at: float, drop_p: float, think_s: tuple[float, float]) -> None:
        await asyncio.sleep(self.rng.uniform(0, RAMP_S))  # users arrive over the ramp
        turn = 0
        while time.monotonic() < stop_at and not self.failed:
            if not await self._open():
                return
            segment = self.segments[-1]
            try:
                for _ in range(self.turns_per_session):
                    if time.monotonic() >= stop_at or self.failed:
                        break
                    text = f"{self.name} turn {turn}"
                    if not await self._turn(text, drop_p):
                        self.tally.unanswered += 1
                        self.segments[-1].unanswered = text
                        self.failed = True
                        break
                    segment.answered.append(text)
                    turn += 1
                    await asyncio.sleep(self.rng.uniform(*think_s))
                if not self.failed:
                    with contextlib.suppress(Exception):  # the user ends it: close 1000
                        await segment.client.end_session()
                        await segment.client.wait_closed(timeout=10)
                    self.tally.sessions_ended += 1
            finally:
                with contextlib.suppress(Exception):
                    await segment.client.close()

    async def _open(self) -> bool:
        """A new session (a new thread), retried while the machine is too busy to answer."""
        for attempt in range(CONNECT_ATTEMPTS):
            client = RealtimeClient(self.url, self.token, max_messages=4_000)
            try:
                await client.connect(timeout=30)
                self.segments.append(Segment(client, trace=[] if self.explain else None))
                return True
            except (ClientClosed, OSError, TimeoutError, ConnectionClosed) as e:
                with contextlib.suppress(Exception):
                    await client.close()
                if attempt == CONNECT_ATTEMPTS - 1:
                    if isinstance(e, ClientClosed):  # the server answered with an error
                        self.tally.unexpected[f"connect:{_error_code(str(e))}"] += 1
                    else:  # no answer in time, again and again: an overloaded machine
                        self.tally.connect_timeouts += 1
                    self.failed = True
                    return False
                self.tally.connect_retries += 1
                await asyncio.sleep(0.5 * 2**attempt)
        return False

    async def _turn(self, text: str, drop_p: float) -> bool:
        client = self.client
        need = "send"
        give_up = time.monotonic() + GIVE_UP_S
        while time.monotonic() < give_up:
            if need == "done":  # a resume's reconcile says the journal has it answered
                return True
            try:
                if client.draining:
                    await client.wait_closed(timeout=60)
                    raise ClientClosed("drained")
                segment = self.segments[-1]
                if need == "send":
                    await client.send_text(text)
                elif need == "ask":
                    await client.send_json({"type": "response.create"})
                segment.note(f"{need} {text!r}")
                need = "wait"
                if self.rng.random() < drop_p:
                    await asyncio.sleep(self.rng.uniform(0, 0.05))
                    self.tally.drops += 1
                    segment.note("drop")
                    await client.drop()
                    raise ClientClosed("dropped")
                done = await client.wait_for(self._answer_or_failure, timeout=TURN_TIMEOUT_S)
                assert done.event is not None
                response = done.event["response"]
                segment.note(f"done {response.get('id')} {response.get('status')} "
                             f"{(response.get('status_details') or {}).get('error')}")  # fmt: skip
                if response.get("status") == "completed" and response.get("output_text"):
                    self.segments[-1].response_ids[str(response.get("id"))] += 1
                    return True
                code = str(((response.get("status_details") or {}).get("error") or {}).get("code"))
                if response.get("status") == "cancelled":
                    # A newer response of this turn replaced it (an ask that crossed a resume):
                    # the newer one's done follows; asking again would cancel that one too.
                    self.tally.cancelled += 1
                    continue
                if code == "model_busy":
                    self.tally.model_busy += 1
                elif code == "journal_unavailable":
                    self.tally.outage_retries += 1
                else:
                    self.tally.unexpected[f"response:{response.get('status')}:{code}"] += 1
                await asyncio.sleep(self.rng.uniform(0.1, 0.4))
                need = "ask"
            except TimeoutError:
                # Slow, not lost: the connection is up, so the turn is on its way (asking
                # again would cancel the answer in progress). Keep waiting, up to give_up.
                self.tally.slow_turns += 1
            except (ClientClosed, ConnectionClosed, OSError):
                resumed = await self._resume()
                if resumed is None:
                    return False
                if resumed.get("replayed") is False or resumed.get("missing"):
                    # The journal's account replaces the old stream's: what it said unread
                    # (a refusal of a request sent just before the drop) answers nothing now.
                    reconcile = resumed.get("reconcile") or {}
                    self.tally.superseded += await client.skip_through(
                        int(reconcile.get("from_seq") or 1) - 1
                    )
                    need = _after_reconcile(reconcile, text)
                    self.segments[-1].note(f"resumed, reconcile from {reconcile.get('from_seq')}: "
                                           f"{need}")  # fmt: skip
                else:
                    self.segments[-1].note("resumed replayed")
        return False

    def _answer_or_failure(self, message: Received) -> bool:
        event = message.event
        if event is None:
            return False
        kind = event.get("type")
        if kind == "error":
            code = str((event.get("error") or {}).get("code"))
            if code not in EXPECTED_ERRORS:
                self.tally.unexpected[f"error:{code}"] += 1
            return False
        if self.explain and kind in ("response.created", "response.done"):  # per message
            response = event.get("response") or {}
            self.segments[-1].note(f"  saw seq={message.seq} {kind} {response.get('id')} "
                                   f"{response.get('status')}")  # fmt: skip
        return kind == "response.done"

    async def _resume(self) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            resumed = await self.client.reconnect(
                attempts=RESUME_ATTEMPTS, backoff=0.1, wait_for_replay=False
            )
        except ClientClosed as e:
            self.tally.failed_continuations += 1
            self.tally.unexpected[f"resume:{_error_code(str(e))}"] += 1
            self.failed = True
            return None
        self.tally.resume_ms.append((time.perf_counter() - started) * 1000)
        self.tally.resumes += 1
        if resumed.get("missing"):
            first, last = resumed["missing"]
            self.tally.missing += int(last) - int(first) + 1
        if resumed.get("replayed") is False:
            self.tally.continued += 1
        return resumed


def _error_code(text: str) -> str:
    """The ``code`` of an error event quoted in a ``ClientClosed`` (else its text)."""
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text)["error"]["code"])
    return text[:80]


def _after_reconcile(reconcile: dict[str, Any], text: str) -> str:
    """What a turn needs after a resume that could not replay: ``send`` (its input never reached
    the journal), ``ask`` (journaled, unanswered) or ``done`` (answered)."""
    items = list(reconcile.get("items") or [])
    at = next((i for i, item in enumerate(items) if item.get("role") == "user"
               and item.get("text") == text), None)  # fmt: skip
    if at is None:
        return "send"
    if any(item.get("role") == "assistant" for item in items[at + 1 :]):
        return "done"
    return "ask"


def journal_accounting(
    segment: Segment, events: list[JournalEvent], tally: Tally, *, explain: bool = False
) -> tuple[int, int]:
    """(lost, duplicated) for one session's thread (module doc); the kinds go to ``tally``."""
    lost: Counter[str] = Counter()
    duplicated: Counter[str] = Counter()
    duplicated["journal_event_twice"] += sum(
        n - 1 for n in Counter(e.event_id for e in events).values()
    )
    inputs = Counter(str(e.payload.get("text")) for e in events if e.kind is EventKind.USER_INPUT)
    duplicated["input_journaled_twice"] += sum(n - 1 for n in inputs.values() if n > 1)
    answers: Counter[str] = Counter()
    current: str | None = None
    for event in events:
        if event.kind is EventKind.USER_INPUT:
            current = str(event.payload.get("text"))
        elif event.kind is EventKind.ASSISTANT_OUTPUT and current is not None:
            if not event.payload.get("interrupted"):
                answers[current] += 1
    for text in segment.answered:
        lost["answered_input_not_journaled"] += 1 if inputs[text] == 0 else 0
        lost["answer_not_journaled"] += 1 if answers[text] == 0 else 0
    duplicated["answered_twice"] += sum(n - 1 for n in answers.values() if n > 1)
    duplicated["response_seen_twice"] += sum(n - 1 for n in segment.response_ids.values() if n > 1)
    lost["seq_gaps"] += segment.client.gaps
    tally.lost.update(+lost)
    tally.duplicated.update(+duplicated)
    if explain and (+lost or +duplicated or segment.unanswered):
        _explain(segment, events, lost, duplicated)
    return sum(lost.values()), sum(duplicated.values())


def _explain(
    segment: Segment, events: list[JournalEvent], lost: Counter[str], duplicated: Counter[str]
) -> None:
    """One anomalous session on stderr: what it counted, the turns the client had answered,
    and the thread's journal (kind, session, time, text) — to find the cause, not to score."""
    print(f"--- {segment.client.session.get('thread_id')} lost={dict(+lost)} "
          f"dup={dict(+duplicated)} answered={segment.answered}", file=sys.stderr)  # fmt: skip
    for line in segment.trace or ():
        print(f"  client {line}", file=sys.stderr)
    for event in events:
        payload = event.payload
        what = payload.get("text") or payload.get("response_id") or ""
        extra = {k: v for k, v in payload.items() if k not in ("text", "heard_text")}
        print(f"  {event.seq:4d} {event.created_at.time()} {event.kind.value:24s} "
              f"{str(event.voice_session_id)[-8:]} {str(what)[:40]!r} {extra}",
              file=sys.stderr)  # fmt: skip


def rss_mb(pid: int) -> float | None:
    """Resident set size of a live process (``/proc/<pid>/status``), in MiB."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_slope(samples: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (MB per minute) of (seconds, MB) samples."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mx = sum(t for t, _ in samples) / n
    my = sum(m for _, m in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return sum((t - mx) * (m - my) for t, m in samples) / var * 60


class Fleet:
    """The server processes, restarted on their own ports after a kill or a drain."""

    def __init__(
        self, database_url: str, root: Path, env: dict[str, str], brain_args: list[str]
    ) -> None:
        self.brain_args = brain_args
        self.database_url = database_url
        self.root = root
        self.env = env
        self.servers: list[ServerProcess] = []
        self.logs: list[Path] = []

    async def launch(self, index: int, port: int = 0) -> ServerProcess:
        """Server ``index`` started (not yet in ``servers``: ``start`` puts it there)."""
        log = self.root / f"server-{index}-{len(self.logs)}.log"
        self.logs.append(log)
        with log.open("wb") as stderr:
            return await ServerProcess.start(
                database_url=self.database_url, data_dir=self.root / "data", env=self.env,
                port=port, brain="queued", stderr=stderr.fileno(), name=f"p{index}",
                extra_args=self.brain_args,
            )  # fmt: skip

    async def start(self, index: int, port: int = 0) -> ServerProcess:
        server = await self.launch(index, port)
        if index < len(self.servers):
            self.servers[index] = server
        else:
            self.servers.append(server)
        return server

    async def restart(self, index: int, after_s: float) -> None:
        await self.servers[index].process.wait()
        await asyncio.sleep(after_s)
        await self.start(index, self.servers[index].port)

    def tracebacks(self) -> tuple[list[str], list[str]]:
        """The exception line of every traceback in the servers' stderr: (ours, library's).
        A traceback with no frame of this repository (asyncpg's pool logging the PostgreSQL
        restart from its own tasks) is the library's."""
        ours: list[str] = []
        library: list[str] = []
        for log in self.logs:
            lines = log.read_text(errors="replace").splitlines()
            for at, line in enumerate(lines):
                if not line.startswith("Traceback"):
                    continue
                end = next((j for j in range(at + 1, len(lines))
                            if lines[j] and not lines[j].startswith(" ")), len(lines))  # fmt: skip
                frames = [f for f in lines[at + 1 : end] if f.lstrip().startswith('File "')]
                mine = any(str(ROOT) in f and "site-packages" not in f for f in frames)
                exception = lines[end][:160] if end < len(lines) else "?"
                (ours if mine else library).append(exception)
        return ours, library

    async def stop(self) -> None:
        for server in self.servers:
            await server.kill()


async def run(
    *,
    processes: int,
    sessions: int,
    seconds: float,
    soak_minutes: float,
    seed: int,
    drop_p: float,
    kill: bool = True,
    drain: bool = True,
    restart_db: bool = True,
    think_s: tuple[float, float] = (3.0, 8.0),
    rss_every_s: float = 10.0,
    model_ms: float = 100.0,
    model_queue_max: int = 16,
    keep_dir: bool = False,
    turns_per_session: int = 20,
    explain: bool = False,
) -> dict[str, Any]:
    rng = random.Random(seed)
    tally = Tally()
    root = Path(tempfile.mkdtemp(prefix="openrealtime-fleet-"))
    os.chmod(root, 0o755)  # the embedded server runs as a system user when we are root
    postgres = await asyncio.to_thread(EmbeddedPostgres.attach, root / "pg")
    env = {
        "OPENREALTIME_DRAIN_TIMEOUT_S": "15",
        "OPENREALTIME_RESUME_TTL_S": "120",
        "OPENREALTIME_MAX_UNSAVED_EVENTS": "4096",
        "OPENREALTIME_MAX_SESSIONS": "10000",
    }
    brain_args = ["--model-ms", str(model_ms), "--model-queue-max", str(model_queue_max)]
    fleet = Fleet(postgres.url, root, env, brain_args)
    nginx: Nginx | None = None
    faults: dict[str, int] = {"killed": 0, "drained": 0, "postgres_restarts": 0}
    drain_exit: list[int] = []
    faults_s: dict[str, float] = {}
    rss: dict[int, list[tuple[float, float]]] = {}
    try:
        await fleet.start(0)  # the first one migrates the database; the others start at once
        fleet.servers.extend(await asyncio.gather(*(fleet.launch(i) for i in range(1, processes))))
        nginx = await Nginx.start([s.port for s in fleet.servers], root / "nginx")
        token = fleet.servers[0].token
        conversations = [
            Conversation(
                i,
                nginx.ws_url,
                token,
                random.Random(rng.random()),
                tally,
                turns_per_session=turns_per_session,
                explain=explain,
            )
            for i in range(sessions)
        ]
        started = time.monotonic()
        stop_at = started + seconds + soak_minutes * 60

        async def chaos() -> None:
            restarts: list[asyncio.Task[None]] = []
            await asyncio.sleep(0.2 * seconds)
            if kill and processes > 1:
                await fleet.servers[0].kill()
                faults["killed"] += 1
                restarts.append(asyncio.create_task(fleet.restart(0, 3.0)))
            await asyncio.sleep(0.2 * seconds)
            if restart_db:
                began = time.monotonic()
                await asyncio.to_thread(postgres.restart)
                faults_s["postgres_restart"] = time.monotonic() - began
                faults["postgres_restarts"] += 1
            await asyncio.sleep(0.2 * seconds)
            if drain and processes > 1:
                target = fleet.servers[processes - 1]
                target.process.send_signal(15)
                faults["drained"] += 1
                drain_exit.append(await target.process.wait())
                restarts.append(asyncio.create_task(fleet.restart(processes - 1, 0.5)))
            await asyncio.gather(*restarts)

        async def sample_rss() -> None:
            soak_from = started + seconds + 60  # the soak's second minute on
            while True:
                await asyncio.sleep(rss_every_s)
                now = time.monotonic()
                if now < soak_from:
                    continue
                for index, server in enumerate(fleet.servers):
                    mb = rss_mb(server.process.pid)
                    if mb is not None:
                        rss.setdefault(server.process.pid * 100 + index, []).append((now, mb))

        chaos_task = asyncio.create_task(chaos())
        sampler = asyncio.create_task(sample_rss())
        await asyncio.gather(*(c.run(stop_at, drop_p, think_s) for c in conversations))
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        await chaos_task
        elapsed = time.monotonic() - started

        database = await open_database(
            database_url=postgres.url, data_dir=root, min_size=1, max_size=4
        )
        lost = duplicated = 0
        try:
            store = PostgresJournalStore(database.pool)
            for segment in (seg for c in conversations for seg in c.segments):
                thread_id = segment.client.session.get("thread_id")
                if not thread_id:
                    continue
                thread = ThreadRef(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user, str(thread_id))
                c_lost, c_dup = journal_accounting(
                    segment, await store.read(thread), tally, explain=explain
                )
                lost += c_lost
                duplicated += c_dup
        finally:
            await database.close()
        lost += tally.missing + tally.unanswered
        tally.lost.update(+Counter(missing=tally.missing, unanswered=tally.unanswered))
        unexpected = sum(tally.unexpected.values())
        tracebacks, library_tracebacks = fleet.tracebacks()
        slopes = [s for s in (rss_slope(v) for v in rss.values()) if s is not None]
        turns = sum(len(seg.answered) for c in conversations for seg in c.segments)
        unexpected += len(tracebacks)
        return {
            "processes": processes,
            "sessions": sessions,
            "seconds": round(elapsed, 1),
            "fault_seconds": seconds,
            "soak_minutes": soak_minutes,
            "turns": turns,
            "drops": tally.drops,
            "killed": faults["killed"],
            "drained": faults["drained"],
            "drain_exit_status": drain_exit[0] if drain_exit else None,
            "postgres_restarts": faults["postgres_restarts"],
            "resumes": tally.resumes,
            "continued_from_journal": tally.continued,
            "model_busy_retries": tally.model_busy,
            "lost_events": lost,
            "duplicated_events": duplicated,
            "failed_continuations": tally.failed_continuations,
            "lost_kinds": dict(tally.lost),
            "duplicated_kinds": dict(tally.duplicated),
            "connect_retries": tally.connect_retries,
            "superseded_unread": tally.superseded,
            "sessions_ended": tally.sessions_ended,
            "sessions_never_opened": tally.connect_timeouts,
            "server_errors": unexpected,
            "retried_during_postgres_restart": tally.outage_retries,
            "slow_turns": tally.slow_turns,
            "cancelled_responses": tally.cancelled,
            "postgres_restart_s": round(faults_s.get("postgres_restart", 0.0), 2),
            "server_error_kinds": dict(tally.unexpected),
            "server_tracebacks": len(tracebacks),
            "server_traceback_kinds": dict(Counter(tracebacks)),
            "library_tracebacks": dict(Counter(library_tracebacks)),
            "resume_ms": p50_p99(tally.resume_ms),
            "rss_slope_mb_per_min": round(max(slopes), 3) if slopes else None,
            "rss_mb_last": [round(v[-1][1], 1) for v in rss.values()] if rss else None,
        }
    finally:
        if nginx is not None:
            await nginx.stop()
        await fleet.stop()
        await asyncio.to_thread(postgres.detach)
        if keep_dir:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--soak-minutes", type=float, default=10)
    parser.add_argument("--drop-p", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--turns-per-session", type=int, default=20)
    parser.add_argument(
        "--explain", action="store_true", help="print each anomalous thread's journal to stderr"
    )
    parser.add_argument("--keep-dir", action="store_true", help="keep the servers' logs")
    args = parser.parse_args()
    install_uvloop()
    result = asyncio.run(
        run(
            processes=args.processes,
            sessions=args.sessions,
            seconds=args.seconds,
            soak_minutes=args.soak_minutes,
            seed=args.seed,
            drop_p=args.drop_p,
            turns_per_session=args.turns_per_session,
            explain=args.explain,
            keep_dir=args.keep_dir,
        )
    )
    emit(result)


if __name__ == "__main__":
    main()
