"""A real MCP server for the tests, started as a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.fleet import free_port

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0


@contextlib.asynccontextmanager
async def mcp_server(api_key: str | None = None) -> AsyncIterator[str]:
    """``tests.mcp.server`` on a free port until the block ends; yields its MCP URL once it
    accepts connections."""
    port = free_port()
    args = [sys.executable, "-m", "tests.mcp.server", str(port)]
    if api_key is not None:
        args.append(api_key)
    process = await asyncio.create_subprocess_exec(
        *args, cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(STARTUP_S):
            while True:
                if process.returncode is not None:
                    err = await process.stderr.read() if process.stderr else b""
                    raise RuntimeError(f"the MCP server exited: {err.decode()[-2000:]}")
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
