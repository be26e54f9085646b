"""Our server with the embedded speech stack, for the speech benchmarks.

``python -m benchmarks.speech_server --port 0 [--vad silero] [--vad-only]`` prints
``{"listening": ws_url, "token": …, "http": http_url}`` once ready. Storage is in memory: the
benchmarks measure speech, not the database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
from pathlib import Path

from runtime.config import Settings
from runtime.server import running_server


async def serve(port: int, vad: str, vad_only: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="openrealtime-speech-bench-") as data_dir:
        settings = Settings(
            port=port,
            data_dir=Path(data_dir),
            vad=vad,  # type: ignore[arg-type]
            storage="memory",
            max_sessions=10_000,
            max_live_sessions_per_user=10_000,  # one local token drives every session
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        plugins = None
        if vad_only:
            # The real VAD, everything after it instant: what listening alone costs.
            from pipeline.engine import Plugins
            from plugins.fakes import FakeASR, FakeBrain, FakeTTS
            from runtime.plugin_factory import build_plugins

            real = build_plugins(settings)
            plugins = Plugins(vad=real.vad, asr=FakeASR(), brain=FakeBrain(), tts=FakeTTS())
        async with running_server(settings, plugins=plugins) as server:
            print(
                json.dumps(
                    {"listening": server.ws_url, "token": server.token, "http": server.http_url}
                ),
                flush=True,
            )
            await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--vad", choices=("energy", "silero"), default="silero")
    parser.add_argument("--vad-only", action="store_true", help="instant fakes after the VAD")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.vad, args.vad_only))


if __name__ == "__main__":
    main()
