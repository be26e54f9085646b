"""The Pacer (``pipeline/pacer.py``) in virtual time: order, the first frame at once, at most
``lead_ms`` ahead of real-time playback, messages of up to ``message_ms``, nothing once the
response is no longer current, and the drain task living and dying with the response's group.

The pacer's clock is the loop's (virtual) clock, as its drain sleeps on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest

from pipeline.audio import PCM
from pipeline.pacer import Pacer
from pipeline.playout import PlayoutTracker
from tests.virtual_time import in_virtual_time

RATE = 24_000
EPS = 1e-6
"""Milliseconds of float slack when comparing computed playback positions."""


@dataclass
class Message:
    at: float
    frames: list[int]


@dataclass
class Client:
    """The receiving end: which frames arrived when (frame ``k`` holds the value ``k``)."""

    frame_ms: int
    tracker: PlayoutTracker = field(default_factory=PlayoutTracker)
    messages: list[Message] = field(default_factory=list)

    @property
    def samples_per_frame(self) -> int:
        return RATE * self.frame_ms // 1000

    def frame(self, k: int) -> PCM:
        return np.full(self.samples_per_frame, k, dtype=np.int16)

    def receive(self, pcm: PCM, now: float) -> None:
        # What the engine's send_frame does for the pacer: write, then tell the tracker.
        frames = [int(v) for v in pcm.reshape(-1, self.samples_per_frame)[:, 0]]
        self.messages.append(Message(now, frames))
        self.tracker.on_sent(pcm.size * 1000 / RATE, now)

    @property
    def frames(self) -> list[int]:
        return [k for m in self.messages for k in m.frames]

    @property
    def started(self) -> float:
        return self.messages[0].at

    def ahead_ms(self) -> list[float]:
        """For every frame: how far its start was ahead of real-time playback when sent."""
        return [
            k * self.frame_ms - (m.at - self.started) * 1000.0
            for m in self.messages
            for k in m.frames
        ]


@asynccontextmanager
async def pacing(
    *,
    lead_ms: float = 100.0,
    frame_ms: int = 20,
    message_ms: int = 60,
    is_current: Callable[[], bool] = lambda: True,
) -> AsyncIterator[tuple[Pacer, Client]]:
    client = Client(frame_ms)
    loop = asyncio.get_running_loop()
    async with asyncio.TaskGroup() as group:
        pacer = Pacer(
            tracker=client.tracker,
            clock=loop.time,
            group=group,
            is_current=is_current,
            send=client.receive,
            lead_ms=lead_ms,
            frame_ms=frame_ms,
            message_ms=message_ms,
        )
        yield pacer, client


@in_virtual_time
async def test_the_first_frame_goes_alone_at_once_on_the_callers_stack() -> None:
    async with pacing() as (pacer, client):
        pacer.push(client.frame(0))
        # No await in between: sent from push itself, one frame alone.
        assert client.messages == [Message(0.0, [0])]
        assert pacer.drain is None and pacer.backlog == 0


@in_virtual_time
async def test_what_fits_in_the_lead_is_sent_at_once_and_the_rest_waits() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20) as (pacer, client):
        for k in range(20):
            pacer.push(client.frame(k))
        # Frames 0..5 start at most 100 ms ahead (frame 5 starts at 100 ms): sent from push.
        assert client.frames == [0, 1, 2, 3, 4, 5]
        assert all(m.at == 0.0 for m in client.messages)
        assert pacer.backlog == 14 and pacer.drain is not None
        await pacer.finish()
        assert pacer.backlog == 0 and pacer.drain is None


@pytest.mark.parametrize(
    ("lead_ms", "frame_ms", "message_ms"),
    [(100.0, 20, 60), (300.0, 40, 120), (250.0, 20, 100), (60.0, 20, 20), (100.0, 20, 5)],
)
@in_virtual_time
async def test_every_frame_goes_once_in_order_never_more_than_lead_ms_ahead_nor_late(
    lead_ms: float, frame_ms: int, message_ms: int
) -> None:
    async with pacing(lead_ms=lead_ms, frame_ms=frame_ms, message_ms=message_ms) as (
        pacer,
        client,
    ):
        for k in range(60):
            pacer.push(client.frame(k))
        await pacer.finish()
    assert client.frames == list(range(60))
    ahead = client.ahead_ms()
    assert max(ahead) <= lead_ms + EPS
    # Never late: each frame arrives before real-time playback reaches it.
    assert min(ahead) >= -EPS
    per_message = max(1, message_ms // frame_ms)
    assert max(len(m.frames) for m in client.messages) <= per_message


@in_virtual_time
async def test_beyond_the_lead_frames_go_in_messages_of_message_ms_one_wake_up_each() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20, message_ms=60) as (pacer, client):
        for k in range(24):
            pacer.push(client.frame(k))
        await pacer.finish()
    drained = client.messages[6:]
    assert [m.frames for m in drained] == [list(range(k, k + 3)) for k in range(6, 24, 3)]
    # Each goes as soon as its last frame fits in the lead: every 60 ms.
    assert [round((m.at - client.started) * 1000.0, 6) for m in drained] == [
        60.0 * n for n in range(1, 7)
    ]


@in_virtual_time
async def test_with_the_engine_defaults_every_drained_message_is_full() -> None:
    async with pacing(lead_ms=300.0, frame_ms=40, message_ms=120) as (pacer, client):
        for k in range(29):
            pacer.push(client.frame(k))
        await pacer.finish()
    drained = client.messages[8:]  # frames 0..7 fit in the lead at once
    assert [len(m.frames) for m in drained] == [3] * 7


@in_virtual_time
async def test_a_message_longer_than_the_lead_still_never_lets_playback_run_dry() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20, message_ms=200) as (pacer, client):
        for k in range(30):
            pacer.push(client.frame(k))
        await pacer.finish()
    assert client.frames == list(range(30))
    assert min(client.ahead_ms()) >= -EPS


@in_virtual_time
async def test_frames_pushed_while_draining_follow_in_order() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20, message_ms=60) as (pacer, client):
        # A synthesiser twice as fast as real time, in chunks of 4 frames.
        for chunk in range(10):
            for k in range(chunk * 4, chunk * 4 + 4):
                pacer.push(client.frame(k))
            await asyncio.sleep(0.04)
        await pacer.finish()
    assert client.frames == list(range(40))
    ahead = client.ahead_ms()
    assert max(ahead) <= 100.0 + EPS and min(ahead) >= -EPS


@in_virtual_time
async def test_a_single_frame_message_when_message_ms_is_below_a_frame() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20, message_ms=5) as (pacer, client):
        for k in range(15):
            pacer.push(client.frame(k))
        await pacer.finish()
    assert [m.frames for m in client.messages] == [[k] for k in range(15)]


@in_virtual_time
async def test_nothing_is_sent_once_the_response_is_no_longer_current() -> None:
    current = True
    async with pacing(is_current=lambda: current) as (pacer, client):
        for k in range(30):
            pacer.push(client.frame(k))
        await asyncio.sleep(0.1)
        sent = list(client.frames)
        assert pacer.backlog > 0
        current = False
        await pacer.finish()  # the drain wakes, finds the response stale, stops
        assert client.frames == sent
        assert pacer.backlog == 0 and pacer.drain is None
        pacer.push(client.frame(99))  # late audio of the stale response
        assert client.frames == sent and pacer.backlog == 0


@in_virtual_time
async def test_a_stale_response_sends_not_even_its_first_frame() -> None:
    async with pacing(is_current=lambda: False) as (pacer, client):
        pacer.push(client.frame(0))
        assert client.messages == [] and pacer.backlog == 0 and pacer.drain is None


@in_virtual_time
async def test_the_drain_is_cancelled_with_the_responses_task_group() -> None:
    class Interrupted(Exception):
        pass

    loop = asyncio.get_running_loop()
    client = Client(20)
    drain: asyncio.Task[None] | None = None
    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as group:
            pacer = Pacer(
                tracker=client.tracker,
                clock=loop.time,
                group=group,
                is_current=lambda: True,
                send=client.receive,
                lead_ms=100.0,
                frame_ms=20,
                message_ms=60,
            )
            for k in range(40):
                pacer.push(client.frame(k))
            drain = pacer.drain
            await asyncio.sleep(0.1)
            raise Interrupted
    assert caught.group_contains(Interrupted)
    assert drain is not None and drain.cancelled()
    sent = list(client.frames)
    await asyncio.sleep(1.0)
    assert client.frames == sent and sent == list(range(len(sent))) and len(sent) < 40
    assert pacer.drain is None


@in_virtual_time
async def test_wait_for_room_returns_once_the_backlog_is_down_to_the_limit() -> None:
    async with pacing(lead_ms=100.0, frame_ms=20, message_ms=60) as (pacer, client):
        loop = asyncio.get_running_loop()
        for k in range(36):
            pacer.push(client.frame(k))
        assert pacer.backlog == 30
        await pacer.wait_for_room(10)
        # 20 frames drained in messages of 3: the 7th message (t = 420 ms) gets it to 9.
        assert pacer.backlog == 9
        assert loop.time() == pytest.approx(0.42)
        await pacer.wait_for_room(100)  # already room: returns at once
        assert loop.time() == pytest.approx(0.42)
        await pacer.finish()


@in_virtual_time
async def test_finish_without_a_backlog_returns_at_once() -> None:
    async with pacing() as (pacer, client):
        loop = asyncio.get_running_loop()
        pacer.push(client.frame(0))
        await pacer.finish()
        assert loop.time() == 0.0 and client.frames == [0]
