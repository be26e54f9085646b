"""Pipecat 1.14 baseline server speaking the OpenRealtime wire subset the benchmarks use.

Theory of operation
===================

Our benchmarks compare OpenRealtime with Pipecat side by side, in the same run, with the same
scenario, the same instant fake services and the *same client code*.  This module is the Pipecat
side: a server that looks like ours on the wire, built the way a Pipecat 1.14 application is
normally built to serve many sessions on one port:

* **Transport** – FastAPI + uvicorn with one :class:`FastAPIWebsocketTransport` per WebSocket
  connection (the shape of Pipecat's own development runner, ``pipecat.runner.run``).  Pipecat's
  ``WebsocketServerTransport`` is not an option: it serves one client at a time (renamed
  ``SingleClientWebsocketServerTransport`` in 1.4) and rejects a second concurrent connection.
  Every path is accepted (``ws://host:port/`` and ``ws://host:port/anything``).
* **Pipeline per connection** – ``transport.input() → FakeSTT → user aggregator (energy VAD) →
  FakeLLM → FakeTTS → transport.output() → assistant aggregator``, run by a ``PipelineWorker`` on
  its own ``WorkerRunner``, cancelled from ``on_client_disconnected`` (as Pipecat's examples do).
* **Wire format** – a custom :class:`OpenRealtimeSerializer` (``FrameSerializer``):

  client → server
    - binary message: raw PCM16 mono 16 kHz → ``InputAudioRawFrame``.
    - ``{"type": "input_audio_buffer.append", "audio": <base64 PCM16>}`` → same, for clients that
      send JSON audio.
    - ``{"type": "input_audio_buffer.commit"}`` → explicit end of the user's turn (see below).
    - anything else is ignored.

  server → client
    - binary message: the bot's PCM16 mono 24 kHz, exactly as Pipecat's output transport emits
      it (40 ms chunks paced at real time by the transport's simulated playback clock).
    - ``{"type": "openrealtime.response.interrupted"}`` when an ``InterruptionFrame`` reaches the
      output transport *while the bot is speaking* (Pipecat broadcasts an InterruptionFrame at
      every user-turn start, also when there is nothing to interrupt; those are not reported).
    - ``{"type": "response.done"}`` when the output transport emits ``BotStoppedSpeakingFrame``
      (end of the bot's audio, natural or interrupted; after an interruption it follows the
      ``interrupted`` event).

Commit mapping (explicit end of turn)
-------------------------------------

Pipecat has no "the client says the turn ended" input for a cascaded pipeline: the end of a user
turn is the VAD reporting the end of speech (``VADUserStoppedSpeakingFrame``), which (a) makes the
``SegmentedSTTService`` transcribe the buffered segment and (b) feeds the user-turn stop strategy.
We therefore make a commit *be* the VAD's end of speech, right now:

* the serializer turns ``input_audio_buffer.commit`` into one ``InputAudioRawFrame`` holding
  ``stop_secs`` (+ one analysis window) of digital silence.  It enters the input transport's audio
  queue *behind* the audio already received (a control frame pushed directly would overtake the
  queued audio), the user aggregator's VAD analyses it in one pass, reaches ``stop_secs`` of
  non-speech and fires its normal speech-stopped path at once: ``VADUserStoppedSpeakingFrame`` is
  broadcast, the STT transcribes the segment instantly, and
* the stop strategy is ``SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0)`` (Pipecat's
  default stop strategy is the Smart Turn v3 ONNX model, ~120 ms per inference here; the speech
  timeout strategy defaults to 0.6 s), so the user turn stops, the context is pushed and the LLM
  runs as soon as the (finalized) transcript arrives.

Emitting a ``VADUserStoppedSpeakingFrame``/``UserStoppedSpeakingFrame`` from the serializer was
rejected: the aggregator's own ``VADController`` would still be in SPEAKING, and the next audio
(trailing silence, or the 1 s audio-idle watchdog) would produce a *second* VAD stop → a second
STT segment → a transcription-started user turn that interrupts the bot's reply.  Driving the VAD
itself keeps every one of Pipecat's components in a consistent state and keeps all of Pipecat's
real per-turn machinery (VAD controller, STT segment queue, turn controller and strategies,
context aggregation, LLM, TTS sentence aggregation and audio contexts, media sender) on the
measured path.  What the flush skips is only the ``stop_secs`` wall-clock wait, which a commit
removes in our runtime too.  A commit with no speech detected (VAD quiet, or less than
``start_secs`` of speech) is a no-op: Pipecat has no user turn to end.  Pipecat's own endpointing
stays on: ``stop_secs`` of silence without a commit also ends the turn (then a later commit is a
no-op).

Interruption mapping
--------------------

Barge-in uses Pipecat's default behaviour: the default start strategies
(``VADUserTurnStartStrategy`` + ``TranscriptionUserTurnStartStrategy``, interruptions enabled)
start a user turn when the VAD confirms speech (``start_secs`` = 0.1 s → three 32 ms windows of
speech), the user aggregator broadcasts an ``InterruptionFrame``, the LLM/TTS drop their work and
the output transport's media sender drains its queue.  The FastAPI output transport hands the
InterruptionFrame to the serializer right after draining — that is where we emit
``openrealtime.response.interrupted`` — so at most one in-flight 40 ms chunk can still follow it.

Fake services and VAD (instant)
-------------------------------

* ``EnergyVAD``: 512-sample windows (Silero's size at 16 kHz); speech iff the window's peak
  ``|sample| > 1000``; ``VADParams(start_secs=0.1, stop_secs=0.2, min_volume=0)`` (0.2 s is
  Pipecat's default ``stop_secs``; a different value makes the speech-timeout strategy warn).
* ``FakeSTT`` (``SegmentedSTTService``): a fixed finalized transcript per VAD segment.
* ``FakeLLM``: streams ``"Sure. Here is the answer. Anything else?"`` token by token, at once.
* ``FakeTTS`` (HTTP-style ``TTSService``, Pipecat's sentence aggregation): 0.4 s of constant
  non-silent 24 kHz PCM per sentence, yielded at once in 40 ms frames.

Worker configuration
--------------------

Default is *lean* — Pipecat at its fastest, the fair comparison: ``enable_rtvi=False``, metrics
off, turn tracking off, idle timeout off (none of them is needed to serve a session; the idle
timeout would also cancel sessions of idle-cost benchmarks after 300 s).  ``--default-worker``
keeps ``PipelineWorker``'s defaults (RTVI on, turn tracking on, 300 s idle timeout) and turns
metrics and usage metrics on, as Pipecat's example bots do.

Warm-up
-------

The first pipeline built in a process imports ~0.6 s of modules lazily (the LLM adapter imports
``openai``), blocking the event loop inside the first session: its first turn then measured
0.6–1.2 s of import time.  :func:`warm_up` builds and drops one session's objects before the
server listens.

Usage
-----

``python -m benchmarks.pipecat_baseline --port 8765`` prints ``{"listening": "ws://127.0.0.1:8765"}``
on one stdout line once it accepts connections (``--port 0`` picks a free port and prints it).
In-process: ``async with PipecatBaselineServer(port=0) as server: server.url`` or
``await serve(host, port, ready=event)``.  Logging: Pipecat logs through loguru at DEBUG by
default; the CLI sets WARNING (``--log-level``), the importable API leaves loguru alone unless
given ``log_level``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import socket
import sys
from collections.abc import AsyncGenerator
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.serializers.base_serializer import FrameSerializer
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, STTSettings, TTSSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketOutputTransport,
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

IN_SAMPLE_RATE = 16_000
OUT_SAMPLE_RATE = 24_000
VAD_WINDOW_SAMPLES = 512  # Silero's analysis window at 16 kHz (32 ms)
VAD_PEAK_THRESHOLD = 1000
VAD_START_SECS = 0.1
VAD_STOP_SECS = 0.2
TRANSCRIPT = "hello bot"
REPLY_TOKENS = ("Sure.", " Here", " is", " the", " answer.", " Anything", " else?")
TTS_SECS_PER_SENTENCE = 0.4
TTS_FRAME_SECS = 0.04
TTS_SAMPLE_VALUE = 1000  # constant, clearly non-silent PCM16 sample

EVENT_INTERRUPTED = json.dumps({"type": "openrealtime.response.interrupted"})
EVENT_RESPONSE_DONE = json.dumps({"type": "response.done"})

_S = TypeVar("_S")


def _unset_settings(cls: type[_S], **overrides: Any) -> _S:
    """A service settings object with every field explicitly ``None`` (keeps Pipecat quiet)."""
    values: dict[str, Any] = {f.name: None for f in fields(cls) if f.name != "extra"}  # type: ignore[arg-type]
    values.update(overrides)
    return cls(**values)


def commit_flush_bytes(stop_secs: float = VAD_STOP_SECS) -> int:
    """Bytes of 16 kHz PCM16 silence that make the energy VAD report end of speech at once.

    ``stop_secs`` worth of whole analysis windows, plus one window for the partial window the
    analyzer may still hold from the last speech frame.
    """
    window_secs = VAD_WINDOW_SAMPLES / IN_SAMPLE_RATE
    stop_windows = max(1, round(stop_secs / window_secs))
    return (stop_windows + 1) * VAD_WINDOW_SAMPLES * 2


# --------------------------------------------------------------------------------------------
# VAD and fake services
# --------------------------------------------------------------------------------------------


class EnergyVAD(VADAnalyzer):
    """Speech iff the peak absolute sample of a 512-sample window exceeds a threshold."""

    def __init__(self, *, threshold: int = VAD_PEAK_THRESHOLD, params: VADParams | None = None):
        super().__init__(params=params)
        self._threshold = threshold

    def num_frames_required(self) -> int:
        return VAD_WINDOW_SAMPLES

    def voice_confidence(self, buffer: bytes) -> float:
        if len(buffer) < 2:
            return 0.0
        samples = memoryview(buffer[: len(buffer) & ~1]).cast("h")
        peak = max(max(samples), -min(samples))
        return 1.0 if peak > self._threshold else 0.0


class FakeSTT(SegmentedSTTService):
    """Transcribes every VAD segment instantly into the same finalized text."""

    def __init__(self, text: str = TRANSCRIPT) -> None:
        super().__init__(
            ttfs_p99_latency=0.0,
            trailing_silence_secs=0.0,
            settings=_unset_settings(STTSettings),
        )
        self._text = text

    @property
    def wants_wav_segments(self) -> bool:
        return False  # raw PCM, skip the WAV wrapping

    def can_generate_metrics(self) -> bool:
        return True

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        yield TranscriptionFrame(self._text, "user", time_now_iso8601(), finalized=True)


class FakeLLM(LLMService):
    """Streams a canned three-sentence reply, token by token, as soon as it gets a context."""

    def __init__(self, tokens: tuple[str, ...] = REPLY_TOKENS) -> None:
        super().__init__(settings=_unset_settings(LLMSettings, filter_incomplete_user_turns=False))
        self._tokens = tokens

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            # Same frame sequence and metric calls as Pipecat's OpenAI-style services.
            await self.push_frame(LLMFullResponseStartFrame())
            await self.start_processing_metrics()
            await self.start_ttfb_metrics()
            for token in self._tokens:
                await self.stop_ttfb_metrics()
                await self._push_llm_text(token)
            await self.stop_processing_metrics()
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


class FakeTTS(TTSService):
    """HTTP-style TTS: ``TTS_SECS_PER_SENTENCE`` of constant PCM per sentence, instantly."""

    def __init__(self) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            sample_rate=OUT_SAMPLE_RATE,
            settings=_unset_settings(TTSSettings),
        )
        sample = TTS_SAMPLE_VALUE.to_bytes(2, "little", signed=True)
        self._chunk = sample * int(OUT_SAMPLE_RATE * TTS_FRAME_SECS)
        self._chunks_per_sentence = round(TTS_SECS_PER_SENTENCE / TTS_FRAME_SECS)

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, None]:
        await self.start_tts_usage_metrics(text)
        for _ in range(self._chunks_per_sentence):
            await self.stop_ttfb_metrics()
            yield TTSAudioRawFrame(
                audio=self._chunk,
                sample_rate=OUT_SAMPLE_RATE,
                num_channels=1,
                context_id=context_id,
            )


# --------------------------------------------------------------------------------------------
# Wire format
# --------------------------------------------------------------------------------------------


class OpenRealtimeSerializer(FrameSerializer):
    """Maps the OpenRealtime wire subset onto Pipecat frames (one instance per connection)."""

    def __init__(self, *, flush_bytes: int | None = None) -> None:
        super().__init__()
        self._commit_silence = bytes(flush_bytes or commit_flush_bytes())
        # True from the first bot audio chunk sent until the bot stopped speaking.
        self._bot_speaking = False

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if isinstance(data, bytes):
            return InputAudioRawFrame(audio=data, sample_rate=IN_SAMPLE_RATE, num_channels=1)
        try:
            message = json.loads(data)
        except ValueError:
            return None
        if not isinstance(message, dict):
            return None
        kind = message.get("type")
        if kind == "input_audio_buffer.commit":
            # End of turn now: let the VAD hear its stop_secs of silence at once (module doc).
            return InputAudioRawFrame(
                audio=self._commit_silence, sample_rate=IN_SAMPLE_RATE, num_channels=1
            )
        if kind == "input_audio_buffer.append":
            try:
                audio = base64.b64decode(message.get("audio", ""), validate=True)
            except (binascii.Error, TypeError, ValueError):
                return None
            if audio:
                return InputAudioRawFrame(audio=audio, sample_rate=IN_SAMPLE_RATE, num_channels=1)
        return None

    async def serialize(self, frame: Frame) -> str | bytes | None:
        if isinstance(frame, OutputAudioRawFrame):
            self._bot_speaking = True
            return bytes(frame.audio)
        if isinstance(frame, InterruptionFrame):
            return EVENT_INTERRUPTED if self._bot_speaking else None
        if isinstance(frame, BotStoppedSpeakingFrame):
            if not self._bot_speaking:
                return None
            self._bot_speaking = False
            return EVENT_RESPONSE_DONE
        return None  # RTVI/transport messages, End/Cancel frames: nothing on our wire


class _OutputTransport(FastAPIWebsocketOutputTransport):
    """Pipecat's FastAPI output transport, also handing ``BotStoppedSpeakingFrame`` to the
    serializer (for ``response.done``).

    During an interruption the media sender emits BotStoppedSpeaking *before* the transport
    writes the InterruptionFrame; we hold it until after, so the client sees ``interrupted`` then
    ``response.done``.  Pipecat's own processing order is unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[Frame] | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if not isinstance(frame, InterruptionFrame):
            await super().process_frame(frame, direction)
            return
        self._held = []
        try:
            await super().process_frame(frame, direction)
        finally:
            held, self._held = self._held, None
        for pending in held:
            await self._write_frame(pending)

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        await super().push_frame(frame, direction)
        if isinstance(frame, BotStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            if self._held is not None:
                self._held.append(frame)
            else:
                await self._write_frame(frame)


class _Transport(FastAPIWebsocketTransport):
    """``FastAPIWebsocketTransport`` with :class:`_OutputTransport` as its output."""

    def __init__(self, websocket: WebSocket, params: FastAPIWebsocketParams) -> None:
        super().__init__(websocket, params)
        # Same constructor call as the base class, with our subclass (input/output share _client).
        self._output = _OutputTransport(self, self._client, self._params, name=self._output_name)


# --------------------------------------------------------------------------------------------
# Sessions and server
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineConfig:
    """Per-server knobs (all sessions share them)."""

    default_worker: bool = False
    vad_start_secs: float = VAD_START_SECS
    vad_stop_secs: float = VAD_STOP_SECS


def build_worker(websocket: WebSocket, config: BaselineConfig) -> PipelineWorker:
    """One connection's transport, pipeline and worker (cancelled when the client leaves)."""
    serializer = OpenRealtimeSerializer(flush_bytes=commit_flush_bytes(config.vad_stop_secs))
    transport = _Transport(
        websocket,
        FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_in_sample_rate=IN_SAMPLE_RATE,
            audio_out_enabled=True,
            audio_out_sample_rate=OUT_SAMPLE_RATE,
            serializer=serializer,
        ),
    )
    vad = EnergyVAD(
        params=VADParams(
            start_secs=config.vad_start_secs, stop_secs=config.vad_stop_secs, min_volume=0.0
        )
    )
    context = LLMContext([{"role": "system", "content": "You are a benchmark bot."}])
    user, assistant = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=vad,
            # Start strategies stay Pipecat's defaults (VAD + transcription, interruptions on).
            user_turn_strategies=UserTurnStrategies(
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)]
            ),
        ),
    )
    pipeline = Pipeline(
        [transport.input(), FakeSTT(), user, FakeLLM(), FakeTTS(), transport.output(), assistant]
    )
    pipeline_params = PipelineParams(
        audio_in_sample_rate=IN_SAMPLE_RATE,
        audio_out_sample_rate=OUT_SAMPLE_RATE,
        enable_metrics=config.default_worker,
        enable_usage_metrics=config.default_worker,
    )
    if config.default_worker:
        worker = PipelineWorker(pipeline, params=pipeline_params)
    else:
        worker = PipelineWorker(
            pipeline,
            params=pipeline_params,
            enable_rtvi=False,
            enable_turn_tracking=False,
            idle_timeout_secs=None,
        )

    async def _on_client_disconnected(_transport: Any, _websocket: Any) -> None:
        await worker.cancel()

    transport.add_event_handler("on_client_disconnected", _on_client_disconnected)
    return worker


async def run_session(websocket: WebSocket, config: BaselineConfig) -> None:
    """Serve one accepted WebSocket until the client disconnects."""
    worker = build_worker(websocket, config)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


class _NoWebSocket:
    """Stand-in connection for :func:`warm_up` (the transport only reads it once running)."""

    headers: dict[str, str] = {}


def warm_up(config: BaselineConfig) -> None:
    """Build and drop one session's objects so Pipecat's lazy imports happen now.

    The first pipeline built in a process imports ~0.6 s of modules on the fly (e.g. the LLM
    adapter imports ``openai``).  Done inside the first session, that blocks the event loop
    while the client streams, and the first turn measures import time, not Pipecat.
    """
    build_worker(_NoWebSocket(), config)  # type: ignore[arg-type]


def create_app(config: BaselineConfig | None = None) -> FastAPI:
    """FastAPI app serving a fresh Pipecat pipeline on every WebSocket, on any path."""
    cfg = config or BaselineConfig()
    app = FastAPI()

    @app.websocket("/{path:path}")
    async def _session(websocket: WebSocket, path: str) -> None:
        await websocket.accept()
        await run_session(websocket, cfg)

    return app


class _Server(uvicorn.Server):
    """uvicorn server that signals when it accepts connections."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class PipecatBaselineServer:
    """In-process handle: ``async with PipecatBaselineServer(port=0) as s: connect(s.url)``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        default_worker: bool = False,
        log_level: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.config = BaselineConfig(default_worker=default_worker)
        self._log_level = log_level
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    async def start(self) -> str:
        """Bind, start serving, and return the URL once connections are accepted."""
        if self._log_level is not None:
            configure_logging(self._log_level)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        warm_up(self.config)
        server = _Server(
            uvicorn.Config(
                create_app(self.config),
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_graceful_shutdown=5,
            )
        )
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="pipecat-baseline")
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({ready, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            await asyncio.gather(ready, return_exceptions=True)
            await self._task  # re-raise the startup failure
            raise RuntimeError("uvicorn stopped before it started listening")
        return self.url

    async def wait_closed(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Stop accepting, close the open sessions (their pipelines are cancelled), wait."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = None
            self._task = None

    async def __aenter__(self) -> PipecatBaselineServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    ready: asyncio.Event | None = None,
    *,
    default_worker: bool = False,
    log_level: str | None = None,
    announce: bool = False,
) -> None:
    """Serve until cancelled.  Sets ``ready`` (and, with ``announce``, prints the listening
    line) once connections are accepted."""
    server = PipecatBaselineServer(host, port, default_worker=default_worker, log_level=log_level)
    await server.start()
    if announce:
        print(json.dumps({"listening": server.url}), flush=True)
    if ready is not None:
        ready.set()
    try:
        await server.wait_closed()
    finally:
        await server.stop()


def configure_logging(level: str) -> None:
    """Route loguru (Pipecat's logger) to stderr at ``level`` (Pipecat's default is DEBUG)."""
    logger.remove()
    logger.add(sys.stderr, level=level.upper())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pipecat_baseline",
        description="Pipecat 1.14 baseline server speaking the OpenRealtime wire subset.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--default-worker",
        action="store_true",
        help="keep PipelineWorker defaults (RTVI, turn tracking, idle timeout) + metrics on",
    )
    parser.add_argument("--log-level", default="WARNING", help="loguru level (Pipecat logs)")
    args = parser.parse_args(argv)
    try:
        asyncio.run(
            serve(
                args.host,
                args.port,
                default_worker=args.default_worker,
                log_level=args.log_level,
                announce=True,
            )
        )
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
