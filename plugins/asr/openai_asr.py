"""ASR on any OpenAI-compatible transcription endpoint (``POST /audio/transcriptions``).

Each utterance (16 kHz PCM16 mono, as every ``ASR`` gets it) is wrapped in an in-memory WAV file
and uploaded with the model name and, when known, the language (ISO-639-1: "zh-CN" is sent as
"zh"). ``timeout`` bounds the whole call. The endpoint's JSON answer gives the text; it does not
say the language, so the transcript carries the language that was asked for, if any.
"""

from __future__ import annotations

import asyncio
import io
import wave

from openai import omit

from plugins.audio import INPUT_SAMPLE_RATE, PCM
from plugins.contracts import Transcript
from plugins.errors import PluginError
from plugins.language import normalise_language
from plugins.openai_errors import PROVIDER_EXCEPTIONS, create_client, map_openai_error

_WHAT = "OpenAI-compatible ASR"

MAX_UTTERANCE_SECONDS = 600.0
"""Longest utterance sent (about 19 MB of WAV, under OpenAI's 25 MB upload limit)."""


class OpenAIASR:
    """Transcribes utterances with an OpenAI-compatible ``/audio/transcriptions`` endpoint.

    ``model`` is for example "whisper-1" or "gpt-4o-mini-transcribe" (OpenAI) or whatever the
    self-hosted server serves; ``language`` is the default when a call gives none; ``prompt``
    (optional) biases the vocabulary. Call ``aclose`` when done.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 30.0,
        language: str | None = None,
        prompt: str | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.language = language
        self.prompt = prompt
        self._api_key = api_key
        self._client = create_client(base_url=base_url, api_key=api_key, timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        await self._client.close()

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        """Transcribe one utterance of 16 kHz audio; an empty one gives an empty transcript."""
        language = normalise_language(language or self.language)
        if utterance.size == 0:
            return Transcript(text="", language=language)
        if utterance.size > MAX_UTTERANCE_SECONDS * INPUT_SAMPLE_RATE:
            raise PluginError(f"{_WHAT}: utterance longer than {MAX_UTTERANCE_SECONDS:g} s")
        try:
            async with asyncio.timeout(self.timeout):
                result = await self._client.audio.transcriptions.create(
                    file=("utterance.wav", wav_bytes(utterance), "audio/wav"),
                    model=self.model,
                    language=language or omit,
                    prompt=self.prompt or omit,
                    response_format="json",
                )
        except PROVIDER_EXCEPTIONS as e:
            raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
        return Transcript(text=result.text.strip(), language=language)


def wav_bytes(pcm: PCM, sample_rate: int = INPUT_SAMPLE_RATE) -> bytes:
    """``pcm`` (mono PCM16) as a WAV file in memory."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.astype("<i2", copy=False).tobytes())
    return buffer.getvalue()
