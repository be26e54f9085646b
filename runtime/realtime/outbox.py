"""Outbox: the ordered, numbered, bounded stream of everything a session sends.

Theory of operation
-------------------
Every server → client message gets the next ``seq`` at the moment it is written, so ``seq``
order is send order. The engine calls ``send_event``/``send_audio`` synchronously; when nothing
is queued the message is written at once on the caller's stack (the ASGI ``send`` of a writable
WebSocket completes without suspending, so no task switch stands between the engine and the
socket). Only when a write has to wait (transport flow control) does a drain task take over,
and later messages queue behind it in order. Queued audio is checked against ``is_current`` when
it is dequeued, so frames of a generation interrupted meanwhile are dropped, never sent.

Bounds: at most ``max_queued`` messages wait; beyond that ``overflowed`` is set and the session
closes with 4010 (slow consumer).

Media (WebRTC): when the link carries the agent's voice as a media track (``media``), every
event is offered to it first; it takes the audio (which then is neither numbered nor kept: it
is played out live, never replayed) and notes playback control, and the rest is sent as usual.

Telemetry: ``tap``, when set, sees every event handed to ``send`` before anything else happens
to it (``runtime/telemetry.py``).

Replay window (for resuming after a dropped connection): every message written is also kept,
encoded, until the client acknowledges it (``ack``) — at most ``max_replay_bytes`` and
``max_replay_age_s`` of it. ``replay_after(seq)`` returns what a reconnecting client missed, and
the range the window can no longer supply.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import types
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from pipeline.audio_formats import PCM24K, AudioFormat, compand
from pipeline.events import ExtensionEvent, OutputAudioDelta, ServerEvent
from runtime.realtime.protocol import Extensions, encode_audio, encode_event
from runtime.realtime.transport import MediaOut

log = logging.getLogger(__name__)

SendText = Callable[[str], Awaitable[None]]
SendBytes = Callable[[bytes], Awaitable[None]]


NO_EXTENSIONS = Extensions(events=False, seq=False, binary_audio=False, pause_playback=False)
"""A GA-only client: no ``seq``, no extension events or fields, audio as base64 JSON."""


class Outbox:
    def __init__(
        self,
        *,
        send_text: SendText,
        send_bytes: SendBytes,
        is_current: Callable[[int], bool],
        max_queued: int,
        max_replay_bytes: int = 1024 * 1024,
        max_replay_age_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send_text = send_text
        self._send_bytes = send_bytes
        self.is_current = is_current
        self.max_queued = max_queued
        self.seq = 0
        self.acked = 0
        self.overflowed = False
        self.failed = False
        self._queue: deque[ServerEvent] = deque()
        self._drain: asyncio.Task[None] | None = None
        self.max_replay_bytes = max_replay_bytes
        self.max_replay_age_s = max_replay_age_s
        self.clock = clock
        self._sent: deque[tuple[int, float, str | bytes]] = deque()
        self._sent_bytes = 0
        self.detached = False
        """No connection: messages are numbered and kept for replay, not written."""
        self._replaying = False
        self.output_format: AudioFormat = PCM24K
        """The session's output format: G.711 audio is companded here, at the edge."""
        self.extensions = NO_EXTENSIONS
        """What the client negotiated (``runtime.realtime.protocol.Extensions``); set by the
        session."""
        self._event_prefix = f"event_{uuid.uuid4().hex[:10]}_"
        self.media: MediaOut | None = None
        """The link's media track, when it plays the agent's voice itself (module doc)."""
        self.tap: Callable[[ServerEvent], None] | None = None
        """Sees every event first, whatever happens to it next: the process's metrics and
        traces (``runtime/telemetry.py``)."""

    # ------------------------------------------------------------ engine side (OutputSink)

    def send(self, event: ServerEvent) -> None:
        if self.tap is not None:
            self.tap(event)
        media = self.media
        if media is not None and media.take(event):
            return
        if isinstance(event, ExtensionEvent) and not self.extensions.events:
            return  # a GA-only client never sees an extension event
        self._submit(event)

    def ack(self, seq: int) -> None:
        self.acked = max(self.acked, min(seq, self.seq))
        sent = self._sent
        while sent and sent[0][0] <= self.acked:
            self._sent_bytes -= len(sent.popleft()[2])

    def replay_after(self, seq: int) -> tuple[list[str | bytes], tuple[int, int] | None]:
        """Messages with a higher ``seq`` still in the window, in order, and the range
        ``(first, last)`` of those after ``seq`` the window no longer holds (None if none)."""
        self._trim()
        retained = [data for s, _, data in self._sent if s > seq]
        oldest = self._sent[0][0] if self._sent else self.seq + 1
        missing = (seq + 1, oldest - 1) if oldest - 1 > seq else None
        return retained, missing

    def _retain(self, seq: int, data: str | bytes) -> None:
        self._sent.append((seq, self.clock(), data))
        self._sent_bytes += len(data)
        self._trim()

    def _trim(self) -> None:
        sent = self._sent
        horizon = self.clock() - self.max_replay_age_s
        while sent and (self._sent_bytes > self.max_replay_bytes or sent[0][1] < horizon):
            self._sent_bytes -= len(sent.popleft()[2])

    # ------------------------------------------------------------ writing

    def detach(self) -> None:
        """The connection dropped: keep numbering and keeping messages, stop writing."""
        self.detached = True
        self.failed = False
        self._set_media(None)
        while self._queue:
            coro = self._encode(self._queue.popleft())
            if coro is not None:
                coro.close()

    def attach(
        self, send_text: SendText, send_bytes: SendBytes, media: MediaOut | None = None
    ) -> None:
        """A new connection: new messages wait behind the replay (``replay_done``)."""
        self._send_text, self._send_bytes = send_text, send_bytes
        self._set_media(media)
        self.detached = False
        self.failed = False
        self._replaying = True

    def _set_media(self, media: MediaOut | None) -> None:
        if self.media is not None and self.media is not media:
            self.media.detach()
        self.media = media

    def replay_done(self) -> None:
        """The replay was written: what queued meanwhile goes out, in order, then live."""
        self._replaying = False
        if self._queue and self._drain is None:
            self._drain = asyncio.ensure_future(self._finish(None, None))

    def _submit(self, item: ServerEvent) -> None:
        if self.failed or self.detached:
            coro = self._encode(item)  # numbered and kept for replay
            if coro is not None:
                coro.close()
            return
        if self._drain is None and not self._queue and not self._replaying:
            self._write_now(item)
            return
        if len(self._queue) >= self.max_queued:
            self.overflowed = True
            return
        self._queue.append(item)

    def _encode(self, item: ServerEvent) -> Coroutine[Any, Any, None] | None:
        """Number and encode one event; None for audio of a generation no longer current."""
        extensions = self.extensions
        if isinstance(item, OutputAudioDelta):
            if not self.is_current(item.generation):
                return None
            if self.output_format.kind != "audio/pcm":
                item = dataclasses.replace(item, delta=compand(self.output_format, item.delta))
            if extensions.binary_audio:
                self.seq += 1
                audio = encode_audio(self.seq, item.generation, item.delta)
                if extensions.seq:
                    self._retain(self.seq, audio)
                return _as_coroutine(self._send_bytes(audio))
        self.seq += 1
        text = encode_event(
            item,
            event_id=f"{self._event_prefix}{self.seq}",
            seq=self.seq if extensions.seq else None,
            extensions=extensions.events,
        )
        if extensions.seq:
            self._retain(self.seq, text)
        return _as_coroutine(self._send_text(text))

    def _write_now(self, item: ServerEvent) -> None:
        coro = self._encode(item)
        if coro is None:
            return
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return
        except Exception as e:
            self._fail(e)
            return
        # The write must wait: a task finishes it, then drains what queues up meanwhile.
        self._drain = asyncio.ensure_future(self._finish(coro, waiting_on))

    async def _finish(self, coro: Coroutine[Any, Any, None] | None, waiting_on: Any) -> None:
        try:
            if coro is not None:
                await _resume(coro, waiting_on)
            while self._queue and not self.failed:
                next_coro = self._encode(self._queue.popleft())
                if next_coro is not None:
                    await next_coro
        except Exception as e:
            self._fail(e)
        finally:
            self._drain = None

    def _fail(self, error: BaseException) -> None:
        """The connection broke: what still waits is numbered and kept for a resume."""
        log.debug("outbox write failed: %s", error)
        self.failed = True
        while self._queue:
            coro = self._encode(self._queue.popleft())
            if coro is not None:
                coro.close()

    async def flush(self, timeout: float = 2.0) -> None:
        """Let queued messages go out, waiting at most ``timeout`` (then the write is given up)."""
        drain = self._drain
        if drain is not None:
            try:
                await asyncio.wait_for(asyncio.shield(drain), timeout)
            except (TimeoutError, Exception):
                drain.cancel()
                with contextlib.suppress(BaseException):
                    await drain

    async def close(self, timeout: float = 2.0) -> None:
        """Let queued messages go out (bounded by ``timeout``), then stop."""
        await self.flush(timeout)
        self.failed = True
        self._queue.clear()
        self._set_media(None)


async def _as_coroutine_impl(awaitable: Awaitable[None]) -> None:
    await awaitable


def _as_coroutine(awaitable: Awaitable[None]) -> Coroutine[Any, Any, None]:
    if asyncio.iscoroutine(awaitable):
        return awaitable
    return _as_coroutine_impl(awaitable)


@types.coroutine
def _yield(value: Any) -> Generator[Any, Any, Any]:
    """Yield ``value`` to the running task exactly as the suspended coroutine did."""
    return (yield value)


async def _resume(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    """Drive a coroutine that already ran to its first suspension, from inside a task.

    Each object it yields (an asyncio future) is passed up to this task unchanged, and the
    value or exception the task is resumed with is passed down, so the coroutine cannot tell
    it was started on another stack."""
    while True:
        try:
            sent = await _yield(waiting_on)
        except BaseException as e:
            try:
                waiting_on = coro.throw(e)
            except StopIteration:
                return
            continue
        try:
            waiting_on = coro.send(sent)
        except StopIteration:
            return
