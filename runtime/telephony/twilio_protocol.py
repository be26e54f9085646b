"""Twilio's side of a phone call, sans-I/O: webhook signatures, stream tokens, TwiML, the Media
Streams messages and playback marks (SPEC TEL-1; ``runtime.telephony.twilio``
does the I/O).

Rules
-----
1. Webhooks are Twilio's if signed: ``X-Twilio-Signature`` is base64(HMAC-SHA1(auth token,
   URL + every POST parameter as name + value, sorted by name)), compared in constant time. The
   URL is the one Twilio requested: the server's ``public_url`` when set (behind a proxy the
   server cannot see it), else the request's own.
2. A stream token lets exactly one Media Streams WebSocket open for the call it was minted for:
   HMAC-SHA256 (key derived from the auth token, so every process of a fleet checks it) over
   the call SID, the agent role, the caller and called numbers, the expiry and a nonce. It
   lives ``ttl`` seconds, travels as a ``<Parameter>`` of the TwiML (Twilio hands it back in
   ``start.customParameters``; never in the URL), is bound to the call SID that the ``start``
   message names, and each nonce is redeemed once per process (``StreamTokens``).
3. Marks say what the caller heard. After each piece of an answer's audio (at most
   ``MARK_EVERY_MS``) the server sends a mark named ``g<generation>:<ms>``: Twilio echoes it once
   that audio has played, so the heard prefix is exact to one piece. After a ``clear`` Twilio
   echoes the marks still queued without playing them, so the server sends a fence mark
   (``c<n>``) right behind the clear and ignores every mark until the fence comes back.
4. Keypad digits (``dtmf``) are collected into entries as on every phone line
   (``runtime.telephony.phone`` rule 2).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

_XML = '<?xml version="1.0" encoding="UTF-8"?>'
MARK_EVERY_MS = 100
"""The longest piece of answer audio between two marks: the heard prefix's resolution."""
STREAM_TOKEN_PREFIX = "ts1"


# ---------------------------------------------------------------- rule 1: webhook signatures


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str]) -> str:
    """The ``X-Twilio-Signature`` Twilio sends for a POST of ``params`` to ``url``."""
    payload = url + "".join(f"{name}{params[name]}" for name in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signature_valid(auth_token: str, url: str, params: Mapping[str, str], signature: str) -> bool:
    expected = twilio_signature(auth_token, url, params)
    return hmac.compare_digest(expected.encode(), signature.encode())


# ---------------------------------------------------------------- rule 2: stream tokens


@dataclass(frozen=True, slots=True)
class StreamGrant:
    """What a stream token lets open: one stream of ``call_sid`` with ``role_id``."""

    call_sid: str
    role_id: str
    caller: str
    called: str
    expires_at: float
    nonce: str


class TokenRefused(Exception):
    """A stream token that does not open a stream (its ``reason`` is safe to log)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _token_key(auth_token: str) -> bytes:
    return hmac.new(auth_token.encode(), b"openrealtime stream token", hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint_stream_token(
    auth_token: str,
    *,
    call_sid: str,
    role_id: str,
    caller: str,
    called: str,
    ttl_s: float,
    now: float | None = None,
) -> str:
    grant = {
        "c": call_sid,
        "r": role_id,
        "f": caller,
        "t": called,
        "e": round((time.time() if now is None else now) + ttl_s, 3),
        "n": secrets.token_urlsafe(12),
    }
    body = _b64(json.dumps(grant, separators=(",", ":")).encode())
    mac = _b64(hmac.new(_token_key(auth_token), body.encode(), hashlib.sha256).digest())
    return f"{STREAM_TOKEN_PREFIX}.{body}.{mac}"


def read_stream_token(
    auth_token: str, token: str, *, call_sid: str, now: float | None = None
) -> StreamGrant:
    """The grant ``token`` carries, checked (rule 2); ``TokenRefused`` otherwise."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != STREAM_TOKEN_PREFIX:
        raise TokenRefused("not a stream token")
    body, mac = parts[1], parts[2]
    expected = _b64(hmac.new(_token_key(auth_token), body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(expected.encode(), mac.encode()):
        raise TokenRefused("bad signature")
    try:
        raw = json.loads(_unb64(body))
        grant = StreamGrant(
            str(raw["c"]), str(raw["r"]), str(raw["f"]), str(raw["t"]), float(raw["e"]),
            str(raw["n"]),
        )  # fmt: skip
    except (ValueError, KeyError, TypeError):
        raise TokenRefused("malformed") from None
    if (time.time() if now is None else now) > grant.expires_at:
        raise TokenRefused("expired")
    if not hmac.compare_digest(grant.call_sid.encode(), call_sid.encode()):
        raise TokenRefused("minted for another call")
    return grant


class StreamTokens:
    """Redeemed nonces of this process, kept until their tokens expire (rule 2; bounded)."""

    MAX_KEPT = 100_000

    def __init__(self) -> None:
        self._used: OrderedDict[str, float] = OrderedDict()

    def redeem(self, grant: StreamGrant, *, now: float | None = None) -> None:
        now = time.time() if now is None else now
        while self._used and next(iter(self._used.values())) < now:
            self._used.popitem(last=False)
        if grant.nonce in self._used:
            raise TokenRefused("already used")
        if len(self._used) >= self.MAX_KEPT:
            self._used.popitem(last=False)
        self._used[grant.nonce] = grant.expires_at


# ---------------------------------------------------------------- TwiML


def connect_stream_twiml(stream_url: str, token: str, *, action_url: str | None = None) -> str:
    """``<Connect><Stream>``: a bidirectional stream to ``stream_url`` carrying ``token``; when
    the stream ends Twilio asks ``action_url`` what next (rule 2; the caller's drop-out resume)."""
    action = f" action={quoteattr(action_url)}" if action_url else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect{action}><Stream url={quoteattr(stream_url)}>"
        f'<Parameter name="token" value={quoteattr(token)}/>'
        "</Stream></Connect></Response>"
    )


def hangup_twiml() -> str:
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>'


def say_twiml(text: str) -> str:
    """A short spoken refusal (the call cannot be served), then the call ends."""
    return f"{_XML}<Response><Say>{escape(text)}</Say><Hangup/></Response>"


def dial_twiml(target: str) -> str:
    """The call goes on to ``target`` (a number, or a SIP URI): ``transfer_call``."""
    noun = "Sip" if target.startswith(("sip:", "sips:")) else "Number"
    return f"{_XML}<Response><Dial><{noun}>{escape(target)}</{noun}></Dial></Response>"


def busy_twiml() -> str:
    """The server takes no new sessions (draining, or at its limit): Twilio plays busy."""
    return f'{_XML}<Response><Reject reason="busy"/></Response>'


# ---------------------------------------------------------------- Media Streams messages


def media_message(stream_sid: str, mulaw: bytes) -> str:
    payload = base64.b64encode(mulaw).decode()
    return json.dumps({"event": "media", "streamSid": stream_sid, "media": {"payload": payload}})


def mark_message(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})


def clear_message(stream_sid: str) -> str:
    return json.dumps({"event": "clear", "streamSid": stream_sid})


def audio_mark(generation: int, played_ms: float) -> str:
    return f"g{generation}:{played_ms:.0f}"


def read_audio_mark(name: str) -> tuple[int, float] | None:
    """(generation, ms played when it is echoed) of an audio mark; None for any other name."""
    if not name.startswith("g") or ":" not in name:
        return None
    generation, _, ms = name[1:].partition(":")
    try:
        return int(generation), float(ms)
    except ValueError:
        return None
