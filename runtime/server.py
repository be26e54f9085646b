"""Running the app under uvicorn (websockets implementation), in-process or from the CLI.

``RunningServer.drain`` is what SIGTERM does (``runtime/drain.py``): no new sessions, live turns
finish, connected clients are told to resume elsewhere; then the caller leaves
``running_server`` and the process exits."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import uvicorn

from pipeline import echo
from pipeline.engine import Plugins
from runtime.app import create_asgi_app
from runtime.config import Settings
from runtime.drain import DrainReport, DrainState, drain_sessions
from runtime.services import Services, open_services
from runtime.telephony.sip_server import SipServer
from runtime.token_keepalive import TokenKeepalive

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunningServer:
    services: Services
    host: str
    port: int
    drain_state: DrainState
    sip: SipServer | None = None

    async def drain(self, timeout_s: float | None = None) -> DrainReport:
        """Refuse new sessions and hand the live ones over (``runtime/drain.py``), within
        ``timeout_s`` (default: the ``drain_timeout_s`` setting)."""
        settings = self.services.settings
        self.drain_state.begin(time.monotonic())
        self.services.start_draining()  # /healthz/ready and the draining gauge say so too
        report = await drain_sessions(
            self.services.live_sessions,
            timeout_s=settings.drain_timeout_s if timeout_s is None else timeout_s,
        )
        log.info(
            "drained: %d connected and %d waiting sessions in %.1f s (%d cut at the deadline)",
            report.connected,
            report.waiting,
            report.seconds,
            report.cut_at_deadline,
        )
        return report

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/v1/realtime"

    @property
    def token(self) -> str:
        assert self.services.local_token is not None
        return self.services.local_token


def uvicorn_config(app: object, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=settings.host,
        port=settings.port,
        ws=settings.ws_implementation,
        ws_max_size=settings.hard_max_message_bytes,
        # PCM audio does not compress; deflate would only cost CPU on every frame.
        ws_per_message_deflate=False,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        log_level="warning",
        # uvicorn's own loggers propagate to the root logger: serve's format (runtime/logs.py).
        log_config=None,
        lifespan="on",
        access_log=False,
    )


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the caller (CLI, tests) owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def running_server(
    settings: Settings, *, plugins: Plugins | None = None, services: Services | None = None
) -> AsyncIterator[RunningServer]:
    """Start the server on the current event loop (port 0 = a free port) until exit."""
    own = services is None
    services = services or await open_services(settings, plugins=plugins)
    drain = DrainState()
    keepalive = TokenKeepalive(services)
    app = create_asgi_app(services, drain)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    port = sock.getsockname()[1]
    server = _Server(uvicorn_config(app, settings))
    await asyncio.to_thread(echo.warm_up)  # the echo guard's kernels, before any session
    task = asyncio.create_task(server.serve(sockets=[sock]), name="uvicorn")
    sip: SipServer | None = None
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        services.loop_lag.start()
        await services.start_background()
        keepalive.start()
        if settings.sip_listen:
            sip = SipServer(services)
            await sip.start()
        yield RunningServer(services, settings.host, port, drain, sip)
    finally:
        if sip is not None:
            await sip.close()
        await keepalive.stop()
        await services.loop_lag.stop()
        await services.stop_background()
        await services.calls.close()
        for session in list(services.live_sessions.values()):
            await session.shutdown()
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(task, 10)
        sock.close()
        if own:
            await services.close()
