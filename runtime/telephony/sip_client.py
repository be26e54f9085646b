"""A SIP phone over UDP, for tests and benchmarks: INVITE with an SDP offer (PCMU or PCMA and
``telephone-event``), ACK, RTP every 20 ms in real time both ways, RFC 4733 keypad tones, BYE —
and a BYE from the server answered as a phone answers it.

``SipPhone.call`` dials and returns the final answer (a 401 is answered once with digest
credentials when ``auth`` is given). ``say`` queues speech (PCM16 at 8 kHz) and returns when
each 20 ms frame of it left; silence is sent otherwise, as a phone does. What the server sends
is kept as ``played``: the frames that are not digital silence, with the arrival time of the
first. ``request`` sends any request in or out of the dialog (OPTIONS, INFO, a re-INVITE …).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections import deque
from typing import Any, cast

import numpy as np

from pipeline.audio_formats import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from runtime.telephony.rtp import (
    EVENT_DIGITS,
    FRAME_S,
    SILENCE,
    RtpPacket,
    build_rtp,
    event_payload,
    parse_rtp,
)
from runtime.telephony.sip_message import (
    PCMA,
    SipMessage,
    SipParseError,
    header_param,
    parse_message,
    parse_sdp,
)
from runtime.telephony.twilio_client import Played

RATE = 8_000
FRAME = 160
EVENT_PT = 101


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, on: Any) -> None:
        self.on = on

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.on(data, addr)


class SipPhone:
    def __init__(
        self,
        server: tuple[str, int],
        *,
        called: str = "+15550002222",
        caller: str = "+15550001111",
        codec: int = 0,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.server, self.called, self.caller, self.codec, self.auth = (
            server, called, caller, codec, auth,
        )  # fmt: skip
        self.call_id = secrets.token_hex(10) + "@phone"
        self.from_tag = secrets.token_hex(4)
        self.to_tag = ""
        self.cseq = 0
        self.played = Played()
        self.answers: list[SipMessage] = []
        self.requests: list[SipMessage] = []
        self.referred_to: str | None = None
        """The target of the server's REFER (a transfer), which this phone accepts."""
        self.hung_up = asyncio.Event()
        """The server sent BYE (and was answered 200)."""
        self._waiting: dict[tuple[str, str], asyncio.Future[SipMessage]] = {}
        self._sip: asyncio.DatagramTransport | None = None
        self._rtp: asyncio.DatagramTransport | None = None
        self._media_to: tuple[str, int] | None = None
        self._speech: deque[tuple[np.ndarray, asyncio.Future[list[float]] | None]] = deque()
        self._tones: deque[bytes] = deque()
        self._clock: asyncio.Task[None] | None = None
        self.sent_at: list[float] = []
        """When each frame of speech left."""
        self.tones: list[str] = []
        """Keypad tones the server sent (RFC 4733 events)."""
        self._tone_stamps: set[int] = set()
        self.arrivals: list[float] = []
        self._acked: set[tuple[int, str]] = set()
        """The INVITEs (CSeq) whose 200 was acknowledged: a 200 seen again is ACKed again."""
        """When each frame of the server's speech arrived."""

    @property
    def local(self) -> tuple[str, int]:
        assert self._sip is not None
        return cast(tuple[str, int], self._sip.get_extra_info("sockname")[:2])

    @property
    def rtp_port(self) -> int:
        assert self._rtp is not None
        return int(self._rtp.get_extra_info("sockname")[1])

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        host = self.server[0]
        self._sip, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self._on_sip), local_addr=(host, 0)
        )
        self._rtp, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self._on_rtp), local_addr=(host, 0)
        )

    async def __aenter__(self) -> SipPhone:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._clock
        for transport in (self._sip, self._rtp):
            if transport is not None:
                transport.close()

    # ------------------------------------------------------------ signalling

    def offer(self, *, direction: str = "sendrecv", codecs: str | None = None) -> bytes:
        host, port = self.local[0], self.rtp_port
        pts = codecs or f"{self.codec} {EVENT_PT}"
        lines = [
            "v=0", f"o=phone 1 1 IN IP4 {host}", "s=call", f"c=IN IP4 {host}", "t=0 0",
            f"m=audio {port} RTP/AVP {pts}", "a=rtpmap:0 PCMU/8000", "a=rtpmap:8 PCMA/8000",
            f"a=rtpmap:{EVENT_PT} telephone-event/8000", f"a=fmtp:{EVENT_PT} 0-15",
            "a=ptime:20", f"a={direction}",
        ]  # fmt: skip
        return ("\r\n".join(lines) + "\r\n").encode()

    def build(self, method: str, *, body: bytes = b"", headers: dict[str, str] | None = None,
              in_dialog: bool | None = None) -> SipMessage:  # fmt: skip
        host, port = self.local
        if method not in ("ACK", "CANCEL"):
            self.cseq += 1
        branch = "z9hG4bK" + secrets.token_hex(8)
        to = f"<sip:{self.called}@{self.server[0]}>"
        dialog = self.to_tag if in_dialog is None else (self.to_tag if in_dialog else "")
        request = SipMessage(
            method=method, uri=f"sip:{self.called}@{self.server[0]}:{self.server[1]}"
        )
        request.headers = [
            ("Via", f"SIP/2.0/UDP {host}:{port};branch={branch};rport"),
            ("Max-Forwards", "70"),
            ("From", f"<sip:{self.caller}@{host}>;tag={self.from_tag}"),
            ("To", to + (f";tag={dialog}" if dialog else "")),
            ("Call-ID", self.call_id),
            ("CSeq", f"{self.cseq} {method}"),
            ("Contact", f"<sip:{self.caller}@{host}:{port}>"),
        ]
        for name, value in (headers or {}).items():
            request.set(name, value)
        if body:
            request.headers.append(("Content-Type", "application/sdp"))
        request.body = body
        return request

    async def send(self, request: SipMessage, timeout_s: float = 10.0) -> SipMessage:
        """Send ``request``, again every T1 doubling to T2 until answered, as a UA does over
        UDP (RFC 3261 §17.1); its final answer (provisional ones are kept in ``answers``)."""
        assert self._sip is not None
        future: asyncio.Future[SipMessage] = asyncio.get_running_loop().create_future()
        key = (request.branch, request.method)
        self._waiting[key] = future
        data, wait = request.to_bytes(), 0.5
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    self._sip.sendto(data, self.server)
                    with contextlib.suppress(TimeoutError):
                        return await asyncio.wait_for(asyncio.shield(future), wait)
                    wait = min(wait * 2, 4.0)
        finally:
            self._waiting.pop(key, None)

    def send_only(self, request: SipMessage) -> None:
        assert self._sip is not None
        self._sip.sendto(request.to_bytes(), self.server)

    async def call(self, *, offer: bytes | None = None) -> SipMessage:
        """INVITE (answering one digest challenge), ACK; RTP starts once answered 200."""
        body = self.offer() if offer is None else offer
        answer = await self.send(self.build("INVITE", body=body))
        if answer.status == 401 and self.auth is not None:
            self._ack(answer)
            invite = self.build("INVITE", body=body)
            invite.set("Authorization", self._digest(answer, invite))
            answer = await self.send(invite)
        self._ack(answer)
        if answer.status == 200:
            self.to_tag = header_param(answer.get("To"), "tag")
            sdp = parse_sdp(answer.body)
            self._media_to = (sdp.address, sdp.port)
            self.codec = sdp.codec() or self.codec
            self._clock = asyncio.ensure_future(self._microphone())
        return answer

    def _ack(self, answer: SipMessage) -> None:
        if answer.status < 200:
            return
        number = answer.cseq[0]
        if answer.status < 300:
            self._acked.add(answer.cseq)
        ack = self.build("ACK", in_dialog=True)
        ack.set("To", answer.get("To"))
        ack.set("CSeq", f"{number} ACK")
        if answer.status >= 300:  # the INVITE's own transaction: the same branch
            ack.set("Via", answer.get("Via").split(";received")[0].split(";rport=")[0])
        self.send_only(ack)

    def _digest(self, challenge: SipMessage, request: SipMessage) -> str:
        assert self.auth is not None
        user, password = self.auth
        params = "x;" + challenge.get("WWW-Authenticate")[7:].replace(",", ";")
        realm, nonce = header_param(params, "realm"), header_param(params, "nonce")

        def md5(text: str) -> str:
            return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()

        cnonce, nc = secrets.token_hex(4), "00000001"
        ha1, ha2 = md5(f"{user}:{realm}:{password}"), md5(f"INVITE:{request.uri}")
        digest = md5(f"{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}")
        return (
            f'Digest username="{user}", realm="{realm}", nonce="{nonce}", uri="{request.uri}", '
            f'response="{digest}", algorithm=MD5, cnonce="{cnonce}", qop=auth, nc={nc}'
        )

    async def hang_up(self) -> SipMessage:
        return await self.send(self.build("BYE"))

    def _on_sip(self, data: bytes, addr: Any) -> None:
        try:
            message = parse_message(data)
        except SipParseError:
            return
        if message.is_request:
            self.requests.append(message)
            if message.method == "BYE":
                self._reply(message, 200, addr)
                self.hung_up.set()
            elif message.method == "REFER":  # accepted; the new call is "up" at once
                self._reply(message, 202, addr)
                self.referred_to = message.get("Refer-To").strip("<>")
                notify = self.build("NOTIFY", headers={"Event": "refer"})
                notify.headers.append(("Content-Type", "message/sipfrag"))
                notify.body = b"SIP/2.0 200 OK\r\n"
                self.send_only(notify)
            return
        self.answers.append(message)
        if message.cseq in self._acked:
            self._ack(message)  # its 200 again: our ACK was lost, so it is sent again
            return
        future = self._waiting.get((message.branch, message.cseq[1]))
        if future is not None and not future.done() and message.status >= 200:
            future.set_result(message)

    def _reply(self, request: SipMessage, status: int, addr: Any) -> None:
        answer = SipMessage(status=status, reason="OK" if status == 200 else "Accepted")
        for name in ("Via", "From", "To", "Call-ID", "CSeq"):
            answer.headers += [(name, v) for v in request.get_all(name)]
        assert self._sip is not None
        self._sip.sendto(answer.to_bytes(), addr)

    # ------------------------------------------------------------ media

    async def say(self, pcm8k: np.ndarray) -> list[float]:
        """Queue speech; the times each of its 20 ms frames left."""
        future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._speech.append((pcm8k.astype(np.int16), future))
        return await future

    async def silence(self, seconds: float) -> None:
        await self.say(np.zeros(int(RATE * seconds), np.int16))

    def press(self, digit: str) -> None:
        for step in range(1, 6):
            self._tones.append(event_payload(digit, end=step == 5, duration=step * FRAME))

    async def _microphone(self) -> None:
        sequence, timestamp, ssrc = secrets.randbits(16), 0, secrets.randbits(32)
        start, frames = time.monotonic(), 0
        current: tuple[np.ndarray, asyncio.Future[list[float]] | None] | None = None
        offset, sent = 0, list[float]()
        while True:
            frames += 1
            await asyncio.sleep(max(0.0, start + frames * FRAME_S - time.monotonic()))
            if self._rtp is None or self._media_to is None:
                continue
            sequence = (sequence + 1) & 0xFFFF
            if self._tones:
                payload = self._tones.popleft()
                packet = RtpPacket(EVENT_PT, sequence, timestamp, ssrc, False, payload)
                self._rtp.sendto(build_rtp(packet), self._media_to)
                if payload[1] & 0x80:
                    timestamp += 5 * FRAME
                continue
            if current is None and self._speech:
                current, offset, sent = self._speech.popleft(), 0, []
            if current is not None:
                pcm = current[0][offset : offset + FRAME]
                pcm = np.pad(pcm, (0, FRAME - pcm.size))
                offset += FRAME
            else:
                pcm = np.zeros(FRAME, np.int16)
            encode = alaw_encode if self.codec == PCMA else ulaw_encode
            packet = RtpPacket(self.codec, sequence, timestamp, ssrc, False, encode(pcm))
            self._rtp.sendto(build_rtp(packet), self._media_to)
            timestamp += FRAME
            if current is not None:
                sent.append(time.monotonic())
                self.sent_at.append(sent[-1])
                if offset >= current[0].size:
                    if current[1] is not None and not current[1].done():
                        current[1].set_result(sent)
                    current = None

    def _on_rtp(self, data: bytes, addr: Any) -> None:
        packet = parse_rtp(data)
        if packet is not None and packet.payload_type == EVENT_PT and packet.payload:
            if packet.timestamp not in self._tone_stamps:  # one digit per event
                self._tone_stamps.add(packet.timestamp)
                self.tones.append(EVENT_DIGITS[packet.payload[0] % 16])
            return
        if packet is None or packet.payload_type not in (0, 8):
            return
        if (
            not packet.marker
            and packet.payload == SILENCE[packet.payload_type][: len(packet.payload)]
        ):
            return  # the line's comfort silence (a talk spurt's first frame has the marker)
        decode = alaw_decode if packet.payload_type == PCMA else ulaw_decode
        if self.played.first_audio_at is None:
            self.played.first_audio_at = time.monotonic()
        self.played.pcm.append(decode(packet.payload))
        self.arrivals.append(time.monotonic())
