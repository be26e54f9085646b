"""Resume tokens of live sessions stay valid while their process serves them (SPEC OPS-1).

Theory of operation
-------------------
A resume token expires ``resume_ttl_s`` after it was issued or last extended
(``runtime/realtime/resume.py`` rule 3); a session extends it when its connection drops. A process
that dies (SIGKILL, a crash) extends nothing: a session connected for longer than the TTL would then
be refused everywhere, although its journal is intact.

Rule 1 — every ``resume_ttl_s / 3`` this process extends, by ``resume_ttl_s``, the token of each
session live here and held by a connection, so a token is never older than a third of its life
while its session is served; when the process dies, its clients have at least two thirds of the
TTL to resume elsewhere.

Rule 2 — best effort: an extension that fails (the database restarting) is logged once per
round and retried at the next; sessions waiting for a resume are left alone (their own
extension at the drop counts, and expiry is theirs).

Rule 3 — bounded: one round extends at most ``MAX_PER_ROUND`` tokens, at most ``CONCURRENCY``
at once, each within ``TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.realtime.live import LiveSessions
    from runtime.realtime.resume import ResumeTokenStore

log = logging.getLogger(__name__)

MAX_PER_ROUND = 10_000
CONCURRENCY = 8
TIMEOUT_S = 5.0


class KeepaliveServices(Protocol):
    """What the keepalive takes of the services."""

    settings: Settings
    live_sessions: LiveSessions
    resume_tokens: ResumeTokenStore


class TokenKeepalive:
    """Rule 1's periodic task; ``start`` and ``stop`` it with the server."""

    def __init__(self, services: KeepaliveServices) -> None:
        self.services = services
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="token-keepalive")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        ttl = self.services.settings.resume_ttl_s
        while True:
            await asyncio.sleep(ttl / 3)
            await self.extend_all()

    async def extend_all(self) -> int:
        """One round (rules 1-3); returns how many tokens were extended."""
        services = self.services
        ttl = services.settings.resume_ttl_s
        live = services.live_sessions
        ids = [sid for sid in list(live) if live[sid].connection is not None][:MAX_PER_ROUND]
        gate = asyncio.Semaphore(CONCURRENCY)
        failures: list[BaseException] = []

        async def extend(session_id: str) -> bool:
            async with gate:
                try:
                    async with asyncio.timeout(TIMEOUT_S):
                        await services.resume_tokens.extend(session_id, ttl_s=ttl)
                    return True
                except Exception as e:  # rule 2: retried next round
                    failures.append(e)
                    return False

        done = await asyncio.gather(*(extend(sid) for sid in ids))
        if failures:
            log.warning(
                "could not extend %d resume tokens of live sessions (%s); retrying later",
                len(failures),
                type(failures[0]).__name__,
            )
        return sum(done)
