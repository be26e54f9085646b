"""WebRTC calls: ``POST /v1/realtime/calls``, as OpenAI's GA API has it (SPEC RTC-1).

Theory of operation
-------------------
A call is one RTCPeerConnection (aiortc) serving one voice session. The client offers an audio
track (its microphone, Opus) and the data channel ``oai-events``; it POSTs the offer — a bare
``application/sdp`` body, or multipart with ``sdp``, an optional GA ``session`` object and an
optional ``openrealtime`` part holding an ``openrealtime.session.start`` or
``openrealtime.session.resume`` message (extensions, a thread to continue, the resume token:
credentials travel in the body or the ``Authorization`` header, never the URL). The answer is
201 with the SDP answer and ``Location: /v1/realtime/calls/{call_id}``; a refusal is the error
JSON with the HTTP status its close code means (``_STATUS``).

Rule 1. One connection per call. The call's ``RealtimeConnection`` opens the session during the
        request (so a refusal is an HTTP error) on a ``CallLink``; messages written before the
        data channel opens wait in the link, in order, and go out when it opens. Then the
        connection's receive loop runs on the channel, as over a WebSocket: same parser, same
        policies, same errors.
Rule 2. Voice is media. The agent's audio never travels as ``response.output_audio.delta``:
        the outbox hands it to the call's ``VoiceTrack`` (``runtime.webrtc.track``), which
        plays it out in 20 ms frames at real time (aiortc encodes Opus). What left the track is
        what the peer heard: the track reports it as playback (``Engine.on_playback``), so the
        heard prefix of an interrupted answer is what was played, without client reports. Audio
        of a generation that is no longer current is dropped at once (``cleared``); a held
        answer's playback pauses in the track. The GA events ``output_audio_buffer.started`` /
        ``stopped`` / ``cleared`` come from here. The microphone's Opus is decoded by aiortc and
        resampled at the edge to the engine's 16 kHz mono.
Rule 3. Resume is a new offer. A dropped call's session waits for a resume as a WebSocket's
        does; the client POSTs a new offer carrying ``openrealtime.session.resume`` (aiortc has
        no ICE restart). The new call takes the session over and the old peer connection is
        closed.
Rule 4. Clean teardown. When the peer goes (data channel closed, ICE failed), when the call is
        hung up (``POST /v1/realtime/calls/{id}/hangup`` ends the session for good) or when the
        server stops, the call's tasks are cancelled and its peer connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aioice.ice
import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from pipeline.audio import INPUT_SAMPLE_RATE
from runtime.accounts import Principal
from runtime.errors import OfferRejected, ProtocolError, Refused
from runtime.http.api import ApiError, services_of
from runtime.http.policy import Policy, allow
from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.outbox import NO_EXTENSIONS
from runtime.realtime.protocol import (
    CloseCode,
    ErrorCode,
    Limits,
    SessionResume,
    SessionStart,
    parse_client_message,
)
from runtime.webrtc.link import CallLink
from runtime.webrtc.track import VoiceTrack

if TYPE_CHECKING:
    from runtime.realtime.session import VoiceSession
    from runtime.services import Services

log = logging.getLogger(__name__)

CALLS_PATH = "/v1/realtime/calls"


# ---------------------------------------------------------------- ICE candidates


_gather_all = aioice.ice.get_host_addresses


def restrict_host_addresses(addresses: list[str]) -> None:
    """Offer only ``addresses`` as host candidates (``Settings.webrtc_host_addresses``), e.g.
    ``127.0.0.1`` for calls on one machine; an empty list restores every interface. aioice
    gathers through a module function, so this applies to the process."""
    if not addresses:
        aioice.ice.get_host_addresses = _gather_all
        return
    chosen = list(addresses)

    def gather(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [a for a in chosen if (":" in a and use_ipv6) or (":" not in a and use_ipv4)]

    aioice.ice.get_host_addresses = gather


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# ---------------------------------------------------------------- calls


_STATUS = {
    CloseCode.UNAUTHORIZED: 401,
    CloseCode.CREDENTIALS_REVOKED: 401,
    CloseCode.FORBIDDEN: 403,
    CloseCode.TOO_MANY_SESSIONS: 429,
    CloseCode.SUPERSEDED: 409,
    CloseCode.TOO_MANY_ERRORS: 400,
}
_ERROR_STATUS = {
    ErrorCode.ROLE_NOT_FOUND: 404,
    ErrorCode.THREAD_NOT_FOUND: 404,
    ErrorCode.RESUME_REFUSED: 409,
    ErrorCode.INVALID_MESSAGE: 400,
    ErrorCode.INVALID_VALUE: 400,
    ErrorCode.UNKNOWN_PARAMETER: 400,
    ErrorCode.UNSUPPORTED: 400,
}


def refusal_response(refused: Refused) -> JSONResponse:
    status = _ERROR_STATUS.get(refused.error_code) or _STATUS.get(refused.close_code, 403)
    body: dict[str, Any] = {"code": refused.error_code, "message": refused.message}
    if refused.param is not None:
        body["param"] = refused.param
    return JSONResponse(body, status_code=status)


class Call:
    """One peer connection and the connection that serves its session (rules 1, 4)."""

    def __init__(self, services: Services, principal: Principal) -> None:
        settings = services.settings
        self.id = f"rtc_{uuid.uuid4().hex}"
        self.services = services
        self.principal = principal
        servers = [RTCIceServer(urls=url) for url in _split(settings.webrtc_ice_servers)]
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self.track = VoiceTrack()
        self.link = CallLink(self.track, connect_timeout_s=settings.webrtc_connect_timeout_s)
        self.link.close_peer = self.close_peer
        self._peer_closed: asyncio.Task[None] | None = None
        self.connection = RealtimeConnection(self.link, services)
        self.connection.principal = principal
        self.session: VoiceSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._serving: asyncio.Task[None] | None = None

        self.pc.on("datachannel", self.link.bind_channel)
        self.pc.on("track", self._on_track)
        self.pc.on("connectionstatechange", self._on_state)

    async def answer(self, offer_sdp: str) -> str:
        """Apply the offer; the SDP answer (with our candidates). ``OfferRejected`` when the
        offer is not one we can answer."""
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(offer_sdp, "offer"))
        except Exception as e:  # aiortc raises several kinds for a malformed offer
            raise OfferRejected(f"the SDP offer could not be applied: {e}") from None
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio"]
        if not audio:
            raise OfferRejected("the offer has no audio section")
        if self.pc.sctp is None:
            self.link.voice_only()
        audio[0].sender.replaceTrack(self.track)
        audio[0].direction = "sendrecv"
        answer = await self.pc.createAnswer()
        await self.pc.setLocalDescription(answer)
        local = self.pc.localDescription
        return str(local.sdp)

    async def open(self, first: SessionStart | SessionResume) -> None:
        """Rule 1: open (or resume) the session on this call; raises ``Refused``."""
        session = await self.connection.open(first)
        if session is None:  # cannot happen: nothing is written before the channel opens
            raise Refused(
                ErrorCode.RESUME_REFUSED,
                "the session could not be resumed; try again",
                CloseCode.SUPERSEDED,
                "resume failed",
            )
        self.session = session
        self.track.bind(session)
        self._serving = self._spawn(self._serve(session), "serve")

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(f"{self.id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve(self, session: VoiceSession) -> None:
        try:
            await self.connection.serve(session)
        except Exception:
            log.exception("call %s: the session failed", self.id)
        finally:
            await self.close(from_serve=True)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._shorten_jitter_buffer(track)
            self._spawn(self._listen(track), "microphone")

    def _shorten_jitter_buffer(self, track: MediaStreamTrack) -> None:
        """``webrtc_receive_buffer_frames``: aiortc fixes its audio jitter buffer's prefetch
        at 4 frames and offers no setting, so it is set on the receiver's buffer here."""
        frames = self.services.settings.webrtc_receive_buffer_frames
        for transceiver in self.pc.getTransceivers():
            if transceiver.receiver.track is track:
                buffer = getattr(transceiver.receiver, "_RTCRtpReceiver__jitter_buffer", None)
                if buffer is not None and hasattr(buffer, "_prefetch"):
                    buffer._prefetch = frames
                else:
                    log.warning("aiortc's jitter buffer is not where it was; left as it is")

    def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.link.lost()

    async def _listen(self, track: MediaStreamTrack) -> None:
        """The microphone: Opus decoded by aiortc, resampled at the edge to 16 kHz mono."""
        resampler = av.AudioResampler(format="s16", layout="mono", rate=INPUT_SAMPLE_RATE)
        connection = self.connection
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            session = connection.session
            if session is None or not session.holds(connection):
                continue
            assert isinstance(frame, av.AudioFrame)
            for out in resampler.resample(frame):
                await session.hear(out.to_ndarray().reshape(-1).astype(np.int16, copy=False))

    async def hang_up(self) -> None:
        """End the session for good, as ``openrealtime.session.close`` does (rule 4) — also
        when the peer connection dropped first (a page that hangs up closes it at once) and
        the session already waits for a resume. Returns once it has ended."""
        session, connection = self.session, self.connection
        if session is None:
            return
        if connection.serving and session.holds(connection):
            connection.request_close(CloseCode.NORMAL, "hung up")
            serving = self._serving
            if serving is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(serving), 5.0)
        else:
            await end_dropped(session)

    @property
    def session_id(self) -> str | None:
        return None if self.session is None else self.session.id

    def close_peer(self) -> asyncio.Task[None]:
        """Close the peer connection in a task of its own, once: aiortc's ``close`` must not
        be cancelled half way (a second ``close`` would then wait forever), so whoever asks
        awaits it shielded."""
        if self._peer_closed is None:
            self._peer_closed = asyncio.ensure_future(self._close_peer())
            self._peer_closed.set_name(f"{self.id}-close")
        return self._peer_closed

    async def _close_peer(self) -> None:
        self.link.lost()
        with contextlib.suppress(Exception):
            await self.pc.close()
        self.track.stop()

    async def close(self, *, from_serve: bool = False) -> None:
        """Rule 4: end the call — its session's connection, its tasks, its peer connection.
        Idempotent; it leaves the registry last, so a server stop still finds a call whose
        close is under way."""
        self.link.lost()
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current and not t.done()]
        if not from_serve:
            for task in tasks:
                task.cancel()
        try:
            await asyncio.shield(self.close_peer())
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
            self.services.calls.forget(self)


async def end_dropped(session: VoiceSession) -> None:
    """A hangup of a call whose peer connection dropped first: its session, waiting for a
    resume, ends for good (one held by a newer connection is left alone)."""
    if session.connection is None and session.begin_end():
        await session.revoke_token()
        await session.shutdown()


# ---------------------------------------------------------------- the route


@dataclass(frozen=True, slots=True)
class Offer:
    sdp: str
    first: SessionStart | SessionResume


async def read_offer(request: Request, services: Services) -> Offer:
    """The offer and what opens the session, from either body the GA API allows."""
    settings = services.settings
    limit = settings.max_sdp_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "offer_too_large", f"the body is larger than {limit} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    session: dict[str, Any] | None = None
    opening: str | None = None
    if kind == "multipart/form-data":
        try:
            form = await request.form(max_files=0, max_fields=8, max_part_size=limit)
        except Exception as e:
            raise ApiError(
                400, "invalid_request", f"the multipart body is not valid: {e}"
            ) from None
        sdp = form.get("sdp")
        raw_session = form.get("session")
        raw_opening = form.get("openrealtime")
        if not isinstance(sdp, str) or not sdp.strip():
            raise ApiError(400, "invalid_request", "the multipart body needs an sdp part")
        if raw_session is not None:
            session = _json_object(raw_session, "session")
        if raw_opening is not None:
            opening = str(raw_opening)
    elif kind in ("application/sdp", "text/plain", ""):
        body = bytearray()
        async for piece in request.stream():
            body += piece
            if len(body) > limit:
                raise ApiError(413, "offer_too_large", f"the body is larger than {limit} bytes")
        sdp = body.decode("utf-8", errors="replace")
    else:
        raise ApiError(415, "unsupported_media_type", "send application/sdp or multipart/form-data")
    if "v=0" not in sdp[:64]:
        raise ApiError(400, "invalid_sdp", "the body is not an SDP offer")
    return Offer(sdp, _first_message(opening, session))


def _json_object(raw: object, part: str) -> dict[str, Any]:
    try:
        value = json.loads(str(raw))
    except ValueError:
        raise ApiError(400, "invalid_json", f"the {part} part is not JSON") from None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_request", f"the {part} part must be a JSON object")
    return value


def _first_message(
    opening: str | None, session: dict[str, Any] | None
) -> SessionStart | SessionResume:
    """What opens the call's session: the ``openrealtime`` part's message, else a GA start
    (the ``session`` part's model names the role, as ``?model=`` does on the WebSocket)."""
    if opening is None:
        config = dict(session or {})
        model = config.pop("model", None)
        return SessionStart(
            type="openrealtime.session.start",
            model=model if isinstance(model, str) else None,
            extensions=NO_EXTENSIONS,
            session=config or None,
        )
    try:
        message = parse_client_message(opening, _OPENING_LIMITS)
    except ProtocolError as e:
        raise ApiError(400, e.code, f"openrealtime part: {e.message}") from None
    if isinstance(message, SessionResume):
        return message
    if not isinstance(message, SessionStart):
        raise ApiError(
            400,
            "invalid_request",
            "the openrealtime part holds openrealtime.session.start or .resume",
        )
    if message.extensions.binary_audio:
        raise ApiError(
            400,
            ErrorCode.INVALID_VALUE,
            "binary_audio is for WebSockets; over WebRTC audio is the media track",
        )
    if session is not None:
        if message.session is not None:
            raise ApiError(
                400, "invalid_request", "give the session in one place (session part or start)"
            )
        config = dict(session)
        config.pop("model", None)
        message = message.model_copy(update={"session": config})
    return message


_OPENING_LIMITS = Limits()


def _principal(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    assert isinstance(principal, Principal), "Policy.REALTIME sets it"
    return principal


router = APIRouter()


@router.post(CALLS_PATH, status_code=201, dependencies=[allow(Policy.REALTIME)])
async def create_call(request: Request) -> Response:
    services = services_of(request)
    settings = services.settings
    restrict_host_addresses(_split(settings.webrtc_host_addresses))
    if not settings.webrtc:
        raise ApiError(404, "webrtc_disabled", "WebRTC calls are not served here")
    if len(services.active_sessions) >= settings.max_sessions:
        raise ApiError(503, "server_busy", "server is at its session limit")
    offer = await read_offer(request, services)
    call = Call(services, _principal(request))
    try:
        answer = await call.answer(offer.sdp)
    except OfferRejected as e:
        await call.close()
        raise ApiError(400, "invalid_sdp", str(e)) from None
    services.calls.add(call)
    try:
        await call.open(offer.first)
    except Refused as refused:
        await call.close()
        return refusal_response(refused)
    except (ValidationError, ProtocolError) as e:
        await call.close()
        raise ApiError(400, "invalid_request", str(e)) from None
    return Response(
        answer,
        status_code=201,
        media_type="application/sdp",
        headers={"Location": f"{CALLS_PATH}/{call.id}"},
    )


@router.post(f"{CALLS_PATH}/{{call_id}}/hangup", dependencies=[allow(Policy.REALTIME)])
async def hang_up(call_id: str, request: Request) -> dict[str, Any]:
    services = services_of(request)
    principal = _principal(request)
    call = services.calls.find(call_id, principal)
    if call is not None:
        await call.hang_up()
        return {}
    session_id = services.calls.ended_session(call_id, principal)
    session = None if session_id is None else services.live_sessions.get(session_id)
    if session is None:
        raise ApiError(404, "call_not_found", f"no call {call_id}")
    await end_dropped(session)
    return {}
