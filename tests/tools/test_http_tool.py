"""The HTTP tool executor against a real HTTP server on 127.0.0.1: templating, the allowlist
after templating, redirects, the timeout, the size limit, errors, and the secret header that is
sent but never appears in errors or logs."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tools.errors import (
    HostNotAllowed,
    InvalidArguments,
    ResponseTooLarge,
    SecretMissing,
    ToolError,
    ToolHttpStatus,
    ToolTimeout,
    ToolUnreachable,
)
from tools.http_tool import HttpToolExecutor, InMemorySecrets, build_url
from tools.registry import HttpTool, SecretHeader, check_http_tool

SECRET = "sk-live-0123456789abcdef"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalServer:
    """A tiny HTTP/1.1 server: each path is a behaviour (``/slow`` never answers)."""

    port: int = 0
    requests: list[Request] = field(default_factory=list)
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            headers = dict(line.split(": ", 1) for line in head[1:] if line)
            length = int(headers.get("Content-Length", headers.get("content-length", "0")))
            body = await reader.readexactly(length) if length else b""
            self.requests.append(Request(method, path, headers, body))
            await self.answer(path, writer)
        except asyncio.CancelledError:
            pass  # stopped by the fixture: end quietly (asyncio logs a cancelled handler)
        finally:
            writer.close()
            self.handlers.discard(task)

    async def answer(self, path: str, writer: asyncio.StreamWriter) -> None:
        def send(status: str, body: bytes, extra: str = "", length: bool = True) -> None:
            sized = f"Content-Length: {len(body)}\r\n" if length else ""
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{sized}"
                         f"Connection: close\r\n{extra}\r\n".encode() + body)  # fmt: skip

        if path.startswith("/slow"):
            await asyncio.Event().wait()
        elif path.startswith("/big-unsized"):
            send("200 OK", b"", length=False)
            for _ in range(64):
                writer.write(b"x" * 1024)
                await writer.drain()
        elif path.startswith("/big"):
            send("200 OK", b"y" * 5000)
        elif path.startswith("/redirect"):
            send("302 Found", b"", "Location: http://evil.example.net/\r\n")
        elif path.startswith("/fail"):
            send("503 Service Unavailable", b'{"error": "down"}')
        else:
            send("200 OK", json.dumps({"path": path}).encode())
        await writer.drain()


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    local = LocalServer()
    listener = await asyncio.start_server(local.handle, "127.0.0.1", 0)
    local.port = listener.sockets[0].getsockname()[1]
    try:
        yield local
    finally:
        for task in list(local.handlers):
            task.cancel()
        listener.close()
        await listener.wait_closed()


@pytest.fixture
async def executor() -> AsyncIterator[HttpToolExecutor]:
    secrets = InMemorySecrets({("t", "shop_token"): SECRET})
    running = HttpToolExecutor(secrets, frozenset({"127.0.0.1"}))
    try:
        yield running
    finally:
        await running.aclose()


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
    "required": ["order_id"],
}


def tool(server: LocalServer, path: str = "/orders/{order_id}", **changes: Any) -> HttpTool:
    fields: dict[str, Any] = {
        "name": "lookup_order", "description": "Look up an order.", "parameters": SCHEMA,
        "method": "GET", "url_template": f"http://127.0.0.1:{server.port}{path}",
        "headers": (SecretHeader("Authorization", "shop_token", "Bearer "),),
        "timeout_s": 5.0, "max_response_bytes": 4096, "target": "order_id",
    } | changes  # fmt: skip
    return check_http_tool(HttpTool(**fields), frozenset({"127.0.0.1"}))


async def test_a_call_fills_the_template_and_sends_the_secret(
    server: LocalServer, executor: HttpToolExecutor
) -> None:
    result = await executor.call("t", tool(server), {"order_id": "a/b?c#d@e", "note": "hi 你"})
    assert result.status == 200
    (request,) = server.requests
    # Each argument is one URL component: a value can never add a path, a query or a host.
    assert request.path == "/orders/a%2Fb%3Fc%23d%40e?note=hi+%E4%BD%A0"
    assert json.loads(result.body) == {"path": request.path}
    assert request.headers["Authorization"] == f"Bearer {SECRET}"


async def test_post_sends_the_other_arguments_as_json(
    server: LocalServer, executor: HttpToolExecutor
) -> None:
    await executor.call("t", tool(server, method="POST"), {"order_id": "7", "note": "rush"})
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/orders/7"
    assert json.loads(request.body) == {"note": "rush"}


async def test_a_host_off_the_allowlist_is_refused_before_any_request(
    server: LocalServer,
) -> None:
    with pytest.raises(HostNotAllowed):
        check_http_tool(
            HttpTool(name="x", description="", parameters=SCHEMA, method="GET",
                     url_template=f"http://localhost:{server.port}/x"),
            frozenset({"127.0.0.1"}),
        )  # fmt: skip
    declared = tool(server)
    narrow = HttpToolExecutor(InMemorySecrets(), frozenset({"api.example.com"}))
    try:
        with pytest.raises(HostNotAllowed):  # checked again at call time
            await narrow.call("t", declared, {"order_id": "7"})
    finally:
        await narrow.aclose()
    assert server.requests == []


def test_the_host_cannot_be_changed_by_an_argument(server: LocalServer) -> None:
    declared = tool(server, path="/{order_id}")
    url, _ = build_url(declared, {"order_id": "@evil.example.net/x"})
    assert url == f"http://127.0.0.1:{server.port}/%40evil.example.net%2Fx"


async def test_bad_arguments_never_reach_the_server(
    server: LocalServer, executor: HttpToolExecutor
) -> None:
    with pytest.raises(InvalidArguments):
        await executor.call("t", tool(server), {"order_id": 7})
    assert server.requests == []


async def test_a_slow_server_times_out(server: LocalServer, executor: HttpToolExecutor) -> None:
    with pytest.raises(ToolTimeout) as raised:
        await executor.call("t", tool(server, path="/slow/{order_id}", timeout_s=0.2),
                            {"order_id": "7"})  # fmt: skip
    assert raised.value.retryable and raised.value.code == "tool_timeout"


@pytest.mark.parametrize("path", ["/big/{order_id}", "/big-unsized/{order_id}"])
async def test_a_response_past_the_limit_fails_clearly(
    server: LocalServer, executor: HttpToolExecutor, path: str
) -> None:
    with pytest.raises(ResponseTooLarge) as raised:
        await executor.call("t", tool(server, path=path), {"order_id": "7"})
    assert raised.value.code == "response_too_large" and "4096" in raised.value.message


async def test_redirects_are_not_followed(server: LocalServer, executor: HttpToolExecutor) -> None:
    with pytest.raises(ToolHttpStatus) as raised:
        await executor.call("t", tool(server, path="/redirect/{order_id}"), {"order_id": "7"})
    assert raised.value.status == 302 and not raised.value.retryable
    assert len(server.requests) == 1


async def test_a_server_error_is_retryable_and_unreachable_is_mapped(
    server: LocalServer, executor: HttpToolExecutor
) -> None:
    with pytest.raises(ToolHttpStatus) as raised:
        await executor.call("t", tool(server, path="/fail/{order_id}"), {"order_id": "7"})
    assert raised.value.status == 503 and raised.value.retryable
    closed = HttpTool(name="x", description="", parameters=SCHEMA, method="GET",
                      url_template="http://127.0.0.1:9/{order_id}")  # fmt: skip
    with pytest.raises(ToolUnreachable) as unreachable:
        await executor.call("t", closed, {"order_id": "7"})
    assert unreachable.value.retryable


async def test_a_missing_secret_is_a_clear_error(
    server: LocalServer, executor: HttpToolExecutor
) -> None:
    declared = tool(server, headers=(SecretHeader("X-Key", "not_stored"),))
    with pytest.raises(SecretMissing, match="not_stored"):
        await executor.call("t", declared, {"order_id": "7"})
    with pytest.raises(SecretMissing):  # another tenant's secret is not this tenant's
        await executor.call("t2", tool(server), {"order_id": "7"})
    assert server.requests == []


async def test_the_secret_never_appears_in_errors_or_logs(
    server: LocalServer, executor: HttpToolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[ToolError] = []
    for path, timeout in [("/slow/{order_id}", 0.2), ("/big/{order_id}", 5.0),
                          ("/fail/{order_id}", 5.0), ("/orders/{order_id}", 5.0)]:  # fmt: skip
        try:
            await executor.call("t", tool(server, path=path, timeout_s=timeout),
                                {"order_id": "secret-order-arg"})  # fmt: skip
        except ToolError as e:
            errors.append(e)
    assert len(errors) == 3 and len(server.requests) >= 3  # the slow one may time out connecting
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in server.requests)
    for error in errors:
        seen = f"{error} {error!r} {error.message} {error.__cause__!r}"
        assert SECRET not in seen and "secret-order-arg" not in str(error)
    assert caplog.records and SECRET not in caplog.text
    assert "secret-order-arg" not in caplog.text  # arguments are not logged either
    assert SECRET not in repr(executor.secrets)
