"""Pacing a response's audio to the client.

Theory of operation
-------------------
Audio arrives in frames of ``frame_ms``. The pacer sends it in order, at most ``lead_ms`` ahead of
real-time playback (measured from the first frame sent). Whatever may go now is sent on the
caller's stack — the first frame alone, at once — and audio beyond the lead waits in a queue that
a drain task (in the response's TaskGroup, so it is cancelled with the response) sends as real
time catches up, in messages of up to ``message_ms``: a long answer costs one wake-up and one
write per message rather than per frame. Once the response is no longer current nothing more is
sent. A paused pacer (a held answer) sends nothing and keeps its queue; ``resume`` sends on from
there, paced against the tracker's re-anchored playback.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import numpy as np

from pipeline.audio import PCM
from pipeline.playout import PlayoutTracker


class Pacer:
    def __init__(
        self,
        *,
        tracker: PlayoutTracker,
        clock: Callable[[], float],
        group: asyncio.TaskGroup,
        is_current: Callable[[], bool],
        send: Callable[[PCM, float], None],
        lead_ms: float,
        frame_ms: int,
        message_ms: int,
    ) -> None:
        self.tracker = tracker
        self.clock = clock
        self.group = group
        self.is_current = is_current
        self.send = send
        self.lead_ms = lead_ms
        self.frame_ms = frame_ms
        self.per_message = max(1, message_ms // frame_ms)
        self.queue: deque[PCM] = deque()
        self.drain: asyncio.Task[None] | None = None
        self.room = asyncio.Event()
        self.paused = False
        self._resumed = asyncio.Event()

    @property
    def backlog(self) -> int:
        return len(self.queue)

    def push(self, frame: PCM) -> None:
        self.queue.append(frame)
        if self.drain is None:
            self._pump()
            if self.queue:
                self.drain = self.group.create_task(self._drain())

    async def wait_for_room(self, backlog: int) -> None:
        while len(self.queue) > backlog:
            self.room.clear()
            await self.room.wait()

    async def finish(self) -> None:
        if self.drain is not None:
            await self.drain

    def pause(self) -> None:
        self.paused = True
        self._resumed.clear()

    def resume(self) -> None:
        """Send on after a pause (the tracker was re-anchored first)."""
        if not self.paused:
            return
        self.paused = False
        self._resumed.set()
        if self.drain is None:
            self._pump()

    def _ahead_ms(self, now: float) -> float:
        ahead = self.tracker.ahead_ms(now)
        return -self.lead_ms if ahead is None else ahead

    def _pump(self) -> None:
        queue = self.queue
        while queue and not self.paused:
            now = self.clock()
            ahead = self._ahead_ms(now)
            if ahead > self.lead_ms:
                break
            if self.tracker.first_sent_at is None:
                count = 1
            else:
                # The epsilon keeps an exact deadline (virtual time) from losing a frame to
                # float rounding (79.99999 // 40 == 1).
                fits = 1 + int((self.lead_ms - ahead + 1e-6) // self.frame_ms)
                count = min(len(queue), self.per_message, fits)
            frames = [queue.popleft() for _ in range(count)]
            if not self.is_current():
                queue.clear()
                break
            self.send(frames[0] if count == 1 else np.concatenate(frames), now)
        self.room.set()

    async def _drain(self) -> None:
        # Wake when a whole message fits again, but never later than the lead allows: a
        # message longer than the lead must not let playback run dry.
        refill_at = max(0.0, self.lead_ms - (self.per_message - 1) * self.frame_ms)
        try:
            while self.queue:
                if self.paused:
                    await self._resumed.wait()
                    continue
                wait_ms = self._ahead_ms(self.clock()) - refill_at
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000.0)
                self._pump()
        finally:
            self.drain = None
