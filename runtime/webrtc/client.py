"""A small WebRTC client of ``POST /v1/realtime/calls`` (aiortc), for tests, benchmarks and
demos — the WebRTC sibling of ``runtime.client.RealtimeClient``.

``WebRTCClient`` offers a microphone track (``Microphone``: PCM you feed it, played at real
time, silence in between) and the ``oai-events`` data channel; it records every event it
receives (``events``, ``wait_type``) and the agent's voice as it comes out of its Opus decoder
(``Speaker``: 16-bit mono at 48 kHz with the arrival time of each frame). ``call()`` opens a
session (``openrealtime`` extensions on by default), ``resume()`` posts a new offer carrying
``openrealtime.session.resume``, ``drop()`` closes the peer connection without a word, and
``hang_up()`` ends the session with the hangup route.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

MIC_RATE = 48_000
FRAME_S = 0.020
SPEECH_LEVEL = 300
"""A decoded frame whose peak is above this is speech, not Opus's comfort noise."""


class Microphone(MediaStreamTrack):
    """PCM fed with ``feed`` (16-bit mono at ``rate``), sent in 20 ms frames at real time."""

    kind = "audio"

    def __init__(self, rate: int = MIC_RATE) -> None:
        super().__init__()
        self.rate = rate
        self._samples: deque[np.ndarray[Any, np.dtype[np.int16]]] = deque()
        self._start: float | None = None
        self._frames = 0
        self.fed_until: float | None = None
        """When the last sample fed so far leaves (perf_counter time), once it is queued."""
        self._queued = 0

    def feed(self, pcm: np.ndarray[Any, np.dtype[np.int16]]) -> None:
        self._samples.append(pcm.astype(np.int16, copy=False))
        self._queued += pcm.size

    @property
    def pending_s(self) -> float:
        return self._queued / self.rate

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        else:
            due = self._start + self._frames * FRAME_S
            if due > now:
                await asyncio.sleep(due - now)
            elif now - due > 0.2:
                self._start, self._frames = now, 0
        size = int(self.rate * FRAME_S)
        out = np.zeros(size, dtype=np.int16)
        filled = 0
        while self._samples and filled < size:
            head = self._samples[0]
            take = min(size - filled, head.size)
            out[filled : filled + take] = head[:take]
            filled += take
            if take == head.size:
                self._samples.popleft()
            else:
                self._samples[0] = head[take:]
        self._queued -= filled
        if filled and not self._samples:
            self.fed_until = time.perf_counter()
        frame = av.AudioFrame.from_ndarray(out.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.time_base = fractions.Fraction(1, self.rate)
        frame.pts = self._frames * size
        self._frames += 1
        return frame


class Speaker:
    """The agent's voice as decoded: (arrival time, 16-bit mono 48 kHz) per frame — only the
    frames carrying speech unless ``keep_silence`` (a long call keeps little)."""

    def __init__(self, *, keep_silence: bool = False) -> None:
        self.frames: list[tuple[float, np.ndarray[Any, np.dtype[np.int16]]]] = []
        self.task: asyncio.Task[None] | None = None
        self.keep_silence = keep_silence
        self.decoded = 0
        """Frames out of the decoder, speech or not."""

    async def listen(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            assert isinstance(frame, av.AudioFrame)
            at = time.perf_counter()
            self.decoded += 1
            pcm = frame.to_ndarray()
            if pcm.ndim == 2 and pcm.shape[0] == 1 and len(frame.layout.channels) == 2:
                pcm = pcm.reshape(-1, 2)[:, 0]  # interleaved stereo: one channel will do
            pcm = pcm.reshape(-1).astype(np.int16, copy=False)
            if self.keep_silence or (pcm.size and int(np.abs(pcm).max()) > SPEECH_LEVEL):
                self.frames.append((at, pcm))

    def first_speech_after(self, moment: float) -> float | None:
        for at, pcm in self.frames:
            if at >= moment and pcm.size and int(np.abs(pcm).max()) > SPEECH_LEVEL:
                return at
        return None

    def speech_ms(self, after: float = 0.0) -> float:
        """Milliseconds of decoded frames carrying speech since ``after``."""
        total = 0.0
        for at, pcm in self.frames:
            if at >= after and pcm.size and int(np.abs(pcm).max()) > SPEECH_LEVEL:
                total += 1000.0 * pcm.size / MIC_RATE
        return total


class WebRTCClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        clock: Callable[[], float] = time.perf_counter,
        keep_events: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.clock = clock
        self.keep_events = keep_events
        """Keep every event (tests); off: only the last 200 (a long benchmark call)."""
        self.events: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.session: dict[str, Any] = {}
        self.resume_token = ""
        self.last_seq = 0
        self.location: str | None = None
        self.microphone = Microphone()
        self.speaker = Speaker()
        self.pc: RTCPeerConnection | None = None
        self._channel: Any = None
        self._arrived = asyncio.Event()
        self._cursor = 0

    # ------------------------------------------------------------ calls

    async def call(
        self,
        *,
        extensions: dict[str, Any] | None = None,
        session: dict[str, Any] | None = None,
        model: str | None = None,
        ga: bool = False,
        timeout: float = 15.0,
    ) -> dict[str, Any]:
        """Open a session over a new peer connection; ``session.created``'s session."""
        if ga:
            await self._connect(None, session, timeout)
            created = await self.wait_type("session.created", timeout)
            return dict(created["session"])
        fields: dict[str, Any] = {"extensions": extensions or {"events": True, "seq": True}}
        if model is not None:
            fields["model"] = model
        if session is not None:
            fields["session"] = session
        return await self.call_with(fields, timeout)

    async def call_with(self, fields: dict[str, Any], timeout: float = 15.0) -> dict[str, Any]:
        """``call`` with more fields in ``openrealtime.session.start`` (a thread to continue,
        a role, a session configuration)."""
        opening = {
            "type": "openrealtime.session.start",
            "extensions": {"events": True, "seq": True},
            **fields,
        }
        await self._connect(opening, None, timeout)
        created = await self.wait_type("session.created", timeout)
        config: dict[str, Any] = created["session"]
        self.session = dict(config.get("openrealtime") or {})
        self.resume_token = str(self.session.get("resume_token") or "")
        return config

    async def resume(self, timeout: float = 15.0) -> dict[str, Any]:
        """A new offer carrying the resume message (the token in the body); the answer's
        ``openrealtime.session.resumed``."""
        await self._close_pc()
        opening = {
            "type": "openrealtime.session.resume",
            "session_id": self.session["id"],
            "resume_token": self.resume_token,
            "last_seq": self.last_seq,
        }
        start = len(self.events)
        self._cursor = start
        await self._connect(opening, None, timeout)
        resumed = await self.wait_type("openrealtime.session.resumed", timeout)
        self.resume_token = str(resumed.get("resume_token") or self.resume_token)
        return resumed

    async def _connect(
        self, opening: dict[str, Any] | None, session: dict[str, Any] | None, timeout: float
    ) -> None:
        pc = RTCPeerConnection()
        self.pc = pc
        self.microphone = Microphone()
        pc.addTrack(self.microphone)
        channel = pc.createDataChannel("oai-events")
        self._channel = channel
        opened = asyncio.Event()
        channel.on("open", opened.set)
        channel.on("message", self._on_message)

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self.speaker.task = asyncio.ensure_future(self.speaker.listen(track))

        offer = await pc.createOffer()
        await pc.setLocalDescription(offer)
        answer = await self.post_offer(pc.localDescription.sdp, opening, session, timeout)
        await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        async with asyncio.timeout(timeout):
            await opened.wait()

    async def post_offer(
        self,
        sdp: str,
        opening: dict[str, Any] | None,
        session: dict[str, Any] | None,
        timeout: float,
    ) -> str:
        files: dict[str, tuple[None, str, str]] = {"sdp": (None, sdp, "application/sdp")}
        if session is not None:
            files["session"] = (None, json.dumps(session), "application/json")
        if opening is not None:
            files["openrealtime"] = (None, json.dumps(opening), "application/json")
        async with httpx.AsyncClient(timeout=timeout) as http:
            reply = await http.post(
                f"{self.base_url}/v1/realtime/calls",
                files=files,
                headers={"Authorization": f"Bearer {self.token}"},
            )
        if reply.status_code != 201:
            raise CallRefused(reply.status_code, reply.json())
        self.location = reply.headers.get("location")
        return reply.text

    def _on_message(self, message: str | bytes) -> None:
        event = json.loads(message)
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.last_seq:
                return  # a replay of something seen
            self.last_seq = seq
        self.events.append(event)
        self.arrivals.append(self.clock())
        if not self.keep_events and len(self.events) > 400:
            del self.events[:200], self.arrivals[:200]
            self._cursor = max(0, self._cursor - 200)
        self._arrived.set()

    # ------------------------------------------------------------ talking

    def say(self, pcm: np.ndarray[Any, np.dtype[np.int16]], rate: int) -> None:
        """Speak ``pcm`` (16-bit mono at ``rate``) into the microphone."""
        if rate != MIC_RATE:
            from pipeline.audio import resample

            pcm = resample(pcm, rate, MIC_RATE)
        self.microphone.feed(pcm)

    async def send(self, event: dict[str, Any]) -> None:
        assert self._channel is not None
        self._channel.send(json.dumps(event))

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 15.0
    ) -> dict[str, Any]:
        seen = self._cursor
        async with asyncio.timeout(timeout):
            while True:
                for index in range(seen, len(self.events)):
                    if predicate(self.events[index]):
                        return self.events[index]
                seen = len(self.events)
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_type(self, kind: str, timeout: float = 15.0) -> dict[str, Any]:
        return await self.wait_for(lambda e: e.get("type") == kind, timeout)

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.events]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]

    def mark(self) -> None:
        """Later waits look only at events from now on."""
        self._cursor = len(self.events)

    # ------------------------------------------------------------ ending

    async def hang_up(self) -> int:
        assert self.location is not None
        async with httpx.AsyncClient(timeout=10) as http:
            reply = await http.post(
                f"{self.base_url}{self.location}/hangup",
                headers={"Authorization": f"Bearer {self.token}"},
            )
        return reply.status_code

    async def drop(self) -> None:
        """The peer vanishes: the peer connection closes without a word."""
        await self._close_pc()

    async def _close_pc(self) -> None:
        pc, self.pc = self.pc, None
        if pc is not None:
            await pc.close()
        task, self.speaker.task = self.speaker.task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def close(self) -> None:
        await self._close_pc()

    async def __aenter__(self) -> WebRTCClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class CallRefused(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body
