"""The WebSocket protocol: message schemas, limits, error and close codes (docs/protocol.md).

Theory of operation
-------------------
``parse_client_message`` is the only way client bytes become a message. It is pure: given the
raw frame and the limits it returns a typed message or raises ``ProtocolError`` carrying a stable
``code``; the session turns that into an ``error`` event and carries on. Nothing a client sends
can raise anything else out of this module.

Server → client text messages are JSON objects with ``type`` and ``seq``. Server → client audio
is a binary message: a 12-byte little-endian header (``seq`` u64, ``generation`` u32) followed by
PCM16 mono at the session's output rate. Client → server binary messages are raw PCM16 mono
16 kHz.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pipeline.audio import INPUT_SAMPLE_RATE

AUDIO_HEADER = struct.Struct("<QI")


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
    """No valid ``session.start`` in time."""
    TOO_MANY_ERRORS = 4009
    SUPERSEDED = 4012
    """Another connection resumed this session (the older connection is fenced off)."""
    SLOW_CONSUMER = 4010
    """The client did not read its messages; the outbound queue filled up."""
    JOURNAL_UNAVAILABLE = 4011
    """The journal stayed unreachable until the session's buffer of unsaved events filled."""
    CREDENTIALS_REVOKED = 4013
    """The token that opened the session was revoked or expired, or its user was disabled."""
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


class ProtocolError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    max_message_bytes: int = 256 * 1024
    """Largest client message handled; larger ones get ``message_too_large``."""
    max_audio_frame_ms: int = 500
    max_text_chars: int = 4_000

    @property
    def max_audio_frame_bytes(self) -> int:
        return INPUT_SAMPLE_RATE * 2 * self.max_audio_frame_ms // 1000


# ---------------------------------------------------------------- client messages


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    event_id: str | None = Field(default=None, max_length=128)


class TurnDetection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["server_vad", "none"] = "server_vad"
    silence_duration_ms: int | None = Field(default=None, ge=0, le=10_000)
    min_interrupt_ms: int | None = Field(default=None, ge=0, le=5_000)


class SessionStart(_Message):
    type: Literal["session.start"]
    token: str | None = Field(default=None, max_length=512)
    role_id: str | None = Field(default=None, max_length=128)
    requested_thread_id: str | None = Field(default=None, max_length=128)
    """Continue this thread (with ``previous_voice_session_id``) instead of starting one."""
    previous_voice_session_id: str | None = Field(default=None, max_length=128)
    output_sample_rate: Literal[16000, 22050, 24000, 48000] = 24000
    turn_detection: TurnDetection = TurnDetection()


class SessionResume(_Message):
    """Pick up a session after a dropped connection (first message of the new connection)."""

    type: Literal["session.resume"]
    token: str | None = Field(default=None, max_length=512)
    session_id: str = Field(max_length=128)
    resume_token: str = Field(max_length=512)
    last_seq: int = Field(ge=0)


class AudioAppend(_Message):
    type: Literal["input_audio_buffer.append"]
    audio: str = Field(max_length=1_000_000)


class AudioCommit(_Message):
    type: Literal["input_audio_buffer.commit"]


class InputText(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["input_text"]
    text: str


class UserItem(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["message"] = "message"
    role: Literal["user"]
    content: list[InputText] = Field(min_length=1, max_length=16)


class ItemCreate(_Message):
    type: Literal["conversation.item.create"]
    item: UserItem


class ResponseCancel(_Message):
    type: Literal["response.cancel"]


class InputPause(_Message):
    type: Literal["openrealtime.input.pause"]


class InputResume(_Message):
    type: Literal["openrealtime.input.resume"]


class PlaybackProgress(_Message):
    type: Literal["openrealtime.playback"]
    generation: int = Field(ge=0)
    played_ms: float = Field(ge=0, le=3_600_000)


class Ack(_Message):
    type: Literal["openrealtime.ack"]
    seq: int = Field(ge=0)


class SessionClose(_Message):
    type: Literal["session.close"]


ClientMessage = Annotated[
    SessionStart
    | SessionResume
    | AudioAppend
    | AudioCommit
    | ItemCreate
    | ResponseCancel
    | InputPause
    | InputResume
    | PlaybackProgress
    | Ack
    | SessionClose,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)
KNOWN_TYPES = frozenset(
    {
        "session.start",
        "session.resume",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "conversation.item.create",
        "response.cancel",
        "openrealtime.input.pause",
        "openrealtime.input.resume",
        "openrealtime.playback",
        "openrealtime.ack",
        "session.close",
    }
)


@dataclass(frozen=True, slots=True)
class AudioFrame:
    pcm: bytes


def parse_client_message(data: str | bytes, limits: Limits) -> ClientMessage | AudioFrame:
    """Parse one client WebSocket message; raises ``ProtocolError`` for anything invalid."""
    if isinstance(data, bytes):
        if len(data) > limits.max_message_bytes:
            raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
        return check_audio(data, limits)
    if len(data) > limits.max_message_bytes:  # chars ≤ bytes, so this is a cheap first bound
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
    if len(data.encode("utf-8", "surrogatepass")) > limits.max_message_bytes:
        raise ProtocolError(ErrorCode.MESSAGE_TOO_LARGE, _too_large(len(data), limits))
    try:
        raw: Any = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message must be a JSON object")
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, "a message needs a string 'type'")
    if kind not in KNOWN_TYPES:
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind[:64]!r}")
    try:
        message = _ADAPTER.validate_python(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProtocolError(
            ErrorCode.INVALID_MESSAGE, f"{kind}: {where}: {first.get('msg')}"
        ) from None
    if isinstance(message, ItemCreate):
        text = "".join(part.text for part in message.item.content)
        if len(text) > limits.max_text_chars:
            raise ProtocolError(
                ErrorCode.TEXT_TOO_LONG, f"text is longer than {limits.max_text_chars} characters"
            )
    return message


def decode_append(message: AudioAppend, limits: Limits) -> AudioFrame:
    try:
        pcm = base64.b64decode(message.audio, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(ErrorCode.INVALID_AUDIO, "audio is not valid base64") from None
    return check_audio(pcm, limits)


def check_audio(pcm: bytes, limits: Limits) -> AudioFrame:
    if len(pcm) % 2:
        raise ProtocolError(
            ErrorCode.ODD_LENGTH_AUDIO, "PCM16 audio must have an even number of bytes"
        )
    if len(pcm) > limits.max_audio_frame_bytes:
        raise ProtocolError(
            ErrorCode.AUDIO_FRAME_TOO_LONG,
            f"an audio frame may hold at most {limits.max_audio_frame_ms} ms",
        )
    return AudioFrame(pcm)


def _too_large(size: int, limits: Limits) -> str:
    return f"message of {size} bytes exceeds the limit of {limits.max_message_bytes}"


# ---------------------------------------------------------------- server messages


def encode_event(seq: int, event: dict[str, Any]) -> str:
    return json.dumps({**event, "seq": seq}, ensure_ascii=False, separators=(",", ":"))


def encode_audio(seq: int, generation: int, pcm: bytes) -> bytes:
    return AUDIO_HEADER.pack(seq, generation) + pcm


def decode_audio(data: bytes) -> tuple[int, int, bytes]:
    """Client side: split a server audio message into (seq, generation, pcm)."""
    seq, generation = AUDIO_HEADER.unpack_from(data)
    return seq, generation, data[AUDIO_HEADER.size :]


def error_event(code: str, message: str, *, retryable: bool = False) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "retryable": retryable,
        },
    }
