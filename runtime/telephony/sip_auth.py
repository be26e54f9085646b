"""Who may call the SIP endpoint: source networks and digest authentication per trunk.

Rules
-----
1. A request from an address outside ``sip_allow_networks`` is refused (403) before anything
   else is read; the default allows loopback only. An empty list allows every source (only
   with trunks' digest credentials, or behind a firewall that does the same).
2. With trunks configured (``sip_trunks``, ``name:password,…``), an INVITE must carry digest
   credentials (RFC 2617/7616, MD5, ``qop=auth``) of one of them; without, or with a stale
   nonce, it is challenged (401 ``WWW-Authenticate``); with wrong ones, refused (403).
3. Nonces are stateless: the issue time and an HMAC of it under a per-process key, valid for
   ``NONCE_TTL_S``; a trunk's password is compared through the digest only, never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

NONCE_TTL_S = 300.0
_PARAM = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def parse_networks(
    setting: str,
) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [
        ipaddress.ip_network(part.strip(), strict=False)
        for part in setting.split(",")
        if part.strip()
    ]


def parse_trunks(setting: str) -> dict[str, str]:
    trunks: dict[str, str] = {}
    for pair in setting.split(","):
        name, colon, password = pair.strip().partition(":")
        if colon and name and password:
            trunks[name] = password
    return trunks


def allowed_source(
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network], host: str
) -> bool:
    """Rule 1."""
    if not networks:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


Verdict = Literal["ok", "challenge", "stale", "refused"]


@dataclass(slots=True)
class DigestAuth:
    """Rules 2 and 3."""

    trunks: dict[str, str]
    realm: str = "openrealtime"
    clock: Callable[[], float] = time.time
    _key: bytes = b""

    def __post_init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def nonce(self) -> str:
        issued = str(int(self.clock()))
        mac = hmac.new(self._key, issued.encode(), hashlib.sha256).hexdigest()[:24]
        return f"{issued}.{mac}"

    def _nonce_state(self, nonce: str) -> Literal["ok", "stale", "bad"]:
        issued, _, mac = nonce.partition(".")
        expected = hmac.new(self._key, issued.encode(), hashlib.sha256).hexdigest()[:24]
        if not issued.isdigit() or not hmac.compare_digest(mac, expected):
            return "bad"
        return "ok" if self.clock() - int(issued) <= NONCE_TTL_S else "stale"

    def challenge(self, *, stale: bool = False) -> str:
        value = f'Digest realm="{self.realm}", nonce="{self.nonce()}", algorithm=MD5, qop="auth"'
        return value + (", stale=true" if stale else "")

    def check(self, method: str, authorization: str) -> tuple[Verdict, str]:
        """The verdict on an ``Authorization`` header, and the trunk it names when ``ok``."""
        if not authorization.lower().startswith("digest "):
            return "challenge", ""
        params = {
            m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
            for m in _PARAM.finditer(authorization[7:])
        }
        user, nonce = params.get("username", ""), params.get("nonce", "")
        password = self.trunks.get(user)
        if password is None or params.get("realm") != self.realm:
            return "refused", ""
        state = self._nonce_state(nonce)
        if state == "bad":
            return "challenge", ""
        ha1 = _md5(f"{user}:{self.realm}:{password}")
        ha2 = _md5(f"{method}:{params.get('uri', '')}")
        if params.get("qop"):
            tail = f"{params.get('nc', '')}:{params.get('cnonce', '')}:{params['qop']}"
            expected = _md5(f"{ha1}:{nonce}:{tail}:{ha2}")
        else:
            expected = _md5(f"{ha1}:{nonce}:{ha2}")
        if not hmac.compare_digest(expected, params.get("response", "")):
            return "refused", ""
        return ("stale", "") if state == "stale" else ("ok", user)
