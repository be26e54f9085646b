"""A WebRTC call's ``Link``: JSON events on its ``oai-events`` data channel, voice on its track.

The realtime connection (``runtime.realtime.connection``) reads and writes a call through this
as it does a WebSocket (``runtime.realtime.transport.Link``): events written before the channel
opens wait (at most ``_MAX_PENDING``), a send waits while more than ``_HIGH_WATER`` bytes are
buffered, a peer that sends faster than the session reads is dropped, and every receive after
the peer went away raises ``Disconnected``. An offer without a data channel is a voice-only
call: events are dropped, the call ends with its peer connection. (``runtime.webrtc.calls``
owns the call; rule 1 there.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

from aiortc import RTCDataChannel

from runtime.errors import Disconnected
from runtime.realtime.transport import MediaOut
from runtime.webrtc.track import VoiceTrack

EVENTS_CHANNEL = "oai-events"
_MAX_PENDING = 4_000
"""Messages a call keeps for its data channel before it opens (the outbox's own bound)."""
_MAX_INBOX = 1_000
_HIGH_WATER = 1024 * 1024
"""Bytes buffered on the data channel before a send waits for the peer to read."""


class CallLink:
    """The call's ``Link``: JSON events on ``oai-events``, voice on the track (rule 1)."""

    def __init__(self, track: VoiceTrack, *, connect_timeout_s: float) -> None:
        self.media: MediaOut | None = track
        self.connect_timeout_s = connect_timeout_s
        self.close_peer: Callable[[], asyncio.Future[None]] | None = None
        """Closes the peer connection, once (``Call.close_peer``)."""
        self._channel: RTCDataChannel | None = None
        self._pending: deque[str | bytes] = deque()
        self._inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue(_MAX_INBOX)
        self._opened = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.gone = False
        self._voice_only = False

    def bind_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self._channel is not None:
            channel.close()
            return
        self._channel = channel
        channel.bufferedAmountLowThreshold = _HIGH_WATER // 4

        @channel.on("message")
        def on_message(message: str | bytes) -> None:
            try:
                self._inbox.put_nowait(message)
            except asyncio.QueueFull:
                self.lost()  # the peer sends faster than the session reads: dropped

        @channel.on("bufferedamountlow")
        def on_low() -> None:
            self._writable.set()

        channel.on("close", self.lost)
        if channel.readyState == "open":
            self._open()
        else:
            channel.on("open", self._open)

    def voice_only(self) -> None:
        """An offer without a data channel: voice both ways, no events (they are dropped); the
        call ends with its peer connection."""
        self._voice_only = True
        self._pending.clear()
        self._opened.set()

    def _open(self) -> None:
        channel = self._channel
        assert channel is not None
        while self._pending and not self.gone:
            channel.send(self._pending.popleft())
        self._opened.set()

    def lost(self) -> None:
        """The peer went away (or the call is being torn down)."""
        if self.gone:
            return
        self.gone = True
        self._writable.set()
        self._opened.set()
        with contextlib.suppress(asyncio.QueueFull):
            self._inbox.put_nowait(None)
        if self._inbox.full():  # make room for the end marker: the loop must see the end
            with contextlib.suppress(asyncio.QueueEmpty):
                self._inbox.get_nowait()
            self._inbox.put_nowait(None)

    async def send_text(self, data: str) -> None:
        await self._send(data)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(data)

    async def _send(self, data: str | bytes) -> None:
        if self.gone:
            raise Disconnected()
        if self._voice_only:
            return
        channel = self._channel
        if channel is None or channel.readyState != "open":
            if len(self._pending) >= _MAX_PENDING:
                raise Disconnected()
            self._pending.append(data)
            return
        channel.send(data)
        if channel.bufferedAmount > _HIGH_WATER:
            self._writable.clear()
            await self._writable.wait()
            if self.gone:
                raise Disconnected()

    async def receive(self) -> str | bytes:
        if not self._opened.is_set():
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    await self._opened.wait()
            except TimeoutError:
                self.lost()
        message = await self._inbox.get()
        if message is None:
            self._inbox.put_nowait(None)  # every later receive sees the end too
            raise Disconnected()
        return message

    async def close(self, code: int, reason: str) -> None:
        """Close the call's peer connection (no close code travels over WebRTC: the error
        event before it says why)."""
        self.lost()
        if self.close_peer is not None:
            await asyncio.shield(self.close_peer())


__all__ = ["EVENTS_CHANNEL", "CallLink"]
