"""Drain: what a server process does between SIGTERM and its exit (SPEC OPS-1).

Theory of operation
-------------------
Several processes share one database behind a load balancer (README "Fleet"); any of them can
continue any session from the journal (``runtime/realtime/continuity.py`` rule 3). A process that is
told to stop hands its sessions over instead of cutting them:

Rule 1 — no new sessions. From ``DrainState.begin`` on, a realtime WebSocket handshake (a start
or a resume) and a WebRTC offer are answered HTTP 503 ``server_draining`` before anything is
accepted, so nginx (``proxy_next_upstream … http_503``) gives the request to another process.
Every other HTTP route goes on answering until the process exits.

Rule 2 — a live turn finishes. Each connected session is first waited on while a turn is under
way (``Engine.in_turn``). Then it is sent ``openrealtime.server.draining`` and waited on until
its client has acknowledged every message sent so far (``openrealtime.ack``: whatever the client
sent before that ack has been read, and it starts no new turn after it), and again while a turn
that came in meanwhile finishes. All of this is bounded by one deadline, ``drain_timeout_s``
after the drain began, for every session together.

Rule 3 — told to resume elsewhere. Then the session ends here without revoking its token
(``shutdown``: engine stopped, journal buffer flushed, queued messages sent) and the connection
is closed with 1012. The client resumes through the load balancer; another process continues
the session from the journal, numbering on from the client's ``last_seq``, so nothing it was
sent is lost or sent twice. A session waiting for a resume (no connection) just ends here; its
resume goes to another process the same way.

Rule 4 — one drain. ``begin`` is idempotent; ``drain_sessions`` runs once, and the process then
exits (``runtime.server`` closes the listener and the database).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.events import ServerDraining
from runtime.realtime.protocol import CloseCode

if TYPE_CHECKING:
    from runtime.realtime.live import LiveSessions
    from runtime.realtime.session import VoiceSession

log = logging.getLogger(__name__)

DRAINING_CODE = "server_draining"
"""The ``code`` of the 503 a draining process answers new sessions with (rule 1)."""
POLL_S = 0.02
"""How often a drain looks at a session's turn and acknowledgements."""


@dataclass(frozen=True, slots=True)
class DrainReport:
    """What a drain did: sessions handed over, and those cut at the deadline."""

    connected: int
    waiting: int
    cut_at_deadline: int
    seconds: float


class DrainState:
    """Whether this process is draining (rule 1); read on every new realtime connection."""

    def __init__(self) -> None:
        self.draining = False
        self.began_at: float | None = None

    def begin(self, now: float) -> bool:
        """Start draining (rule 4); False when it had begun already."""
        if self.draining:
            return False
        self.draining = True
        self.began_at = now
        return True


async def drain_sessions(
    live: LiveSessions,
    *,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> DrainReport:
    """Rules 2 and 3 for every session live in this process, within ``timeout_s``."""
    started = clock()
    deadline = started + timeout_s
    sessions = [live[sid] for sid in list(live)]
    connected = [s for s in sessions if s.connection is not None and s.connection.serving]
    waiting = [s for s in sessions if s not in connected]
    results = await asyncio.gather(
        *(_hand_over(s, deadline, clock) for s in connected), return_exceptions=True
    )
    for session in waiting:
        if session.begin_end():
            await session.shutdown()
    cut = sum(1 for r in results if r is not True)
    for r in results:
        if isinstance(r, BaseException):
            log.warning("drain: a session failed to hand over: %r", r)
    return DrainReport(len(connected), len(waiting), cut, clock() - started)


async def _hand_over(session: VoiceSession, deadline: float, clock: Callable[[], float]) -> bool:
    """Rules 2-3 for one connected session; True when it went in time."""
    in_time = await _until(lambda: not _in_turn(session), deadline, clock)
    connection = session.connection
    if connection is None or not session.holds(connection):
        return in_time  # dropped or fenced meanwhile: its resume goes elsewhere
    outbox = session.outbox
    remaining_ms = max(0, int((deadline - clock()) * 1000))
    outbox.send(ServerDraining(close_within_ms=remaining_ms))
    await outbox.flush(max(0.0, deadline - clock()))
    mark = outbox.seq
    if outbox.extensions.seq:
        in_time = await _until(lambda: outbox.acked >= mark, deadline, clock) and in_time
    in_time = await _until(lambda: not _in_turn(session), deadline, clock) and in_time
    if not session.holds(connection):
        return in_time
    session.begin_end()
    await session.shutdown()
    with contextlib.suppress(Exception):
        await connection.link.close(CloseCode.SERVER_SHUTDOWN, "server draining; resume")
    return in_time


def _in_turn(session: VoiceSession) -> bool:
    engine = session.engine
    return engine is not None and not session.closed and engine.in_turn


async def _until(done: Callable[[], bool], deadline: float, clock: Callable[[], float]) -> bool:
    while not done():
        if clock() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True
