"""``openrealtime serve-models``: the embedded models as OpenAI-compatible endpoints.

Theory of operation
-------------------
Runtime processes on machines without the models (or any other tool) use them through the
OpenAI-compatible providers they already have (``OPENREALTIME_ASR=openai`` …, with
``*_BASE_URL=http://host:8770/v1``). Routes (docs/http_api.md, "Model server"):

- ``POST /v1/audio/transcriptions``: multipart ``file`` (a WAV file, PCM16, any rate, mono or
  not) and ``model``, ``language``, ``prompt``, ``response_format`` (``json`` | ``text``) →
  ``{"text": …}``.
- ``POST /v1/audio/speech``: JSON ``model``, ``input``, ``voice``, ``response_format`` (``pcm``:
  24 kHz PCM16 mono, streamed as it is synthesised).
- ``POST /v1/chat/completions``: JSON ``messages`` (system/user/assistant text), ``max_tokens``,
  ``temperature``, ``stream`` (server-sent ``chat.completion.chunk`` events, then
  ``data: [DONE]``). Tools are not offered (the local model routes tools by constrained JSON
  inside the runtime's own brain); a request with ``tools`` gets plain text.
- ``GET /v1/models``: what is served.

Rule 1 — authenticated: every route needs ``Authorization: Bearer <key>`` with one of the
configured keys (``models_api_keys``); else 401 ``invalid_api_key``. Keys are compared in
constant time and never logged.

Rule 2 — fair: the language model's queue (``plugins.brain.model_queue``) is keyed by caller,
the key's name, so one busy runtime cannot starve another; a full queue answers 429
``model_busy`` with ``Retry-After`` (retryable for the OpenAI client).

Rule 3 — bounded: a request body above ``models_max_request_bytes`` is refused with 413
``request_too_large`` before it is read; chat messages, their characters, speech input and
``max_tokens`` have maxima (422 ``invalid_request``, naming the field).

Errors are OpenAI-shaped, ``{"error": {"message", "type", "code"}}``, so the providers map them.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import time
import uuid
import wave
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from plugins.audio import INPUT_SAMPLE_RATE, resample
from plugins.brain.model_queue import ModelQueueFull
from plugins.brain.openai_brain import PRIORITY_HEADER
from plugins.contracts import ASR, TTS
from plugins.errors import PluginError

SPEECH_RATE = 24_000
"""``response_format: pcm`` is 24 kHz PCM16 mono, as OpenAI's."""
MAX_SPEECH_CHARS = 4096
MAX_MESSAGES = 200
MAX_MESSAGE_CHARS = 100_000
MAX_TOKENS = 2048
MAX_FORM_FIELDS = 8


class ChatModel(Protocol):
    """What the chat route needs of a language model (``plugins.brain.local_model.LocalModel``
    is one): stream the text of one completion, queued fairly by ``lane``."""

    def chat(
        self, payload: dict[str, Any], *, lane: str, background: bool = False
    ) -> AsyncIterator[str]: ...


@dataclass(frozen=True, slots=True)
class ModelBackends:
    asr: ASR
    tts: TTS
    chat: ChatModel
    asr_model: str = "whisper-base"
    tts_model: str = "piper"
    chat_model: str = "local"


@dataclass(frozen=True, slots=True)
class ModelServerLimits:
    max_request_bytes: int = 25 * 1024 * 1024
    """Largest request body (an upload of about 13 minutes of 16 kHz WAV)."""


class ModelServerError(Exception):
    def __init__(self, status: int, code: str, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_body(code: str, message: str, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status < 500 and status != 429 else "server_error"
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(default="local", max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(default="piper", max_length=200)
    input: str = Field(min_length=1, max_length=MAX_SPEECH_CHARS)
    voice: str | None = Field(default=None, max_length=100)
    response_format: Literal["pcm"] = "pcm"
    speed: float | None = Field(default=None, ge=0.25, le=4.0)
    instructions: str | None = Field(default=None, max_length=4096)


def caller_names(keys: str) -> dict[str, str]:
    """``name:key[,name:key…]`` (or bare keys, named by a digest) as {key: name}."""
    found: dict[str, str] = {}
    for part in (p.strip() for p in keys.split(",")):
        if not part:
            continue
        name, _, key = part.rpartition(":")
        found[key] = name or "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    return found


class BodyLimit:
    """Rule 3 at the edge: refuse a body that says it is too large, and stop reading one that
    turns out to be."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise ModelServerError(
                        413, "request_too_large", f"the body is larger than {self.limit} bytes"
                    )
            return message

        await self.app(scope, limited, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"the body is larger than {self.limit} bytes"
        response = JSONResponse(error_body("request_too_large", message, 413), status_code=413)
        await response(scope, receive, send)


def create_model_app(
    backends: ModelBackends,
    *,
    api_keys: str,
    limits: ModelServerLimits | None = None,
) -> FastAPI:
    """The model server (module doc). ``api_keys``: rule 1's keys (at least one)."""
    limits = limits or ModelServerLimits()
    callers = caller_names(api_keys)
    if not callers:
        raise ValueError("the model server needs at least one API key (models_api_keys)")
    app = FastAPI(title="OpenRealtime models")
    app.add_middleware(BodyLimit, limit=limits.max_request_bytes)

    @app.exception_handler(ModelServerError)
    async def refused(request: Request, exc: ModelServerError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message, exc.status),
            status_code=exc.status,
            headers=exc.headers or None,
        )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid')}"
        return JSONResponse(error_body("invalid_request", message, 422), status_code=422)

    async def caller(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() == "bearer" and key:
            for known, name in callers.items():
                if hmac.compare_digest(known.encode(), key.strip().encode()):
                    return name
        raise ModelServerError(401, "invalid_api_key", "a valid bearer API key is required")

    @app.get("/v1/models")
    async def models(who: str = Depends(caller)) -> dict[str, Any]:
        names = (backends.asr_model, backends.tts_model, backends.chat_model)
        return {
            "object": "list",
            "data": [{"id": n, "object": "model", "owned_by": "openrealtime"} for n in names],
        }

    @app.post("/v1/audio/transcriptions", response_model=None)
    async def transcriptions(
        request: Request, who: str = Depends(caller)
    ) -> dict[str, Any] | StreamingResponse:
        try:
            form = await request.form(
                max_files=1, max_fields=MAX_FORM_FIELDS, max_part_size=limits.max_request_bytes
            )
        except ModelServerError:
            raise
        except Exception as e:
            raise ModelServerError(400, "invalid_request", f"not a valid form: {e}") from None
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ModelServerError(400, "invalid_request", "file: a WAV file is required")
        pcm = wav_pcm16(await upload.read())
        language = form.get("language")
        try:
            transcript = await backends.asr.transcribe(
                pcm, language=str(language) if isinstance(language, str) and language else None
            )
        except PluginError as e:
            raise _model_failed(e) from e
        if form.get("response_format") == "text":
            return StreamingResponse(iter([transcript.text]), media_type="text/plain")
        return {"text": transcript.text}

    @app.post("/v1/audio/speech")
    async def speech(body: SpeechRequest, who: str = Depends(caller)) -> StreamingResponse:
        chunks = backends.tts.stream(body.input, voice=body.voice, language=None)
        first = await _first(chunks)

        async def pcm() -> AsyncIterator[bytes]:
            chunk = first
            while chunk is not None:
                audio = chunk.pcm
                if chunk.sample_rate != SPEECH_RATE:
                    audio = resample(audio, chunk.sample_rate, SPEECH_RATE)
                yield np.asarray(audio, dtype=np.int16).tobytes()
                chunk = await anext(chunks, None)

        return StreamingResponse(pcm(), media_type="audio/pcm")

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(
        body: ChatRequest, request: Request, who: str = Depends(caller)
    ) -> dict[str, Any] | StreamingResponse:
        if sum(len(m.text()) for m in body.messages) > MAX_MESSAGE_CHARS:
            raise ModelServerError(
                422, "invalid_request", f"messages: more than {MAX_MESSAGE_CHARS} characters"
            )
        payload: dict[str, Any] = {
            "messages": [
                {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in body.messages
                if m.role != "tool"
            ],
        }
        max_tokens = body.max_completion_tokens or body.max_tokens
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if body.temperature is not None:
            payload["temperature"] = body.temperature
        # A runtime's memory learning says so: it waits for the pauses (SPEC RT-11).
        background = request.headers.get(PRIORITY_HEADER, "").lower() == "background"
        pieces = backends.chat.chat(payload, lane=who, background=background)
        first = await _first(pieces)  # a full queue is refused before anything is sent
        ident = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if not body.stream:
            text = "" if first is None else first
            text += "".join([p async for p in pieces]) if first is not None else ""
            return {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": body.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
            }

        def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
            event = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.model,
                "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
            }
            return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"

        async def events() -> AsyncIterator[str]:
            yield chunk({"role": "assistant", "content": ""})
            piece = first
            try:
                while piece is not None:
                    yield chunk({"content": piece})
                    piece = await anext(pieces, None)
            except PluginError as e:  # after the headers: the stream says it, then ends
                yield f"data: {json.dumps(error_body(e.code, str(e), 500))}\n\n"
                return
            yield chunk({}, "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app.state.callers = sorted(callers.values())
    return app


async def _first(stream: AsyncIterator[Any]) -> Any:
    """The first item of ``stream`` (None when empty), with model failures as HTTP errors."""
    try:
        return await anext(stream, None)
    except PluginError as e:
        raise _model_failed(e) from e


def _model_failed(error: PluginError) -> ModelServerError:
    if isinstance(error, ModelQueueFull):
        return ModelServerError(429, "model_busy", str(error), **{"Retry-After": "1"})
    status = 503 if error.retryable else 500
    return ModelServerError(status, error.code, str(error))


def wav_pcm16(data: bytes) -> Any:
    """A WAV file's audio as 16 kHz mono PCM16 (the ``ASR`` contract); 400 when it is not a
    PCM16 WAV file."""
    try:
        with wave.open(io.BytesIO(data)) as wav:
            if wav.getsampwidth() != 2:
                raise ModelServerError(400, "unsupported_audio", "file: PCM16 WAV only")
            rate, channels = wav.getframerate(), wav.getnchannels()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as e:
        raise ModelServerError(400, "unsupported_audio", f"file: not a WAV file ({e})") from None
    pcm = np.frombuffer(frames, dtype=np.int16)
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)
    if rate != INPUT_SAMPLE_RATE:
        pcm = resample(pcm, rate, INPUT_SAMPLE_RATE)
    return pcm
