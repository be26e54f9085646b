"""The runtime's SIP endpoint: a user agent server on UDP and TCP that answers calls with a voice
session (SPEC TEL-2).

Theory of operation
-------------------
Rule 1. Off unless ``sip_listen`` is set, and on loopback by default: ``127.0.0.1:5060``.
        Messages, retransmissions and where answers go are ``runtime.telephony.sip_transport``'s.
Rule 2. A request from outside ``sip_allow_networks`` gets 403 before anything else is read
        (``sip_auth`` rule 1).
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
Rule 6. A transfer (``transfer_call``) is a REFER in the dialog (RFC 3515): ``Refer-To`` is
        the target's SIP URI, or a number at the caller's host (the trunk routes it). Once
        the far end accepts (2xx) and its NOTIFY reports the new call answered (a final 2xx
        sipfrag; or no NOTIFY within ``REFER_WAIT_S``), the server hangs up; a refusal, or a
        NOTIFY with a failure, leaves the call as it was.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.handshake import role_for
from runtime.telephony.call_records import keep
from runtime.telephony.calls import PhoneCall, number_digest
from runtime.telephony.phone import number_roles, open_phone_session, transfer_targets
from runtime.telephony.rtp import RtpStream, open_rtp
from runtime.telephony.sip_auth import DigestAuth, allowed_source, parse_networks, parse_trunks
from runtime.telephony.sip_call import SipLink, SipVoice
from runtime.telephony.sip_message import (
    ALLOW,
    CODECS,
    PCMA,
    SdpError,
    SdpOffer,
    SipMessage,
    SipParseError,
    answer_direction,
    answer_sdp,
    header_param,
    parse_sdp,
    response,
    uri_user,
)
from runtime.telephony.sip_transport import Peer, SipTransport

if TYPE_CHECKING:
    from runtime.realtime.session import VoiceSession
    from runtime.services import Services

log = logging.getLogger(__name__)

T1, T2, TIMER_B = 0.5, 4.0, 32.0
KNOWN_METHODS = frozenset(
    {"REGISTER", "SUBSCRIBE", "NOTIFY", "PUBLISH", "MESSAGE", "UPDATE", "PRACK", "REFER"}
)
ANSWERED_KEPT = 4096
REFER_WAIT_S = 30.0


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
    referred: asyncio.Future[int] | None = None
    """The final status a transfer's NOTIFY reported (rule 6)."""
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
        self.transport = SipTransport(self._request)
        self.dialogs: dict[tuple[str, str], Dialog] = {}
        self._setting_up: dict[str, asyncio.Task[None]] = {}

    @property
    def port(self) -> int:
        return self.transport.port

    # ------------------------------------------------------------ transports (rule 1)

    async def start(self) -> None:
        if self.media_address in ("0.0.0.0", "::"):
            raise ValueError("sip_listen on every interface needs sip_media_address")
        await self.transport.start(self.host, self._wanted_port)
        log.info("SIP on %s:%d (UDP and TCP)", self.host, self.port)

    async def close(self) -> None:
        for task in list(self._setting_up.values()):
            task.cancel()
        for dialog in list(self.dialogs.values()):
            dialog.link.caller_hung_up()
            self._bye(dialog)
        await self.transport.close()

    # ------------------------------------------------------------ requests (rules 2–4)

    def _request(self, request: SipMessage, peer: Peer) -> None:
        """A new request (never an ACK or a retransmission: the transport's)."""
        if request.method == "CANCEL":
            self._cancel(request, peer)
            return
        if not allowed_source(self.networks, peer.address[0]):
            self.transport.answer(request, peer, response(request, 403, to_tag=_tag()))
            return
        dialog = self._dialog_of(request)
        if header_param(request.get("To"), "tag"):
            if dialog is None:
                self.transport.answer(request, peer, response(request, 481))
            elif request.method == "INVITE":
                self._reinvite(dialog, request, peer)
            elif request.method == "BYE":
                self.transport.answer(request, peer, response(request, 200))
                dialog.link.caller_hung_up()
            elif request.method == "INFO":
                self._info(dialog, request, peer)
            elif request.method == "NOTIFY":
                self._notify(dialog, request, peer)
            elif request.method == "OPTIONS":
                self.transport.answer(request, peer, self._options(request))
            else:
                self._refuse_method(request, peer)
        elif request.method == "INVITE":
            self._invite(request, peer)
        elif request.method == "OPTIONS":
            self.transport.answer(request, peer, self._options(request))
        elif request.method == "BYE":
            self.transport.answer(request, peer, response(request, 481))
        else:
            self._refuse_method(request, peer)

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
        self.transport.answer(request, peer, answer)

    def _dialog_of(self, request: SipMessage, local_tag: str = "") -> Dialog | None:
        remote = header_param(request.get("From"), "tag")
        dialog = self.dialogs.get((request.call_id, remote))
        local = local_tag or header_param(request.get("To"), "tag")
        if dialog is not None and local and dialog.local_tag != local:
            return None
        return dialog

    def _cancel(self, request: SipMessage, peer: Peer) -> None:
        task = self._setting_up.get(request.branch)
        self.transport.answer(
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
        self.transport.answer(request, peer, response(request, 200))

    def _notify(self, dialog: Dialog, request: SipMessage, peer: Peer) -> None:
        """The far end reports a transfer's progress (rule 6): a sipfrag status line."""
        self.transport.answer(request, peer, response(request, 200))
        first = request.body.decode("utf-8", "replace").strip().split("\r\n")[0].split()
        if len(first) >= 2 and first[0] == "SIP/2.0" and first[1].isdigit():
            status = int(first[1])
            if status >= 200 and dialog.referred is not None and not dialog.referred.done():
                dialog.referred.set_result(status)

    # ------------------------------------------------------------ a new call (rule 3)

    def _invite(self, request: SipMessage, peer: Peer) -> None:
        refusal, offer = self._check_invite(request, peer)
        if refusal is not None:
            self.transport.answer(request, peer, refusal)
            return
        assert offer is not None
        self.transport.answer(request, peer, response(request, 100))
        task = asyncio.ensure_future(self._set_up(request, peer, offer))
        self._setting_up[request.branch] = task
        self.transport.spawn(task)

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
            if dialog is None:
                self.transport.answer(request, peer, answer)
                return
            self.transport.answer(request, peer, answer, on_no_ack=partial(self._no_ack, dialog))
            dialog.rtp.start()
            await self._serve(dialog)
        except asyncio.CancelledError:
            if request.branch in self._setting_up:  # CANCEL before the 200 (rule 4)
                self._setting_up.pop(request.branch, None)
                self.transport.answer(request, peer, response(request, 487, to_tag=tag))
            if dialog is not None:
                await self._forget(dialog)
            raise

    def _no_ack(self, dialog: Dialog) -> None:
        """The caller never acknowledged the call's 200 (transport rule 2): it is over."""
        log.info("sip: call %s never acknowledged its 200; hanging up", dialog.call_id[:12])
        dialog.link.caller_hung_up()
        self._bye(dialog)

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
        targets = await transfer_targets(services, principal, role.id)
        voice = SipVoice(codec, transfer_targets=targets)
        remote_tag = header_param(request.get("From"), "tag")
        holder: list[Dialog] = []

        def hang_up() -> None:
            if holder:
                self._bye(holder[0])

        async def transfer(target: str) -> bool:
            return bool(holder) and await self._refer(holder[0], target)

        def send_digits(digits: str) -> None:
            if holder:
                holder[0].rtp.send_digits(digits)

        link = SipLink(
            voice,
            keypad_gap_s=settings.telephony_keypad_gap_s,
            hang_up=hang_up,
            transfer=transfer,
            send_digits=send_digits,
        )

        def silent() -> None:
            if holder:
                log.info("sip: call %s sent no RTP for %.0f s; hanging up",
                         holder[0].call_id[:12], settings.sip_rtp_timeout_s)  # fmt: skip
                holder[0].link.caller_hung_up()
                self._bye(holder[0])

        rtp = RtpStream(
            next_frame=voice.next_frame,
            on_audio=link.heard,
            on_digit=link.digit,
            on_silent=silent,
            silent_s=settings.sip_rtp_timeout_s,
        )
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
        principal = connection.principal
        assert principal is not None and dialog.phone is not None
        await keep(self.services, principal, dialog.phone, "sip")
        try:
            await connection.serve(session)
        finally:
            self.services.active_sessions.discard(connection.id)
            ended_by = dialog.link.ended_by
            if dialog.phone is not None and ended_by is not None:
                self.services.phone.end(dialog.phone, ended_by)
                if ended_by == "agent" and dialog.link.voice.hang_up.transfer_to is not None:
                    dialog.phone.transfer_target = dialog.link.voice.hang_up.transfer_to
            if dialog.link.ended_by != "caller":
                self._bye(dialog)
            await self._forget(dialog)
            await keep(self.services, principal, dialog.phone, "sip")

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
            self.transport.answer(request, peer, response(request, 488))
            return
        dialog.rtp.negotiated(
            codec=dialog.rtp.codec,
            event_pt=offer.telephone_event(),
            remote=(offer.address, offer.port),
            direction=offer.direction,
        )
        dialog.sdp_version += 1
        self.transport.answer(request, peer, self._ok(request, dialog, offer))

    def _in_dialog(self, dialog: Dialog, method: str) -> SipMessage:
        """A request of ours in ``dialog`` (rule 5)."""
        dialog.local_cseq += 1
        invite = dialog.invite
        contact = invite.get("Contact")
        target = (
            contact[contact.find("<") + 1 : contact.find(">")]
            if "<" in contact
            else contact.split(";")[0]
        )
        branch = "z9hG4bK" + secrets.token_hex(8)
        request = SipMessage(method=method, uri=target.strip() or invite.get("From").strip("<>"))
        request.headers = [
            ("Via", f"SIP/2.0/{dialog.peer.transport} {self._here};branch={branch};rport"),
            ("Max-Forwards", "70"),
            ("From", f"{invite.get('To')};tag={dialog.local_tag}"),
            ("To", invite.get("From")),
            ("Call-ID", dialog.call_id),
            ("CSeq", f"{dialog.local_cseq} {method}"),
            ("User-Agent", "OpenRealtime"),
        ]
        return request

    def _bye(self, dialog: Dialog) -> None:
        if dialog.bye_sent:
            return
        dialog.bye_sent = True
        bye = self._in_dialog(dialog, "BYE")
        self.transport.spawn(asyncio.ensure_future(self._send_bye(bye, dialog.peer)))

    async def _send_bye(self, bye: SipMessage, peer: Peer) -> None:
        await self.transport.send_request(bye, peer)

    async def _refer(self, dialog: Dialog, target: str) -> bool:
        """Rule 6: whether the call was put through to ``target``."""
        if dialog.bye_sent:
            return False
        if not target.startswith(("sip:", "sips:")):
            target = f"sip:{target}@{_host(dialog.peer.address[0])}:{dialog.peer.address[1]}"
        refer = self._in_dialog(dialog, "REFER")
        refer.headers += [
            ("Refer-To", f"<{target}>"),
            ("Referred-By", f"<sip:openrealtime@{self._here}>"),
            ("Contact", f"<sip:openrealtime@{self._here}>"),
        ]
        dialog.referred = asyncio.get_running_loop().create_future()
        answer = await self.transport.send_request(refer, dialog.peer)
        if answer is None or not 200 <= answer.status < 300:
            log.info("sip: transfer refused (%s)", "no answer" if answer is None else answer.status)
            return False
        try:
            status = await asyncio.wait_for(dialog.referred, REFER_WAIT_S)
        except TimeoutError:
            return True  # accepted, never reported: the far end has it
        if status >= 300:
            log.info("sip: the transfer's new call failed (%d)", status)
        return status < 300


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _port_range(setting: str) -> tuple[int, int] | None:
    low, dash, high = setting.partition("-")
    if not dash:
        return None
    return int(low), int(high)
