"""The queue in front of the one local model: bounded, fair across sessions, with deadlines,
and two classes of work — a person's answers first, background work in the pauses.

Theory of operation
-------------------
One model serves every session of the process, one request at a time (on a 2-core CPU two
requests decoded together are no faster than one after the other, and each would wait twice as
long for its first token). Requests wait here until the model is free.

Rule 1. Every request belongs to a *lane* (the voice session that made it, or for background
        work the thread or role it is for). Lanes are served round robin: after a request of
        lane A, the next one comes from the next lane that has work, so one chatty session
        cannot starve the others. Within a lane, first come first served.
Rule 2. Bounded: at most ``max_waiting`` foreground requests wait, at most
        ``max_background_waiting`` background ones (each class has its own room: background
        work waiting for a pause never takes a person's place), at most ``max_per_lane`` per
        lane. ``submit`` beyond a bound raises ``ModelQueueFull`` (retryable) and queues
        nothing.
Rule 3. Every request carries a deadline for *starting*. ``take`` never hands out a request whose
        deadline has passed: it is expired instead (its owner is told, see ``Ticket.expire``),
        and the queue wait of every request handed out is recorded.
Rule 4. A request cancelled while it waits (``cancel``) leaves the queue at once; one cancelled
        after it was taken is the runner's business (it stops generating at the next token).
Rule 5. Two classes (SPEC RT-11). *Foreground* is what a person waits for (an answer, a tool
        judgement a pending call waits on); *background* is everything else (memory
        consolidation, learning, summaries, evals). Each class has its own rotation. ``take``
        hands out a background request only when no foreground request waits and
        ``BackgroundPolicy`` allows it (Rule 6); otherwise it waits, however long it has waited.
Rule 6. A background request may start only when (a) no session is *mid-turn* (``hold``
        from the moment a person starts speaking or typing until their answer is generated;
        a hold lapses after ``hold_max_s`` so a lost ``release`` cannot starve background work
        for ever), (b) no foreground work was seen for ``idle_before_s`` (the gap between a
        typed answer and the next question is not a pause), and (c) while sessions are active
        (any foreground work in the last ``window_s``), background model time in that window is
        below ``share`` of it (``ran`` reports the runner's busy time).
Rule 7. Preemption: a foreground ``submit`` or a ``hold`` calls ``on_foreground`` (outside the
        lock). The runner stops a running background request at its next token or prompt batch
        and puts it back with ``requeue`` (first in its lane, its deadline unchanged, counted
        in ``preempted``): background work restarts from what it stored, it is never lost.
Rule 8. A caller's own bound is on running, not on waiting for a pause: within
        ``bound_runs(timeout, seconds)`` each time the model starts running one of the task's
        requests (a preempted one again) it calls ``model_run_started`` and the ``asyncio``
        timeout restarts ``seconds`` from then; when a run is stopped for a person and put
        back, the client calls ``model_run_stopped`` and the timeout waits
        ``BACKGROUND_WAIT_S`` again. How long background work may wait is the queue's
        business (its start deadline), not its owner's step bound.

The queue is plain data behind one lock: ``now`` is passed in, so tests run it in virtual time.
``take`` may be called from the model's worker thread while the event loop submits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from plugins.errors import PluginError

T = TypeVar("T")


class ModelQueueFull(PluginError):
    code = "model_busy"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


BACKGROUND_WAIT_S = 3600.0
"""How long background work may wait for a pause to start in, by default (an hour of talk)."""

_run_started: ContextVar[tuple[tuple[Callable[[float], None], float], ...]] = ContextVar(
    "model_run_started", default=()
)


@contextlib.contextmanager
def bound_runs(timeout: asyncio.Timeout, seconds: float) -> Iterator[None]:
    """Within the block, ``timeout`` restarts ``seconds`` from each start of a model run of
    this task, and waits ``BACKGROUND_WAIT_S`` again after a run stopped for a person
    (Rule 8)."""
    loop = asyncio.get_running_loop()

    def restart(bound: float) -> None:
        if not timeout.expired():
            with contextlib.suppress(RuntimeError):  # the block is already being left
                timeout.reschedule(loop.time() + bound)

    token = _run_started.set((*_run_started.get(), (restart, seconds)))
    try:
        yield
    finally:
        _run_started.reset(token)


def model_run_started() -> None:
    """The model started running a request of the current task (Rule 8): called by the
    model's client in the task that waits for the request."""
    for restart, seconds in _run_started.get():
        restart(seconds)


def model_run_stopped() -> None:
    """A run of the current task's request was stopped for a person and put back (Rule 8):
    its wait for the next pause is the queue's business, not the run's bound."""
    for restart, _ in _run_started.get():
        restart(BACKGROUND_WAIT_S)


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundPolicy:
    """When background work may use the model (Rule 6)."""

    idle_before_s: float = 3.0
    """Foreground quiet this long before a background request starts: a pause, not the gap
    between an answer and the next question (a prompt batch of background work stopped for a
    person still costs them up to two batches, so background work starts only when one is
    unlikely)."""
    share: float = 0.5
    """The most of the model's time background work may take while sessions are active."""
    window_s: float = 60.0
    """The window the share is measured over (and in which sessions count as active)."""
    hold_max_s: float = 120.0
    """A session's mid-turn hold lapses after this long without a release."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("share must be between 0 and 1")
        if self.idle_before_s < 0 or self.window_s <= 0 or self.hold_max_s <= 0:
            raise ValueError("idle_before_s >= 0, window_s > 0 and hold_max_s > 0")


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
    background: bool = False
    preempted: int = 0
    """How often the runner stopped it for foreground work and put it back (Rule 7)."""

    @property
    def queue_wait(self) -> float | None:
        return None if self.started_at is None else self.started_at - self.enqueued_at


class _Rotation(Generic[T]):
    """One class's lanes in round-robin order (Rule 1)."""

    def __init__(self) -> None:
        self.lanes: dict[str, deque[Ticket[T]]] = {}
        self.order: deque[str] = deque()  # lanes with work, next to serve first
        self.waiting = 0

    def add(self, ticket: Ticket[T], *, first: bool = False) -> None:
        queue = self.lanes.get(ticket.lane)
        if queue is None:
            queue = self.lanes[ticket.lane] = deque()
            if first:
                self.order.appendleft(ticket.lane)
            else:
                self.order.append(ticket.lane)
        if first:
            queue.appendleft(ticket)
        else:
            queue.append(ticket)
        self.waiting += 1

    def pop(self) -> Ticket[T] | None:
        if not self.order:
            return None
        lane = self.order.popleft()
        queue = self.lanes[lane]
        ticket = queue.popleft()
        self.waiting -= 1
        if queue:
            self.order.append(lane)  # the lane goes to the back of the rotation
        else:
            del self.lanes[lane]
        return ticket

    def remove(self, ticket: Ticket[T]) -> None:
        queue = self.lanes.get(ticket.lane)
        if queue is None:
            return
        try:
            queue.remove(ticket)
        except ValueError:
            return
        self.waiting -= 1
        if not queue:
            del self.lanes[ticket.lane]
            self.order.remove(ticket.lane)

    def clear(self) -> list[Ticket[T]]:
        left = [ticket for lane in self.order for ticket in self.lanes[lane]]
        self.lanes.clear()
        self.order.clear()
        self.waiting = 0
        return left


class FairModelQueue(Generic[T]):
    """Round-robin lanes of waiting requests in two classes (see the module's rules)."""

    def __init__(
        self,
        *,
        max_waiting: int = 32,
        max_per_lane: int = 2,
        waits_kept: int = 1024,
        background: BackgroundPolicy | None = None,
        max_background_waiting: int = 256,
    ):
        if max_waiting < 1 or max_per_lane < 1 or max_background_waiting < 1:
            raise ValueError("max_waiting, max_background_waiting, max_per_lane must be >= 1")
        self.max_waiting = max_waiting
        self.max_background_waiting = max_background_waiting
        self.max_per_lane = max_per_lane
        self.policy = background or BackgroundPolicy()
        self._foreground: _Rotation[T] = _Rotation()
        self._background: _Rotation[T] = _Rotation()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self.waits: deque[float] = deque(maxlen=waits_kept)
        """Queue waits (seconds) of the latest foreground requests handed to the model."""
        self.background_waits: deque[float] = deque(maxlen=waits_kept)
        self.waits_behind_background: deque[float] = deque(maxlen=waits_kept)
        """Of each foreground wait, the seconds the model spent on background work meanwhile
        (the preemption's cost: Rule 7 keeps it to a token or a prompt batch)."""
        self.expired = 0
        self.preempted = 0
        """Background requests stopped for foreground work and put back (Rule 7)."""
        self.on_foreground: Callable[[], None] = lambda: None
        """Called (outside the lock) when foreground work arrives: the runner preempts."""
        self._holds: dict[str, float] = {}  # lane → when its hold lapses
        self._last_foreground = -1e18
        self._busy: deque[tuple[float, float, bool]] = deque()  # (start, end, background)
        self._closed = False

    def __len__(self) -> int:
        return self._foreground.waiting + self._background.waiting

    @property
    def foreground_waiting(self) -> int:
        return self._foreground.waiting

    @property
    def background_waiting(self) -> int:
        return self._background.waiting

    def submit(
        self,
        lane: str,
        item: T,
        *,
        now: float,
        deadline: float,
        on_expire: Callable[[], None] = lambda: None,
        background: bool = False,
    ) -> Ticket[T]:
        with self._lock:
            if self._closed:
                raise ModelQueueFull("the local model is shutting down")
            rotation = self._background if background else self._foreground
            queue = rotation.lanes.get(lane)
            bound = self.max_background_waiting if background else self.max_waiting
            if rotation.waiting >= bound:
                kind = "background requests" if background else "requests"
                raise ModelQueueFull(
                    f"local model: {rotation.waiting} {kind} already waiting (at most {bound})"
                )
            if queue is not None and len(queue) >= self.max_per_lane:
                raise ModelQueueFull(
                    f"local model: this session already has {len(queue)} requests waiting"
                )
            ticket = Ticket(lane, item, now, deadline, on_expire, background=background)
            rotation.add(ticket)
            if not background:
                self._last_foreground = now
            self._ready.notify()
        if not background:
            self.on_foreground()
        return ticket

    def requeue(self, ticket: Ticket[T]) -> bool:
        """Put a preempted background ticket back, first in its lane (Rule 7); False when the
        queue is closed (the caller fails it)."""
        with self._lock:
            if self._closed:
                return False
            ticket.state = "waiting"
            ticket.started_at = None
            ticket.preempted += 1
            self.preempted += 1
            self._background.add(ticket, first=True)
            self._ready.notify()
            return True

    def hold(self, lane: str, now: float) -> None:
        """``lane`` is mid-turn: no background work starts until ``release`` (Rule 6)."""
        with self._lock:
            self._holds[lane] = now + self.policy.hold_max_s
            self._last_foreground = now
        self.on_foreground()

    def release(self, lane: str, now: float) -> None:
        with self._lock:
            if self._holds.pop(lane, None) is not None:
                self._last_foreground = now
            self._ready.notify()

    def held(self, now: float) -> int:
        """Sessions mid-turn now."""
        with self._lock:
            return self._held_locked(now)

    def ran(self, start: float, end: float, *, background: bool) -> None:
        """The runner's report of one request's time on the model (Rule 6c)."""
        with self._lock:
            self._busy.append((start, end, background))
            if not background:
                self._last_foreground = max(self._last_foreground, end)
            self._trim(end)
            self._ready.notify()

    def background_share(self, now: float) -> float:
        """The share of the last ``window_s`` the model spent on background work."""
        with self._lock:
            return self._share_locked(now)

    def cancel(self, ticket: Ticket[T]) -> bool:
        """Remove a waiting ticket; False when it was already taken, expired or cancelled."""
        with self._lock:
            if ticket.state != "waiting":
                return False
            ticket.state = "cancelled"
            (self._background if ticket.background else self._foreground).remove(ticket)
            return True

    def take(self, now: float) -> Ticket[T] | None:
        """The next request to run (Rules 1, 5, 6), expiring the late ones (Rule 3); None if
        none may run now."""
        expired: list[Ticket[T]] = []
        try:
            with self._lock:
                return self._take_locked(now, expired)
        finally:
            for ticket in expired:
                ticket.on_expire()

    def wait_and_take(self, clock: Callable[[], float], timeout: float) -> Ticket[T] | None:
        """``take``, blocking up to ``timeout`` seconds for work (the worker thread's call).
        Background work that may not start yet is looked at again every 50 ms."""
        expired: list[Ticket[T]] = []
        try:
            with self._lock:
                if not self._closed:
                    if not len(self):
                        self._ready.wait(timeout)
                    elif not self._foreground.waiting and not self._background_allowed(clock()):
                        self._ready.wait(min(timeout, 0.05))
                return self._take_locked(clock(), expired)
        finally:
            for ticket in expired:
                ticket.on_expire()

    def close(self) -> list[Ticket[T]]:
        """Refuse new work and hand back everything still waiting (the caller fails it)."""
        with self._lock:
            self._closed = True
            left = self._foreground.clear() + self._background.clear()
            for ticket in left:
                ticket.state = "cancelled"
            self._ready.notify_all()
            return left

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------ internals (lock held)

    def _take_locked(self, now: float, expired: list[Ticket[T]]) -> Ticket[T] | None:
        for rotation in (self._foreground, self._background):
            if rotation is self._background and (
                self._foreground.waiting or not self._background_allowed(now)
            ):
                return None
            while (ticket := rotation.pop()) is not None:
                if ticket.deadline < now:
                    ticket.state = "expired"
                    self.expired += 1
                    expired.append(ticket)
                    continue
                ticket.state = "taken"
                ticket.started_at = now
                if ticket.background:
                    self.background_waits.append(now - ticket.enqueued_at)
                else:
                    self.waits.append(now - ticket.enqueued_at)
                    self.waits_behind_background.append(self._background_during(ticket, now))
                return ticket
        return None

    def _held_locked(self, now: float) -> int:
        for lane in [lane for lane, until in self._holds.items() if until < now]:
            del self._holds[lane]  # a hold nobody released lapses (Rule 6a)
        return len(self._holds)

    def _background_allowed(self, now: float) -> bool:
        policy = self.policy
        if self._held_locked(now) or now - self._last_foreground < policy.idle_before_s:
            return False
        active = now - self._last_foreground < policy.window_s
        return not active or self._share_locked(now) < policy.share

    def _background_during(self, ticket: Ticket[T], now: float) -> float:
        start = ticket.enqueued_at
        return sum(
            max(0.0, min(end, now) - max(s, start))
            for s, end, bg in self._busy
            if bg and end > start
        )

    def _share_locked(self, now: float) -> float:
        self._trim(now)
        start = now - self.policy.window_s
        busy = sum(max(0.0, end - max(s, start)) for s, end, bg in self._busy if bg)
        return busy / self.policy.window_s

    def _trim(self, now: float) -> None:
        start = now - self.policy.window_s
        while self._busy and self._busy[0][1] < start:
            self._busy.popleft()
