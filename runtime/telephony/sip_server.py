"""The runtime's SIP endpoint: a user agent server on UDP and TCP that answers calls with a voice
session (SPEC TEL-2).

Theory of operation
-------------------
Rule 1. Off unless ``sip_listen`` is set, and on loopback by default: ``127.0.0.1:5060``.
        UDP and TCP share the port (TCP framed by ``Content-Length``, bounded like UDP by
        ``sip_message.MAX_MESSAGE_BYTES``). A message that does not parse is dropped.
Rule 2. Transactions (RFC 3261 §17.2). A request seen again (same Via branch, method and
        Call-ID: a retransmission) gets the last answer again. A final answer to an INVITE is
        sent again on UDP (T1 = 0.5 s doubling to T2 = 4 s) until its ACK; a 200 never
        acknowledged within 32 s ends the call. Our own requests (BYE) are sent again on UDP
        until answered, at most 32 s. Answers go where the request came from (the source
        address and port, RFC 3581's ``rport``; on TCP, the same connection).
Rule 3. A new INVITE is checked, cheapest first: source network (403), Max-Forwards (483),
        digest credentials of a trunk when trunks are set (401 challenge / 403), ``Require``
        (420 with ``Unsupported``), a body that is SDP (415; none, a delayed offer: 488), an
        audio stream with PCMU or PCMA (488); then 100 Trying, capacity (503 while draining,
        486 at ``max_sessions``), the role the Request-URI's user chooses
        (``telephony_numbers``; a number naming no role: 404), the session. Only then 200 OK
        with our SDP: no audio is lost to a session that is not there yet.
Rule 4. A CANCEL before the 200 answers 200 and ends the INVITE with 487; after it, it is
        answered 200 and changes nothing (the caller sends BYE). A re-INVITE with SDP moves or
        holds the media (``a=sendonly``/``inactive``: the server stops sending) and is answered
        with our SDP, its version one higher. BYE ends the call (200); a request for a dialog
        that does not exist gets 481. OPTIONS gets 200 with what we allow; INFO with
        ``application/dtmf-relay`` is a keypad tone; other methods of RFC 3261's family get 405
        with ``Allow``, unknown ones 501.
Rule 5. A call runs as the line's owner (``telephony_token``), like a Twilio call: the caller's
        number is not an identity. Its records are ``Services.phone``'s (``sip:<Call-ID>``);
        numbers reach logs only as ``tel_<hash>``. In-dialog requests of ours (BYE) go to the
        address the INVITE came from (a trunk or PBX that talks to us directly; a route set
        through proxies is not followed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.handshake import role_for
from runtime.telephony.calls import PhoneCall, number_digest
from runtime.telephony.phone import number_roles, open_phone_session
from runtime.telephony.rtp import RtpStream, open_rtp
from runtime.telephony.sip_auth import DigestAuth, allowed_source, parse_networks, parse_trunks
from runtime.telephony.sip_call import SipLink, SipVoice
from runtime.telephony.sip_message import (
    ALLOW,
    CODECS,
    MAX_MESSAGE_BYTES,
    PCMA,
    SdpError,
    SdpOffer,
    SipMessage,
    SipParseError,
    answer_direction,
    answer_sdp,
    header_end,
    header_param,
    parse_message,
    parse_sdp,
    response,
    uri_user,
)

if TYPE_CHECKING:
    from runtime.realtime.session import VoiceSession
    from runtime.services import Services

log = logging.getLogger(__name__)

T1, T2, TIMER_B = 0.5, 4.0, 32.0
KNOWN_METHODS = frozenset(
    {"REGISTER", "SUBSCRIBE", "NOTIFY", "PUBLISH", "MESSAGE", "UPDATE", "PRACK", "REFER"}
)
ANSWERED_KEPT = 4096


@dataclass(slots=True)
class Peer:
    """Where a request came from, and how to answer it (rule 2)."""

    transport: str
    address: tuple[str, int]
    _send: Callable[[bytes], None]

    def send(self, message: SipMessage) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._send(message.to_bytes())


@dataclass(slots=True)
class Dialog:
    call_id: str
    local_tag: str
    remote_tag: str
    peer: Peer
    invite: SipMessage
    rtp: RtpStream
    link: SipLink
    sdp_session: int = field(default_factory=lambda: secrets.randbelow(10**9))
    sdp_version: int = 1
    local_cseq: int = field(default_factory=lambda: secrets.randbelow(10_000) + 1)
    bye_sent: bool = False
    phone: PhoneCall | None = None
    connection: RealtimeConnection | None = None
    session: VoiceSession | None = None


def _tag() -> str:
    return secrets.token_hex(6)


def listen_address(setting: str) -> tuple[str, int]:
    host, _, port = setting.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port or 5060)


class SipServer:
    """The endpoint (rules 1–5); ``start`` binds it, ``close`` hangs up every call."""

    def __init__(self, services: Services) -> None:
        self.services = services
        settings = services.settings
        self.host, self._wanted_port = listen_address(settings.sip_listen)
        self.media_address = settings.sip_media_address or self.host
        self.networks = parse_networks(settings.sip_allow_networks)
        trunks = parse_trunks(settings.sip_trunks.get_secret_value())
        self.digest = DigestAuth(trunks, settings.sip_realm) if trunks else None
        self.rtp_ports = _port_range(settings.sip_rtp_ports)
        self.port = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.dialogs: dict[tuple[str, str], Dialog] = {}
        self._setting_up: dict[str, asyncio.Task[None]] = {}
        self._answered: OrderedDict[tuple[str, str, str], SipMessage] = OrderedDict()
        self._acks: dict[tuple[str, int], asyncio.Event] = {}
        self._requests: dict[str, asyncio.Future[SipMessage]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------ transports (rule 1)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.media_address in ("0.0.0.0", "::"):
            raise ValueError("sip_listen on every interface needs sip_media_address")
        udp, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self), local_addr=(self.host, self._wanted_port)
        )
        self._udp = udp
        self.port = int(udp.get_extra_info("sockname")[1])
        self._tcp = await asyncio.start_server(self._tcp_client, self.host, self.port)
        log.info("SIP on %s:%d (UDP and TCP)", self.host, self.port)

    async def close(self) -> None:
        for task in list(self._setting_up.values()):
            task.cancel()
        for dialog in list(self.dialogs.values()):
            dialog.link.caller_hung_up()
            self._bye(dialog)
        if self._tasks:  # BYEs answered, calls wound up; then whatever is left is cut
            await asyncio.wait(list(self._tasks), timeout=5)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._tcp is not None:
            self._tcp.close()
        if self._udp is not None:
            self._udp.close()

    def datagram(self, data: bytes, address: tuple[str, int]) -> None:
        assert self._udp is not None
        udp = self._udp
        self._received(data.lstrip(b"\r\n"), Peer("UDP", address, lambda b: udp.sendto(b, address)))

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername")[:2]
        peer = Peer("TCP", address, writer.write)
        buffer = bytearray()
        try:
            while chunk := await reader.read(65536):
                buffer.extend(chunk)
                while (message := _framed(buffer)) is not None:
                    self._received(message, peer)
                if len(buffer) > MAX_MESSAGE_BYTES:
                    break
        except (ConnectionError, SipParseError):
            pass
        finally:
            writer.close()

    def _received(self, data: bytes, peer: Peer) -> None:
        if not data:
            return
        try:
            message = parse_message(data)
        except SipParseError as e:
            log.info("sip: a message from %s dropped: %s", peer.address[0], e)
            return
        try:
            if message.is_request:
                self._request(message, peer)
            else:
                self._response(message)
        except SipParseError as e:
            if message.is_request and message.get("Via"):
                peer.send(response(message, 400, reason=f"Bad Request ({e})"))

    def _spawn(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("sip: a call's task failed", exc_info=task.exception())

    # ------------------------------------------------------------ requests (rules 2–4)

    def _request(self, request: SipMessage, peer: Peer) -> None:
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            if not request.get(name):
                raise SipParseError(f"no {name}")
        number, method = request.cseq
        if method != request.method and request.method != "ACK":
            raise SipParseError("CSeq method differs")
        if request.method == "ACK":
            event = self._acks.pop((request.call_id, number), None)
            if event is not None:
                event.set()
            return
        key = (request.branch, request.method, request.call_id)
        if key in self._answered:  # a retransmission (rule 2)
            peer.send(self._answered[key])
            return
        if request.method == "CANCEL":
            self._cancel(request, peer)
            return
        if not allowed_source(self.networks, peer.address[0]):
            self._answer(request, peer, response(request, 403, to_tag=_tag()))
            return
        dialog = self._dialog_of(request)
        if header_param(request.get("To"), "tag"):
            if dialog is None:
                self._answer(request, peer, response(request, 481))
            elif request.method == "INVITE":
                self._reinvite(dialog, request, peer)
            elif request.method == "BYE":
                self._answer(request, peer, response(request, 200))
                dialog.link.caller_hung_up()
            elif request.method == "INFO":
                self._info(dialog, request, peer)
            elif request.method == "OPTIONS":
                self._answer(request, peer, self._options(request))
            else:
                self._refuse_method(request, peer)
        elif request.method == "INVITE":
            self._invite(request, peer)
        elif request.method == "OPTIONS":
            self._answer(request, peer, self._options(request))
        elif request.method == "BYE":
            self._answer(request, peer, response(request, 481))
        else:
            self._refuse_method(request, peer)

    def _answer(self, request: SipMessage, peer: Peer, answer: SipMessage) -> None:
        """Send ``answer`` and keep it for retransmissions of ``request`` (rule 2)."""
        self._answered[(request.branch, request.method, request.call_id)] = answer
        while len(self._answered) > ANSWERED_KEPT:
            self._answered.popitem(last=False)
        if peer.transport == "UDP":
            _via_received(answer, peer)
        peer.send(answer)
        if request.method == "INVITE" and answer.status >= 200 and peer.transport == "UDP":
            self._spawn(asyncio.ensure_future(self._until_ack(request, peer, answer)))

    async def _until_ack(self, request: SipMessage, peer: Peer, answer: SipMessage) -> None:
        event = self._acks[(request.call_id, request.cseq[0])] = asyncio.Event()
        wait, waited = T1, 0.0
        while waited < TIMER_B:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), wait)
                return
            waited += wait
            wait = min(wait * 2, T2)
            peer.send(answer)
        self._acks.pop((request.call_id, request.cseq[0]), None)
        dialog = self._dialog_of(request, local_tag=header_param(answer.get("To"), "tag"))
        if answer.status == 200 and dialog is not None:
            log.info("sip: call %s never acknowledged its 200; hanging up", request.call_id[:12])
            dialog.link.caller_hung_up()
            self._bye(dialog)

    def _options(self, request: SipMessage) -> SipMessage:
        answer = response(request, 200, to_tag=_tag())
        answer.headers += [("Allow", ALLOW), ("Accept", "application/sdp")]
        return answer

    def _refuse_method(self, request: SipMessage, peer: Peer) -> None:
        if request.method in KNOWN_METHODS:
            answer = response(request, 405, to_tag=_tag())
            answer.headers.append(("Allow", ALLOW))
        else:
            answer = response(request, 501, to_tag=_tag())
        self._answer(request, peer, answer)

    def _dialog_of(self, request: SipMessage, local_tag: str = "") -> Dialog | None:
        remote = header_param(request.get("From"), "tag")
        dialog = self.dialogs.get((request.call_id, remote))
        local = local_tag or header_param(request.get("To"), "tag")
        if dialog is not None and local and dialog.local_tag != local:
            return None
        return dialog

    def _cancel(self, request: SipMessage, peer: Peer) -> None:
        task = self._setting_up.get(request.branch)
        self._answer(
            request, peer, response(request, 200 if task or self._dialog_of(request) else 481)
        )
        if task is not None:
            task.cancel()  # the INVITE ends with 487 (rule 4)

    def _info(self, dialog: Dialog, request: SipMessage, peer: Peer) -> None:
        if request.get("Content-Type").lower().startswith("application/dtmf-relay"):
            for line in request.body.decode("utf-8", "replace").splitlines():
                name, _, value = line.partition("=")
                if name.strip().lower() == "signal" and value.strip():
                    dialog.link.digit(value.strip()[:1].upper())
        self._answer(request, peer, response(request, 200))

    # ------------------------------------------------------------ a new call (rule 3)

    def _invite(self, request: SipMessage, peer: Peer) -> None:
        refusal, offer = self._check_invite(request, peer)
        if refusal is not None:
            self._answer(request, peer, refusal)
            return
        assert offer is not None
        trying = response(request, 100)
        self._answered[(request.branch, request.method, request.call_id)] = trying
        peer.send(trying)
        task = asyncio.ensure_future(self._set_up(request, peer, offer))
        self._setting_up[request.branch] = task
        self._spawn(task)

    def _check_invite(
        self, request: SipMessage, peer: Peer
    ) -> tuple[SipMessage | None, SdpOffer | None]:
        tag = _tag()
        try:
            hops = int(request.get("Max-Forwards", "70"))
        except ValueError:
            raise SipParseError("bad Max-Forwards") from None
        if hops <= 0:
            return response(request, 483, to_tag=tag), None
        if self.digest is not None:
            verdict, trunk = self.digest.check("INVITE", request.get("Authorization"))
            if verdict in ("challenge", "stale"):
                answer = response(request, 401, to_tag=tag)
                answer.headers.append(
                    ("WWW-Authenticate", self.digest.challenge(stale=verdict == "stale"))
                )
                return answer, None
            if verdict == "refused":
                log.warning("sip: digest credentials refused from %s", peer.address[0])
                return response(request, 403, to_tag=tag), None
        required = [t.strip() for t in request.get("Require").split(",") if t.strip()]
        if required:
            answer = response(request, 420, to_tag=tag)
            answer.headers.append(("Unsupported", ", ".join(required)))
            return answer, None
        if not request.body:
            return response(
                request, 488, to_tag=tag, reason="Not Acceptable Here (no SDP offer)"
            ), None
        if request.get("Content-Type").split(";")[0].strip().lower() != "application/sdp":
            answer = response(request, 415, to_tag=tag)
            answer.headers.append(("Accept", "application/sdp"))
            return answer, None
        try:
            offer = parse_sdp(request.body)
        except SdpError:
            return response(request, 488, to_tag=tag), None
        if offer.codec() is None:
            return response(
                request, 488, to_tag=tag, reason="Not Acceptable Here (PCMU or PCMA only)"
            ), None
        return None, offer

    async def _set_up(self, request: SipMessage, peer: Peer, offer: SdpOffer) -> None:
        tag = _tag()
        dialog: Dialog | None = None
        try:
            answer, dialog = await self._open_call(request, peer, offer, tag)
            self._setting_up.pop(request.branch, None)
            self._answer(request, peer, answer)
            if dialog is None:
                return
            dialog.rtp.start()
            await self._serve(dialog)
        except asyncio.CancelledError:
            if request.branch in self._setting_up:  # CANCEL before the 200 (rule 4)
                self._setting_up.pop(request.branch, None)
                self._answer(request, peer, response(request, 487, to_tag=tag))
            if dialog is not None:
                await self._forget(dialog)
            raise

    async def _open_call(
        self, request: SipMessage, peer: Peer, offer: SdpOffer, tag: str
    ) -> tuple[SipMessage, Dialog | None]:
        services, settings = self.services, self.services.settings
        if services.draining:
            answer = response(request, 503, to_tag=tag)
            answer.headers.append(("Retry-After", "30"))
            return answer, None
        if len(services.active_sessions) >= settings.max_sessions:
            return response(request, 486, to_tag=tag), None
        principal = await services.authenticate(settings.telephony_token.get_secret_value())
        if principal is None:
            log.warning("sip: telephony_token does not authenticate anyone")
            return response(request, 503, to_tag=tag), None
        caller, called = uri_user(request.get("From")), uri_user(request.uri)
        wanted = number_roles(settings.telephony_numbers).get(called)
        role = await role_for(services, principal, wanted, strict=wanted is not None)
        if role is None:
            log.warning("sip call to %s: no role %r", number_digest(called), wanted)
            return response(request, 404, to_tag=tag), None
        codec = offer.codec()
        assert codec is not None
        voice = SipVoice(codec)
        remote_tag = header_param(request.get("From"), "tag")
        holder: list[Dialog] = []

        def hang_up() -> None:
            if holder:
                self._bye(holder[0])

        link = SipLink(voice, keypad_gap_s=settings.telephony_keypad_gap_s, hang_up=hang_up)
        rtp = RtpStream(next_frame=voice.next_frame, on_audio=link.heard, on_digit=link.digit)
        await open_rtp(rtp, self.host, self.rtp_ports)
        rtp.peers.add(peer.address[0])
        rtp.negotiated(
            codec=codec,
            event_pt=offer.telephone_event(),
            remote=(offer.address, offer.port),
            direction=offer.direction,
        )
        dialog = Dialog(request.call_id, tag, remote_tag, peer, request, rtp, link)
        holder.append(dialog)
        connection = RealtimeConnection(link, services, call_tools=link.call_tools)
        link.connection = connection
        connection.principal = principal
        call = services.phone.open(
            f"sip:{request.call_id}", caller=caller, called=called, role_id=role.id
        )
        dialog.phone = call
        services.active_sessions.add(connection.id)
        self.dialogs[(request.call_id, remote_tag)] = dialog
        kind = "audio/pcma" if codec == PCMA else "audio/pcmu"
        try:
            session = await open_phone_session(connection, call, kind)
        except BaseException:
            services.active_sessions.discard(connection.id)
            await self._forget(dialog)
            raise
        if session is None:
            services.active_sessions.discard(connection.id)
            await self._forget(dialog)
            return response(request, 486, to_tag=tag), None
        voice.bind(session)
        link.start_hearing(session)
        call.thread_id, call.session_id = session.thread.thread_id, session.id
        log.info(
            "sip call %s from %s to %s (%s): session %s",
            request.call_id[:12],
            number_digest(caller),
            number_digest(called),
            CODECS[codec],
            session.id,
        )
        dialog.connection, dialog.session = connection, session
        return self._ok(request, dialog, offer), dialog

    @property
    def _here(self) -> str:
        return f"{_host(self.media_address)}:{self.port}"

    def _ok(self, request: SipMessage, dialog: Dialog, offer: SdpOffer) -> SipMessage:
        body = answer_sdp(
            offer,
            address=self.media_address,
            port=dialog.rtp.port,
            session_id=dialog.sdp_session,
            version=dialog.sdp_version,
            direction=answer_direction(offer.direction),
        )
        answer = response(request, 200, to_tag=dialog.local_tag, body=body)
        transport = ";transport=tcp" if dialog.peer.transport == "TCP" else ""
        answer.headers += [
            ("Contact", f"<sip:openrealtime@{self._here}{transport}>"),
            ("Allow", ALLOW),
            ("Content-Type", "application/sdp"),
        ]
        return answer

    async def _serve(self, dialog: Dialog) -> None:
        connection, session = dialog.connection, dialog.session
        assert connection is not None and session is not None
        try:
            await connection.serve(session)
        finally:
            self.services.active_sessions.discard(connection.id)
            ended_by = dialog.link.ended_by
            if dialog.phone is not None and ended_by is not None:
                self.services.phone.end(dialog.phone, ended_by)
            if dialog.link.ended_by != "caller":
                self._bye(dialog)
            await self._forget(dialog)

    async def _forget(self, dialog: Dialog) -> None:
        self.dialogs.pop((dialog.call_id, dialog.remote_tag), None)
        await dialog.link.finish()
        await dialog.rtp.close()

    # ------------------------------------------------------------ in the dialog (rule 4)

    def _reinvite(self, dialog: Dialog, request: SipMessage, peer: Peer) -> None:
        try:
            offer = parse_sdp(request.body) if request.body else None
        except SdpError:
            offer = None
        if offer is None or offer.codec() is None:
            self._answer(request, peer, response(request, 488))
            return
        dialog.rtp.negotiated(
            codec=dialog.rtp.codec,
            event_pt=offer.telephone_event(),
            remote=(offer.address, offer.port),
            direction=offer.direction,
        )
        dialog.sdp_version += 1
        self._answer(request, peer, self._ok(request, dialog, offer))

    def _bye(self, dialog: Dialog) -> None:
        if dialog.bye_sent:
            return
        dialog.bye_sent = True
        dialog.local_cseq += 1
        invite = dialog.invite
        contact = invite.get("Contact")
        target = (
            contact[contact.find("<") + 1 : contact.find(">")]
            if "<" in contact
            else contact.split(";")[0]
        )
        branch = "z9hG4bK" + secrets.token_hex(8)
        transport = dialog.peer.transport
        bye = SipMessage(method="BYE", uri=target.strip() or invite.get("From").strip("<>"))
        bye.headers = [
            (
                "Via",
                f"SIP/2.0/{transport} {self._here};branch={branch};rport",
            ),
            ("Max-Forwards", "70"),
            ("From", f"{invite.get('To')};tag={dialog.local_tag}"),
            ("To", invite.get("From")),
            ("Call-ID", dialog.call_id),
            ("CSeq", f"{dialog.local_cseq} BYE"),
            ("User-Agent", "OpenRealtime"),
        ]
        self._spawn(asyncio.ensure_future(self._send_request(bye, branch, dialog.peer)))

    async def _send_request(self, request: SipMessage, branch: str, peer: Peer) -> None:
        future: asyncio.Future[SipMessage] = asyncio.get_running_loop().create_future()
        self._requests[branch] = future
        try:
            wait, waited = T1, 0.0
            while waited < TIMER_B:
                peer.send(request)
                if peer.transport != "UDP":
                    wait = TIMER_B
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(future), wait)
                    return
                waited += wait
                wait = min(wait * 2, T2)
        finally:
            self._requests.pop(branch, None)

    def _response(self, answer: SipMessage) -> None:
        future = self._requests.get(answer.branch)
        if future is not None and not future.done() and answer.status >= 200:
            future.set_result(answer)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: SipServer) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.server.datagram(data, addr)


def _framed(buffer: bytearray) -> bytes | None:
    """One whole message off the front of a TCP stream's ``buffer`` (rule 1), or None."""
    while buffer[:2] == b"\r\n":  # keep-alive pings
        del buffer[:2]
    end = header_end(buffer)
    if end < 0:
        return None
    length = 0
    for line in bytes(buffer[:end]).split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() in (b"content-length", b"l"):
            try:
                length = int(value.strip())
            except ValueError:
                raise SipParseError("bad Content-Length") from None
    if length < 0 or end + length > MAX_MESSAGE_BYTES:
        raise SipParseError("message too large")
    if len(buffer) < end + length:
        return None
    message = bytes(buffer[: end + length])
    del buffer[: end + length]
    return message


def _via_received(answer: SipMessage, peer: Peer) -> None:
    """RFC 3581: the top Via says where the request really came from."""
    for index, (name, value) in enumerate(answer.headers):
        if name == "Via":
            if ";rport" in value and "rport=" not in value:
                value = value.replace(";rport", f";rport={peer.address[1]}", 1)
            if "received=" not in value:
                value += f";received={peer.address[0]}"
            answer.headers[index] = (name, value)
            return


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _port_range(setting: str) -> tuple[int, int] | None:
    low, dash, high = setting.partition("-")
    if not dash:
        return None
    return int(low), int(high)
