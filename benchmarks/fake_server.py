"""Our server with instant fake plugins, for the runtime-overhead benchmarks.

``python -m benchmarks.fake_server --port 0`` prints ``{"listening": ws_url, "token": …}``.
The fakes answer at once (ASR, brain: three short sentences, TTS: ~0.4 s of audio per sentence)
so what is measured is the runtime's own cost. Energy VAD as in the issue's scenario.

The restart and two-process tests (``tests/runtime/test_restart.py``) run it as a real server
process on PostgreSQL: ``--storage postgres`` (the database from ``OPENREALTIME_DATABASE_URL``,
like ``openrealtime serve``), ``--data-dir`` (kept, so the local token survives a restart) and
``--brain local`` (the offline rule brain, which repeats an earlier user message on "what did I
just say" — it shows which history reached it). Every other setting comes from the environment
(``OPENREALTIME_*``) as for the CLI.

``--brain queued`` (``benchmarks/fleet.py``): the fake brain behind the real fair model queue
(``plugins.brain.model_queue``), one request at a time taking ``--model-ms``, at most
``--model-queue-max`` waiting (more: ``model_busy``, retryable) — a saturated model with fake
speech. SIGTERM drains (``runtime/drain.py``), as for ``openrealtime serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

from pipeline.engine import Plugins
from plugins.brain.local import LocalBrain
from plugins.brain.model_queue import FairModelQueue, Ticket
from plugins.contracts import Brain, BrainDelta, BrainInput
from plugins.errors import PluginTimeout
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.loop import install_uvloop, stop_signals, tune_gc
from runtime.server import running_server

REPLY = "Sure thing, here. This is the answer. Anything else?"


class QueuedFakeBrain:
    """``FakeBrain`` behind the real fair queue of the local model (module doc)."""

    def __init__(
        self, *, model_ms: float = 40.0, max_waiting: int = 16, start_deadline_s: float = 30.0
    ) -> None:
        self.inner = FakeBrain([REPLY])
        self.model_s = model_ms / 1000
        self.start_deadline_s = start_deadline_s
        self.queue: FairModelQueue[asyncio.Future[None]] = FairModelQueue(
            max_waiting=max_waiting, max_per_lane=2
        )
        self._running: Ticket[asyncio.Future[None]] | None = None

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()

        def expire() -> None:
            if not turn.done():
                turn.set_exception(PluginTimeout("the model did not start in time"))

        now = loop.time()
        ticket = self.queue.submit(
            request.session, turn, now=now, deadline=now + self.start_deadline_s, on_expire=expire
        )  # ModelQueueFull (model_busy) when saturated
        self._next()
        try:
            await turn
            await asyncio.sleep(self.model_s)  # the model decodes, one request at a time
        except BaseException:
            self.queue.cancel(ticket)
            raise
        finally:
            if self._running is ticket:
                self._running = None
                self._next()
        async for delta in self.inner.stream(request):
            yield delta

    def _next(self) -> None:
        if self._running is not None:
            return
        ticket = self.queue.take(asyncio.get_running_loop().time())
        if ticket is not None:
            self._running = ticket
            if not ticket.item.done():
                ticket.item.set_result(None)


def instant_plugins(
    *,
    brain: str = "fake",
    ms_per_char: float = 25.0,
    tone_hz: float | None = None,
    model_ms: float = 40.0,
    model_queue_max: int = 16,
) -> Plugins:
    chosen: Brain
    if brain == "local":
        chosen = LocalBrain()
    elif brain == "queued":
        chosen = QueuedFakeBrain(model_ms=model_ms, max_waiting=model_queue_max)
    else:
        chosen = FakeBrain([REPLY])
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(["hello bot"]),
        brain=chosen,
        tts=FakeTTS(ms_per_char=ms_per_char, chunk_ms=40.0, tone_hz=tone_hz),
    )


async def serve(
    port: int,
    min_interrupt_ms: int,
    silence_ms: int,
    *,
    storage: Literal["memory", "postgres"] = "memory",
    data_dir: Path | None = None,
    brain: str = "fake",
    ms_per_char: float = 25.0,
    tone_hz: float | None = None,
    model_ms: float = 40.0,
    model_queue_max: int = 16,
) -> None:
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="openrealtime-bench-"))
            )
        settings = Settings(
            port=port,
            data_dir=data_dir,
            min_interrupt_ms=min_interrupt_ms,
            silence_ms=silence_ms,
            max_sessions=10_000,
            max_live_sessions_per_user=10_000,  # one local token drives every session
            # memory: runtime overhead only; the journal has its own benchmark
            storage=storage,
        )
        stop, drain = stop_signals()
        plugins = instant_plugins(
            brain=brain,
            ms_per_char=ms_per_char,
            tone_hz=tone_hz,
            model_ms=model_ms,
            model_queue_max=model_queue_max,
        )
        async with running_server(settings, plugins=plugins) as server:
            line = settings.telephony_token.get_secret_value()
            if line and await server.services.authenticate(line) is None:
                # benchmarks.telephony: the phone line's owner is the local token's user
                owner = await server.services.accounts.authenticate(server.token)
                assert owner is not None
                await server.services.accounts.add_token(owner, line)
            tune_gc()  # as `openrealtime serve` does: see runtime/loop.py
            ready = {"listening": server.ws_url, "http": server.http_url, "token": server.token}
            print(json.dumps(ready), flush=True)
            await stop.wait()
            if drain.is_set():  # SIGTERM drains, as `openrealtime serve` does
                await server.drain()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--min-interrupt-ms", type=int, default=300)
    parser.add_argument("--silence-ms", type=int, default=300)
    parser.add_argument("--storage", choices=["memory", "postgres"], default="memory")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--brain", choices=["fake", "local", "queued"], default="fake")
    parser.add_argument("--model-ms", type=float, default=40.0)
    parser.add_argument("--model-queue-max", type=int, default=16)
    parser.add_argument("--tts-ms-per-char", type=float, default=25.0)
    parser.add_argument(
        "--tone-hz", type=float, default=None, help="a tone for a voice (for Opus: WebRTC)"
    )
    args = parser.parse_args()
    install_uvloop()
    asyncio.run(
        serve(
            args.port,
            args.min_interrupt_ms,
            args.silence_ms,
            storage=args.storage,
            data_dir=args.data_dir,
            brain=args.brain,
            ms_per_char=args.tts_ms_per_char,
            tone_hz=args.tone_hz,
            model_ms=args.model_ms,
            model_queue_max=args.model_queue_max,
        )
    )


if __name__ == "__main__":
    main()
