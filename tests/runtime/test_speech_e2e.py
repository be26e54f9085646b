"""End to end with the embedded speech stack: a spoken question (generated with our TTS) over a
real WebSocket gets a spoken answer, and both texts are in the journal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from journal.events import EventKind, ThreadRef
from pipeline.audio import INPUT_SAMPLE_RATE, resample
from plugins.tts import create_tts
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import running_server

FRAME = INPUT_SAMPLE_RATE // 50


async def test_a_spoken_question_gets_a_spoken_answer_that_is_journaled(tmp_path: Path) -> None:
    tts = create_tts("piper")
    parts = [
        resample(c.pcm, c.sample_rate, INPUT_SAMPLE_RATE)
        async for c in tts.stream("Tell me, who are you?", voice=None, language="en")
    ]
    silence = np.zeros(INPUT_SAMPLE_RATE // 2, dtype=np.int16)
    question = np.concatenate([silence, *parts, silence, silence, silence])

    settings = Settings(port=0, data_dir=tmp_path, storage="memory")
    async with running_server(settings) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            for offset in range(0, question.size, FRAME):
                await client.send_audio(question[offset : offset + FRAME].tobytes())
                await asyncio.sleep(0.02)
            transcript = await client.wait_type(
                "conversation.item.input_audio_transcription.completed", timeout=30
            )
            done = await client.wait_type("response.done", timeout=30)
            generation = done["response"]["generation"]
            audio = b"".join(m.audio or b"" for m in client.audio(generation))
        principal = await server.services.accounts.authenticate(server.token)
        assert principal is not None
        events = await server.services.journal.read(
            ThreadRef(principal.tenant, principal.user, client.session["thread_id"])
        )
    assert "who are you" in transcript["transcript"].lower()
    assert "OpenRealtime" in done["response"]["output_text"]
    assert len(audio) / 2 / 24_000 > 1.0  # seconds of speech, at the session's 24 kHz
    assert [e.kind for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
    assert events[0].payload["text"] == transcript["transcript"]
    assert events[1].payload["text"] == done["response"]["output_text"]
