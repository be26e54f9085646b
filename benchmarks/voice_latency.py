"""End of speech → first audio with the embedded speech stack, and where the time goes.

``python -m benchmarks.voice_latency`` prints one JSON object.

The real server (in this process, embedded defaults: energy VAD, Whisper base, the local brain,
Piper/eSpeak TTS, in-memory storage) gets spoken questions synthesised with our English TTS,
streamed as real-time 20 ms frames over a real WebSocket, followed by silence. Per turn:

- ``end_of_speech_to_first_audio``: the client sent the frame holding the last voiced sample →
  the client received the first audio byte of the answer;
- breakdown (server marks, ``openrealtime.turn.latency``): ``vad_end`` = VAD decided the pause −
  the true end of speech (client clock); ``endpoint`` = commit − end of speech as the VAD dated
  it; ``asr_compute`` = the final transcription's compute time; ``asr_after_endpoint`` = ASR
  still running after the commit (what speculation did not hide); ``brain_first_token``;
  ``tts_first_audio``;
- ``runtime_overhead`` = end_of_speech_to_first_audio − (endpoint + asr_after_endpoint +
  brain_first_token + tts_first_audio): what our own code (and the loopback) adds;
- ``preempted_turns``: turns whose brain started on the transcript made at the pause, before
  the commit (``pipeline.preemption``); their ``brain_first_token`` is what was left after it;
- ``asr_hidden_fraction`` = share of the final transcription's compute done before the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.common import emit, p50_p99, percentile
from evals.runner import last_voiced_sample
from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from plugins.tts import create_tts
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import running_server

DOCUMENT = (
    "Nova X2 Headphones: Warranty and Care",
    "The Nova X2 headphones come with a two-year warranty from the date of purchase. "
    "The warranty covers manufacturing defects but not water damage or a lost ear cushion. "
    "A full charge takes about two hours and lasts up to thirty hours of playback. "
    "Unused headphones in their original box can be returned within 30 days for a full refund. "
    "Replacement ear cushions cost 15 dollars a pair.",
)
"""A document the server searches: the questions about it are answered by the model."""
QUESTIONS = (
    ("Hello there.", "code"),
    ("How long is the warranty on the Nova X2 headphones?", "model"),
    ("My name is Sam and I live in Berlin.", "code"),
    ("How long does a full charge last?", "model"),
    ("Does the warranty cover water damage?", "model"),
    ("Thank you very much.", "code"),
    ("Can I return them if I change my mind?", "model"),
    ("What is my name?", "code"),
    ("How much do new ear cushions cost?", "model"),
    ("Goodbye, see you later.", "code"),
)
"""Spoken questions about the document, which the default ``llm`` brain answers with the model
(``model``), and greetings, thanks, a statement and a memory question, which code answers at
once (``code``): the figures cover both, and the model's turns on their own."""
FRAME = INPUT_SAMPLE_RATE // 50


async def synthesize(text: str) -> PCM:
    tts = create_tts("piper")
    parts = [
        resample(c.pcm, c.sample_rate, INPUT_SAMPLE_RATE)
        async for c in tts.stream(text, voice=None, language="en")
    ]
    return np.concatenate(parts)


async def one_turn(client: RealtimeClient, voice: PCM) -> dict[str, float] | None:
    """Stream one question and listen until its answer is done; None if it got no answer."""
    loop = asyncio.get_running_loop()
    end_sample = last_voiced_sample(voice)
    audio = np.concatenate((voice, np.zeros(INPUT_SAMPLE_RATE * 3, dtype=np.int16)))
    start = loop.time()
    speech_end: float | None = None
    mark = len(client.messages)
    done = asyncio.create_task(
        client.wait_for(lambda m: m.type == "response.done" and m.event is not None
                        and bool(m.event["response"]["output_text"]), 60)
    )  # fmt: skip
    try:
        for i, offset in enumerate(range(0, audio.size, FRAME)):
            await client.send_audio(audio[offset : offset + FRAME].tobytes())
            if speech_end is None and offset + FRAME >= end_sample:
                speech_end = client.clock()
            if done.done():
                break
            delay = start + (i + 1) * 0.02 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        while not done.done():  # keep the microphone open until the answer has played
            await client.send_audio(bytes(FRAME * 2))
            await asyncio.sleep(0.02)
        await done
    finally:
        done.cancel()
    assert speech_end is not None
    later = client.messages[mark:]
    first_audio = next((m.at for m in later if m.audio is not None), None)
    stopped = next((m.at for m in later if m.type == "input_audio_buffer.speech_stopped"), None)
    latency = next((m.event for m in later if m.type == "openrealtime.turn.latency"), None)
    if first_audio is None or latency is None or stopped is None:
        return None
    marks = latency["latency_ms"]
    e2e = (first_audio - speech_end) * 1000
    endpoint = marks["committed"]
    asr_after = marks["asr_final"] - marks["committed"]
    brain = marks["brain_first_token"] - marks["asr_final"]
    tts = marks["tts_first_audio"] - marks["brain_first_token"]
    started, finished = marks.get("asr_started"), marks.get("asr_done")
    hidden = None
    if started is not None and finished is not None and finished > started:
        hidden = max(0.0, min(finished, endpoint) - started) / (finished - started)
    return {
        "e2e": e2e,
        "vad_end": (stopped - speech_end) * 1000,
        "endpoint": endpoint,
        "asr_compute": (finished - started) if started is not None and finished else asr_after,
        "asr_after_endpoint": asr_after,
        "brain_first_token": brain,
        "tts_first_audio": tts,
        "runtime_overhead": e2e - (endpoint + asr_after + brain + tts),
        "asr_hidden": -1.0 if hidden is None else hidden,
        "preempted": 1.0 if latency.get("preempted") else 0.0,
    }


async def run(turns: int, brain: str = "llm") -> dict[str, Any]:
    voices = [await synthesize(q) for q, _ in QUESTIONS]
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="openrealtime-voice-latency-") as data_dir:
        settings = Settings.model_validate(
            {"port": 0, "data_dir": Path(data_dir), "storage": "memory", "brain": brain}
        )
        async with running_server(settings) as server:
            async with httpx.AsyncClient(
                base_url=server.http_url, headers={"Authorization": f"Bearer {server.token}"}
            ) as http:
                name, text = DOCUMENT
                (
                    await http.post("/api/documents", json={"name": name, "text": text})
                ).raise_for_status()
            async with RealtimeClient(server.ws_url, server.token, clock=time.monotonic) as c:
                await c.connect()
                for i in range(turns):
                    row = await one_turn(c, voices[i % len(voices)])
                    if row is not None:
                        row["model"] = float(QUESTIONS[i % len(QUESTIONS)][1] == "model")
                        rows.append(row)

    def col(name: str) -> list[float]:
        return [r[name] for r in rows]

    hidden = [h for h in col("asr_hidden") if h >= 0]
    model_rows = [r for r in rows if r["model"]]
    return {
        "turns": len(rows),
        "end_of_speech_to_first_audio_ms": p50_p99(col("e2e")),
        "model_turns": len(model_rows),
        "model_end_of_speech_to_first_audio_ms": p50_p99([r["e2e"] for r in model_rows]),
        "model_brain_first_token_ms": percentile([r["brain_first_token"] for r in model_rows], 50),
        "breakdown_ms": {
            name: percentile(col(name), 50)
            for name in (
                "vad_end",
                "endpoint",
                "asr_compute",
                "asr_after_endpoint",
                "brain_first_token",
                "tts_first_audio",
            )
        },
        "runtime_overhead_ms": p50_p99(col("runtime_overhead")),
        "asr_hidden_fraction": round(float(np.mean(hidden)), 3) if hidden else None,
        "preempted_turns": int(sum(col("preempted"))),
        "settings": {
            "vad": settings.vad,
            "silence_ms": settings.silence_ms,
            "asr": "whisper-base",
            "brain": type(server.services.plugins.brain).__name__,
            "preemptive": settings.preemptive,
            "false_interruption_ms": settings.false_interruption_ms,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--brain", choices=["llm", "rules"], default="llm")
    args = parser.parse_args()
    emit(asyncio.run(run(args.turns, args.brain)))


if __name__ == "__main__":
    main()
