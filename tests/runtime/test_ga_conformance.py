"""GA conformance: a scripted conversation over a real socket — text, audio in and out, a
function call, a barge-in with truncate, a deleted item and an error — where every server event
validates strictly against the installed ``openai`` package's ``RealtimeServerEvent``."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

from journal.events import EventKind, ThreadRef
from plugins.fakes import FakeASR, FakeTTS
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.runtime.conftest import fake_plugins
from tests.runtime.ga import WEATHER_TOOL, FunctionBrain, strict

RATE = 24_000
FRAME = RATE // 50  # 20 ms


def tone(ms: int) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16).tobytes()


def silence(ms: int) -> bytes:
    return b"\x00\x00" * (RATE * ms // 1000)


class GAConnection:
    """A raw GA client: records every server event, each validated strictly on arrival."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.cursor = 0
        self.arrived = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for data in self.ws:
            assert isinstance(data, str), "a GA client never gets binary frames"
            event = json.loads(data)
            strict(event)
            async with self.arrived:
                self.events.append(event)
                self.arrived.notify_all()

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(event))

    async def wait(self, kind: str, *, where: Callable[[dict[str, Any]], bool] | None = None,
                   timeout: float = 10.0) -> dict[str, Any]:  # fmt: skip
        async with asyncio.timeout(timeout), self.arrived:
            while True:
                for index in range(self.cursor, len(self.events)):
                    event = self.events[index]
                    if event["type"] == kind and (where is None or where(event)):
                        self.cursor = index + 1
                        return event
                assert not self.reader.done(), f"closed while waiting for {kind}"
                await self.arrived.wait()

    async def stream(self, pcm: bytes) -> None:
        """Send audio in 20 ms appends at real-time pace."""
        for start in range(0, len(pcm), FRAME * 2):
            chunk = base64.b64encode(pcm[start : start + FRAME * 2]).decode()
            await self.send({"type": "input_audio_buffer.append", "audio": chunk})
            await asyncio.sleep(0.02)

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


async def say(conn: GAConnection, text: str) -> None:
    await conn.send({"type": "conversation.item.create",
                     "item": {"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": text}]}})  # fmt: skip
    await conn.send({"type": "response.create"})


async def journal_of(server: RunningServer, thread_id: str) -> list[Any]:
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    thread = ThreadRef(principal.tenant, principal.user, thread_id)
    return await server.services.journal.read(thread)


async def test_a_scripted_ga_conversation_validates_strictly(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, silence_ms=300,
                        min_interrupt_ms=200)  # fmt: skip
    plugins = fake_plugins(
        brain=FunctionBrain("Once upon a time there was a small voice agent that listened."),
        asr=FakeASR(["tell me a story", "stop please"]),
        tts=FakeTTS(ms_per_char=40.0),
    )
    async with running_server(settings, plugins=plugins) as server:
        headers = {"Authorization": f"Bearer {server.token}"}
        url = server.ws_url + "?model=gpt-realtime"
        async with websockets.connect(url, additional_headers=headers) as ws:
            conn = GAConnection(ws)
            created = await conn.wait("session.created")
            assert created["session"]["type"] == "realtime"
            await conn.send({"type": "session.update", "session": {
                "type": "realtime", "tools": [WEATHER_TOOL], "tool_choice": "auto",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
                                    "turn_detection": {"type": "server_vad",
                                                       "silence_duration_ms": 300}},
                          "output": {"voice": "marin"}}}})  # fmt: skip
            updated = await conn.wait("session.updated")
            assert updated["session"]["tools"][0]["name"] == "get_weather"
            assert updated["session"]["audio"]["output"]["voice"] == "marin"

            # An error names the parameter and the event it answers; the session goes on.
            await conn.send(
                {
                    "type": "session.update",
                    "event_id": "evt_bad",
                    "session": {"audio": {"input": {"format": {"rate": 11025}}}},
                }
            )
            error = await conn.wait("error")
            assert error["error"]["param"] == "session.audio.input.format.rate"
            assert error["error"]["event_id"] == "evt_bad"

            # Text in, audio and transcript out.
            await say(conn, "hello")
            first_user = await conn.wait("conversation.item.added")
            done = await conn.wait("response.done")
            assert done["response"]["status"] == "completed"
            message = done["response"]["output"][0]
            assert message["content"][0]["transcript"].startswith("Once upon a time")
            assert done["response"]["usage"]["output_tokens"] > 0

            # A function call round trip.
            await say(conn, "what is the weather in Paris?")
            args = await conn.wait("response.function_call_arguments.done")
            assert json.loads(args["arguments"]) == {"city": "Paris"}
            done = await conn.wait("response.done")
            call = done["response"]["output"][0]
            assert call["type"] == "function_call" and call["call_id"] == args["call_id"]
            await conn.send(
                {
                    "type": "conversation.item.create",
                    "item": {
                        "type": "function_call_output",
                        "call_id": call["call_id"],
                        "output": "sunny, 21 C",
                    },
                }
            )
            await conn.send({"type": "response.create"})
            done = await conn.wait("response.done")
            assert "sunny" in done["response"]["output"][0]["content"][0]["transcript"]

            # Audio in; the answer is spoken; a barge-in stops it and the client truncates.
            await conn.stream(silence(200) + tone(600) + silence(600))
            await conn.wait("input_audio_buffer.speech_started")
            await conn.wait("input_audio_buffer.speech_stopped")
            committed = await conn.wait("input_audio_buffer.committed")
            transcribed = await conn.wait(
                "conversation.item.input_audio_transcription.completed",
                where=lambda e: e["item_id"] == committed["item_id"],
            )
            assert transcribed["transcript"] == "tell me a story"
            first_audio = await conn.wait("response.output_audio.delta")
            answer_item = first_audio["item_id"]
            await asyncio.sleep(0.3)
            await conn.stream(tone(500))
            await conn.wait("input_audio_buffer.speech_started")
            await conn.send({"type": "conversation.item.truncate", "item_id": answer_item,
                             "content_index": 0, "audio_end_ms": 400})  # fmt: skip
            truncated = await conn.wait("conversation.item.truncated")
            assert truncated["audio_end_ms"] == 400
            cancelled = await conn.wait(
                "response.done", where=lambda e: e["response"]["status"] == "cancelled"
            )
            assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
            await conn.stream(silence(700))

            # A deleted item leaves the model's history.
            await conn.send({"type": "conversation.item.delete",
                             "item_id": first_user["item"]["id"]})  # fmt: skip
            deleted = await conn.wait("conversation.item.deleted")
            assert deleted["item_id"] == first_user["item"]["id"]
            await conn.send({"type": "conversation.item.retrieve",
                             "item_id": first_user["item"]["id"]})  # fmt: skip
            gone = await conn.wait("error")
            assert gone["error"]["code"] == "item_not_found"
            # A truncation past the answer's audio names audio_end_ms (its own error type).
            await conn.send({"type": "conversation.item.truncate", "item_id": answer_item,
                             "content_index": 0, "audio_end_ms": 3_600_000})  # fmt: skip
            beyond = await conn.wait("error")
            assert (beyond["error"]["code"], beyond["error"]["param"]) == (
                "invalid_value",
                "audio_end_ms",
            )
            thread_id = done["response"]["conversation_id"]
            await ws.close()
            await conn.reader
        events = await journal_of(server, thread_id)
    heard = [e for e in events if e.kind is EventKind.ASSISTANT_OUTPUT
             and e.payload.get("item_id") == answer_item]  # fmt: skip
    assert heard and heard[0].payload["interrupted"] is True
    full, prefix = heard[0].payload["text"], heard[0].payload["heard_text"]
    assert prefix and len(prefix) < len(full) and full.startswith(prefix.rstrip("."))
    assert any(e.kind is EventKind.ITEM_DELETED for e in events)
    for kind in ("conversation.item.added", "conversation.item.done",
                 "response.output_item.added", "response.content_part.added",
                 "response.output_audio_transcript.delta", "response.output_audio.done",
                 "response.content_part.done", "response.output_item.done"):  # fmt: skip
        assert kind in conn.types(), kind
