"""LiveSessions: the voice sessions live in this process, by id.

Theory of operation
-------------------
A session is *live* here from its registration until it shuts down: connected, or waiting
``resume_ttl_s`` for its client to resume (``runtime.realtime.session``). Every step that looks at
the registry and changes it on what it saw is one synchronous method — no await between the check
and the set — so two connections on the event loop cannot both pass a check meant for one.

Rule 1 — a new session holds a place first. ``reserve`` counts the user's live sessions and the
places already held for them, refuses at the limit (``too_many_sessions``, 4029) and holds a
place; the start then does its slow work (role, thread, resume token) and ``Place.register``
puts the session in. A start that fails gives its place back when the ``with`` block ends.

Rule 2 — a session continued from the journal (``runtime/realtime/continuity.py`` rule 3) goes in
with ``take_over`` before the next await after its epoch was claimed (continuity rule 4). It
replaces the older copy the claim fenced, which then ends without touching the registry.

Rule 3 — a resume of a session live here at the token's epoch claims it for its connection
with ``claim``: the session must still be ``LIVE`` at that epoch (a session whose end has begun
is refused like a gone one: ``resume_refused``, 4003), and the connection holds it from that
step on. Two resumes of one session at once are two claims one after the other: the later holds
the session, and the earlier one's connection is closed with 4012 (``runtime.realtime.session`` rule
1), after ``resume_refused`` if it had not been answered yet. "Later" is the order the resumes'
connections reached this process (``RealtimeConnection.arrival``), not the order their slow
handshakes got here: a client's attempt it gave up on, still redeeming its token, never takes
the session from the retry that followed it (that attempt is refused instead, 4012).

Rule 4 — a session leaves with ``remove`` when it shuts down, unless another copy took its id
over (rule 2).

Everything else reads: the registry is a ``Mapping`` of id to session, and ``lookup`` is the
continuity handshake's view (an open session, or None).
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import Refused
from runtime.realtime.continuity import BAD_TOKEN, refuse_resume, resumed_meanwhile
from runtime.realtime.protocol import CloseCode, ErrorCode
from runtime.realtime.session import State

if TYPE_CHECKING:
    from runtime.accounts import Principal
    from runtime.realtime.connection import RealtimeConnection
    from runtime.realtime.session import VoiceSession


@dataclass(frozen=True, slots=True)
class Claim:
    """A resume's connection now holds ``session`` (rule 3)."""

    session: VoiceSession
    superseded: RealtimeConnection | None
    """The connection that was serving the session until now: the claimant closes it (4012)."""


class Place:
    """A place held for one new session of ``principal`` (rule 1)."""

    def __init__(self, registry: LiveSessions, principal: Principal) -> None:
        self.registry = registry
        self.principal = principal

    def register(self, session: VoiceSession) -> None:
        """Put ``session`` in this place: from now on it is live."""
        self.registry._fill(self, session)

    def __enter__(self) -> Place:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: types.TracebackType | None,
    ) -> None:
        self.registry._places.discard(self)


class LiveSessions(Mapping[str, "VoiceSession"]):
    def __init__(self) -> None:
        self._sessions: dict[str, VoiceSession] = {}
        self._places: set[Place] = set()

    def __getitem__(self, session_id: str) -> VoiceSession:
        return self._sessions[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    def lookup(self, session_id: str) -> VoiceSession | None:
        """The open session live here under ``session_id``, if any."""
        session = self._sessions.get(session_id)
        return session if session is not None and not session.closed else None

    def count(self, principal: Principal) -> int:
        """Live sessions of ``principal`` here (connected or awaiting a resume), with the places
        held for the ones starting."""
        held = sum(1 for place in self._places if place.principal == principal)
        return held + sum(
            1 for s in self._sessions.values() if s.principal == principal and not s.closed
        )

    def reserve(self, principal: Principal, *, limit: int) -> Place:
        """Rule 1: hold a place for a new session of ``principal``, or refuse at ``limit``."""
        if self.count(principal) >= limit:
            raise Refused(
                ErrorCode.TOO_MANY_SESSIONS,
                f"you already have {limit} live voice sessions (max_live_sessions_per_user)",
                CloseCode.TOO_MANY_SESSIONS,
                "too many live sessions",
            )
        place = Place(self, principal)
        self._places.add(place)
        return place

    def _fill(self, place: Place, session: VoiceSession) -> None:
        assert place in self._places, "a place is filled once, inside its with block"
        assert session.id not in self._sessions
        self._places.discard(place)
        self._sessions[session.id] = session

    def take_over(self, session: VoiceSession) -> None:
        """Rule 2: ``session`` now serves its id here (it was continued from the journal)."""
        held = self._sessions.get(session.id)
        assert held is None or held.epoch < session.epoch, "continuity rule 4 refuses that"
        self._sessions[session.id] = session

    def claim(self, session_id: str, *, epoch: int, connection: RealtimeConnection) -> Claim:
        """Rule 3: hand the session live here under ``session_id`` at ``epoch`` to
        ``connection``, or refuse (``ContinuityRefused``: ``resume_refused``, 4003)."""
        session = self._sessions.get(session_id)
        if session is None or session.state is not State.LIVE or session.epoch != epoch:
            raise refuse_resume(BAD_TOKEN)
        holder = session.connection
        if holder is not None and holder is not connection and holder.arrival > connection.arrival:
            raise resumed_meanwhile()
        return Claim(session, session.hold(connection))

    def remove(self, session: VoiceSession) -> None:
        """Rule 4: ``session`` shut down; its id is free unless another copy took it over."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
