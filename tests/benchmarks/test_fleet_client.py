"""The fleet benchmark's client (``benchmarks/fleet.py``) counts a turn the way the journal does:
a resume that could not replay, whose reconcile shows the turn answered, ends the turn — the
answer's ``response.done`` was in the stream the server gave up and will never come again.

(Found under load: a session whose first answer crossed a SIGKILL waited for it until it gave
up, and the run reported one lost event that the journal had.)"""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

import pytest

from benchmarks import fleet
from runtime.client import ClientClosed


class ScriptedClient:
    """The stream drops while the first answer is awaited; the resume continues the session from
    the journal, which holds the turn and its answer. Later waits see nothing."""

    draining = False

    def __init__(self, text: str) -> None:
        self.text = text
        self.sent: list[str] = []
        self.waits = 0
        self.resumes = 0

    async def send_text(self, text: str) -> None:
        self.sent.append(text)

    async def send_json(self, message: dict[str, Any]) -> None:
        self.sent.append(str(message["type"]))

    async def wait_for(self, predicate: Any, *, timeout: float) -> Any:
        self.waits += 1
        if self.waits == 1:
            raise ClientClosed("the process was killed")
        await asyncio.sleep(0.01)
        raise TimeoutError

    async def reconnect(self, **_: Any) -> dict[str, Any]:
        self.resumes += 1
        items = [{"role": "user", "text": self.text}, {"role": "assistant", "text": "Answered."}]
        return {"replayed": False, "reconcile": {"from_seq": 22, "items": items}}

    async def skip_through(self, seq: int) -> int:
        return 0


async def test_a_turn_the_reconcile_shows_answered_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "GIVE_UP_S", 0.5)  # without the rule the turn waits this long
    text = "s0 turn 0"
    client = ScriptedClient(text)
    user = fleet.Conversation(
        0, "ws://unused", "unused", random.Random(0), fleet.Tally(), turns_per_session=1
    )
    user.segments.append(fleet.Segment(cast(Any, client)))
    assert await user._turn(text, drop_p=0.0) is True
    assert client.sent == [text]  # sent once, never asked again
    assert (client.waits, client.resumes) == (1, 1)
