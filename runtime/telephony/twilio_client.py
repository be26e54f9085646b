"""A phone call as Twilio makes it, for tests and benchmarks: the signed voice webhook, then the
Media Streams socket the TwiML names, with Twilio's documented message sequence.

``TwilioCall`` posts the webhook (``CallSid``, ``From``, ``To`` …, signed with the auth token as
Twilio signs it), reads the ``<Connect><Stream>`` and its token parameter, and opens the stream:
``connected``, ``start`` (μ-law 8 kHz, the custom parameters), then ``media`` every 20 ms in real
time — silence, or what ``say`` queued — ``dtmf`` (``press``) and ``stop`` (``hang_up``). It plays
what the server sends as a phone would: ``media`` joins a playback buffer drained in real time, a
``mark`` is echoed once the audio before it has played, and ``clear`` empties the buffer and
echoes the marks still queued at once — as Twilio does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
import xml.etree.ElementTree as ET
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import websockets

from pipeline.audio_formats import ulaw_decode, ulaw_encode
from runtime.telephony.twilio_protocol import twilio_signature

RATE = 8_000
CHUNK = 160  # 20 ms of μ-law


@dataclass(slots=True)
class Played:
    """What the phone played: samples, and when each mark was echoed."""

    pcm: list[np.ndarray] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    clears: int = 0
    first_audio_at: float | None = None

    def speech_ms(self) -> float:
        return sum(p.size for p in self.pcm) * 1000 / RATE


class TwilioCall:
    def __init__(
        self,
        base_url: str,
        auth_token: str,
        *,
        caller: str = "+15550001111",
        called: str = "+15550002222",
        call_sid: str | None = None,
        webhook_url: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth_token = auth_token
        self.caller, self.called = caller, called
        self.call_sid = call_sid or f"CA{uuid.uuid4().hex}"
        self.stream_sid = f"MZ{uuid.uuid4().hex}"
        self.webhook_url = webhook_url or f"{self.base_url}/v1/telephony/twilio/voice"
        self.twiml = ""
        self.played = Played()
        self.received: list[dict[str, Any]] = []
        self._ws: Any = None
        self._seq = 0
        self._chunk = 0
        self._buffer: deque[tuple[str, Any]] = deque()  # ("audio", pcm) | ("mark", name)
        self._speech: deque[tuple[bytes, asyncio.Future[list[float]]]] = deque()
        self.media_at: list[float] = []
        """When each ``media`` message arrived (``time.monotonic``)."""
        self.clear_at: list[float] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = asyncio.Event()
        self.close_code: tuple[int | None, str | None] | None = None
        """How the stream closed (code, reason), once it has."""

    async def __aenter__(self) -> TwilioCall:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ the webhook

    async def webhook(self, **extra: str) -> str:
        params = {
            "CallSid": self.call_sid, "AccountSid": "AC" + "0" * 32, "From": self.caller,
            "To": self.called, "CallStatus": "ringing", "Direction": "inbound", **extra,
        }  # fmt: skip
        signature = twilio_signature(self.auth_token, self.webhook_url, params)
        async with httpx.AsyncClient() as http:
            response = await http.post(
                self.webhook_url, data=params, headers={"X-Twilio-Signature": signature}
            )
        response.raise_for_status()
        self.twiml = response.text
        return self.twiml

    def stream_target(self) -> tuple[str, dict[str, str]]:
        """The ``<Stream>`` URL and its parameters from the TwiML."""
        root = ET.fromstring(self.twiml)
        stream = root.find("./Connect/Stream")
        if stream is None:
            raise ValueError(f"no <Connect><Stream> in {self.twiml!r}")
        params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
        return stream.get("url", ""), params

    # ------------------------------------------------------------ the stream

    async def connect(self) -> None:
        url, params = self.stream_target()
        self._ws = await websockets.connect(url, max_size=None)
        self._chunk = 0
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send({
            "event": "start",
            "start": {
                "accountSid": "AC" + "0" * 32, "streamSid": self.stream_sid,
                "callSid": self.call_sid, "tracks": ["inbound"], "customParameters": params,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": RATE, "channels": 1},
            },
            "streamSid": self.stream_sid,
        })  # fmt: skip
        self.closed.clear()
        self._tasks = [
            asyncio.ensure_future(self._read()),
            asyncio.ensure_future(self._play()),
            asyncio.ensure_future(self._microphone()),
        ]

    async def _send(self, message: dict[str, Any]) -> None:
        self._seq += 1
        await self._ws.send(json.dumps({"sequenceNumber": str(self._seq), **message}))

    async def say(self, pcm8k: np.ndarray) -> list[float]:
        """Speak ``pcm8k`` (8 kHz PCM16) into the call; returns once it has been sent, with
        when each 20 ms chunk of it went out (``ConnectionError`` when the stream is closed).
        Between utterances the line carries silence, 20 ms at a time, as a phone line does."""
        if self.closed.is_set():
            raise ConnectionError("the call's stream is closed")
        done: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._speech.append((ulaw_encode(pcm8k.astype(np.int16)), done))
        return await done

    async def silence(self, seconds: float) -> None:
        await self.say(np.zeros(int(RATE * seconds), np.int16))

    async def _microphone(self) -> None:
        """The caller's line: a ``media`` message every 20 ms, speech queued by ``say`` or
        μ-law silence (0xFF)."""
        start, sent = time.monotonic(), 0
        current: tuple[bytes, asyncio.Future[list[float]]] | None = None
        offset, sent_at = 0, list[float]()
        while True:
            if current is None and self._speech:
                current, offset, sent_at = self._speech.popleft(), 0, []
            finished: asyncio.Future[list[float]] | None = None
            if current is not None:
                chunk = current[0][offset : offset + CHUNK].ljust(CHUNK, b"\xff")
                offset += CHUNK
                sent_at.append(time.monotonic())
                if offset >= len(current[0]):
                    finished, current = current[1], None
            else:
                chunk = b"\xff" * CHUNK
            self._chunk += 1
            try:
                await self._send({
                    "event": "media", "streamSid": self.stream_sid,
                    "media": {
                        "track": "inbound", "chunk": str(self._chunk),
                        "timestamp": str(self._chunk * 20),
                        "payload": base64.b64encode(chunk).decode(),
                    },
                })  # fmt: skip
            except websockets.ConnectionClosed:
                self._fail_speech(current[1] if current is not None else None)
                return
            if finished is not None and not finished.done():
                finished.set_result(sent_at)
            sent += 1
            due = start + sent * 0.020
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    def _fail_speech(self, current: asyncio.Future[list[float]] | None) -> None:
        """The line went down: nothing queued will be said (``say`` raises)."""
        pending = [f for _, f in self._speech] + ([current] if current is not None else [])
        self._speech.clear()
        for future in pending:
            if not future.done():
                future.set_exception(ConnectionError("the call's stream is closed"))

    async def press(self, digit: str) -> None:
        await self._send({
            "event": "dtmf", "streamSid": self.stream_sid,
            "dtmf": {"track": "inbound_track", "digit": digit},
        })  # fmt: skip

    async def hang_up(self) -> None:
        """``stop``: the caller hung up; Twilio closes the socket."""
        with contextlib.suppress(Exception):
            await self._send({
                "event": "stop", "streamSid": self.stream_sid,
                "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid},
            })  # fmt: skip
        await self.close()

    async def drop(self) -> None:
        """The socket drops without ``stop`` (a network failure)."""
        await self.close()

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []
        self.closed.set()

    async def _read(self) -> None:
        try:
            async for raw in self._ws:
                message = json.loads(raw)
                self.received.append(message)
                kind = message.get("event")
                if kind == "media":
                    self.media_at.append(time.monotonic())
                    pcm = ulaw_decode(base64.b64decode(message["media"]["payload"]))
                    if self.played.first_audio_at is None:
                        self.played.first_audio_at = time.monotonic()
                    self._buffer.append(("audio", pcm))
                elif kind == "mark":
                    self._buffer.append(("mark", message["mark"]["name"]))
                elif kind == "clear":
                    self.clear_at.append(time.monotonic())
                    self.played.clears += 1
                    flushed = [v for k, v in self._buffer if k == "mark"]
                    self._buffer.clear()
                    for name in flushed:
                        await self._echo(name)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self._ws.close_code, self._ws.close_reason
            self.closed.set()

    async def _play(self) -> None:
        """The phone's speaker: 20 ms at a time, in real time; marks echoed when reached."""
        start, played = time.monotonic(), 0
        while True:
            while self._buffer and self._buffer[0][0] == "mark":
                await self._echo(self._buffer.popleft()[1])
            if self._buffer:
                pcm = self._buffer[0][1]
                take, rest = pcm[:CHUNK], pcm[CHUNK:]
                if rest.size:
                    self._buffer[0] = ("audio", rest)
                else:
                    self._buffer.popleft()
                self.played.pcm.append(take)
            played += 1
            due = start + played * 0.020
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if not self._buffer and due < time.monotonic() - 0.2:
                start, played = time.monotonic(), 0

    async def _echo(self, name: str) -> None:
        self.played.marks.append(name)
        with contextlib.suppress(Exception):
            await self._send(
                {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}
            )

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("event") == kind]
