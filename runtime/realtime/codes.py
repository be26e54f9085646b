"""The protocol's stable codes: WebSocket close codes and ``error`` event codes (docs/protocol.md).

A client may branch on them, so a code never changes its meaning; a new condition gets a new
code. ``runtime.realtime.protocol`` exports both classes by name.
"""

from __future__ import annotations


class CloseCode:
    """WebSocket close codes the server uses. Recoverable closes never use 1000."""

    NORMAL = 1000
    """The client asked to end the session (``session.close``)."""
    MESSAGE_TOO_BIG = 1009
    """A frame above the hard transport limit (``hard_max_message_bytes``)."""
    SERVER_SHUTDOWN = 1012
    UNAUTHORIZED = 4001
    FORBIDDEN = 4003
    START_TIMEOUT = 4008
    """A connection in first-message mode sent no valid ``openrealtime.session.start`` (or
    ``.resume``) in time."""
    TOO_MANY_ERRORS = 4009
    SUPERSEDED = 4012
    """Another connection resumed this session (the older connection is fenced off)."""
    SLOW_CONSUMER = 4010
    """The client did not read its messages; the outbound queue filled up."""
    JOURNAL_UNAVAILABLE = 4011
    """The journal stayed unreachable until the session's buffer of unsaved events filled."""
    CREDENTIALS_REVOKED = 4013
    """The token that opened the session was revoked or expired, or its user was disabled."""
    TRY_AGAIN_LATER = 1013
    """The handshake needed the database and it could not be reached (after a retryable
    ``server_unavailable`` error): reconnect or resume a moment later."""
    TOO_MANY_SESSIONS = 4029
    """The user already has ``max_live_sessions_per_user`` live sessions on this server."""


class ErrorCode:
    INVALID_JSON = "invalid_json"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_TYPE = "unknown_message_type"
    SESSION_NOT_STARTED = "session_not_started"
    SESSION_ALREADY_STARTED = "session_already_started"
    UNAUTHORIZED = "unauthorized"
    CREDENTIALS_REVOKED = "credentials_revoked"
    TOO_MANY_SESSIONS = "too_many_sessions"
    SERVER_UNAVAILABLE = "server_unavailable"
    ROLE_NOT_FOUND = "role_not_found"
    ROLE_MISMATCH = "role_mismatch"
    THREAD_NOT_FOUND = "thread_not_found"
    RESUME_REFUSED = "resume_refused"
    TOKEN_IN_URL = "token_in_url"
    PREVIOUS_SESSION_UNKNOWN = "previous_session_not_in_thread"
    MESSAGE_TOO_LARGE = "message_too_large"
    ODD_LENGTH_AUDIO = "odd_length_audio"
    AUDIO_FRAME_TOO_LONG = "audio_frame_too_long"
    INVALID_AUDIO = "invalid_audio"
    COMMIT_EMPTY = "input_audio_buffer_commit_empty"
    NO_RESPONSE = "response_cancel_not_active"
    TEXT_TOO_LONG = "text_too_long"
    MICROPHONE_PAUSED = "microphone_paused"
    UNKNOWN_PARAMETER = "unknown_parameter"
    INVALID_VALUE = "invalid_value"
    UNSUPPORTED = "unsupported_parameter"
    ITEM_NOT_FOUND = "item_not_found"
    BINARY_NOT_NEGOTIATED = "binary_audio_not_negotiated"
    INTERNAL = "internal_error"
    """A bug on our side handling one message; the session goes on (and it is logged)."""


__all__ = ["CloseCode", "ErrorCode"]
