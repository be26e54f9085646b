"""What every phone line shares, whatever carries it (Twilio Media Streams, SIP): the session a
call opens, keypad entries, and how a call ends in code.

Rules
-----
1. A call is a realtime session on a GA-only connection whose input and output are G.711 at
   8 kHz (``phone_session``): the same sessions, journal, memory and tools as every transport.
   It runs as the line's owner (``telephony_token``) with the role the called number chose; its
   first stream opens a new thread, a later stream of the same call continues it
   (``open_phone_session``; ``runtime.telephony.calls`` rule 1).
2. Keypad digits are collected into an entry: ``#`` ends it at once, a pause of ``gap_s`` ends
   it too, and ``*`` alone is an entry of its own (a "back" key); the entry reaches the agent as
   the caller's words (``keypad_text``) through ``conversation.item.create`` +
   ``response.create`` (``keypad_events``), so an answer being spoken gives way.
3. Hanging up is decided in code (``HangUp``): when the caller's words take leave
   (``plugins.brain.grounding.is_farewell``: "bye", "thanks, goodbye", 「再见」, "please hang
   up"; not "don't hang up yet"), the answer to them is the last — once it is done and the
   caller has heard all of it, the line's ``on_heard_all`` hangs up. ``end_call`` is the call's
   own built-in tool (offered in phone sessions only, allowed by the gate like the other
   built-ins): the model may propose it, and it is honoured only after such words — a small
   model calls tools it should not (a statement was once taken for a goodbye).
4. ``transfer_call`` hands the call on to a target the role allows
   (``telephony_transfer_targets``: only those are offered, as an enum, and only those are
   accepted); like ``end_call`` it takes effect once the answer that announces it has been
   heard: Twilio's action URL then dials the target, a SIP call is REFERred to it. A role
   with no targets is not offered the tool. ``send_dtmf`` plays keypad tones to the far end
   (an IVR the call reached): RFC 4733 events on SIP, in-band tones on Twilio's audio.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from pipeline import events as ev
from plugins.brain.grounding import is_farewell
from plugins.brain.tool_loop import ToolHandler
from plugins.contracts import ToolSpec
from runtime.errors import Refused
from runtime.realtime.outbox import NO_EXTENSIONS
from runtime.realtime.protocol import SessionStart

if TYPE_CHECKING:
    from accounts.model import Principal
    from runtime.realtime.connection import RealtimeConnection
    from runtime.realtime.session import VoiceSession
    from runtime.services import Services
    from runtime.telephony.calls import PhoneCall

log = logging.getLogger(__name__)

T = TypeVar("T")
PHONE_RATE = 8_000
SAMPLES_PER_20MS = PHONE_RATE // 50


def phone_session(kind: str = "audio/pcmu") -> dict[str, Any]:
    """The session a phone line opens (rule 1): G.711 (``audio/pcmu`` or ``audio/pcma``)."""
    return {
        "type": "realtime",
        "audio": {"input": {"format": {"type": kind}}, "output": {"format": {"type": kind}}},
    }


def number_roles(setting: str) -> dict[str, str]:
    """``telephony_numbers`` as called number → role id or name (rule 1)."""
    roles: dict[str, str] = {}
    for pair in setting.split(","):
        number, _, role = pair.partition("=")
        if number.strip() and role.strip():
            roles[number.strip()] = role.strip()
    return roles


async def open_phone_session(
    connection: RealtimeConnection, call: PhoneCall, kind: str = "audio/pcmu"
) -> VoiceSession | None:
    """The call's session: a new thread, or the call's thread continued (rule 1)."""
    start = SessionStart(
        type="openrealtime.session.start",
        model=call.role_id,
        extensions=NO_EXTENSIONS,
        session=phone_session(kind),
        requested_thread_id=call.thread_id,
        previous_voice_session_id=call.session_id,
    )
    try:
        return await connection.open(start)
    except Refused as refused:
        log.warning("phone call %s refused: %s", call.call_sid, refused.error_code)
        await connection.link.close(refused.close_code, refused.close_reason)
        return None


# ---------------------------------------------------------------- rule 2: keypad entries


class KeypadEntry:
    """Digits pressed, collected into entries (rule 2); the caller polls ``due`` with the time."""

    DIGITS = frozenset("0123456789*#ABCD")
    MAX_DIGITS = 64

    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self._digits: list[str] = []
        self._last = 0.0

    def press(self, digit: str, now: float) -> str | None:
        """An entry ended by this key (``#``, or ``*`` alone), else None."""
        if digit not in self.DIGITS:
            return None
        if digit == "#":
            return self._take() or "#"
        if digit == "*" and not self._digits:
            return "*"
        if len(self._digits) < self.MAX_DIGITS:
            self._digits.append(digit)
        self._last = now
        return None

    def due(self, now: float) -> str | None:
        """The entry a pause of ``gap_s`` ended, if one did."""
        if self._digits and now - self._last >= self.gap_s:
            return self._take()
        return None

    def deadline(self) -> float | None:
        return self._last + self.gap_s if self._digits else None

    def _take(self) -> str:
        entry = "".join(self._digits)
        self._digits.clear()
        return entry


async def keypad_wait(keypad: KeypadEntry, receive: Callable[[], Awaitable[T]]) -> T | None:
    """What ``receive`` gives — or None when the pause that ends a keypad entry (rule 2) comes
    first (then ``keypad.due`` has the entry)."""
    deadline = keypad.deadline()
    if deadline is None:
        return await receive()
    try:
        return await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        return None


def note_session_error(data: str, line: str) -> None:
    """A phone line has no reader for the session's JSON events: an error is logged by code."""
    if '"type":"error"' in data[:40]:
        code = json.loads(data).get("error", {}).get("code")
        log.info("%s: the session sent error %s (no reader on a phone line)", line, code)


def keypad_text(entry: str) -> str:
    """An entry as the caller's words: the brain reads it as input."""
    return f"(keypad: {entry})"


def keypad_events(entry: str) -> list[str]:
    """The client events that give the agent a keypad entry as the caller's words (rule 2)."""
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": keypad_text(entry)}],
    }
    return [
        json.dumps({"type": "conversation.item.create", "item": item}),
        json.dumps({"type": "response.create"}),
    ]


# ---------------------------------------------------------------- rule 3: the end of a call

END_CALL = ToolSpec(
    name="end_call",
    description=(
        "Hang up this phone call. Use it when the caller says goodbye or asks to end the call. "
        "After it, say one short goodbye: the line closes once the caller has heard it."
    ),
    parameters={
        "type": "object",
        "properties": {
            "reason": {"type": "string", "description": "why the call ends, in a few words"}
        },
        "additionalProperties": False,
    },
)


class HangUp:
    """When a call ends in code (rules 3, 4). The line's voice shows it every server event
    (``note``) and calls ``heard_all`` whenever the caller has heard everything sent; the
    line's ``on_heard_all`` then hangs up, or transfers to ``transfer_to``."""

    def __init__(self, transfer_targets: tuple[str, ...] = ()) -> None:
        self.transfer_targets = transfer_targets
        self.transfer_to: str | None = None
        self.on_heard_all: Callable[[], None] | None = None
        self.farewell = False
        """The caller's last words took leave: the call ends after the answer to them."""
        self._ending = False
        self._armed = False

    def end_after_answer(self) -> None:
        """``end_call``: hang up once this answer is done and heard."""
        self._ending = True

    def note(self, event: ev.ServerEvent) -> bool:
        """True when the last answer just ended (check ``heard_all`` now)."""
        if isinstance(event, ev.TranscriptionCompleted):
            self.farewell = is_farewell(event.transcript)
            if self.farewell:
                self._ending = True
        elif isinstance(event, ev.ResponseDone) and self._ending:
            self._armed = True
            return True
        return False

    def heard_all(self) -> None:
        if self._armed and self.on_heard_all is not None:
            hang_up, self.on_heard_all = self.on_heard_all, None
            hang_up()

    def call_tools(self, press: Callable[[str], None]) -> tuple[tuple[ToolSpec, ToolHandler], ...]:
        """The tools a phone line offers its session (rules 3, 4); ``press`` plays keypad
        tones to the far end the line's way."""

        async def send_dtmf(arguments: dict[str, Any]) -> str:
            digits = str(arguments.get("digits", ""))[:32]
            if not digits or not set(digits) <= DTMF_DIGITS:
                return "Not sent: digits are 0-9, *, # and A-D."
            press(digits)
            return f"Pressed {digits}."

        tools: list[tuple[ToolSpec, ToolHandler]] = [(END_CALL, self.end_call)]
        if self.transfer_targets:
            tools.append((transfer_call_spec(self.transfer_targets), self.transfer_call))
        tools.append((SEND_DTMF, send_dtmf))
        return tuple(tools)

    def resume(self) -> None:
        """A transfer failed: the call goes on (rule 4)."""
        self.transfer_to = None
        self._ending = self._armed = False

    async def transfer_call(self, arguments: dict[str, Any]) -> str:
        """The ``transfer_call`` tool's handler (rule 4)."""
        target = str(arguments.get("target", ""))
        if target not in self.transfer_targets:
            allowed = ", ".join(self.transfer_targets)
            return f"Not transferred: {target!r} is not a target this line allows ({allowed})."
        self.transfer_to = target
        self.end_after_answer()
        return (
            "The call is transferred once the caller has heard your next words: tell them in "
            "one short sentence, in the caller's language, that you are putting them through."
        )

    async def end_call(self, arguments: dict[str, Any]) -> str:
        """The ``end_call`` tool's handler: honoured only after words that take leave."""
        if not self.farewell:
            return (
                "Not ended: the caller has not said goodbye or asked to hang up. Go on with "
                "the conversation."
            )
        self.end_after_answer()
        return (
            "The call ends once the caller has heard your next words: say a short goodbye now, "
            "in the caller's language."
        )


# ---------------------------------------------------------------- rule 4: transfer and tones

_TARGET = re.compile(r"^(\+?[0-9]{3,15}|sips?:[^\s<>;,|]+@[^\s<>;,|]+)$")
DTMF_DIGITS = frozenset("0123456789*#ABCD")

SEND_DTMF = ToolSpec(
    name="send_dtmf",
    description="Press keys on this phone call (for a menu that asked), e.g. '1' or '4711#'.",
    parameters={
        "type": "object",
        "properties": {"digits": {"type": "string", "pattern": "^[0-9*#A-D]{1,32}$"}},
        "required": ["digits"],
        "additionalProperties": False,
    },
)


def transfer_call_spec(targets: tuple[str, ...]) -> ToolSpec:
    return ToolSpec(
        name="transfer_call",
        description=(
            "Put this phone call through to a person or another line, when the caller asks "
            "for one or you cannot help. Then say one short sentence that you are doing so."
        ),
        parameters={
            "type": "object",
            "properties": {
                "target": {"type": "string", "enum": list(targets)},
                "reason": {"type": "string"},
            },
            "required": ["target"],
            "additionalProperties": False,
        },
    )


def parse_transfer_targets(setting: str) -> dict[str, tuple[str, ...]]:
    """``telephony_transfer_targets`` (``support=+15550150|sip:desk@pbx.example.com;sales=…``)
    as role id or name → targets; a target that is not a number or a SIP URI is dropped."""
    roles: dict[str, tuple[str, ...]] = {}
    for entry in setting.split(";"):
        role, _, targets = entry.partition("=")
        found = tuple(t.strip() for t in targets.split("|") if _TARGET.match(t.strip()))
        if role.strip() and found:
            roles[role.strip()] = found
    return roles


async def transfer_targets(
    services: Services, principal: Principal, role_id: str
) -> tuple[str, ...]:
    """The targets the call's role allows (rule 4): by the role's id, else its name."""
    configured = parse_transfer_targets(services.settings.telephony_transfer_targets)
    if not configured:
        return ()
    if role_id in configured:
        return configured[role_id]
    role = await services.roles.get(principal.tenant, role_id)
    return configured.get(role.name, ()) if role is not None else ()


_ROWS = {"1": 0, "2": 0, "3": 0, "A": 0, "4": 1, "5": 1, "6": 1, "B": 1,
         "7": 2, "8": 2, "9": 2, "C": 2, "*": 3, "0": 3, "#": 3, "D": 3}  # fmt: skip


def dtmf_tones(digits: str, rate: int = PHONE_RATE) -> np.ndarray:
    """Keypad tones as audio (in-band DTMF): 100 ms of each digit's two tones, 60 ms apart."""
    rows, columns = (697, 770, 852, 941), (1209, 1336, 1477, 1633)
    order = "147*2580369#ABCD"
    t = np.arange(int(rate * 0.1)) / rate
    pieces = []
    for digit in digits:
        if digit not in DTMF_DIGITS:
            continue
        column = order.index(digit) // 4
        low, high = rows[_ROWS[digit]], columns[column]
        tone = 8000 * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)) / 2
        pieces += [tone.astype(np.int16), np.zeros(int(rate * 0.06), np.int16)]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
