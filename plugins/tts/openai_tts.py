"""TTS on any OpenAI-compatible speech endpoint (``POST /audio/speech``).

Each sentence is one request with ``response_format="pcm"``: raw little-endian PCM16 mono at
``sample_rate`` (24 kHz for OpenAI). The body is streamed and every piece of it becomes a
``SpeechChunk`` as it arrives; a piece may end in the middle of a sample, so an odd trailing byte
is kept for the next piece. The endpoint gives no word timings, so chunks carry none and the
engine estimates the heard prefix of an interrupted sentence proportionally.

``timeout`` bounds connecting, the wait for the response headers and every wait for the next
piece of audio. Closing or cancelling the consumer closes the HTTP response.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from openai import omit

from plugins.audio import pcm_from_bytes
from plugins.contracts import SpeechChunk
from plugins.errors import ProviderError
from plugins.openai_errors import PROVIDER_EXCEPTIONS, create_client, map_openai_error

_WHAT = "OpenAI-compatible TTS"

MAX_INPUT_CHARS = 4096
"""Longest text OpenAI's speech endpoint accepts in one request."""


class OpenAITTS:
    """Synthesises sentences with an OpenAI-compatible ``/audio/speech`` endpoint.

    ``model`` is for example "gpt-4o-mini-tts" or "tts-1" (OpenAI) or whatever the self-hosted
    server serves; ``voice`` is used when a call gives none; ``sample_rate`` is the rate of the
    server's ``pcm`` output (24000 for OpenAI); ``speed`` and ``instructions`` are sent only
    when set. Call ``aclose`` when done.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        voice: str = "alloy",
        sample_rate: int = 24_000,
        timeout: float = 30.0,
        speed: float | None = None,
        instructions: str | None = None,
    ) -> None:
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        self.model = model
        self.voice = voice
        self.sample_rate = sample_rate
        self.timeout = timeout
        self.speed = speed
        self.instructions = instructions
        self._api_key = api_key
        self._client = create_client(base_url=base_url, api_key=api_key, timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        await self._client.close()

    async def stream(
        self, text: str, *, voice: str | None = None, language: str | None = None
    ) -> AsyncGenerator[SpeechChunk, None]:
        """Speak ``text`` (``language`` is not sent: the endpoint reads it from the text)."""
        if not text.strip():
            return
        if len(text) > MAX_INPUT_CHARS:
            raise ProviderError(
                f"{_WHAT}: text longer than {MAX_INPUT_CHARS} characters", retryable=False
            )
        request = self._client.audio.speech.with_streaming_response.create(
            model=self.model,
            voice=voice or self.voice,
            input=text,
            response_format="pcm",
            speed=omit if self.speed is None else self.speed,
            instructions=self.instructions or omit,
        )
        async with contextlib.AsyncExitStack() as stack:  # closes the response, however we leave
            try:
                async with asyncio.timeout(self.timeout):
                    response = await stack.enter_async_context(request)
            except PROVIDER_EXCEPTIONS as e:
                raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
            pieces = response.iter_bytes()
            if isinstance(pieces, AsyncGenerator):  # close it before the response, not at GC
                stack.push_async_callback(pieces.aclose)
            carry = b""
            while True:
                try:
                    async with asyncio.timeout(self.timeout):
                        piece = await anext(pieces, None)
                except PROVIDER_EXCEPTIONS as e:
                    raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
                if piece is None:
                    break
                data = carry + piece
                usable = len(data) - len(data) % 2
                carry = data[usable:]
                if usable:
                    # A copy: chunks are ours to keep, not views of the HTTP buffer.
                    pcm = pcm_from_bytes(data[:usable]).copy()
                    yield SpeechChunk(pcm, self.sample_rate)
