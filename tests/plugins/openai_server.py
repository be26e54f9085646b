"""A scriptable OpenAI-compatible HTTP server for the provider tests (loopback only).

``running_openai_server()`` starts it on the test's event loop (uvicorn on 127.0.0.1, a free
port) and stops it on exit. It speaks three endpoints the way OpenAI does:

- ``POST /v1/chat/completions`` with ``stream: true``: SSE ``chat.completion.chunk`` events — a
  role chunk, one content chunk per word, tool calls split across chunks (id and name first,
  then the JSON arguments in small fragments), a final chunk with ``finish_reason``, ``[DONE]``.
- ``POST /v1/audio/transcriptions`` (multipart form): ``{"text": …}``.
- ``POST /v1/audio/speech``: the scripted PCM bytes, streamed in pieces of ``chunk_bytes``.

Each endpoint answers from its own queue of ``Reply`` scripts (``server.chat``,
``server.transcriptions``, ``server.speech``; when a queue is empty a default reply is used). A
reply can fail with an OpenAI-style JSON error (``status``), wait before answering (``delay``),
pace its chunks (``chunk_delay``) or stall after some chunks until the client goes away
(``stall_after``; with ``keepalive`` the stall sends SSE comments, so only a client-side idle
timer can notice it). A wrong bearer token gets OpenAI's 401, which echoes the key it was given.
Every request is recorded (``server.requests``), and so is every client that left in the middle
of a streamed answer (``server.disconnects``, ``await server.wait_for_disconnect()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

API_KEY = "sk-test-0123456789abcdefSECRET"
"""The key the server accepts."""

MODEL = "test-model"


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call the scripted model makes. ``arguments`` is the raw JSON text the model
    writes (it may be invalid on purpose)."""

    name: str
    arguments: str
    call_id: str = ""


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What the server answers to one request of an endpoint."""

    text: str = ""
    tool_calls: Sequence[ScriptedToolCall] = ()
    audio: bytes = b""
    chunk_bytes: int = 1001  # odd on purpose: a piece may end inside a sample
    argument_fragment_chars: int = 4
    status: int = 200
    error_message: str = "scripted error"
    delay: float = 0.0
    chunk_delay: float = 0.0
    stall_after: int | None = None
    keepalive: bool = False


DEFAULT_CHAT = Reply(text="Hello from the test server.")
DEFAULT_TRANSCRIPTION = Reply(text="hello world")
DEFAULT_SPEECH = Reply(audio=bytes(range(256)) * 40)


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    json: dict[str, Any] | None = None
    form: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)


class OpenAIServer:
    """The scripted server's state; see the module docstring."""

    def __init__(self) -> None:
        self.chat: list[Reply] = []
        self.transcriptions: list[Reply] = []
        self.speech: list[Reply] = []
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[str] = []
        self.completed: list[str] = []
        self.port = 0
        self._disconnected = asyncio.Event()
        self._closing = asyncio.Event()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/audio/transcriptions", self._transcription, methods=["POST"]),
                Route("/v1/audio/speech", self._speech, methods=["POST"]),
            ]
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def wait_for_disconnect(self, timeout: float = 5.0) -> str:
        """The path of the first stream a client left early (waits for one)."""
        async with asyncio.timeout(timeout):
            await self._disconnected.wait()
        return self.disconnects[0]

    def last(self, path_end: str) -> RecordedRequest:
        return [r for r in self.requests if r.path.endswith(path_end)][-1]

    # ------------------------------------------------------------ endpoints

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(RecordedRequest(request.url.path, dict(request.headers), json=body))
        reply = self.chat.pop(0) if self.chat else DEFAULT_CHAT
        refusal = await self._refuse(request, reply)
        if refusal is not None:
            return refusal
        events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in _chat_chunks(reply)]
        events.append(b"data: [DONE]\n\n")
        return StreamingResponse(
            self._paced(request.url.path, events, reply), media_type="text/event-stream"
        )

    async def _transcription(self, request: Request) -> Response:
        form, files = _parse_multipart(request.headers["content-type"], await request.body())
        self.requests.append(
            RecordedRequest(request.url.path, dict(request.headers), form=form, files=files)
        )
        reply = self.transcriptions.pop(0) if self.transcriptions else DEFAULT_TRANSCRIPTION
        refusal = await self._refuse(request, reply)
        if refusal is not None:
            return refusal
        return JSONResponse({"text": reply.text})

    async def _speech(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(RecordedRequest(request.url.path, dict(request.headers), json=body))
        reply = self.speech.pop(0) if self.speech else DEFAULT_SPEECH
        refusal = await self._refuse(request, reply)
        if refusal is not None:
            return refusal
        size = reply.chunk_bytes
        pieces = [reply.audio[i : i + size] for i in range(0, len(reply.audio), size)]
        return StreamingResponse(
            self._paced(request.url.path, pieces, reply), media_type="application/octet-stream"
        )

    async def _refuse(self, request: Request, reply: Reply) -> Response | None:
        """The error answer for this request, if any (after the scripted delay)."""
        if reply.delay:
            await self._sleep(reply.delay)
        given = request.headers.get("authorization", "").removeprefix("Bearer ")
        if given != API_KEY:
            return _error(401, f"Incorrect API key provided: {given}.", "invalid_api_key")
        if reply.status != 200:
            return _error(reply.status, reply.error_message, "scripted")
        return None

    async def _paced(self, path: str, parts: list[bytes], reply: Reply) -> AsyncIterator[bytes]:
        finished = False
        try:
            for n, part in enumerate(parts):
                if reply.stall_after is not None and n >= reply.stall_after:
                    # Only the client leaving (Starlette then cancels us) or the server closing
                    # ends a stall.
                    while not self._closing.is_set():
                        await self._sleep(0.05)
                        if reply.keepalive:
                            yield b": keep-alive\n\n"
                    return
                if reply.chunk_delay and n:
                    await self._sleep(reply.chunk_delay)
                yield part
            finished = True
        finally:
            if finished:
                self.completed.append(path)
            elif not self._closing.is_set():
                # Starlette cancels the body when the client disconnects.
                self.disconnects.append(path)
                self._disconnected.set()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._closing.wait()


def _error(status: int, message: str, code: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


def _chat_chunks(reply: Reply) -> Iterator[dict[str, Any]]:
    yield _chunk({"role": "assistant", "content": "", "refusal": None})
    for word in _words(reply.text):
        yield _chunk({"content": word})
    for index, call in enumerate(reply.tool_calls):
        call_id = call.call_id or f"call_{index}_abc"
        yield _chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        step = reply.argument_fragment_chars
        for i in range(0, len(call.arguments), step):
            fragment = call.arguments[i : i + step]
            yield _chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield _chunk({}, finish_reason="tool_calls" if reply.tool_calls else "stop")


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "system_fingerprint": "fp_test",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + [words[-1]] if text else []


def _parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    header = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(header + body)
    form: dict[str, str] = {}
    files: dict[str, bytes] = {}
    assert isinstance(message, EmailMessage)
    for part in message.iter_parts():
        assert isinstance(part, EmailMessage)
        name = part.get_param("name", header="content-disposition")
        assert isinstance(name, str)
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        if part.get_filename() is not None:
            files[name] = payload
        else:
            form[name] = payload.decode()
    return form, files


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the test owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def running_openai_server() -> AsyncIterator[OpenAIServer]:
    """Start a scriptable server on this event loop; stop it (and every open stall) on exit."""
    state = OpenAIServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    state.port = sock.getsockname()[1]
    config = uvicorn.Config(
        state.app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="openai-test-server")
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield state
    finally:
        state._closing.set()
        server.should_exit = True
        try:
            await asyncio.wait_for(task, 10)
        finally:
            sock.close()
