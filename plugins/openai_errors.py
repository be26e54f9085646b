"""The boundary between the ``openai`` package and our plugins: client settings and errors.

Every OpenAI-compatible provider (``OpenAIBrain``, ``OpenAIASR``, ``OpenAITTS``) builds its
client with ``create_client`` (no retries of the package's own, explicit timeouts) and catches
``PROVIDER_EXCEPTIONS`` around its network work and raises ``map_openai_error(e, …) from e``:

==========================================================  =====================================
raised                                                      becomes
==========================================================  =====================================
``openai.APITimeoutError``, an HTTP client timeout,         ``PluginTimeout``
``TimeoutError`` (our own ``asyncio.timeout``)
``openai.RateLimitError`` (429), 408, 409, any 5xx          ``ProviderError(retryable=True)``
``openai.APIConnectionError``, an HTTP transport error      ``ProviderError(retryable=True)``
any other 4xx (400, 401, 403, 404, 422 …)                   ``ProviderError(retryable=False)``
anything else from ``openai`` (bad response, stream error)  ``ProviderError(retryable=False)``
==========================================================  =====================================

Messages name the provider and the status, and carry the server's own message with every
secret-looking token removed: the configured API key never appears, and neither does the
partly masked key OpenAI echoes in its 401 message (``sk-ab…wxyz``).
"""

from __future__ import annotations

import re

import httpx
import openai

from plugins.errors import PluginError, PluginTimeout, ProviderError

_TIMEOUTS: tuple[type[BaseException], ...] = (TimeoutError, httpx.TimeoutException)
_TRANSPORT: tuple[type[BaseException], ...] = (httpx.TransportError,)
try:  # openai 3 moved to httpx2; raw byte streams (TTS) raise its errors unmapped
    import httpx2
except ImportError:  # pragma: no cover - openai < 3 uses httpx only
    pass
else:
    _TIMEOUTS += (httpx2.TimeoutException,)
    _TRANSPORT += (httpx2.RequestError,)

PROVIDER_EXCEPTIONS: tuple[type[BaseException], ...] = (
    openai.OpenAIError,
    *_TIMEOUTS,
    *_TRANSPORT,
)
"""Everything a provider call may raise that ``map_openai_error`` maps."""

_RETRYABLE_STATUS = frozenset({408, 409, 429})
# OpenAI (sk-…, sk-proj-…) and look-alike keys (gsk_…, pk-…, rk-…), masked or not.
_SECRET_LIKE = re.compile(r"\b(?:sk|gsk|pk|rk)[-_][\w*\-]{6,}", re.IGNORECASE)
_MAX_MESSAGE_CHARS = 300
_STATUS_PREFIX = re.compile(r"^Error code: \d+(?: - )?")  # openai's own prefix; we add ours


NO_API_KEY = "no-key"
"""Sent when no API key is configured (servers without authentication ignore it; the ``openai``
package refuses an empty key, and would otherwise read ``OPENAI_API_KEY`` from the environment)."""


def create_client(*, base_url: str, api_key: str, timeout: float) -> openai.AsyncOpenAI:
    """An ``AsyncOpenAI`` client for one plugin instance. ``max_retries=0``: a retry is the
    caller's decision (errors say ``retryable``); ``timeout`` bounds connecting and each read
    and write."""
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    return openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key or NO_API_KEY, timeout=timeout, max_retries=0
    )


def redact(text: str, secret: str | None) -> str:
    """``text`` without ``secret`` and without anything shaped like an API key."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _SECRET_LIKE.sub("[redacted]", text)


def map_openai_error(error: BaseException, *, what: str, api_key: str | None) -> PluginError:
    """The ``plugins.errors`` exception for ``error`` raised while calling ``what`` (for example
    "OpenAI brain"). ``api_key`` is removed from the message. Raise it ``from error``.

    ``error`` itself is scrubbed too (its message and ``args``): it becomes the ``__cause__``,
    and a logged traceback prints it."""
    _scrub(error, api_key)
    if isinstance(error, (openai.APITimeoutError, *_TIMEOUTS)):
        return PluginTimeout(f"{what}: no answer in time")
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        detail = _detail(_STATUS_PREFIX.sub("", error.message), api_key) or "error"
        retryable = status >= 500 or status in _RETRYABLE_STATUS
        return ProviderError(f"{what}: HTTP {status}: {detail}", status=status, retryable=retryable)
    if isinstance(error, (openai.APIConnectionError, *_TRANSPORT)):
        return ProviderError(
            f"{what}: connection failed ({type(error).__name__})", status=None, retryable=True
        )
    if isinstance(error, openai.APIError):
        return ProviderError(f"{what}: {_detail(error.message, api_key)}", retryable=False)
    return ProviderError(
        f"{what}: {type(error).__name__}: {_detail(str(error), api_key)}", retryable=False
    )


def _scrub(error: BaseException, api_key: str | None) -> None:
    error.args = tuple(redact(a, api_key) if isinstance(a, str) else a for a in error.args)
    if isinstance(error, openai.APIError):
        error.message = redact(error.message, api_key)


def _detail(message: str, api_key: str | None) -> str:
    message = redact(message, api_key)
    if len(message) > _MAX_MESSAGE_CHARS:
        message = message[:_MAX_MESSAGE_CHARS] + "…"
    return message
