"""An asyncio TCP proxy that misbehaves on purpose (the machine has no netem or toxiproxy).

``FaultProxy(target_host, target_port)`` listens on 127.0.0.1 and forwards both ways. Faults:
``cut_all()`` closes every open connection at once (a dropped network), ``cut_after_bytes(n)``
closes the next connections after ``n`` bytes from the server, ``delay`` adds latency to every
chunk, and ``blackhole`` stops forwarding (and accepting) without closing anything.
"""

from __future__ import annotations

import asyncio
import contextlib


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.delay = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.cut_after: int | None = None
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut_all()
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    @property
    def blackhole(self) -> bool:
        return not self._flowing.is_set()

    @blackhole.setter
    def blackhole(self, on: bool) -> None:
        if on:
            self._flowing.clear()
        else:
            self._flowing.set()

    def cut_all(self) -> None:
        if self._writers:
            self.cuts += 1
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def cut_after_bytes(self, n: int | None) -> None:
        self.cut_after = n

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        limit = self.cut_after
        for src, dst, budget in ((reader, up_writer, None), (up_reader, writer, limit)):
            task = asyncio.create_task(self._pipe(src, dst, budget, (writer, up_writer)))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        budget: int | None,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        sent = 0
        try:
            while data := await src.read(65536):
                await self._flowing.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                if budget is not None and sent + len(data) > budget:
                    dst.write(data[: max(0, budget - sent)])
                    break
                dst.write(data)
                sent += len(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for w in pair:
                w.transport.abort()
                self._writers.discard(w)
