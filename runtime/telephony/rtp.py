"""RTP for a G.711 phone call (RFC 3550, 3551, 4733): packets, the jitter buffer, keypad events,
and one call's media endpoint (``RtpStream``).

Rules
-----
1. Packets: version 2, 20 ms of G.711 (160 bytes) per packet; CSRCs, a header extension and
   padding are skipped when reading. Anything else (too short, another version, a payload type
   not negotiated, more than ``MAX_PACKET_BYTES``) is dropped and counted.
2. Who may send: packets whose source address is the SDP's connection address, or the SIP
   peer's address; the first such packet fixes the port answers go to (symmetric RTP, RFC 4961:
   a caller behind NAT is heard and answered on the port it sends from). One source at a time:
   packets of another SSRC are dropped while the current one is live; after
   ``SOURCE_SWITCH_S`` of its silence the new one takes over, with a fresh jitter buffer (a
   phone that restarts its stream; a stray stream never mixes into the caller's audio). A
   re-INVITE that moves the media starts both choices again.
3. The jitter buffer releases the caller's audio in sequence order the moment it is in order
   (no added delay on a clean line). A missing packet is waited for ``wait_frames`` × 20 ms; then
   it is lost and replaced by silence, and what came after it is released. Late and duplicate
   packets are dropped. When the caller sends nothing (silence suppression, comfort noise,
   hold), silence is released every 20 ms after the same wait — the endpointing hears the
   pause, as it would on a line that never goes quiet.
4. The clock: one task per call ticks every 20 ms on an absolute schedule (a loop that stalled
   over 200 ms starts again from now, never in a burst). Each tick sends one packet — a frame
   of the answer, a keypad tone's event packet, else silence (comfort silence: the line never
   goes quiet, so the far end's RTP timeout never fires) — and runs the jitter buffer's clock.
5. Keypad tones (RFC 4733 ``telephone-event``): a digit is reported once per event (the event's
   RTP timestamp), on its first packet. Digits sent (``send_dtmf``) are 100 ms events with a
   pause of 60 ms between them, the end packet sent three times, in place of audio.
6. A caller whose RTP stops for ``silent_s`` (a phone that vanished without BYE) is reported
   once (``on_silent``): the call is hung up, never kept alive by its own comfort silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

log = logging.getLogger(__name__)

HEADER = struct.Struct("!BBHII")
FRAME_BYTES = 160
"""20 ms of G.711 at 8 kHz."""
FRAME_S = 0.020
MAX_PACKET_BYTES = 1500
SOURCE_SWITCH_S = 0.5
EVENT_DIGITS = "0123456789*#ABCD"
SILENCE = {0: b"\xff" * FRAME_BYTES, 8: b"\xd5" * FRAME_BYTES}
"""Digital silence in μ-law (PT 0) and A-law (PT 8)."""


@dataclass(frozen=True, slots=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    marker: bool
    payload: bytes


def parse_rtp(data: bytes) -> RtpPacket | None:
    """A packet (rule 1), or None."""
    if len(data) < HEADER.size or len(data) > MAX_PACKET_BYTES:
        return None
    first, second, sequence, timestamp, ssrc = HEADER.unpack_from(data)
    if first >> 6 != 2:
        return None
    start = HEADER.size + 4 * (first & 0x0F)
    if first & 0x10:  # a header extension
        if len(data) < start + 4:
            return None
        start += 4 + 4 * struct.unpack_from("!H", data, start + 2)[0]
    end = len(data)
    if first & 0x20:  # padding
        end -= data[-1]
    if start > end:
        return None
    return RtpPacket(second & 0x7F, sequence, timestamp, ssrc, bool(second & 0x80), data[start:end])


def build_rtp(packet: RtpPacket) -> bytes:
    second = (0x80 if packet.marker else 0) | packet.payload_type
    return (
        HEADER.pack(0x80, second, packet.sequence, packet.timestamp, packet.ssrc) + packet.payload
    )


def event_payload(digit: str, *, end: bool, duration: int, volume: int = 10) -> bytes:
    return struct.pack("!BBH", EVENT_DIGITS.index(digit), (0x80 if end else 0) | volume, duration)


class JitterBuffer:
    """Rule 3. ``push`` a packet's sequence number and payload (None: a keypad event's packet,
    which holds its place and no audio); ``tick`` every 20 ms. Both return the audio released,
    oldest first (``b""`` is 20 ms of silence)."""

    def __init__(self, wait_frames: int = 3) -> None:
        self.wait_frames = wait_frames
        self._expected: int | None = None
        self._highest = 0
        self._packets: dict[int, bytes | None] = {}
        self._idle = 0
        self.lost = self.late = 0

    def _extend(self, sequence: int) -> int:
        delta = (sequence - self._highest) & 0xFFFF
        extended = self._highest + delta if delta < 0x8000 else self._highest - (0x10000 - delta)
        self._highest = max(self._highest, extended)
        return extended

    def push(self, sequence: int, payload: bytes | None) -> list[bytes]:
        if self._expected is None:
            self._highest = self._expected = sequence
        extended = self._extend(sequence)
        if extended < self._expected or extended in self._packets:
            self.late += 1
            return []
        if extended - self._expected > 50:  # a new source or a long outage: start again here
            self._packets.clear()
            self._expected = extended
        self._packets[extended] = payload
        return self._release()

    def _release(self) -> list[bytes]:
        out: list[bytes] = []
        assert self._expected is not None
        while self._expected in self._packets:
            payload = self._packets.pop(self._expected)
            self._expected += 1
            self._idle = 0
            if payload is not None:
                out.append(payload)
        return out

    def tick(self) -> list[bytes]:
        self._idle += 1
        if self._idle < self.wait_frames or self._expected is None:
            return []
        if self._packets:  # a gap: the packet is lost
            self._expected += 1
            self.lost += 1
            return [b"", *self._release()]
        return [b""]  # the caller sends nothing: comfort silence


class RtpStream(asyncio.DatagramProtocol):
    """One call's RTP (rules 2, 4, 5). ``next_frame`` gives the answer's next 160 bytes of
    G.711 (or None: nothing to say); ``on_audio`` gets the caller's, 160 bytes at a time
    (silence included); ``on_digit`` each keypad tone."""

    def __init__(
        self,
        *,
        next_frame: Callable[[], bytes | None],
        on_audio: Callable[[bytes], None],
        on_digit: Callable[[str], None],
        on_silent: Callable[[], None] | None = None,
        silent_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.next_frame = next_frame
        self.on_silent = on_silent
        self.silent_s = silent_s
        self._heard_at = clock()
        self.on_audio = on_audio
        self.on_digit = on_digit
        self.clock = clock
        self.codec = 0
        self.event_pt: int | None = None
        self.remote: tuple[str, int] | None = None
        self._offered: tuple[str, int] | None = None
        self._source: int | None = None
        """The SSRC heard (rule 2)."""
        self.peers: set[str] = set()
        self._latched = False
        self.sending = True
        self.transport: asyncio.DatagramTransport | None = None
        self.jitter = JitterBuffer()
        self._ssrc = secrets.randbits(32)
        self._sequence = secrets.randbits(16)
        self._timestamp = secrets.randbits(32)
        self._talking = False
        self._events: deque[tuple[str, int, bool]] = deque()
        self._heard_events: deque[int] = deque(maxlen=16)
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0

    # ------------------------------------------------------------ set-up

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def negotiated(
        self, *, codec: int, event_pt: int | None, remote: tuple[str, int], direction: str
    ) -> None:
        """The SDP's outcome (an INVITE's or a re-INVITE's)."""
        self.codec, self.event_pt = codec, event_pt
        if remote != self._offered or not self._latched:
            self.remote, self._latched, self._offered = remote, False, remote
            self._source = None
        self.peers.add(remote[0])
        self.sending = direction in ("sendrecv", "recvonly") and remote[1] != 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    # ------------------------------------------------------------ in (rules 1–3, 5)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if addr[0] not in self.peers:
            self.dropped += 1
            return
        packet = parse_rtp(data)
        if packet is None:
            self.dropped += 1
            return
        now = self.clock()
        if packet.ssrc != self._source:  # one source at a time (rule 2)
            if self._source is not None and now - self._heard_at < SOURCE_SWITCH_S:
                self.dropped += 1
                return
            self._source, self.jitter = packet.ssrc, JitterBuffer(self.jitter.wait_frames)
        self._heard_at = now
        if not self._latched and self.remote is not None and addr[0] == self.remote[0]:
            self.remote, self._latched = (addr[0], addr[1]), True  # symmetric RTP (rule 2)
        if packet.payload_type == self.event_pt:
            self._event(packet)
            released = self.jitter.push(packet.sequence, None)
        elif packet.payload_type == self.codec and len(packet.payload) > 0:
            released = self.jitter.push(packet.sequence, packet.payload)
        else:
            self.dropped += 1
            return
        for payload in released:
            self._hear(payload)

    def _event(self, packet: RtpPacket) -> None:
        if len(packet.payload) < 4 or packet.timestamp in self._heard_events:
            return
        event = packet.payload[0]
        if event < len(EVENT_DIGITS):
            self._heard_events.append(packet.timestamp)
            self.on_digit(EVENT_DIGITS[event])

    def _hear(self, payload: bytes) -> None:
        self.on_audio(payload or SILENCE.get(self.codec, SILENCE[0]))

    # ------------------------------------------------------------ out (rules 4, 5)

    def send_digits(self, digits: str) -> None:
        """Queue keypad tones (rule 5): each 100 ms, then 60 ms of nothing."""
        for digit in digits:
            if digit in EVENT_DIGITS:
                for step in range(1, 6):
                    self._events.append((digit, step * FRAME_BYTES, step == 5))
                self._events.extend([("", 0, False)] * 3)

    async def _run(self) -> None:
        start, frames = self.clock(), 0
        while True:
            due = start + frames * FRAME_S
            now = self.clock()
            if due > now:
                await asyncio.sleep(due - now)
            elif now - due > 0.2:  # the loop stalled: go on from now, never in a burst (rule 4)
                start, frames = now, 0
            frames += 1
            try:
                self._tick()
            except Exception:  # one bad tick must not end the call's audio
                log.exception("rtp: a tick failed")

    def _tick(self) -> None:
        if self.silent_s and self.on_silent and self.clock() - self._heard_at > self.silent_s:
            silent, self.on_silent = self.on_silent, None  # once (rule 6)
            silent()
        for payload in self.jitter.tick():
            self._hear(payload)
        if self._events and self.event_pt is not None:
            self._send_event()
            return
        frame = self.next_frame()
        marker = frame is not None and not self._talking
        self._talking = frame is not None
        payload = frame if frame is not None else SILENCE.get(self.codec, SILENCE[0])
        self._send(self.codec, payload, marker)
        self._timestamp = (self._timestamp + FRAME_BYTES) & 0xFFFFFFFF

    def _send_event(self) -> None:
        digit, duration, end = self._events.popleft()
        if not digit:  # the pause after a digit: silence
            self._send(self.codec, SILENCE.get(self.codec, SILENCE[0]), False)
            self._timestamp = (self._timestamp + FRAME_BYTES) & 0xFFFFFFFF
            return
        assert self.event_pt is not None
        payload = event_payload(digit, end=end, duration=duration)
        first = duration == FRAME_BYTES
        for _ in range(3 if end else 1):
            self._send(self.event_pt, payload, first)
        if end:  # the event's timestamp is its start: move on by its whole length
            self._timestamp = (self._timestamp + duration) & 0xFFFFFFFF

    def _send(self, payload_type: int, payload: bytes, marker: bool) -> None:
        self._sequence = (self._sequence + 1) & 0xFFFF
        if self.transport is None or self.remote is None or not self.sending:
            return
        packet = RtpPacket(
            payload_type, self._sequence, self._timestamp, self._ssrc, marker, payload
        )
        self.transport.sendto(build_rtp(packet), self.remote)


async def open_rtp(stream: RtpStream, host: str, ports: tuple[int, int] | None) -> RtpStream:
    """Bind ``stream`` on ``host``: an even port of ``ports`` (inclusive), else any free one."""
    loop = asyncio.get_running_loop()
    candidates = [0] if ports is None else list(range(ports[0] + ports[0] % 2, ports[1] + 1, 2))
    if ports is not None:
        offset = secrets.randbelow(max(1, len(candidates)))
        candidates = candidates[offset:] + candidates[:offset]
    for port in candidates:
        try:
            await loop.create_datagram_endpoint(lambda: stream, local_addr=(host, port))
            return stream
        except OSError:
            continue
    raise OSError("no free RTP port")
