"""Our server with instant fake plugins, for the runtime-overhead benchmarks.

``python -m benchmarks.fake_server --port 0`` prints ``{"listening": ws_url, "token": …}``.
The fakes answer at once (ASR, brain: three short sentences, TTS: ~0.4 s of audio per sentence)
so what is measured is the runtime's own cost. Energy VAD as in the issue's scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
from pathlib import Path

from pipeline.engine import Plugins
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from runtime.config import Settings
from runtime.loop import install_uvloop
from runtime.server import running_server

REPLY = "Sure thing, here. This is the answer. Anything else?"


def instant_plugins() -> Plugins:
    return Plugins(
        vad=EnergyVAD(),
        asr=FakeASR(["hello bot"]),
        brain=FakeBrain([REPLY]),
        tts=FakeTTS(ms_per_char=25.0, chunk_ms=40.0),
    )


async def serve(port: int, min_interrupt_ms: int, silence_ms: int) -> None:
    with tempfile.TemporaryDirectory(prefix="openrealtime-bench-") as data_dir:
        settings = Settings(
            port=port,
            data_dir=Path(data_dir),
            min_interrupt_ms=min_interrupt_ms,
            silence_ms=silence_ms,
            max_sessions=10_000,
            storage="memory",  # runtime overhead only; the journal has its own benchmark
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with running_server(settings, plugins=instant_plugins()) as server:
            print(json.dumps({"listening": server.ws_url, "token": server.token}), flush=True)
            await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--min-interrupt-ms", type=int, default=300)
    parser.add_argument("--silence-ms", type=int, default=300)
    args = parser.parse_args()
    install_uvloop()
    asyncio.run(serve(args.port, args.min_interrupt_ms, args.silence_ms))


if __name__ == "__main__":
    main()
