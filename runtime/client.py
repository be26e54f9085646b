"""A small Python client of the realtime protocol, used by the demos, benchmarks and tests.

``RealtimeClient`` speaks the GA protocol with every extension on (docs/protocol.md): it offers
the ``openrealtime`` subprotocol, opens with ``openrealtime.session.start`` (numbered messages,
resume tokens, ``openrealtime.*`` events, binary audio, 16 kHz PCM input), then sends GA
events. It receives in a background task. Every server
message is recorded in arrival order as a ``Received`` (JSON event or audio frame) with its
``seq`` and arrival time; ``wait_for`` blocks until a message matching a predicate arrives.
Messages are deduplicated by ``seq`` (a replay after a resume never shows twice).

``messages`` keeps everything by default (tests and benchmarks read it afterwards). A long-lived
client passes ``max_messages``: then messages already consumed (``wait_for``/``next_message``
moved past them) are dropped, and when ``max_messages`` are waiting unread the reader waits for
the consumer (back-pressure on the socket; nothing is lost), so memory stays bounded.

After ``reconnect()`` the server may not have been able to replay everything (its replay window
was exceeded, or the session was continued from the journal on a process that never held the
stream): then ``reconcile`` holds the server's account — the ``seq`` range given up and the
session's user/assistant items from the journal, which callers show instead of what they
assembled from the stream for that session (``reconciles`` keeps every one, oldest first).

A server that drains (SIGTERM, ``runtime/drain.py``) sends ``openrealtime.server.draining``: the
client acknowledges everything it has received at once (and every message after it), sets
``draining`` and should start no new turn; the connection then closes with 1012 and
``reconnect()`` resumes the session — through a load balancer, on another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.typing import Subprotocol

from pipeline.audio import INPUT_SAMPLE_RATE
from runtime.realtime.protocol import decode_audio

SUBPROTOCOL = "openrealtime"
RETRY_LATER_CODE = "server_unavailable"
"""The handshake's answer while the server cannot reach its database: resume again later."""


def ga_turn_detection(detection: dict[str, Any] | None) -> dict[str, Any] | None:
    """Our older ``turn_detection`` shorthand as the GA shape (``{"type": "none"}`` → null)."""
    if detection is None:
        return {"type": "server_vad"}
    if detection.get("type") == "none":
        return None
    return {k: v for k, v in detection.items() if k != "min_interrupt_ms"}


@dataclass(frozen=True, slots=True)
class Received:
    seq: int
    at: float
    event: dict[str, Any] | None = None
    audio: bytes | None = None
    generation: int = -1

    @property
    def type(self) -> str:
        return "audio" if self.event is None else str(self.event.get("type"))


class ClientClosed(Exception):
    pass


DEFAULT_EXTENSIONS: dict[str, bool] = {"events": True, "seq": True, "binary_audio": True}


class RealtimeClient:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        clock: Callable[[], float] = time.perf_counter,
        max_messages: int | None = None,
    ):
        if max_messages is not None and max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        self.url = url
        self.token = token
        self.clock = clock
        self.messages: list[Received] = []
        self.max_messages = max_messages
        """None: keep every message; else keep at most this many (see the module docstring)."""
        self._stopping = False
        self.session: dict[str, Any] = {}
        """Our session facts (``session.openrealtime``: id, thread_id, role, resume_token …)."""
        self.config: dict[str, Any] = {}
        """The GA session object of ``session.created``/``session.updated``."""
        self.close_code: int | None = None
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._arrived = asyncio.Condition()
        self._last_seq = 0
        self.resume_token = ""
        self._acked = 0
        self.ack_every = 64
        self._cursor = 0
        self.reconcile: dict[str, Any] | None = None
        """The last resume's ``reconcile`` (None: the replay was complete)."""
        self.reconciles: list[dict[str, Any]] = []
        self.draining = False
        """The server said it is draining (module doc): start no new turn, resume after the
        close. ``reconnect`` clears it."""
        self.drains = 0
        """How many times a server this client was connected to drained."""
        self.gaps = 0
        """``seq`` numbers skipped in the stream (never received and never reported
        ``missing``): zero for a server that loses nothing."""
        self.duplicates = 0
        """Messages dropped because their ``seq`` was already seen (a server that replays
        exactly what was missed sends none)."""

    async def connect(
        self,
        *,
        role_id: str | None = None,
        requested_thread_id: str | None = None,
        previous_voice_session_id: str | None = None,
        output_sample_rate: int = 24_000,
        turn_detection: dict[str, Any] | None = None,
        extensions: dict[str, bool] | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Open a session; ``extensions`` replaces ``DEFAULT_EXTENSIONS`` (every extension but
        ``pause_playback`` on)."""
        self._ws = await self._open(timeout)
        self._reader = asyncio.create_task(self._read(), name="client-reader")
        start: dict[str, Any] = {
            "type": "openrealtime.session.start",
            "token": self.token,
            "extensions": dict(DEFAULT_EXTENSIONS if extensions is None else extensions),
            "session": {
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": INPUT_SAMPLE_RATE},
                        "turn_detection": ga_turn_detection(turn_detection),
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": output_sample_rate}},
                }
            },
        }
        if role_id is not None:
            start["model"] = role_id
        if requested_thread_id is not None:
            start["requested_thread_id"] = requested_thread_id
        if previous_voice_session_id is not None:
            start["previous_voice_session_id"] = previous_voice_session_id
        await self.send_json(start)
        created = await self.wait_for(lambda m: m.type in ("session.created", "error"), timeout)
        assert created.event is not None
        if created.type == "error":
            raise ClientClosed(json.dumps(created.event))
        self.config = created.event["session"]
        self.session = dict(self.config.get("openrealtime") or {})
        self.resume_token = str(self.session.get("resume_token") or "")
        return self.session

    async def _open(self, timeout: float) -> ClientConnection:
        return await websockets.connect(
            self.url, max_size=2**22, open_timeout=timeout, subprotocols=[Subprotocol(SUBPROTOCOL)]
        )

    async def reconnect(
        self,
        *,
        attempts: int = 5,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        timeout: float = 10.0,
        wait_for_replay: bool | None = None,
    ) -> dict[str, Any]:
        """Reconnect after a dropped connection and resume the session: retries with
        exponential backoff, replays what was missed (messages already seen are dropped by
        ``seq``), and keeps the rotated resume token. Waits grow from ``backoff`` to at most
        ``max_backoff``; an answer ``server_unavailable`` (the server's database is restarting)
        counts as a failed attempt. Returns the server's resumed event.

        If an attempt is cut before the answer arrives, the next one presents the same (old)
        token: the server hands out the same new token again until it is used (no lockout).
        When the server could not replay (``replayed`` is false: continued from the journal
        elsewhere; or ``missing`` is set) ``reconcile`` is filled in; numbering goes on from
        ``last_seq`` either way, so dedupe by ``seq`` keeps working."""
        last_error: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(max_backoff, backoff * 2 ** (attempt - 1)))
            await self._stop_reader()
            try:
                self._ws = await self._open(timeout)
                await self._ws.send(
                    json.dumps(
                        {
                            "type": "openrealtime.session.resume",
                            "token": self.token,
                            "session_id": self.session["id"],
                            "resume_token": self.resume_token,
                            "last_seq": self._last_seq,
                        }
                    )
                )
                first = json.loads(await asyncio.wait_for(self._ws.recv(), timeout))
            except (
                OSError,
                TimeoutError,
                websockets.ConnectionClosed,
                websockets.exceptions.InvalidHandshake,  # cut during the HTTP upgrade
            ) as e:
                last_error = e
                continue
            error = first.get("error") or {}
            if first.get("type") == "error" and (
                error.get("retryable") or error.get("code") == RETRY_LATER_CODE
            ):
                last_error = ClientClosed(json.dumps(first))  # the database is restarting …
                continue
            if first.get("type") != "openrealtime.session.resumed":
                raise ClientClosed(json.dumps(first))
            self.draining = False
            self.resume_token = str(first["resume_token"])
            self.session["id"] = first["session_id"]
            continued = first.get("session")  # sent when continued elsewhere
            if continued:
                self.config = continued
                self.session.update(continued.get("openrealtime") or {})
            self.reconcile = first.get("reconcile")
            if self.reconcile is not None:
                self.reconciles.append(self.reconcile)
            missing = first.get("missing")
            if missing:  # never coming: the replay starts after them
                self._last_seq = max(self._last_seq, int(missing[1]))
            self._reader = asyncio.create_task(self._read(), name="client-reader")
            wait = self.max_messages is None if wait_for_replay is None else wait_for_replay
            if not wait:
                return dict(first)
            # Return once the replay is in: everything up to the server's seq at the resume.
            try:
                await self.wait_for_seq(int(first.get("last_seq", 0)), timeout)
            except (ClientClosed, TimeoutError) as e:
                last_error = e  # dropped again during the replay: resume once more
                continue
            return dict(first)
        raise ClientClosed(f"could not resume after {attempts} attempts: {last_error}")

    async def drop(self) -> None:
        """Cut the connection without ending the session (as a network failure would)."""
        await self._stop_reader()

    async def _stop_reader(self) -> None:
        await self.close()
        self._reader = None

    async def _release_reader(self) -> None:
        """A bounded reader waiting for room stops waiting (its connection is being closed)."""
        if self.max_messages is not None:
            self._stopping = True
            async with self._arrived:
                self._arrived.notify_all()

    # ------------------------------------------------------------ sending

    async def send_json(self, message: dict[str, Any]) -> None:
        assert self._ws is not None
        await self._ws.send(json.dumps(message))

    async def send_raw(self, data: str | bytes) -> None:
        assert self._ws is not None
        await self._ws.send(data)

    async def send_audio(self, pcm: bytes) -> None:
        assert self._ws is not None
        await self._ws.send(pcm)

    async def commit(self) -> None:
        await self.send_json({"type": "input_audio_buffer.commit"})

    async def send_text(self, text: str) -> None:
        """A typed user turn, answered: ``conversation.item.create`` then ``response.create``."""
        await self.add_text(text)
        await self.send_json({"type": "response.create"})

    async def add_text(self, text: str) -> None:
        """A user text item only (no response is asked for)."""
        await self.send_json(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                },
            }
        )

    async def end_session(self) -> None:
        """End the session for good (it cannot be resumed afterwards)."""
        await self.send_json({"type": "openrealtime.session.close"})

    async def cancel(self) -> None:
        await self.send_json({"type": "response.cancel"})

    async def pause(self) -> None:
        await self.send_json({"type": "openrealtime.input.pause"})

    async def resume(self) -> None:
        await self.send_json({"type": "openrealtime.input.resume"})

    async def report_playback(self, generation: int, played_ms: float) -> None:
        await self.send_json(
            {"type": "openrealtime.playback", "generation": generation, "played_ms": played_ms}
        )

    async def ack(self) -> None:
        await self.send_json({"type": "openrealtime.ack", "seq": self._last_seq})

    # ------------------------------------------------------------ receiving

    async def wait_for(
        self, predicate: Callable[[Received], bool], timeout: float = 10.0
    ) -> Received:
        """The first message after the cursor matching ``predicate``; moves the cursor past it."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                while True:
                    for index in range(self._cursor, len(self.messages)):
                        if predicate(self.messages[index]):
                            self._cursor = index + 1
                            if self.max_messages is not None:
                                self._arrived.notify_all()  # a reader may wait for room
                            return self.messages[index]
                    if self.max_messages is not None and self._cursor < len(self.messages):
                        self._cursor = len(self.messages)  # skipped: consumed too
                        self._arrived.notify_all()
                    if self._reader is None or self._reader.done():
                        raise ClientClosed(f"connection closed (code {self.close_code})")
                    await self._arrived.wait()

    async def next_message(self, timeout: float = 10.0) -> Received:
        """The next message after the cursor, whatever it is (for a client's own event loop)."""
        return await self.wait_for(lambda m: True, timeout)

    async def skip_through(self, seq: int) -> int:
        """Move the cursor past the unread messages numbered up to ``seq``; returns how many.
        After a resume answered with a ``reconcile`` from ``seq + 1`` on, the journal's account
        replaces what the old stream said: an unread ``response.done`` from before the drop
        (a request refused ``model_busy`` just before the connection was cut, say) is not the
        answer to a request sent after the resume."""
        async with self._arrived:
            start = self._cursor
            while self._cursor < len(self.messages) and self.messages[self._cursor].seq <= seq:
                self._cursor += 1
            if self.max_messages is not None:
                self._arrived.notify_all()  # a reader may wait for room
            return self._cursor - start

    async def wait_for_seq(self, seq: int, timeout: float = 10.0) -> None:
        """Until every message up to ``seq`` has arrived (or the connection closed)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                while self._last_seq < seq:
                    if self._reader is None or self._reader.done():
                        raise ClientClosed(f"connection closed (code {self.close_code})")
                    await self._arrived.wait()

    async def wait_type(self, kind: str, timeout: float = 10.0) -> dict[str, Any]:
        message = await self.wait_for(lambda m: m.type == kind, timeout)
        assert message.event is not None
        return message.event

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            m.event
            for m in self.messages
            if m.event is not None and (kind is None or m.event.get("type") == kind)
        ]

    def audio(self, generation: int | None = None) -> list[Received]:
        return [
            m
            for m in self.messages
            if m.audio is not None and (generation is None or m.generation == generation)
        ]

    def played_ms(self, generation: int, now: float | None = None) -> float:
        """What a real-time player would have played of ``generation`` by ``now``: playback
        starts when its first frame arrives and cannot run ahead of what arrived."""
        frames = self.audio(generation)
        if not frames:
            return 0.0
        rate = int(self.session.get("output_sample_rate", 24_000))
        received_ms = sum(len(m.audio or b"") for m in frames) / 2 * 1000 / rate
        elapsed_ms = ((now if now is not None else self.clock()) - frames[0].at) * 1000
        return max(0.0, min(received_ms, elapsed_ms))

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for data in self._ws:
                now = self.clock()
                if isinstance(data, bytes):
                    seq, generation, pcm = decode_audio(data)
                    message = Received(seq, now, audio=pcm, generation=generation)
                else:
                    event = json.loads(data)
                    message = Received(int(event.get("seq", 0)), now, event=event)
                if message.seq and message.seq <= self._last_seq:
                    self.duplicates += 1
                    continue
                if message.seq > self._last_seq + 1:
                    self.gaps += message.seq - self._last_seq - 1
                self._last_seq = max(self._last_seq, message.seq)
                if message.type == "openrealtime.server.draining" and not self.draining:
                    self.draining = True
                    self.drains += 1
                if self.draining or self._last_seq - self._acked >= self.ack_every:
                    # Acknowledge now and then, so the server's replay window stays small.
                    self._acked = self._last_seq
                    await self._ws.send(
                        json.dumps({"type": "openrealtime.ack", "seq": self._acked})
                    )
                async with self._arrived:
                    if self.max_messages is not None:
                        await self._make_room(self.max_messages)
                    self.messages.append(message)
                    self._arrived.notify_all()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self._ws.close_code
            async with self._arrived:
                self._arrived.notify_all()

    async def _make_room(self, limit: int) -> None:
        """Called holding ``_arrived``: drop consumed messages once ``limit`` are held (all of
        them at once, so this costs little per message), then wait while ``limit`` are unread."""
        while len(self.messages) >= limit and not self._stopping:
            if self._cursor:
                del self.messages[: self._cursor]
                self._cursor = 0
                continue
            await self._arrived.wait()

    async def wait_closed(self, timeout: float = 5.0) -> int | None:
        if self._reader is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.close_code

    async def close(self) -> None:
        await self._release_reader()
        try:
            if self._ws is not None:
                await self._ws.close()
            if self._reader is not None:
                with contextlib.suppress(BaseException):
                    await self._reader
        finally:
            self._stopping = False

    async def __aenter__(self) -> RealtimeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
