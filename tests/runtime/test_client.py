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


async def test_skip_through_leaves_an_old_answer_unread_so_the_next_wait_gets_the_new_one(
    server: RunningServer,
) -> None:
    """What a client does after a resume's reconcile: the old stream's unread messages (up to
    the reconcile's ``from_seq - 1``) are skipped, so an old ``response.done`` is not taken
    for the answer to the next request."""
    async with RealtimeClient(server.ws_url, server.token) as client:
        await client.connect()
        await client.send_text("hello")
        for _ in range(1000):  # until the answer has arrived (not consumed)
            if client.events("response.done"):
                break
            await asyncio.sleep(0.01)
        old = client.events("response.done")[0]
        through = old["seq"]
        unread = sum(1 for m in client.messages if 1 < m.seq <= through)  # after session.created
        assert await client.skip_through(through) == unread
        assert await client.skip_through(through) == 0
        await client.send_text("again")
        done = await client.wait_type("response.done")
        assert done["response"]["id"] != old["response"]["id"]
        assert done["seq"] > through
