from __future__ import annotations

import asyncio

from tests.fault_proxy import FaultProxy


async def test_proxy_forwards_then_cuts() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = FaultProxy("127.0.0.1", port)
    proxy_port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.write(b"hello")
        assert await reader.readexactly(5) == b"hello"
        proxy.cut_all()
        assert await reader.read(10) == b""
        writer.close()
        proxy.cut_after_bytes(3)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.write(b"abcdef")
        assert await reader.read(10) == b"abc"
        assert await reader.read(10) == b""
        writer.close()
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()
