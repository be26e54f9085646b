"""Your own chat agent as the brain (SPEC BRAIN-6): every answer comes from an HTTP endpoint.

Theory of operation
-------------------
Rule 1. One round, one POST. For each round of a response (its first, and one after each tool
        result) the agent's URL gets one JSON request (``agent_request``: the protocol's
        version, the role, thread, session, response and turn ids, the role's instructions, the
        person's ``<memory_data>`` and the thread's facts apart, the budgeted history as turns,
        the last answer as the person heard it, the current input, the tools offered — the
        knowledge search among them — with ``tool_choice``, and the round's earlier calls and
        results). ``docs/agent_protocol.md`` documents it and ``docs/agent_protocol.schema.json``
        is its JSON Schema.
Rule 2. The reply is a stream of Server-Sent Events — ``text`` (``{"delta": …}``), ``tool_call``
        (``{"call_id", "name", "arguments"}``), ``error`` (``{"message"}``) and ``done`` — or one
        JSON object (``{"text": …, "tool_calls": [...]}``). Text is yielded as it arrives; a tool
        call is yielded whole, and the tool loop (``plugins.brain.tool_loop``) runs it and asks
        again with its result. Anything else — another content type, an event that is not
        JSON or lacks its fields, a stream that ends without ``done``, a status other than 200
        — raises ``AgentProtocolError`` or ``ProviderError`` naming what was wrong; the turn
        fails like any brain's (the person hears the apology, the next turn is answered).
Rule 3. Bounds: ``connect_timeout_s`` to connect, ``timeout_s`` for the response's headers and
        for every wait for the next bytes (an SSE comment keeps a slow agent alive); a reply of
        at most ``MAX_TEXT_CHARS`` of text and ``MAX_TOOL_CALLS`` calls, lines of at most
        ``MAX_LINE_BYTES``. Only a failure to connect is retried (``CONNECT_RETRIES`` times,
        after 0.2 s then 0.5 s): once the request is sent the agent may have acted, so nothing
        is sent twice.
Rule 4. The person interrupts: the consuming task is cancelled, the response stream is closed at
        once, and the agent sees its client go away (its cue to stop). The next request's
        ``previous_answer`` says the answer was interrupted and what of it was heard; the
        history's entry for it holds only the heard part (``interrupted: true``).
Rule 5. The agent's credential goes in ``Authorization: Bearer …`` and nowhere else: never in a
        log line or an error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from plugins.contracts import BrainDelta, BrainInput, HistoryTurn, ToolCall
from plugins.errors import PluginTimeout, ProviderError

PROTOCOL = "openrealtime.agent/1"
MAX_TEXT_CHARS = 64_000
MAX_TOOL_CALLS = 16
MAX_LINE_BYTES = 256 * 1024
CONNECT_RETRIES = 2
_BACKOFF_S = (0.2, 0.5)


class AgentProtocolError(ProviderError):
    """The agent's reply does not follow the protocol (Rule 2)."""

    code = "agent_protocol_error"

    def __init__(self, message: str) -> None:
        super().__init__(f"the agent's reply: {message}", retryable=False)


def _turn(turn: HistoryTurn) -> dict[str, Any]:
    out: dict[str, Any] = {"role": turn.role, "text": turn.text}
    if turn.tool:
        out["tool"] = turn.tool
    if turn.interrupted:
        out["interrupted"] = True
    return out


def previous_answer(history: tuple[HistoryTurn, ...]) -> dict[str, Any] | None:
    """The last answer as the person heard it (Rule 4); None before the first."""
    for turn in reversed(history):
        if turn.role == "assistant":
            return {"text": turn.text, "interrupted": turn.interrupted}
        if turn.role == "summary":
            return None
    return None


def agent_request(request: BrainInput) -> dict[str, Any]:
    """Rule 1: the JSON body of one round."""
    return {
        "protocol": PROTOCOL,
        "role_id": request.role_id,
        "thread_id": request.thread_id,
        "session_id": request.session,
        "response_id": request.response_id,
        "turn_id": request.turn_id,
        "language": request.language,
        "instructions": request.instructions or request.system,
        "memory_data": request.memory_data or None,
        "thread_memory": request.thread_memory or None,
        "history": [_turn(t) for t in request.history],
        "previous_answer": previous_answer(request.history),
        "input": request.current_input,
        "tools": [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in request.tools
        ],  # fmt: skip
        "tool_choice": {"mode": request.tool_choice.mode, "name": request.tool_choice.name or None},
        "tool_calls": [
            {"call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in request.tool_calls
        ],
        "tool_results": [
            {"call_id": r.call_id, "name": r.name, "content": r.content, "is_error": r.is_error}
            for r in request.tool_results
        ],
        "max_output_tokens": request.max_output_tokens,
    }


@dataclass(slots=True)
class _Reply:
    """What one round's reply has given so far (Rule 3's bounds)."""

    chars: int = 0
    calls: int = 0

    def text(self, delta: Any) -> BrainDelta:
        if not isinstance(delta, str):
            raise AgentProtocolError("a text event's delta is not a string")
        self.chars += len(delta)
        if self.chars > MAX_TEXT_CHARS:
            raise AgentProtocolError(f"more than {MAX_TEXT_CHARS} characters of text")
        return BrainDelta(text=delta)

    def call(self, data: Any) -> BrainDelta:
        if not isinstance(data, dict):
            raise AgentProtocolError("a tool call is not an object")
        call_id, name, arguments = data.get("call_id"), data.get("name"), data.get("arguments")
        if isinstance(arguments, str):  # as OpenAI sends them: a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                raise AgentProtocolError("a tool call's arguments are not JSON") from None
        if not (isinstance(call_id, str) and call_id and isinstance(name, str) and name):
            raise AgentProtocolError("a tool call needs a call_id and a name")
        if not isinstance(arguments, dict):
            raise AgentProtocolError("a tool call's arguments are not an object")
        self.calls += 1
        if self.calls > MAX_TOOL_CALLS:
            raise AgentProtocolError(f"more than {MAX_TOOL_CALLS} tool calls")
        return BrainDelta(tool_call=ToolCall(call_id, name, arguments))


class HttpAgentBrain:
    """Rules 1–5: answers from the chat agent at ``url``."""

    def __init__(
        self,
        url: str,
        *,
        token: str = "",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        headers = {"Accept": "text/event-stream, application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        body = agent_request(request)
        for attempt in range(CONNECT_RETRIES + 1):
            try:
                async with self._client.stream("POST", self.url, json=body) as response:
                    async for delta in self._reply(response):
                        yield delta
                return
            except httpx.ConnectError:
                if attempt == CONNECT_RETRIES:
                    raise ProviderError("the agent could not be reached", retryable=True) from None
                await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            except httpx.TimeoutException:
                raise PluginTimeout(f"the agent did not answer within {self.timeout_s} s") from None
            except httpx.HTTPError as e:
                raise ProviderError(
                    f"the agent's connection failed ({type(e).__name__})", retryable=True
                ) from None

    async def _reply(self, response: httpx.Response) -> AsyncIterator[BrainDelta]:
        if response.status_code != 200:
            await response.aread()
            raise ProviderError(
                f"the agent answered HTTP {response.status_code}",
                status=response.status_code,
                retryable=response.status_code >= 500 or response.status_code == 429,
            )
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            async for delta in self._events(response):
                yield delta
        elif kind == "application/json":
            async for delta in self._json(response):
                yield delta
        else:
            raise AgentProtocolError(f"content type {kind or 'none'!r} (SSE or JSON expected)")

    async def _json(self, response: httpx.Response) -> AsyncIterator[BrainDelta]:
        raw = bytearray()
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > MAX_LINE_BYTES:
                raise AgentProtocolError(f"a JSON answer longer than {MAX_LINE_BYTES} bytes")
        try:
            answer = json.loads(raw)
        except ValueError:
            raise AgentProtocolError("the JSON answer does not parse") from None
        if not isinstance(answer, dict):
            raise AgentProtocolError("the JSON answer is not an object")
        reply = _Reply()
        text, calls = answer.get("text", ""), answer.get("tool_calls", [])
        if text:
            yield reply.text(text)
        if not isinstance(calls, list):
            raise AgentProtocolError("tool_calls is not a list")
        for call in calls:
            yield reply.call(call)

    async def _events(self, response: httpx.Response) -> AsyncIterator[BrainDelta]:
        reply, event, data = _Reply(), "message", []
        async for line in response.aiter_lines():
            if len(line) > MAX_LINE_BYTES:
                raise AgentProtocolError(f"a line longer than {MAX_LINE_BYTES} bytes")
            if line.startswith(":"):
                continue  # a comment: a keep-alive
            if line:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)
                continue
            if not data and event == "message":
                continue
            try:
                payload = json.loads("\n".join(data)) if data else {}
            except ValueError:
                raise AgentProtocolError(f"a {event!r} event's data is not JSON") from None
            if event == "text":
                yield reply.text(payload.get("delta") if isinstance(payload, dict) else None)
            elif event == "tool_call":
                yield reply.call(payload)
            elif event == "done":
                return
            elif event == "error":
                message = payload.get("message") if isinstance(payload, dict) else None
                raise ProviderError(f"the agent reported an error: {message}", retryable=False)
            else:
                raise AgentProtocolError(f"an unknown event {event!r}")
            event, data = "message", []
        raise AgentProtocolError("the stream ended without a done event")
