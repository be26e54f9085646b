"""The queue in front of the one local model: bounded, fair across sessions, with deadlines.

Theory of operation
-------------------
One model serves every session of the process, one request at a time (on a 2-core CPU two
requests decoded together are no faster than one after the other, and each would wait twice as
long for its first token). Requests wait here until the model is free.

Rule 1. Every request belongs to a *lane* (the voice session that made it). Lanes are served
        round robin: after a request of lane A, the next one comes from the next lane that has
        work, so one chatty session cannot starve the others. Within a lane, first come first
        served.
Rule 2. Bounded: at most ``max_waiting`` requests wait in all, at most ``max_per_lane`` per lane.
        ``submit`` beyond either bound raises ``ModelQueueFull`` (retryable) and queues nothing.
Rule 3. Every request carries a deadline for *starting*. ``take`` never hands out a request whose
        deadline has passed: it is expired instead (its owner is told, see ``Ticket.expire``),
        and the queue wait of every request handed out is recorded.
Rule 4. A request cancelled while it waits (``cancel``) leaves the queue at once; one cancelled
        after it was taken is the runner's business (it stops generating at the next token).

The queue is plain data behind one lock: ``now`` is passed in, so tests run it in virtual time.
``take`` may be called from the model's worker thread while the event loop submits.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from plugins.errors import PluginError

T = TypeVar("T")


class ModelQueueFull(PluginError):
    code = "model_busy"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


@dataclass(eq=False)
class Ticket(Generic[T]):
    """One waiting request. ``on_expire`` is called (outside the lock) when its start deadline
    passes before the model was free."""

    lane: str
    item: T
    enqueued_at: float
    deadline: float
    on_expire: Callable[[], None] = lambda: None
    started_at: float | None = None
    state: str = field(default="waiting")  # waiting | taken | expired | cancelled

    @property
    def queue_wait(self) -> float | None:
        return None if self.started_at is None else self.started_at - self.enqueued_at


class FairModelQueue(Generic[T]):
    """Round-robin lanes of waiting requests (see the module's rules)."""

    def __init__(self, *, max_waiting: int = 32, max_per_lane: int = 2, waits_kept: int = 1024):
        if max_waiting < 1 or max_per_lane < 1:
            raise ValueError("max_waiting and max_per_lane must be at least 1")
        self.max_waiting = max_waiting
        self.max_per_lane = max_per_lane
        self._lanes: dict[str, deque[Ticket[T]]] = {}
        self._order: deque[str] = deque()  # lanes with work, next to serve first
        self._waiting = 0
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self.waits: deque[float] = deque(maxlen=waits_kept)
        """Queue waits (seconds) of the latest requests handed to the model."""
        self.expired = 0
        self._closed = False

    def __len__(self) -> int:
        return self._waiting

    def submit(
        self,
        lane: str,
        item: T,
        *,
        now: float,
        deadline: float,
        on_expire: Callable[[], None] = lambda: None,
    ) -> Ticket[T]:
        with self._lock:
            if self._closed:
                raise ModelQueueFull("the local model is shutting down")
            queue = self._lanes.get(lane)
            if self._waiting >= self.max_waiting:
                raise ModelQueueFull(
                    f"local model: {self._waiting} requests already waiting (at most "
                    f"{self.max_waiting})"
                )
            if queue is not None and len(queue) >= self.max_per_lane:
                raise ModelQueueFull(
                    f"local model: this session already has {len(queue)} requests waiting"
                )
            ticket = Ticket(lane, item, now, deadline, on_expire)
            if queue is None:
                queue = self._lanes[lane] = deque()
                self._order.append(lane)
            queue.append(ticket)
            self._waiting += 1
            self._ready.notify()
            return ticket

    def cancel(self, ticket: Ticket[T]) -> bool:
        """Remove a waiting ticket; False when it was already taken, expired or cancelled."""
        with self._lock:
            if ticket.state != "waiting":
                return False
            ticket.state = "cancelled"
            self._remove(ticket)
            return True

    def take(self, now: float) -> Ticket[T] | None:
        """The next request to run (Rule 1), expiring the late ones (Rule 3); None if none."""
        expired: list[Ticket[T]] = []
        try:
            with self._lock:
                return self._take_locked(now, expired)
        finally:
            for ticket in expired:
                ticket.on_expire()

    def wait_and_take(self, clock: Callable[[], float], timeout: float) -> Ticket[T] | None:
        """``take``, blocking up to ``timeout`` seconds for work (the worker thread's call)."""
        expired: list[Ticket[T]] = []
        try:
            with self._lock:
                if not self._waiting and not self._closed:
                    self._ready.wait(timeout)
                return self._take_locked(clock(), expired)
        finally:
            for ticket in expired:
                ticket.on_expire()

    def close(self) -> list[Ticket[T]]:
        """Refuse new work and hand back everything still waiting (the caller fails it)."""
        with self._lock:
            self._closed = True
            left = [ticket for lane in self._order for ticket in self._lanes[lane]]
            for ticket in left:
                ticket.state = "cancelled"
            self._lanes.clear()
            self._order.clear()
            self._waiting = 0
            self._ready.notify_all()
            return left

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ internals (lock held)

    def _take_locked(self, now: float, expired: list[Ticket[T]]) -> Ticket[T] | None:
        while self._order:
            lane = self._order.popleft()
            queue = self._lanes[lane]
            ticket = queue.popleft()
            self._waiting -= 1
            if queue:
                self._order.append(lane)  # the lane goes to the back of the rotation
            else:
                del self._lanes[lane]
            if ticket.deadline < now:
                ticket.state = "expired"
                self.expired += 1
                expired.append(ticket)
                continue
            ticket.state = "taken"
            ticket.started_at = now
            self.waits.append(now - ticket.enqueued_at)
            return ticket
        return None

    def _remove(self, ticket: Ticket[T]) -> None:
        queue = self._lanes.get(ticket.lane)
        if queue is None:
            return
        try:
            queue.remove(ticket)
        except ValueError:
            return
        self._waiting -= 1
        if not queue:
            del self._lanes[ticket.lane]
            self._order.remove(ticket.lane)
