"""FairModelQueue in virtual time: every call is given ``now``; nothing sleeps."""

from __future__ import annotations

import asyncio
import threading

import pytest

from plugins.brain.model_queue import (
    BACKGROUND_WAIT_S,
    BackgroundPolicy,
    FairModelQueue,
    ModelQueueFull,
    Ticket,
    bound_runs,
    model_run_started,
    model_run_stopped,
)
from plugins.errors import PluginError

FAR = 1_000.0  # a start deadline no test reaches


def drain(queue: FairModelQueue[str], now: float = 0.0) -> list[str]:
    taken: list[str] = []
    while (ticket := queue.take(now)) is not None:
        taken.append(ticket.item)
    return taken


def test_lanes_are_served_round_robin() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_per_lane=3)
    for item in ("a1", "a2", "a3"):
        queue.submit("A", item, now=0.0, deadline=FAR)
    queue.submit("B", "b1", now=0.0, deadline=FAR)

    assert drain(queue) == ["a1", "b1", "a2", "a3"]
    assert len(queue) == 0


def test_a_lane_that_gets_work_again_joins_the_back_of_the_rotation() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.submit("B", "b1", now=0.0, deadline=FAR)
    assert queue.take(0.0).item == "a1"  # type: ignore[union-attr]
    queue.submit("A", "a2", now=1.0, deadline=FAR)
    queue.submit("C", "c1", now=1.0, deadline=FAR)

    assert drain(queue, 1.0) == ["b1", "a2", "c1"]


def test_requests_of_one_lane_are_first_come_first_served() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_per_lane=5)
    for i in range(5):
        queue.submit("A", f"a{i}", now=float(i), deadline=FAR)

    assert drain(queue, 10.0) == [f"a{i}" for i in range(5)]


def test_submit_beyond_max_waiting_is_refused_and_queues_nothing() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_waiting=2, max_per_lane=2)
    queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.submit("B", "b1", now=0.0, deadline=FAR)

    with pytest.raises(ModelQueueFull) as caught:
        queue.submit("C", "c1", now=0.0, deadline=FAR)

    assert caught.value.retryable
    assert isinstance(caught.value, PluginError) and caught.value.code == "model_busy"
    assert len(queue) == 2
    assert drain(queue) == ["a1", "b1"]


def test_submit_beyond_max_per_lane_is_refused_but_other_lanes_still_get_in() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_waiting=10, max_per_lane=2)
    queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.submit("A", "a2", now=0.0, deadline=FAR)

    with pytest.raises(ModelQueueFull) as caught:
        queue.submit("A", "a3", now=0.0, deadline=FAR)
    assert caught.value.retryable
    assert len(queue) == 2

    queue.submit("B", "b1", now=0.0, deadline=FAR)
    assert drain(queue) == ["a1", "b1", "a2"]


def test_a_lane_has_room_again_once_its_request_is_taken() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_per_lane=1)
    queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.take(0.0)

    queue.submit("A", "a2", now=1.0, deadline=FAR)
    assert drain(queue, 1.0) == ["a2"]


def test_bounds_below_one_are_rejected() -> None:
    with pytest.raises(ValueError):
        FairModelQueue(max_waiting=0)
    with pytest.raises(ValueError):
        FairModelQueue(max_per_lane=0)


def test_take_skips_expired_tickets_and_tells_their_owners() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    told: list[str] = []
    late = queue.submit("A", "late", now=0.0, deadline=5.0, on_expire=lambda: told.append("A"))
    queue.submit("B", "on time", now=0.0, deadline=20.0, on_expire=lambda: told.append("B"))

    ticket = queue.take(10.0)

    assert ticket is not None and ticket.item == "on time"
    assert told == ["A"]
    assert late.state == "expired"
    assert queue.expired == 1
    assert list(queue.waits) == [10.0]  # only the ticket handed out is a recorded wait
    assert len(queue) == 0


def test_a_ticket_at_exactly_its_deadline_still_starts() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    queue.submit("A", "a1", now=0.0, deadline=5.0)

    ticket = queue.take(5.0)

    assert ticket is not None and ticket.state == "taken"


def test_take_returns_none_when_every_ticket_has_expired() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    told: list[str] = []
    queue.submit("A", "a1", now=0.0, deadline=1.0, on_expire=lambda: told.append("a1"))
    queue.submit("A", "a2", now=0.0, deadline=2.0, on_expire=lambda: told.append("a2"))

    assert queue.take(3.0) is None
    assert told == ["a1", "a2"]
    assert queue.expired == 2


def test_on_expire_runs_outside_the_lock() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    seen: list[Ticket[str]] = []
    # A callback that re-enters the queue would deadlock if it ran with the lock held.
    queue.submit(
        "A",
        "late",
        now=0.0,
        deadline=1.0,
        on_expire=lambda: seen.append(queue.submit("A", "again", now=2.0, deadline=FAR)),
    )

    assert queue.take(2.0) is None
    assert [t.item for t in seen] == ["again"]
    assert drain(queue, 2.0) == ["again"]


def test_cancel_removes_a_waiting_ticket() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    a1 = queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.submit("B", "b1", now=0.0, deadline=FAR)

    assert queue.cancel(a1) is True

    assert a1.state == "cancelled"
    assert len(queue) == 1
    assert drain(queue) == ["b1"]


def test_cancel_keeps_the_rest_of_the_lane_in_order() -> None:
    queue: FairModelQueue[str] = FairModelQueue(max_per_lane=3)
    queue.submit("A", "a1", now=0.0, deadline=FAR)
    a2 = queue.submit("A", "a2", now=0.0, deadline=FAR)
    queue.submit("A", "a3", now=0.0, deadline=FAR)

    queue.cancel(a2)

    assert drain(queue) == ["a1", "a3"]


def test_cancel_is_false_for_a_taken_expired_or_cancelled_ticket() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    taken = queue.submit("A", "taken", now=0.0, deadline=FAR)
    assert queue.take(0.0) is taken
    late = queue.submit("A", "late", now=0.0, deadline=1.0)
    assert queue.take(2.0) is None
    gone = queue.submit("B", "gone", now=0.0, deadline=FAR)
    assert queue.cancel(gone)

    assert queue.cancel(taken) is False
    assert taken.state == "taken"
    assert queue.cancel(late) is False
    assert queue.cancel(gone) is False
    assert len(queue) == 0


def test_queue_waits_are_recorded_for_every_ticket_handed_out() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    first = queue.submit("A", "a1", now=1.0, deadline=FAR)
    second = queue.submit("B", "b1", now=2.0, deadline=FAR)

    queue.take(1.5)
    queue.take(4.0)

    assert first.started_at == 1.5 and first.queue_wait == 0.5
    assert second.queue_wait == 2.0
    assert list(queue.waits) == [0.5, 2.0]


def test_a_waiting_ticket_has_no_queue_wait_yet() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    ticket = queue.submit("A", "a1", now=1.0, deadline=FAR)

    assert ticket.queue_wait is None and ticket.started_at is None


def test_recorded_waits_are_bounded() -> None:
    queue: FairModelQueue[str] = FairModelQueue(waits_kept=3)
    for i in range(5):
        queue.submit("A", f"a{i}", now=0.0, deadline=FAR)
        queue.take(float(i))

    assert list(queue.waits) == [2.0, 3.0, 4.0]


def test_close_hands_back_the_waiting_tickets_and_refuses_new_ones() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    a1 = queue.submit("A", "a1", now=0.0, deadline=FAR)
    queue.submit("B", "b1", now=0.0, deadline=FAR)
    a2 = queue.submit("A", "a2", now=0.0, deadline=FAR)
    queue.take(0.0)  # a1 is running: not handed back

    left = queue.close()

    assert sorted(t.item for t in left) == ["a2", "b1"]
    assert all(t.state == "cancelled" for t in left)
    assert a1.state == "taken" and a2 in left
    assert queue.closed and len(queue) == 0
    assert queue.take(0.0) is None
    with pytest.raises(ModelQueueFull) as caught:
        queue.submit("C", "c1", now=0.0, deadline=FAR)
    assert caught.value.retryable
    assert queue.cancel(a2) is False


def test_wait_and_take_returns_none_on_timeout() -> None:
    queue: FairModelQueue[str] = FairModelQueue()

    assert queue.wait_and_take(lambda: 0.0, timeout=0.01) is None


def test_wait_and_take_returns_at_once_when_work_is_waiting() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    queue.submit("A", "a1", now=0.0, deadline=FAR)

    ticket = queue.wait_and_take(lambda: 3.0, timeout=60.0)

    assert ticket is not None and ticket.item == "a1" and ticket.queue_wait == 3.0


def test_wait_and_take_expires_late_tickets_by_the_clock_it_is_given() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    told: list[str] = []
    queue.submit("A", "a1", now=0.0, deadline=1.0, on_expire=lambda: told.append("a1"))

    assert queue.wait_and_take(lambda: 2.0, timeout=60.0) is None
    assert told == ["a1"]


def test_wait_and_take_wakes_when_work_is_submitted_from_another_thread() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    result: list[Ticket[str] | None] = []
    worker = threading.Thread(target=lambda: result.append(queue.wait_and_take(lambda: 0.0, 10.0)))
    worker.start()
    try:
        queue.submit("A", "a1", now=0.0, deadline=FAR)
    finally:
        worker.join(5.0)

    assert not worker.is_alive()
    # The worker either was already waiting (woken by submit) or started after it (work found).
    assert [t.item for t in result if t is not None] == ["a1"]


def test_close_wakes_a_waiting_worker() -> None:
    queue: FairModelQueue[str] = FairModelQueue()
    result: list[Ticket[str] | None] = []
    worker = threading.Thread(target=lambda: result.append(queue.wait_and_take(lambda: 0.0, 10.0)))
    worker.start()
    queue.close()
    worker.join(5.0)

    assert not worker.is_alive()
    assert result == [None]


# ---------------------------------------------------------------- two classes (Rules 5–7)

IDLE = BackgroundPolicy(idle_before_s=1.0, share=0.25, window_s=100.0, hold_max_s=30.0)


def test_foreground_is_taken_before_background_whatever_came_first() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    queue.submit("t", "learn", now=0.0, deadline=FAR, background=True)
    queue.submit("A", "answer", now=5.0, deadline=FAR)

    assert queue.take(5.0).item == "answer"  # type: ignore[union-attr]
    assert queue.take(5.0) is None  # foreground was just seen: no pause yet
    assert queue.take(6.0).item == "learn"  # type: ignore[union-attr]
    assert list(queue.waits) == [0.0] and list(queue.background_waits) == [6.0]


def test_background_waits_for_every_hold_to_be_released_or_to_lapse() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    queue.hold("A", now=0.0)
    queue.hold("B", now=0.0)
    queue.submit("t", "learn", now=0.0, deadline=FAR, background=True)

    queue.release("A", now=2.0)
    assert queue.take(10.0) is None and queue.held(10.0) == 1
    assert queue.take(31.0) is not None  # B's hold lapsed (a lost release starves nothing)


def test_background_may_not_pass_its_share_while_sessions_are_active() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    queue.ran(0.0, 10.0, background=False)
    queue.ran(10.0, 35.0, background=True)  # 25 of the last 100 s
    queue.submit("t", "learn", now=40.0, deadline=FAR, background=True)

    assert queue.background_share(40.0) == pytest.approx(0.25)
    assert queue.take(40.0) is None
    # No foreground work for a whole window: nobody is active, the cap no longer applies.
    assert queue.take(111.0) is not None


def test_foreground_work_and_holds_call_on_foreground_and_background_does_not() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    calls: list[str] = []
    queue.on_foreground = lambda: calls.append("preempt")

    queue.submit("t", "learn", now=0.0, deadline=FAR, background=True)
    assert calls == []
    queue.submit("A", "answer", now=0.0, deadline=FAR)
    queue.hold("B", now=0.0)
    assert calls == ["preempt", "preempt"]


def test_a_requeued_background_ticket_is_first_again_with_its_deadline() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE, max_per_lane=3)
    first = queue.submit("t", "one", now=0.0, deadline=50.0, background=True)
    queue.submit("t", "two", now=0.0, deadline=FAR, background=True)
    assert queue.take(2.0) is first

    assert queue.requeue(first)
    assert first.state == "waiting" and first.preempted == 1 and queue.preempted == 1
    assert [t.item for t in iter(lambda: queue.take(3.0), None)] == ["one", "two"]
    queue.submit("t", "late", now=0.0, deadline=50.0, background=True)
    assert queue.take(60.0) is None and queue.expired == 1


def test_a_closed_queue_takes_no_requeued_ticket() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    ticket = queue.submit("t", "one", now=0.0, deadline=FAR, background=True)
    assert queue.take(2.0) is ticket
    queue.close()

    assert queue.requeue(ticket) is False


def test_policy_bounds_are_checked() -> None:
    with pytest.raises(ValueError):
        BackgroundPolicy(share=1.5)
    with pytest.raises(ValueError):
        BackgroundPolicy(window_s=0)


def test_the_part_of_a_foreground_wait_spent_on_background_work_is_recorded() -> None:
    queue: FairModelQueue[str] = FairModelQueue(background=IDLE)
    queue.ran(0.0, 10.0, background=True)  # a background job running when the answer came
    queue.submit("A", "answer", now=9.8, deadline=FAR)
    queue.ran(10.0, 10.5, background=False)  # then another session's answer

    assert queue.take(10.5) is not None
    assert list(queue.waits) == [pytest.approx(0.7)]
    assert list(queue.waits_behind_background) == [pytest.approx(0.2)]


def test_background_work_waiting_for_a_pause_never_takes_a_persons_place() -> None:
    queue: FairModelQueue[str] = FairModelQueue(
        background=IDLE, max_waiting=2, max_background_waiting=3
    )
    for thread in ("t1", "t2", "t3"):
        queue.submit(thread, "learn", now=0.0, deadline=FAR, background=True)
    with pytest.raises(ModelQueueFull):
        queue.submit("t4", "learn", now=0.0, deadline=FAR, background=True)

    queue.submit("A", "answer", now=0.0, deadline=FAR)
    queue.submit("B", "answer", now=0.0, deadline=FAR)  # both people fit beside the learning
    with pytest.raises(ModelQueueFull):
        queue.submit("C", "answer", now=0.0, deadline=FAR)
    assert (queue.foreground_waiting, queue.background_waiting, len(queue)) == (2, 3, 5)


# ---------------------------------------------------------------- Rule 8: run bounds


async def test_a_run_bound_restarts_when_the_model_starts_and_only_inside_its_block() -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as outer, asyncio.timeout(None) as inner:
        with bound_runs(outer, 60.0):
            with bound_runs(inner, 5.0):
                before = loop.time()
                model_run_started()
                inner_when, outer_when = inner.when(), outer.when()
                assert inner_when is not None and inner_when >= before + 5.0
                assert outer_when is not None and outer_when >= before + 60.0
            model_run_started()  # the inner block is left: only the outer bound restarts
            assert inner.when() == inner_when
            assert (outer.when() or 0.0) >= outer_when
        outer.reschedule(None)
        model_run_started()  # outside every block: nothing restarts
        assert outer.when() is None
        await asyncio.sleep(0)


async def test_a_wait_longer_than_the_run_bound_does_not_time_out_a_started_run() -> None:
    async with asyncio.timeout(0.2) as bound:
        with bound_runs(bound, 0.05):
            await asyncio.sleep(0.1)  # waiting for a pause
            model_run_started()
            await asyncio.sleep(0.01)  # running, within its bound
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2) as bound:
            with bound_runs(bound, 0.05):
                model_run_started()
                await asyncio.sleep(1.0)  # running past its bound


async def test_a_run_stopped_for_a_person_waits_for_the_next_pause_unbounded_by_the_run() -> None:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(None) as bound:
        with bound_runs(bound, 5.0):
            model_run_started()
            model_run_stopped()  # preempted and put back: waiting again, not running
            waiting = bound.when()
            assert waiting is not None and waiting >= loop.time() + BACKGROUND_WAIT_S - 1
            model_run_started()  # the next pause: the run's own bound again
            running = bound.when()
            assert running is not None and running <= loop.time() + 5.0
        bound.reschedule(None)
        await asyncio.sleep(0)
