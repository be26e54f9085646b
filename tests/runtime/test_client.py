"""``RealtimeClient`` options its long-lived users rely on, against the real server."""

from __future__ import annotations

import asyncio

from runtime.client import RealtimeClient
from runtime.server import RunningServer


async def test_a_bounded_client_holds_few_messages_and_hands_over_every_one_in_order(
    server: RunningServer,
) -> None:
    async with RealtimeClient(server.ws_url, server.token, max_messages=4) as client:
        await client.connect()
        await client.send_text("hello")
        seqs: list[int] = []
        while True:
            message = await client.next_message()
            seqs.append(message.seq)
            assert len(client.messages) <= 4
            if message.type == "response.done":
                break
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # none lost, none twice
    assert len(seqs) > 8


async def test_a_bounded_client_closes_while_its_reader_waits_for_room(
    server: RunningServer,
) -> None:
    client = RealtimeClient(server.ws_url, server.token, max_messages=2)
    await client.connect()
    await client.send_text("hello")  # many messages, none consumed: the reader waits
    await asyncio.sleep(0.3)
    assert len(client.messages) == 2
    await asyncio.wait_for(client.close(), 5)
