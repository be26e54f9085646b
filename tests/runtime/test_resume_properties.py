"""Resume as a property (SPEC RES-1): random interleavings of typed and spoken turns, dropped
connections (the client closing, or the fault proxy cutting the TCP connection), acks, waits
and resumes, against the real server.

After every run the client's reassembled stream, ordered by ``seq``, has no gap and no
duplicate, every resume replayed everything (nothing ``missing``), and the user and assistant
texts the client saw are exactly the journal's, in order.

Hypothesis drives the steps synchronously; each step runs on one event loop owned by the test
(server, fault proxy and client live on it), so between steps the server is paused: the
``wait`` step is what lets a response run on while the client is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from benchmarks.common import voice_frame
from journal.events import EventKind, ThreadRef
from pipeline.echo_path import ECHO_TAIL_S
from pipeline.engine_config import EngineSettings
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from runtime.accounts import LOCAL_PRINCIPAL
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from tests.fault_proxy import FaultProxy
from tests.runtime.conftest import fake_plugins

T = TypeVar("T")

SPOKEN = "what is the weather"
OUTPUT_RATE = EngineSettings().output_sample_rate
REPLIES = ["Sure. Here it is.", "Okay then. Done now.", "Right. Anything else?"]
VOICE = voice_frame(6000) * 20
"""400 ms of a steady voiced sound at 16 kHz: the energy VAD hears speech. Not a pure tone: right
after an answer, one band's tone can pass for the answer's echo (``pipeline.echo``)."""


class World:
    """One server, fault proxy and event loop for the whole test (sessions are per run)."""

    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.stack = contextlib.AsyncExitStack()
        config = Settings(port=0, data_dir=data_dir, storage="memory", resume_ttl_s=60)
        plugins = fake_plugins(
            asr=FakeASR([SPOKEN]),
            brain=FakeBrain(REPLIES),
            tts=FakeTTS(ms_per_char=3.0, chunk_ms=20.0),
        )
        self.server: RunningServer = self.run(
            self.stack.enter_async_context(running_server(config, plugins=plugins))
        )
        self.proxy = FaultProxy(self.server.host, self.server.port)
        self.url = f"ws://127.0.0.1:{self.run(self.proxy.start())}/v1/realtime"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self) -> None:
        self.run(self.proxy.stop())
        self.run(self.stack.aclose())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


class ResumeMachine(RuleBasedStateMachine):
    world: World

    def __init__(self) -> None:
        super().__init__()
        self.client = RealtimeClient(self.world.url, self.world.server.token)
        self.client.ack_every = 10**9  # acks only when the ack step says so
        self.world.run(self.client.connect(turn_detection={"type": "none"}))
        self.connected = True
        self.turns = 0
        self.user_texts: list[str] = []
        self.resumes: list[dict[str, Any]] = []

    def _answered(self) -> int:
        return len(self.client.events("response.done"))

    def _settle(self) -> None:
        async def answered() -> None:
            while self._answered() < self.turns:
                await self.client.wait_type("response.done")

        self.client._cursor = 0
        self.world.run(answered())

    # ------------------------------------------------------------ steps

    # Preconditions read only the machine's own state, never what has arrived by now: that
    # depends on timing, and Hypothesis replays a case only if the same rules are enabled.
    @precondition(lambda self: self.connected)
    @rule(text=st.sampled_from(["hello", "tell me more", "and then?", "ok"]))
    def typed_turn(self, text: str) -> None:
        self._settle()  # one turn at a time: the last one answered first
        self.world.run(self.client.send_text(text))
        self.turns += 1
        self.user_texts.append(text)

    def _heard_the_answer(self) -> None:
        """A person speaks after hearing the last answer: until its audio, played at real time
        from its first frame, has ended and the echo guard's tail after it (``ECHO_TAIL_S``).
        Words over an answer's last instants are held as its possible echo until the guard
        has locked on (``pipeline.echo``); that is barge-in's test, not this one's."""
        messages = self.client.messages
        done = max((i for i, m in enumerate(messages) if m.type == "response.done"), default=-1)
        start = max((i for i, m in enumerate(messages[:done]) if m.type == "response.created"),
                    default=-1)  # fmt: skip
        audio = [m for m in messages[start + 1 : done] if m.audio is not None]
        if not audio:
            return
        seconds = sum(len(m.audio or b"") for m in audio) / 2 / OUTPUT_RATE
        ends = audio[0].at + seconds + ECHO_TAIL_S
        self.world.run(asyncio.sleep(max(0.0, ends - self.client.clock()) + 0.05))

    @precondition(lambda self: self.connected)
    @rule()
    def spoken_turn(self) -> None:
        self._settle()
        self._heard_the_answer()

        async def speak() -> None:
            for i in range(0, len(VOICE), 640 * 5):
                await self.client.send_audio(VOICE[i : i + 640 * 5])
            await self.client.commit()
            # Manual turns (turn_detection null) are answered on request, as in GA.
            await self.client.send_json({"type": "response.create"})

        self.world.run(speak())
        self.turns += 1
        self.user_texts.append(SPOKEN)

    @precondition(lambda self: self.connected)
    @rule(how=st.sampled_from(["client", "network"]))
    def drop(self, how: str) -> None:
        if how == "client":
            self.world.run(self.client.drop())
        else:
            self.world.proxy.cut_all()  # the client learns it when it next reads or resumes
        self.connected = False

    @precondition(lambda self: not self.connected)
    @rule()
    def resume(self) -> None:
        self.resumes.append(self.world.run(self.client.reconnect()))
        self.connected = True

    @precondition(lambda self: self.connected)
    @rule()
    def ack(self) -> None:
        self.world.run(self.client.ack())

    @rule(seconds=st.sampled_from([0.0, 0.02, 0.1, 0.3]))
    def wait(self, seconds: float) -> None:
        self.world.run(asyncio.sleep(seconds))

    @precondition(lambda self: self.connected)
    @rule()
    def settle(self) -> None:
        self._settle()

    @invariant()
    def stream_has_no_gap_or_duplicate(self) -> None:
        seqs = [m.seq for m in self.client.messages]
        assert seqs == list(range(1, len(seqs) + 1))
        assert self.client.duplicates == 0  # nothing arrived twice, not even to be dropped
        assert all(r.get("missing") is None and r.get("reconcile") is None for r in self.resumes)

    def teardown(self) -> None:
        try:
            if not self.connected:
                self.resume()
            self._settle()
            self._check_against_the_journal()
        finally:
            with contextlib.suppress(Exception):
                self.world.run(self.client.end_session())
                self.world.run(self.client.wait_closed())
            self.world.run(self.client.close())

    def _check_against_the_journal(self) -> None:
        thread = ThreadRef(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user,
                           self.client.session["thread_id"])  # fmt: skip
        events = self.world.run(self.world.server.services.journal.read(thread))
        journal_user = [e.payload["text"] for e in events if e.kind is EventKind.USER_INPUT]
        journal_assistant = [
            (e.payload["text"], e.payload["heard_text"], e.payload["interrupted"])
            for e in events
            if e.kind is EventKind.ASSISTANT_OUTPUT
        ]
        seen_assistant = [
            (r["output_text"], r["heard_text"], r["interrupted"])
            for r in (d["response"] for d in self.client.events("response.done"))
            if r["output_text"]
        ]
        assert journal_user == self.user_texts
        assert seen_assistant == journal_assistant
        assert len(journal_assistant) == self.turns


def test_resumes_never_lose_or_duplicate_and_match_the_journal() -> None:
    with tempfile.TemporaryDirectory(prefix="openrealtime-resume-props-") as data_dir:
        world = World(Path(data_dir))
        ResumeMachine.world = world
        try:
            run_state_machine_as_test(
                ResumeMachine,
                settings=settings(
                    max_examples=15,
                    stateful_step_count=12,
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow],
                ),
            )
        finally:
            world.close()
