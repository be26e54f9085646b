"""SIP's transport and transaction layers for the endpoint (``runtime.telephony.sip_server``):
UDP and TCP on one port, retransmissions, and the answers a request seen again gets.

Rules
-----
1. UDP and TCP share the port. TCP is framed by ``Content-Length`` and bounded like UDP by
   ``sip_message.MAX_MESSAGE_BYTES``; CRLF keep-alives are skipped. A message that does not
   parse is dropped; a request that parses but lacks a mandatory header (``Via``, ``From``,
   ``To``, ``Call-ID``, ``CSeq``) or whose ``CSeq`` names another method gets 400.
2. Server transactions (RFC 3261 §17.2): a request seen again (same Via branch, method and
   Call-ID: a retransmission) gets the last answer again and never reaches the server twice.
   A final answer to an INVITE is sent again on UDP (T1 = 0.5 s doubling to T2 = 4 s) until
   its ACK; one never acknowledged within 32 s is reported (``on_no_ack``).
3. Client transactions: our requests (BYE, REFER) are sent again on UDP until a final answer,
   at most 32 s; on TCP once.
4. Answers go where the request came from: the source address and port (RFC 3581's
   ``rport``; the top Via says ``received``/``rport``), on TCP the same connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from runtime.telephony.sip_message import (
    MAX_MESSAGE_BYTES,
    SipMessage,
    SipParseError,
    header_end,
    parse_message,
    response,
)

log = logging.getLogger(__name__)

T1, T2, TIMER_B = 0.5, 4.0, 32.0
PORT_ATTEMPTS = 8  # a free UDP port whose TCP twin is taken: pick again
ANSWERED_KEPT = 4096
MANDATORY = ("Via", "From", "To", "Call-ID", "CSeq")


@dataclass(slots=True)
class Peer:
    """Where a request came from, and how to answer it (rule 4)."""

    transport: str
    address: tuple[str, int]
    _send: Callable[[bytes], None]

    def send(self, message: SipMessage) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            self._send(message.to_bytes())


class SipTransport:
    """Rules 1–4. ``on_request`` gets each new request (never an ACK or a retransmission)."""

    def __init__(self, on_request: Callable[[SipMessage, Peer], None]) -> None:
        self.on_request = on_request
        self.port = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._answered: OrderedDict[tuple[str, str, str], SipMessage] = OrderedDict()
        self._acks: dict[tuple[str, int], asyncio.Event] = {}
        self._requests: dict[str, asyncio.Future[SipMessage]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        """Listen on UDP and TCP at one port. With port 0 the system picks the UDP port, and
        that port can be taken for TCP (another server's, or an outbound connection's own
        port): then both are given up and another port is picked, a few times at most."""
        loop = asyncio.get_running_loop()
        for attempt in range(1 if port else PORT_ATTEMPTS):
            udp, protocol = await loop.create_datagram_endpoint(
                lambda: _Udp(self), local_addr=(host, port)
            )
            chosen = int(udp.get_extra_info("sockname")[1])
            try:
                self._tcp = await asyncio.start_server(self._tcp_client, host, chosen)
            except OSError as error:
                udp.close()
                await protocol.closed.wait()  # the socket is shut when this returns
                if port or error.errno != errno.EADDRINUSE or attempt == PORT_ATTEMPTS - 1:
                    raise
                continue
            self._udp, self.port = udp, chosen
            return

    async def close(self) -> None:
        """Let the tasks (BYEs being answered, calls winding up) end, 5 s at most; then cut."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        for task in list(self.tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if self._tcp is not None:
            self._tcp.close()
        if self._udp is not None:
            self._udp.close()

    def spawn(self, task: asyncio.Task[None]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("sip: a call's task failed", exc_info=task.exception())

    # ------------------------------------------------------------ in (rules 1, 2)

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
            if message.is_request and message.get("Via") and message.method != "ACK":
                peer.send(response(message, 400, reason=f"Bad Request ({e})"))

    def _request(self, request: SipMessage, peer: Peer) -> None:
        for name in MANDATORY:
            if not request.get(name):
                raise SipParseError(f"no {name}")
        number, method = request.cseq
        if request.method == "ACK":
            event = self._acks.pop((request.call_id, number), None)
            if event is not None:
                event.set()
            return
        if method != request.method:
            raise SipParseError("CSeq method differs")
        key = (request.branch, request.method, request.call_id)
        if key in self._answered:  # a retransmission (rule 2)
            peer.send(self._answered[key])
            return
        self.on_request(request, peer)

    # ------------------------------------------------------------ out (rules 2–4)

    def answer(
        self,
        request: SipMessage,
        peer: Peer,
        answer: SipMessage,
        *,
        on_no_ack: Callable[[], None] | None = None,
    ) -> None:
        """Send ``answer`` and keep it for retransmissions of ``request`` (rule 2)."""
        self._answered[(request.branch, request.method, request.call_id)] = answer
        while len(self._answered) > ANSWERED_KEPT:
            self._answered.popitem(last=False)
        if peer.transport == "UDP":
            _via_received(answer, peer)
        if request.method == "INVITE" and answer.status >= 200 and peer.transport == "UDP":
            # Expected before the answer leaves: its ACK can be read before a task started
            # now first runs (uvloop reads sockets between two rounds of callbacks).
            key = (request.call_id, request.cseq[0])
            acked = self._acks[key] = asyncio.Event()
            peer.send(answer)
            self.spawn(asyncio.ensure_future(self._until_ack(key, acked, peer, answer, on_no_ack)))
            return
        peer.send(answer)

    async def _until_ack(
        self,
        key: tuple[str, int],
        event: asyncio.Event,
        peer: Peer,
        answer: SipMessage,
        on_no_ack: Callable[[], None] | None,
    ) -> None:
        wait, waited = T1, 0.0
        while waited < TIMER_B:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), wait)
                return
            waited += wait
            wait = min(wait * 2, T2)
            peer.send(answer)
        self._acks.pop(key, None)
        if on_no_ack is not None:
            on_no_ack()

    async def send_request(self, request: SipMessage, peer: Peer) -> SipMessage | None:
        """Send ``request`` (rule 3); its final answer, or None."""
        branch = request.branch
        future: asyncio.Future[SipMessage] = asyncio.get_running_loop().create_future()
        self._requests[branch] = future
        try:
            wait, waited = T1, 0.0
            while waited < TIMER_B:
                peer.send(request)
                if peer.transport != "UDP":
                    wait = TIMER_B
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(future), wait)
                waited += wait
                wait = min(wait * 2, T2)
            return None
        finally:
            self._requests.pop(branch, None)

    def _response(self, answer: SipMessage) -> None:
        future = self._requests.get(answer.branch)
        if future is not None and not future.done() and answer.status >= 200:
            future.set_result(answer)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, transport: SipTransport) -> None:
        self.transport = transport
        self.closed = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.transport.datagram(data, addr)


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
    """RFC 3581: the top Via says where the request really came from (rule 4)."""
    for index, (name, value) in enumerate(answer.headers):
        if name == "Via":
            if ";rport" in value and "rport=" not in value:
                value = value.replace(";rport", f";rport={peer.address[1]}", 1)
            if "received=" not in value:
                value += f";received={peer.address[0]}"
            answer.headers[index] = (name, value)
            return
