"""Our server with the embedded speech stack, for the speech benchmarks.

``python -m benchmarks.speech_server --port 0 [--vad silero]`` prints
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


async def serve(port: int, vad: str) -> None:
    with tempfile.TemporaryDirectory(prefix="openrealtime-speech-bench-") as data_dir:
        settings = Settings(
            port=port,
            data_dir=Path(data_dir),
            vad=vad,  # type: ignore[arg-type]
            storage="memory",
            max_sessions=10_000,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with running_server(settings) as server:
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
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.vad))


if __name__ == "__main__":
    main()
