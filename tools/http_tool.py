"""The HTTP tool executor (SPEC TOOL-1): one call of a declared ``HttpTool``.

Theory of operation
-------------------
1. The arguments are checked against the tool's schema first (``InvalidArguments``).
2. The URL is the template with each placeholder replaced by its argument URL-encoded as one
   component (``quote(…, safe="")``: a value can never add a ``/``, ``?``, ``#`` or ``@``), and
   its host is checked against the allowlist again after templating (``HostNotAllowed``).
   Arguments not in the template travel as the query string (GET, DELETE) or a JSON body.
3. Secret headers are read from the ``SecretStore`` by name for each call (``SecretMissing``
   when one is absent). Their values are put on the request and nowhere else: not in errors,
   results or logs.
4. Bounded: redirects are never followed (a 3xx is a ``ToolHttpStatus``); the whole call,
   connect to last byte, has the tool's ``timeout_s`` (``ToolTimeout``); the body is read in
   chunks and the call fails with ``ResponseTooLarge`` as soon as it passes
   ``max_response_bytes``, never holding more than that.
5. Third-party failures are mapped at this boundary (``raise … from e``): connection errors are
   ``ToolUnreachable``, a non-2xx answer ``ToolHttpStatus`` (retryable for 429 and 5xx). Error
   messages name the tool, the host and the status, never arguments, secrets or bodies.
6. Logs carry the tool name, the host, the status, the size and the time; nothing else.
   Requests go straight to an ``httpx.AsyncHTTPTransport``, not through an ``AsyncClient``:
   the client logs every URL at INFO (with the arguments in it) and could follow redirects,
   read proxies from the environment or keep cookies; the transport does none of that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import httpx

from tools.errors import (
    ResponseTooLarge,
    SecretMissing,
    ToolCallFailed,
    ToolHttpStatus,
    ToolTimeout,
    ToolUnreachable,
)
from tools.registry import HttpTool, check_host, template_fields
from tools.schema import check_arguments

log = logging.getLogger(__name__)


class SecretStore(Protocol):
    async def get(self, tenant: str, name: str) -> str | None: ...


class InMemorySecrets:
    """``SecretStore`` in a dict (tests; the runtime keeps secrets in its configuration)."""

    def __init__(self, secrets: Mapping[tuple[str, str], str] | None = None) -> None:
        self._secrets = dict(secrets or {})

    def set(self, tenant: str, name: str, value: str) -> None:
        self._secrets[(tenant, name)] = value

    async def get(self, tenant: str, name: str) -> str | None:
        return self._secrets.get((tenant, name))

    def __repr__(self) -> str:
        return f"InMemorySecrets({len(self._secrets)} secrets)"


@dataclass(frozen=True, slots=True)
class HttpToolResult:
    status: int
    content_type: str
    body: str
    """The response text (UTF-8, undecodable bytes replaced), within the tool's limit."""


def build_url(tool: HttpTool, arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The filled URL (rule 2) and the arguments it did not use."""
    fields = template_fields(tool.url_template)
    values = {
        name: quote(_text(arguments[name]), safe="") if name in arguments else "" for name in fields
    }
    url = tool.url_template.format(**values)
    rest = {k: v for k, v in arguments.items() if k not in fields}
    return url, rest


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class HttpToolExecutor:
    """Runs ``HttpTool`` calls on one shared connection pool (close it with ``aclose``)."""

    def __init__(
        self,
        secrets: SecretStore,
        allowed_hosts: frozenset[str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.secrets = secrets
        self.allowed_hosts = allowed_hosts
        self._transport = transport or httpx.AsyncHTTPTransport(
            trust_env=False, retries=0, limits=httpx.Limits(max_connections=32)
        )

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def call(
        self, tenant: str, tool: HttpTool, arguments: Mapping[str, Any]
    ) -> HttpToolResult:
        check_arguments(tool.parameters, dict(arguments))
        url, rest = build_url(tool, arguments)
        host = check_host(url, self.allowed_hosts)
        headers = {
            "Accept": "application/json, text/plain;q=0.9, */*;q=0.1",
            "Accept-Encoding": "identity",
            "User-Agent": "openrealtime-tools",
        }
        for secret in tool.headers:
            value = await self.secrets.get(tenant, secret.secret)
            if value is None:
                raise SecretMissing(f"tool {tool.name}: secret {secret.secret!r} is not stored")
            headers[secret.header] = secret.prefix + value
        body: bytes | None = None
        if rest and tool.method in ("GET", "DELETE"):
            url += ("&" if "?" in url else "?") + urlencode({k: _text(v) for k, v in rest.items()})
        elif tool.method not in ("GET", "DELETE"):
            body = json.dumps(rest, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        started = time.perf_counter()
        try:
            async with asyncio.timeout(tool.timeout_s):
                result = await self._send(tool, url, headers, body, host)
        except TimeoutError as e:
            log.info("tool %s on %s: timed out after %.0f ms", tool.name, host,
                     (time.perf_counter() - started) * 1000)  # fmt: skip
            raise ToolTimeout(f"tool {tool.name}: no answer within {tool.timeout_s:g} s") from e
        log.info("tool %s on %s: status %d, %d bytes, %.0f ms", tool.name, host, result.status,
                 len(result.body), (time.perf_counter() - started) * 1000)  # fmt: skip
        return result

    async def _send(
        self, tool: HttpTool, url: str, headers: dict[str, str], body: bytes | None, host: str
    ) -> HttpToolResult:
        request = httpx.Request(
            tool.method, url, headers=headers, content=body,
            extensions={"timeout": httpx.Timeout(tool.timeout_s).as_dict()},
        )  # fmt: skip
        try:
            response = await self._transport.handle_async_request(request)
            response.request = request
        except httpx.TimeoutException as e:
            raise TimeoutError from e
        except httpx.HTTPError as e:
            raise ToolUnreachable(
                f"tool {tool.name}: cannot reach {host} ({type(e).__name__})"
            ) from e
        try:
            if not 200 <= response.status_code < 300:
                raise ToolHttpStatus(
                    f"tool {tool.name}: {host} answered {response.status_code}",
                    response.status_code,
                )
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit():
                if int(declared) > tool.max_response_bytes:
                    raise self._too_large(tool)
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > tool.max_response_bytes:
                    raise self._too_large(tool)
                chunks.append(chunk)
        except httpx.TimeoutException as e:
            raise TimeoutError from e
        except httpx.HTTPError as e:
            raise ToolCallFailed(
                f"tool {tool.name}: the answer from {host} broke off ({type(e).__name__})"
            ) from e
        finally:
            await response.aclose()
        return HttpToolResult(
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            body=b"".join(chunks).decode("utf-8", errors="replace"),
        )

    @staticmethod
    def _too_large(tool: HttpTool) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"tool {tool.name}: the answer passed {tool.max_response_bytes} bytes"
        )
