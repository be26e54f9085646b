"""SIP messages and the SDP of a G.711 call: parsing, building, and the answers a UAS gives.

Rules
-----
1. What is parsed is bounded: a message is at most ``MAX_MESSAGE_BYTES``, its header at most
   ``MAX_HEADERS`` fields; anything else, or a start line that is not SIP/2.0, is
   ``SipParseError`` (the server answers 400 when it can tell where to, else drops it).
2. Header names are kept canonical (compact forms expanded: ``v`` → ``Via``, ``i`` → ``Call-ID``,
   …); repeated fields (``Via``, ``Record-Route``) keep their order. Folded lines are unfolded.
3. A response copies what RFC 3261 §8.2.6 says it copies (every ``Via``, ``From``, ``To``,
   ``Call-ID``, ``CSeq``) and adds the dialog's To-tag to anything above 100.
4. SDP: only what an audio call needs is read — the connection address, the first audio
   ``m=`` line's port and payload types, ``rtpmap``, the direction attribute. The answer offers
   PCMU or PCMA (the first of the offer's that we know, offer order) and ``telephone-event``
   (RFC 4733) when the offer has it, with the offer's payload type number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_MESSAGE_BYTES = 64 * 1024
MAX_HEADERS = 100

COMPACT = {
    "v": "Via", "f": "From", "t": "To", "i": "Call-ID", "m": "Contact", "l": "Content-Length",
    "c": "Content-Type", "k": "Supported", "s": "Subject", "e": "Content-Encoding",
}  # fmt: skip
CANONICAL = {
    name.lower(): name
    for name in (
        "Via", "From", "To", "Call-ID", "CSeq", "Contact", "Content-Length", "Content-Type",
        "Max-Forwards", "Record-Route", "Route", "Require", "Supported", "Allow", "User-Agent",
        "Server", "Authorization", "WWW-Authenticate", "Proxy-Authorization", "Accept",
        "Unsupported", "Retry-After", "Expires", "Session-Expires", "Subject",
    )
}  # fmt: skip
REASONS = {
    100: "Trying", 180: "Ringing", 200: "OK", 400: "Bad Request", 401: "Unauthorized",
    403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 413: "Request Entity Too Large",
    415: "Unsupported Media Type", 420: "Bad Extension", 481: "Call/Transaction Does Not Exist",
    483: "Too Many Hops", 486: "Busy Here", 487: "Request Terminated", 488: "Not Acceptable Here",
    491: "Request Pending", 500: "Server Internal Error", 501: "Not Implemented",
    503: "Service Unavailable",
}  # fmt: skip
ALLOW = "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO"


class SipParseError(ValueError):
    pass


@dataclass(slots=True)
class SipMessage:
    """A request (``method``, ``uri``) or a response (``status``, ``reason``) (rule 2)."""

    method: str = ""
    uri: str = ""
    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def is_request(self) -> bool:
        return bool(self.method)

    def get(self, name: str, default: str = "") -> str:
        for key, value in self.headers:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]

    def set(self, name: str, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k != name]
        self.headers.append((name, value))

    @property
    def call_id(self) -> str:
        return self.get("Call-ID")

    @property
    def cseq(self) -> tuple[int, str]:
        number, _, method = self.get("CSeq").strip().partition(" ")
        try:
            return int(number), method.strip().upper()
        except ValueError:
            raise SipParseError("bad CSeq") from None

    @property
    def branch(self) -> str:
        return header_param(self.get("Via"), "branch")

    def to_bytes(self) -> bytes:
        if self.is_request:
            start = f"{self.method} {self.uri} SIP/2.0"
        else:
            start = f"SIP/2.0 {self.status} {self.reason or REASONS.get(self.status, '')}"
        lines = [start]
        lines += [f"{k}: {v}" for k, v in self.headers if k != "Content-Length"]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def canonical(name: str) -> str:
    name = name.strip()
    lower = name.lower()
    if lower in COMPACT:
        return COMPACT[lower]
    return CANONICAL.get(lower, name)


def header_end(data: bytes | bytearray) -> int:
    """Where the header ends (the index after the blank line), or -1."""
    end = data.find(b"\r\n\r\n")
    return -1 if end < 0 else end + 4


def parse_message(data: bytes) -> SipMessage:
    """One whole message (rule 1); the body is what ``Content-Length`` says, else the rest."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise SipParseError("message too large")
    end = header_end(data)
    if end < 0:
        raise SipParseError("no end of header")
    try:
        text = data[: end - 4].decode("utf-8")
    except UnicodeDecodeError:
        raise SipParseError("header is not UTF-8") from None
    lines: list[str] = []
    for line in text.split("\r\n"):
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += " " + line.strip()  # a folded line (rule 2)
        else:
            lines.append(line)
    message = _start_line(lines[0])
    if len(lines) - 1 > MAX_HEADERS:
        raise SipParseError("too many header fields")
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise SipParseError("a header line without a name")
        message.headers.append((canonical(name), value.strip()))
    body = data[end:]
    length = message.get("Content-Length")
    if length:
        try:
            size = int(length)
        except ValueError:
            raise SipParseError("bad Content-Length") from None
        if size < 0 or size > len(body):
            raise SipParseError("body shorter than Content-Length")
        body = body[:size]
    message.body = body
    return message


def _start_line(line: str) -> SipMessage:
    parts = line.split(" ", 2)
    if len(parts) == 3 and parts[0] == "SIP/2.0":
        try:
            return SipMessage(status=int(parts[1]), reason=parts[2])
        except ValueError:
            raise SipParseError("bad status line") from None
    if len(parts) == 3 and parts[2] == "SIP/2.0" and re.fullmatch(r"[A-Za-z]+", parts[0]):
        return SipMessage(method=parts[0].upper(), uri=parts[1])
    raise SipParseError("not a SIP/2.0 start line")


def header_param(value: str, name: str) -> str:
    """A ``;name=value`` parameter of a header field (outside any ``<…>``)."""
    outside = re.sub(r"<[^>]*>", "", value)
    for part in outside.split(";")[1:]:
        key, _, val = part.partition("=")
        if key.strip().lower() == name:
            return val.strip().strip('"')
    return ""


def uri_user(value: str) -> str:
    """The user part of a SIP URI (``sip:+15550100@host`` → ``+15550100``), or ``""``."""
    match = re.search(r"sips?:([^@;>\s]+)@", value)
    return match.group(1) if match else ""


def response(
    request: SipMessage, status: int, *, to_tag: str = "", reason: str = "", body: bytes = b""
) -> SipMessage:
    """An answer to ``request`` (rule 3); ``to_tag`` is added to ``To`` if it has none."""
    answer = SipMessage(status=status, reason=reason or REASONS.get(status, ""))
    for name in ("Via", "From", "To", "Call-ID", "CSeq"):
        for value in request.get_all(name):
            if name == "To" and status > 100 and to_tag and not header_param(value, "tag"):
                value = f"{value};tag={to_tag}"
            answer.headers.append((name, value))
    answer.headers.append(("Server", "OpenRealtime"))
    answer.body = body
    return answer


# ---------------------------------------------------------------- SDP (rule 4)

PCMU, PCMA = 0, 8
CODECS = {PCMU: "PCMU", PCMA: "PCMA"}


class SdpError(ValueError):
    pass


@dataclass(slots=True)
class SdpOffer:
    address: str
    port: int
    payload_types: list[int]
    rtpmap: dict[int, str]
    direction: str = "sendrecv"

    def codec(self) -> int | None:
        """The first G.711 payload type the offer lists (its own order)."""
        for pt in self.payload_types:
            name = self.rtpmap.get(pt, CODECS.get(pt, "")).split("/")[0].upper()
            if pt in CODECS and name in ("PCMU", "PCMA", ""):
                return pt
        return None

    def telephone_event(self) -> int | None:
        for pt in self.payload_types:
            if self.rtpmap.get(pt, "").lower().startswith("telephone-event/8000"):
                return pt
        return None


def parse_sdp(body: bytes) -> SdpOffer:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SdpError("SDP is not UTF-8") from None
    session_address = media_address = ""
    port, payload_types = -1, []
    rtpmap: dict[int, str] = {}
    direction, in_audio, seen_audio = "sendrecv", False, False
    for raw in text.splitlines():
        kind, _, value = raw.strip().partition("=")
        if kind == "m":
            in_audio = value.startswith("audio ") and not seen_audio
            if in_audio:
                seen_audio = True
                fields = value.split()
                try:
                    port = int(fields[1].split("/")[0])
                    payload_types = [int(pt) for pt in fields[3:]]
                except (IndexError, ValueError):
                    raise SdpError("bad m= line") from None
        elif kind == "c":
            address = value.split()[-1].split("/")[0] if value.split() else ""
            if in_audio:
                media_address = address
            elif not seen_audio:
                session_address = address
        elif kind == "a" and (in_audio or not seen_audio):
            if value.startswith("rtpmap:"):
                pt, _, codec = value[7:].partition(" ")
                if pt.isdigit():
                    rtpmap[int(pt)] = codec.strip()
            elif value in ("sendrecv", "sendonly", "recvonly", "inactive"):
                direction = value
    address = media_address or session_address
    if not seen_audio or port < 0 or not address:
        raise SdpError("no audio stream")
    if port == 0:
        direction = "inactive"
    return SdpOffer(address, port, payload_types, rtpmap, direction)


def answer_sdp(
    offer: SdpOffer, *, address: str, port: int, session_id: int, version: int, direction: str
) -> bytes:
    """Our answer to ``offer`` (rule 4); the offer must have a G.711 codec."""
    codec = offer.codec()
    if codec is None:
        raise SdpError("no PCMU or PCMA in the offer")
    event = offer.telephone_event()
    pts = [codec] + ([event] if event is not None else [])
    family = "IP6" if ":" in address else "IP4"
    lines = [
        "v=0",
        f"o=OpenRealtime {session_id} {version} IN {family} {address}",
        "s=OpenRealtime",
        f"c=IN {family} {address}",
        "t=0 0",
        f"m=audio {port} RTP/AVP {' '.join(str(pt) for pt in pts)}",
        f"a=rtpmap:{codec} {CODECS[codec]}/8000",
    ]
    if event is not None:
        lines += [f"a=rtpmap:{event} telephone-event/8000", f"a=fmtp:{event} 0-15"]
    lines += ["a=ptime:20", f"a={direction}"]
    return ("\r\n".join(lines) + "\r\n").encode()


def answer_direction(offered: str) -> str:
    """The direction that answers ``offered`` (RFC 3264 §6.1)."""
    return {"sendonly": "recvonly", "recvonly": "sendonly", "inactive": "inactive"}.get(
        offered, "sendrecv"
    )
