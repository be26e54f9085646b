"""The realtime path's exceptions, in one place: raised in one module of the connection, the
session, the dispatch or a WebRTC call and handled in another. (The stores' errors stay beside
their contracts — ``records.py``, ``roles.py``, ``thread_memory.py``, ``database.py`` — and a
module keeps the ones it raises and catches itself.)

Theory of operation
-------------------
``ProtocolError``      a client message the server cannot take: an ``error`` event with a
                       stable code; the session goes on (``realtime/protocol.py`` parses).
``Refused``            the server will not go on with the connection: an ``error`` event,
                       then a close with a documented code (docs/protocol.md).
  ``ContinuityRefused``  a resume or a continuation refused (``realtime/continuity.py``).
``Disconnected``       the peer went away; a link's ``receive`` raises it
                       (``realtime/transport.py``).
``SessionCloseRequested`` the client asked to end the session (``realtime/dispatch.py``).
``OfferRejected``      a WebRTC offer the server cannot answer (``webrtc/calls.py``): 400
                       ``invalid_sdp``. A typed error, so a bug elsewhere that raises
                       ``ValueError`` is never reported as the client's bad offer.
"""

from __future__ import annotations


class ProtocolError(Exception):
    def __init__(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        """The offending parameter's path (``session.audio.input.format.rate``), GA style."""
        self.event_id = event_id


class Refused(Exception):
    """The server will not go on with this connection: the ``error`` event
    ``error_code``/``message`` is sent, then the connection is closed with
    ``close_code``/``close_reason`` (docs/protocol.md, *Errors and close codes*)."""

    def __init__(
        self,
        error_code: str,
        message: str,
        close_code: int,
        close_reason: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.close_code = close_code
        self.close_reason = close_reason
        self.param = param
        self.event_id = event_id


class ContinuityRefused(Refused):
    """A continuation or resume is refused: send ``error_code``/``message``, then close."""


class Disconnected(Exception):
    """The peer went away (or the link was closed)."""


class SessionCloseRequested(Exception):
    """The client asked to end the session (Rule 3)."""


class OfferRejected(Exception):
    """A WebRTC offer the server cannot answer (malformed, or without audio)."""
