"""The phone calls this process serves (``Services.phone``): each call's thread and latest
session (a dropped stream of the same call continues them), how it ended, and the stream
tokens redeemed here (``runtime.telephony.twilio_protocol`` rule 2).

Rules
-----
1. A call is known by its provider's id (Twilio's call SID). Its first stream opens a new
   thread; a later stream of the same call (Twilio asks the ``<Connect>`` action URL when a
   stream drops, and gets a new stream) continues that thread from the last session.
2. ``ended`` says who ended the call for good — ``caller`` (Twilio's ``stop``), ``agent``
   (``end_call``) — after which the action URL answers ``<Hangup/>``. A stream that dropped
   leaves it None: the call goes on in a new stream.
3. Bounded: at most ``MAX_CALLS`` calls are remembered, the oldest ended ones forgotten first.
   The registry is this process's: behind a fleet, the action request of a dropped stream must
   reach the process that served it (route on the call SID), or the call starts a new thread.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from runtime.telephony.twilio_protocol import StreamTokens

Ender = Literal["caller", "agent"]


def number_digest(number: str) -> str:
    """A phone number as logs show it: never the number (SPEC TEL-5)."""
    return "tel_" + hashlib.sha256(number.encode()).hexdigest()[:12]


@dataclass(slots=True)
class PhoneCall:
    call_sid: str
    caller: str
    called: str
    role_id: str
    started_at: float = field(default_factory=time.time)
    thread_id: str | None = None
    session_id: str | None = None
    streams: int = 0
    ended: Ender | None = None
    ended_at: float | None = None
    transfer_target: str | None = None
    """Where the agent transferred the call (``phone`` rule 4)."""


class PhoneCalls:
    MAX_CALLS = 10_000

    def __init__(self) -> None:
        self.tokens = StreamTokens()
        self._calls: OrderedDict[str, PhoneCall] = OrderedDict()

    def __len__(self) -> int:
        return len(self._calls)

    def get(self, call_sid: str) -> PhoneCall | None:
        return self._calls.get(call_sid)

    def open(self, call_sid: str, *, caller: str, called: str, role_id: str) -> PhoneCall:
        """The call a new stream of ``call_sid`` belongs to (rule 1)."""
        call = self._calls.get(call_sid)
        if call is None:
            call = self._calls[call_sid] = PhoneCall(call_sid, caller, called, role_id)
            self._bound()
        call.streams += 1
        return call

    def end(self, call: PhoneCall, by: Ender) -> None:
        if call.ended is None:
            call.ended = by
            call.ended_at = time.time()

    def _bound(self) -> None:
        while len(self._calls) > self.MAX_CALLS:
            ended = next((sid for sid, c in self._calls.items() if c.ended is not None), None)
            del self._calls[ended if ended is not None else next(iter(self._calls))]
