"""The outbox: seq order, stale audio never sent, ordered queueing behind a blocked write, and the
bounded replay window a resume will draw from."""

from __future__ import annotations

import asyncio
import json

from pipeline import events as ev
from runtime.realtime.outbox import Outbox
from runtime.realtime.protocol import Extensions, decode_audio


class Wire:
    def __init__(self) -> None:
        self.sent: list[str | bytes] = []
        self.gate: asyncio.Event | None = None

    async def text(self, data: str) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(data)

    async def binary(self, data: bytes) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.sent.append(data)

    def seqs(self) -> list[int]:
        return [
            decode_audio(m)[0] if isinstance(m, bytes) else json.loads(m)["seq"] for m in self.sent
        ]


def outbox(wire: Wire, current: set[int], **kw: object) -> Outbox:
    box = Outbox(
        send_text=wire.text,
        send_bytes=wire.binary,
        is_current=current.__contains__,
        max_queued=100,
        **kw,  # type: ignore[arg-type]
    )
    box.extensions = Extensions(binary_audio=True)
    return box


def named(name: str) -> ev.ItemDeleted:
    """A small event whose wire form carries ``name`` (as its item id)."""
    return ev.ItemDeleted(name)


def audio(generation: int, pcm: bytes) -> ev.OutputAudioDelta:
    return ev.OutputAudioDelta("resp", "item", 0, 0, pcm, generation=generation)


async def test_messages_are_numbered_in_send_order_and_stale_audio_is_dropped() -> None:
    wire, current = Wire(), {1}
    box = outbox(wire, current)
    box.send(named("a"))
    box.send(audio(1, b"\x00\x00"))
    box.send(audio(2, b"\x00\x00"))  # not current: never sent, takes no seq
    box.send(named("b"))
    assert wire.seqs() == [1, 2, 3]
    await box.close()


async def test_a_blocked_write_queues_later_messages_in_order() -> None:
    wire, current = Wire(), {1}
    box = outbox(wire, current)
    wire.gate = asyncio.Event()
    box.send(named("first"))
    box.send(audio(1, b"\x01\x00"))
    box.send(named("third"))
    current.discard(1)  # interrupted while queued: its audio must not go out
    wire.gate.set()
    await box.close()
    assert [json.loads(m)["item_id"] for m in wire.sent if isinstance(m, str)] == ["first", "third"]
    assert wire.seqs() == [1, 2]


async def test_replay_window_is_trimmed_by_acks_bytes_and_age() -> None:
    now = [0.0]
    wire = Wire()
    box = outbox(wire, set(), max_replay_bytes=400, max_replay_age_s=10.0, clock=lambda: now[0])
    for i in range(5):
        box.send(named(str(i)))
    replay, missing = box.replay_after(2)
    assert [int(json.loads(m)["item_id"]) for m in replay] == [2, 3, 4]
    assert missing is None
    box.ack(3)
    replay, missing = box.replay_after(1)
    assert [int(json.loads(m)["item_id"]) for m in replay] == [3, 4]
    assert missing == (2, 3)  # acknowledged, so gone: the resume must say so, not pretend
    box.send(named("5" + " " * 300))  # over the byte bound
    replay, missing = box.replay_after(3)
    assert [int(json.loads(m)["item_id"]) for m in replay] == [5]
    assert missing == (4, 5)
    now[0] = 20.0  # older than the age bound
    assert box.replay_after(5) == ([], (6, 6))
    assert box.replay_after(6) == ([], None)  # the client has everything
    assert box.replay_after(0)[1] == (1, 6)
    await box.close()


async def test_messages_after_a_failed_write_are_numbered_and_kept_for_the_resume() -> None:
    wire = Wire()
    box = outbox(wire, {1})
    box.send(named("first"))

    async def broken(data: str) -> None:
        raise ConnectionResetError("gone")

    box._send_text = broken  # the connection breaks under the next write
    for name in ("second", "third", "fourth"):
        box.send(named(name))
    assert box.seq == 4
    replay, missing = box.replay_after(1)
    assert [json.loads(m)["item_id"] for m in replay] == ["second", "third", "fourth"]
    assert missing is None
    await box.close()
