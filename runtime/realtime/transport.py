"""Links: what a realtime connection sends and receives on, whatever carries it.

A connection (``runtime.realtime.connection``) speaks the protocol's JSON events over a ``Link``: a
WebSocket (``WebSocketLink``), or the ``oai-events`` data channel of a WebRTC call
(``runtime.webrtc.calls``). A link that carries the agent's voice as media (WebRTC's audio track)
also has ``media``: the outbox hands it audio and playback control instead of sending audio events
(``MediaOut``). ``receive`` raises ``Disconnected`` once the peer has gone.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from accounts.model import Principal
from pipeline.events import ServerEvent
from runtime.errors import Disconnected


class MediaOut(Protocol):
    """The agent's voice as a media stream the server plays out itself (WebRTC): it is handed
    every server event before it is sent and takes the audio ones (``take`` → True); it knows
    what it has played, so it reports playback instead of the client."""

    def take(self, event: ServerEvent) -> bool: ...

    def clear(self) -> None:
        """Drop what is left of the answer playing (``output_audio_buffer.clear``)."""

    def detach(self) -> None:
        """No longer the session's output (the link dropped or another took over)."""


class Link(Protocol):
    media: MediaOut | None

    async def send_text(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def receive(self) -> str | bytes: ...

    async def close(self, code: int, reason: str) -> None: ...


class WebSocketLink:
    """A realtime WebSocket (the ASGI socket; ``websocket`` for the handshake's headers)."""

    media: MediaOut | None = None

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    async def send_text(self, data: str) -> None:
        await self.websocket.send_text(data)

    async def send_bytes(self, data: bytes) -> None:
        await self.websocket.send_bytes(data)

    async def receive(self) -> str | bytes:
        message = await self.websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise Disconnected(message.get("code", 1000))
        text = message.get("text")
        if text is not None:
            return str(text)
        return bytes(message.get("bytes") or b"")

    async def close(self, code: int, reason: str) -> None:
        await self.websocket.close(code, reason)


SEND_FAILURES = (Disconnected, WebSocketDisconnect, RuntimeError, OSError)
"""What a send on a link that went away raises."""


class Call(Protocol):
    """A WebRTC call as the registry sees it (``runtime.webrtc.calls.Call``)."""

    id: str
    principal: Principal

    @property
    def session_id(self) -> str | None: ...

    async def hang_up(self) -> None: ...

    async def close(self) -> None: ...


class Calls:
    """The WebRTC calls this process serves (``Services.calls``); each counts against
    ``max_sessions`` while it lives (``active``)."""

    ENDED_KEPT = 1024

    def __init__(self, active: set[str]) -> None:
        self._calls: dict[str, Call] = {}
        self._active = active
        self._ended: dict[str, tuple[str, str, str]] = {}
        """Calls that ended, newest last: (tenant, user, session id) — a hangup that comes
        after its peer connection dropped still finds the session (bounded)."""

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, call: Call) -> None:
        self._calls[call.id] = call
        self._active.add(call.id)

    def forget(self, call: Call) -> None:
        if self._calls.get(call.id) is call:
            del self._calls[call.id]
            self._active.discard(call.id)
            if call.session_id is not None:
                owner = call.principal
                self._ended[call.id] = (owner.tenant, owner.user, call.session_id)
                while len(self._ended) > self.ENDED_KEPT:
                    del self._ended[next(iter(self._ended))]

    def ended_session(self, call_id: str, principal: Principal) -> str | None:
        """The session an ended call of ``principal``'s served (None: unknown, or another
        user's)."""
        found = self._ended.get(call_id)
        if found is None or found[:2] != (principal.tenant, principal.user):
            return None
        return found[2]

    def find(self, call_id: str, principal: Principal) -> Call | None:
        """The call, if it is ``principal``'s (another user's answers as unknown)."""
        call = self._calls.get(call_id)
        if call is None:
            return None
        owner = call.principal
        if (owner.tenant, owner.user) != (principal.tenant, principal.user):
            return None
        return call

    async def close(self) -> None:
        for call in list(self._calls.values()):
            with contextlib.suppress(Exception):
                await call.close()
