"""VoiceSession (``runtime/realtime/session.py``) over a real socket: what a session keeps when it
is continued from the journal."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.audio import INPUT_SAMPLE_RATE
from plugins.contracts import Transcript
from plugins.fakes import FakeASR
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.realtime.protocol import CloseCode
from runtime.server import running_server
from tests.runtime.conftest import fake_plugins

TONE_MS = 400
TONE = 6000 * np.sin(2 * np.pi * 220 * np.arange(INPUT_SAMPLE_RATE * TONE_MS // 1000) / 16000)
TONE_BYTES = TONE.astype("<i2").tobytes()


class MeasuringASR(FakeASR):
    """Records how long each utterance it is given is, in ms of pipeline audio (16 kHz)."""

    def __init__(self) -> None:
        super().__init__(["what is the weather"])
        self.heard_ms: list[float] = []

    async def transcribe(self, utterance: np.ndarray, *, language: str | None = None) -> Transcript:
        self.heard_ms.append(1000 * utterance.size / INPUT_SAMPLE_RATE)
        return await super().transcribe(utterance, language=language)


async def test_a_session_continued_from_the_journal_decodes_input_in_its_own_format(
    tmp_path: Path,
) -> None:
    """The client's 16 kHz input stays 16 kHz after a journal continuation (it was decoded as
    the 24 kHz default, so every utterance came out a third short)."""
    asr = MeasuringASR()
    # One error ends the session without revoking its token: the resume continues it from the
    # journal here, as another process would.
    settings = Settings(port=0, storage="memory", data_dir=tmp_path, max_errors_per_session=1)
    async with running_server(settings, plugins=fake_plugins(asr=asr)) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect(turn_detection={"type": "none"})
            await client.send_raw("not json")
            assert await client.wait_closed() == CloseCode.TOO_MANY_ERRORS
            resumed = await client.reconnect()
            assert resumed["replayed"] is False
            for start in range(0, len(TONE_BYTES), 3_200):
                await client.send_audio(TONE_BYTES[start : start + 3_200])
            await client.commit()
            await client.wait_type("conversation.item.input_audio_transcription.completed")
    assert len(asr.heard_ms) == 1 and abs(asr.heard_ms[0] - TONE_MS) < 40
