from __future__ import annotations

import httpx
import httpx2
import openai
import pytest

from plugins.errors import PluginTimeout, ProviderError
from plugins.openai_errors import create_client, map_openai_error, redact

KEY = "sk-proj-0123456789abcdefghij"


def status_error(status: int, message: str) -> openai.APIStatusError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx2.Response(status, request=request)
    return openai.APIStatusError(f"Error code: {status} - {message}", response=response, body=None)


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError(),
        httpx.ReadTimeout("slow"),
        httpx2.ReadTimeout("slow"),
        openai.APITimeoutError(request=httpx2.Request("GET", "http://127.0.0.1/")),
    ],
)
def test_timeouts_become_plugin_timeouts(error: BaseException) -> None:
    mapped = map_openai_error(error, what="x", api_key=KEY)
    assert isinstance(mapped, PluginTimeout) and mapped.retryable


@pytest.mark.parametrize(
    "error",
    [
        httpx2.RemoteProtocolError("peer closed connection"),
        httpx.ConnectError("refused"),
        openai.APIConnectionError(request=httpx2.Request("GET", "http://127.0.0.1/")),
    ],
)
def test_transport_errors_are_retryable(error: BaseException) -> None:
    mapped = map_openai_error(error, what="x", api_key=KEY)
    assert isinstance(mapped, ProviderError) and mapped.retryable and mapped.status is None


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(400, False), (401, False), (404, False), (408, True), (422, False), (429, True), (502, True)],
)
def test_status_errors(status: int, retryable: bool) -> None:
    mapped = map_openai_error(status_error(status, "nope"), what="brain", api_key=KEY)
    assert isinstance(mapped, ProviderError)
    assert (mapped.status, mapped.retryable) == (status, retryable)
    assert str(mapped) == f"brain: HTTP {status}: nope"


def test_the_key_is_removed_from_the_message_and_from_the_cause() -> None:
    error = status_error(401, f"Incorrect API key provided: {KEY}. Also sk-proj-01***ghij.")
    mapped = map_openai_error(error, what="brain", api_key=KEY)
    assert "sk-proj" not in str(mapped)
    assert "sk-proj" not in str(error)
    assert "sk-proj" not in error.message


def test_redact_keeps_ordinary_words() -> None:
    assert redact("the task-runner failed", None) == "the task-runner failed"
    assert redact("token gsk_abcdef123456 used", None) == "token [redacted] used"


async def test_clients_never_retry_by_themselves() -> None:
    client = create_client(base_url="http://127.0.0.1:9/v1", api_key="", timeout=1.0)
    try:
        assert client.max_retries == 0
        assert client.api_key  # a placeholder: the package refuses an empty key
    finally:
        await client.close()
    with pytest.raises(ValueError, match="timeout"):
        create_client(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=0)
