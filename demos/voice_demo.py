"""Voice demo (SPEC DEMO-2): spoken questions through the real server and pipeline.

``python -m demos.voice_demo`` starts the server in-process on a free port with the embedded
defaults (energy VAD, Whisper base ASR, the local rule-based brain, Piper/eSpeak TTS; a temporary
data directory), synthesises the user's questions with our own TTS, streams them as 16 kHz PCM in
real-time 20 ms frames over a real WebSocket client, plays the answers back in simulated real time
(reporting playback progress like a browser), and talks over one answer (barge-in). It prints one
JSON object: ``{"turns": [{"user_text", "assistant_text", "heard_text", "interrupted",
"latency_ms"}], "interruptions": N}``. No microphone, browser or credentials needed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from plugins.tts import create_tts
from runtime.client import RealtimeClient, Received
from runtime.config import Settings
from runtime.server import running_server

FRAME = INPUT_SAMPLE_RATE // 50  # 20 ms


@dataclass(frozen=True)
class Step:
    text: str
    barge_in_after_s: float | None = None
    """Speak this while the previous answer is playing, this long after its first audio."""


SCRIPT = (
    Step("Hello there."),
    Step("What did I just say?"),
    Step("Who are you?"),
    Step("Wait, stop.", barge_in_after_s=1.2),
    Step("Thank you, goodbye."),
)


async def synthesize(text: str) -> PCM:
    """The user's voice: our own English TTS, resampled to the 16 kHz input rate."""
    tts = create_tts("auto")
    parts: list[PCM] = []
    async for chunk in tts.stream(text, voice=None, language="en"):
        parts.append(resample(chunk.pcm, chunk.sample_rate, INPUT_SAMPLE_RATE))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


async def stream_pcm(client: RealtimeClient, pcm: PCM) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, offset in enumerate(range(0, pcm.size, FRAME)):
        await client.send_audio(pcm[offset : offset + FRAME].tobytes())
        delay = start + (i + 1) * 0.02 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


async def stream_silence(client: RealtimeClient, seconds: float) -> None:
    await stream_pcm(client, np.zeros(int(seconds * INPUT_SAMPLE_RATE), dtype=np.int16))


async def playback_reporter(client: RealtimeClient, stop: asyncio.Event) -> None:
    """Report playback progress of the current generation every 100 ms, like a browser."""
    while not stop.is_set():
        created = client.events("response.created")
        if created:
            generation = int(created[-1]["response"]["generation"])
            if client.audio(generation):
                await client.report_playback(generation, client.played_ms(generation))
        await asyncio.sleep(0.1)


async def run_demo(data_dir: Path) -> dict[str, Any]:
    settings = Settings(port=0, data_dir=data_dir)
    voices = [await synthesize(step.text) for step in SCRIPT]
    async with running_server(settings) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            stop = asyncio.Event()
            reporter = asyncio.create_task(playback_reporter(client, stop))
            try:
                await stream_silence(client, 0.5)
                for index, voice in enumerate(voices):
                    next_step = SCRIPT[index + 1] if index + 1 < len(SCRIPT) else None
                    answered = _latest_generation(client)
                    await stream_pcm(client, voice)
                    if next_step is not None and next_step.barge_in_after_s is not None:
                        # Listen until the answer has played a while, then talk over it.
                        first = await _silence_until(client, lambda m: m.audio is not None)
                        wait = first.at + next_step.barge_in_after_s - client.clock()
                        await stream_silence(client, max(0.0, wait))
                        continue
                    await _listen_until_done(client, after_generation=answered)
            finally:
                stop.set()
                await reporter
    return _summary(client)


async def _silence_until(
    client: RealtimeClient, predicate: Callable[[Received], bool], timeout: float = 60.0
) -> Received:
    """Keep the microphone open (streaming silence, as a quiet room would) until a message
    matching ``predicate`` arrives."""
    waiting = asyncio.create_task(client.wait_for(predicate, timeout))
    try:
        while not waiting.done():
            await stream_silence(client, 0.2)
    finally:
        waiting.cancel()
    return waiting.result()


def _latest_generation(client: RealtimeClient) -> int:
    created = client.events("response.created")
    return int(created[-1]["response"]["generation"]) if created else 0


async def _listen_until_done(client: RealtimeClient, *, after_generation: int) -> None:
    """Listen until the answer to this turn (a generation newer than ``after_generation``) has
    played out; a turn in which the ASR heard no words is skipped."""

    def answer_done(m: Received) -> bool:
        return (
            m.type == "response.done"
            and m.event is not None
            and int(m.event["response"]["generation"]) > after_generation
            and (m.event["response"].get("status_details") or {}).get("reason") != "empty_input"
        )

    await _silence_until(client, answer_done)


def _summary(client: RealtimeClient) -> dict[str, Any]:
    """Walk the session's events in order: each answered response is paired with the
    transcript of the user turn that started it."""
    turns: list[dict[str, Any]] = []
    latencies: dict[str, Any] = {}
    user_text = ""
    for event in client.events():
        kind = event["type"]
        if kind == "conversation.item.input_audio_transcription.completed":
            user_text = event["transcript"]
        elif kind == "openrealtime.turn.latency":
            latencies[event["response_id"]] = event["latency_ms"]
        elif kind == "response.done" and event["response"]["output_text"]:
            response = event["response"]
            turns.append(
                {
                    "user_text": user_text,
                    "assistant_text": response["output_text"],
                    "heard_text": response["heard_text"],
                    "interrupted": response["interrupted"],
                    "latency_ms": latencies.get(response["id"], {}),
                }
            )
    return {
        "turns": turns,
        "interruptions": len(client.events("openrealtime.response.interrupted")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="keep data here instead of a temp dir")
    args = parser.parse_args()
    if args.data_dir is not None:
        result = asyncio.run(run_demo(args.data_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="openrealtime-voice-demo-") as tmp:
            result = asyncio.run(run_demo(Path(tmp)))
    print(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
