from __future__ import annotations

from runtime.client import RealtimeClient
from runtime.server import RunningServer


async def test_typed_text_gets_spoken_answer(server: RunningServer) -> None:
    async with RealtimeClient(server.ws_url, server.token) as client:
        session = await client.connect()
        assert session["thread_id"].startswith("th_")
        await client.send_text("hello there")
        done = await client.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        assert done["response"]["output_text"] == "Sure. Here is the answer. Anything else?"
        assert client.audio(done["response"]["generation"])
