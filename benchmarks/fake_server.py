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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import tempfile
from pathlib import Path
from typing import Literal

from pipeline.engine import Plugins
from plugins.brain.local import LocalBrain
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.loop import install_uvloop, tune_gc
from runtime.server import running_server

REPLY = "Sure thing, here. This is the answer. Anything else?"


def instant_plugins(
    *, brain: str = "fake", ms_per_char: float = 25.0, tone_hz: float | None = None
) -> Plugins:
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(["hello bot"]),
        brain=LocalBrain() if brain == "local" else FakeBrain([REPLY]),
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
        stop = asyncio.Event()
        drain = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)

        def on_sigterm() -> None:
            drain.set()
            stop.set()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        plugins = instant_plugins(brain=brain, ms_per_char=ms_per_char, tone_hz=tone_hz)
        async with running_server(settings, plugins=plugins) as server:
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
    parser.add_argument("--brain", choices=["fake", "local"], default="fake")
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
        )
    )


if __name__ == "__main__":
    main()
