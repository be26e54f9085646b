"""The outbox: seq order, stale audio never sent, ordered queueing behind a blocked write, and the
bounded replay window a resume will draw from."""

from __future__ import annotations

import asyncio
import json

from runtime.outbox import Outbox
from runtime.protocol import decode_audio


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
    return Outbox(
        send_text=wire.text,
        send_bytes=wire.binary,
        is_current=current.__contains__,
        max_queued=100,
        **kw,  # type: ignore[arg-type]
    )


async def test_messages_are_numbered_in_send_order_and_stale_audio_is_dropped() -> None:
    wire, current = Wire(), {1}
    box = outbox(wire, current)
    box.send_event({"type": "a"})
    box.send_audio(1, b"\x00\x00")
    box.send_audio(2, b"\x00\x00")  # not current: never sent, takes no seq
    box.send_event({"type": "b"})
    assert wire.seqs() == [1, 2, 3]
    await box.close()


async def test_a_blocked_write_queues_later_messages_in_order() -> None:
    wire, current = Wire(), {1}
    box = outbox(wire, current)
    wire.gate = asyncio.Event()
    box.send_event({"type": "first"})
    box.send_audio(1, b"\x01\x00")
    box.send_event({"type": "third"})
    current.discard(1)  # interrupted while queued: its audio must not go out
    wire.gate.set()
    await box.close()
    assert [json.loads(m)["type"] for m in wire.sent if isinstance(m, str)] == ["first", "third"]
    assert wire.seqs() == [1, 2]


async def test_replay_window_is_trimmed_by_acks_bytes_and_age() -> None:
    now = [0.0]
    wire = Wire()
    box = outbox(wire, set(), max_replay_bytes=200, max_replay_age_s=10.0, clock=lambda: now[0])
    for i in range(5):
        box.send_event({"type": "e", "i": i})
    replay, missing = box.replay_after(2)
    assert [json.loads(m)["i"] for m in replay] == [2, 3, 4]
    assert missing is None
    box.ack(3)
    replay, missing = box.replay_after(1)
    assert [json.loads(m)["i"] for m in replay] == [3, 4]
    assert missing == (2, 3)  # acknowledged, so gone: the resume must say so, not pretend
    box.send_event({"type": "e", "i": 5, "pad": "x" * 150})  # over the byte bound
    replay, missing = box.replay_after(3)
    assert [json.loads(m)["i"] for m in replay] == [5]
    assert missing == (4, 5)
    now[0] = 20.0  # older than the age bound
    assert box.replay_after(5) == ([], (6, 6))
    assert box.replay_after(6) == ([], None)  # the client has everything
    assert box.replay_after(0)[1] == (1, 6)
    await box.close()
