"""The HTTP + WebSocket application."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from runtime.drain import DRAINING_CODE, DrainState
from runtime.http import accounts as api_accounts
from runtime.http import calls as api_calls
from runtime.http import client_secrets as api_client_secrets
from runtime.http import conversations as api_conversations
from runtime.http import knowledge as api_knowledge
from runtime.http import memory as api_memory
from runtime.http import recordings as api_recordings
from runtime.http import role_memory as api_role_memory
from runtime.http import roles as api_roles
from runtime.http import system as api_system
from runtime.http import thread_fork as api_thread_fork
from runtime.http import threads as api_threads
from runtime.http import tools as api_tools
from runtime.http import usage as api_usage
from runtime.http.operations import router as operations_router
from runtime.http.policy import Policy, allow
from runtime.realtime.connection import RealtimeConnection
from runtime.realtime.transport import WebSocketLink
from runtime.services import Services
from runtime.telephony import twilio
from runtime.telephony.twilio_stream import TWILIO_STREAM_PATH, serve_twilio_stream
from runtime.webrtc import calls as webrtc

WEB_DIR = Path(__file__).resolve().parent.parent / "web"


def create_app(services: Services, *, owns_services: bool = False) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if owns_services:
            await services.close()

    app = FastAPI(title="OpenRealtime", lifespan=lifespan)
    app.state.services = services

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        detail = (
            exc.detail
            if isinstance(exc.detail, dict)
            else {"code": "http_error", "message": str(exc.detail)}
        )
        return JSONResponse(detail, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse(
            {"code": "invalid_request", "message": f"{where}: {first.get('msg', 'invalid')}"},
            status_code=422,
        )

    # Every route declares who may use it (runtime/http/policy.py; docs/http_api.md lists them).
    @app.get("/health", dependencies=[allow(Policy.ANONYMOUS)])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "sessions": len(services.active_sessions)}

    app.include_router(operations_router)
    app.include_router(api_roles.router)
    app.include_router(api_accounts.router)
    app.include_router(api_client_secrets.router)
    app.include_router(api_conversations.router)
    app.include_router(api_calls.router)
    app.include_router(api_usage.router)
    app.include_router(api_recordings.router)
    app.include_router(api_memory.router)
    app.include_router(api_role_memory.router)
    app.include_router(api_knowledge.router)
    app.include_router(api_tools.router)
    app.include_router(api_thread_fork.router)
    app.include_router(webrtc.router)
    app.include_router(twilio.router)
    app.include_router(api_threads.router)
    app.include_router(api_threads.defaults_router)
    app.include_router(api_system.router)
    origins = services.settings.cors_origin_set() if services is not None else frozenset()
    if origins:  # pages hosted on other origins (SPEC WEB-4): never with credentials
        app.add_middleware(
            CORSMiddleware,
            allow_origins=sorted(origins),
            allow_credentials=False,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
            expose_headers=["Location", "Content-Disposition"],
            max_age=600,
        )
    if WEB_DIR.is_dir() and (WEB_DIR / "index.html").exists():
        app.mount("/", StaticFiles(directory=WEB_DIR, html=True), name="web")
    return app


REALTIME_PATH = "/v1/realtime"


class RealtimeApp:
    """The ASGI entry point: the realtime WebSocket is served directly on the server's
    ``receive``/``send`` (every audio frame would otherwise pass through the HTTP app's
    middleware stack twice); everything else goes to the FastAPI app. While the process
    drains (``runtime/drain.py`` rule 1) new realtime connections and WebRTC offers are
    answered 503 ``server_draining``."""

    def __init__(self, http: FastAPI, services: Services, drain: DrainState | None = None) -> None:
        self.http = http
        self.services = services
        self.drain = drain or DrainState()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket_path = scope["path"] if scope["type"] == "websocket" else None
        phone = websocket_path == TWILIO_STREAM_PATH
        realtime = websocket_path == REALTIME_PATH or phone
        # SIGTERM's drain, or SIGUSR1's (preStop) end of readiness: no new sessions either way.
        draining = self.drain.draining or self.services.draining
        if draining and (realtime or _is_call_offer(scope)):
            refusal = JSONResponse(
                {"code": DRAINING_CODE, "message": "this server is draining; retry elsewhere"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
            if realtime:
                await _deny(WebSocket(scope, receive, send), refusal, 1013)
            else:
                await refusal(scope, receive, send)
        elif realtime and not phone and not self._origin_allowed(scope):
            await _deny(
                WebSocket(scope, receive, send),
                JSONResponse(
                    {"code": "origin_not_allowed",
                     "message": "pages of this origin may not use this runtime "
                                "(OPENREALTIME_CORS_ORIGINS)"},
                    status_code=403,
                ),
                1008,
            )  # fmt: skip
        elif phone:
            await self._phone(WebSocket(scope, receive, send))
        elif realtime:
            await self._realtime(WebSocket(scope, receive, send))
        else:
            await self.http(scope, receive, send)

    def _origin_allowed(self, scope: Scope) -> bool:
        """A browser's WebSocket from another origin needs ``cors_origins`` (SPEC WEB-4)."""
        headers = dict(scope.get("headers") or [])
        origin, host = headers.get(b"origin"), headers.get(b"host")
        return self.services.settings.origin_allowed(
            None if origin is None else origin.decode("latin-1"),
            None if host is None else host.decode("latin-1"),
        )

    async def _realtime(self, websocket: WebSocket) -> None:
        services = self.services
        if len(services.active_sessions) >= services.settings.max_sessions:
            await websocket.close(1013, "server is at its session limit")
            return
        connection = RealtimeConnection(WebSocketLink(websocket), services)
        services.active_sessions.add(connection.id)
        try:
            await connection.run()
        finally:
            services.active_sessions.discard(connection.id)

    async def _phone(self, websocket: WebSocket) -> None:
        """A Twilio Media Streams socket (``runtime.telephony.twilio_stream``): served like the
        realtime WebSocket, outside the HTTP app; it authenticates with its stream token."""
        if len(self.services.active_sessions) >= self.services.settings.max_sessions:
            await websocket.close(1013, "server is at its session limit")
            return
        await serve_twilio_stream(websocket, self.services)


async def _deny(websocket: WebSocket, refusal: JSONResponse, close_code: int) -> None:
    """Refuse a WebSocket before accepting it: ``refusal`` as its HTTP answer, or (an ASGI
    server without denial responses) a close with ``close_code``."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(refusal)
    else:
        await websocket.close(close_code, str(refusal.status_code))


def _is_call_offer(scope: Scope) -> bool:
    return (
        scope["type"] == "http"
        and scope.get("method") == "POST"
        and str(scope["path"]).rstrip("/") == webrtc.CALLS_PATH
    )


def create_asgi_app(services: Services, drain: DrainState | None = None) -> RealtimeApp:
    return RealtimeApp(create_app(services), services, drain)
