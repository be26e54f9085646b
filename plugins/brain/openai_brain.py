"""A brain on any OpenAI-compatible chat completions endpoint (OpenAI, vLLM, llama.cpp, Ollama …).

Theory of operation
-------------------
One response is one streamed chat completion. The messages are the system prompt
(``request.system``), one user message (``request.model_text``: history and current input,
rendered by ``TurnContent``) and, in a tool round, one assistant message carrying every earlier
call of this response (``request.tool_calls``) followed by one ``tool`` message per call with its
result (``request.tool_results``; a call without a result is answered "not run", as the API
requires an answer to every call). ``request.tools`` are offered as functions.

Content deltas are yielded as they arrive. Tool calls arrive in fragments keyed by ``index``
(the id and name first, then the JSON arguments in pieces); they are assembled and yielded once
complete, at the choice's ``finish_reason`` or at the end of the stream. Arguments that are not
a JSON object raise ``ProviderError``. Running the calls is not the brain's business: see
``plugins.brain.tool_loop``.

Bounds: ``timeout`` limits connecting, the wait for the response headers and every wait for the
next chunk (SSE keep-alive comments do not count as progress). Tool-call arguments are capped at
``max_tool_argument_chars`` and a response at ``MAX_TOOL_CALLS`` calls. Closing or cancelling the
consumer closes the HTTP response, so the server sees the disconnect at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

from openai import omit
from openai.types.chat import (
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCallParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
from openai.types.shared_params import ResponseFormatJSONSchema

from plugins.brain.lanes import ProviderLanes
from plugins.contracts import BrainDelta, BrainInput, ToolCall, ToolSpec
from plugins.errors import ProviderError
from plugins.openai_errors import PROVIDER_EXCEPTIONS, create_client, map_openai_error

MAX_TOOL_CALLS = 16
"""Most tool calls accepted in one streamed response; more is a ``ProviderError``."""

NOT_RUN = "Error: this tool call was not run."
"""The ``tool`` message sent for an earlier call that has no result."""

PRIORITY_HEADER = "OpenRealtime-Priority"
"""``background``: work nobody waits on (``openrealtime serve-models`` queues it behind people)."""

_WHAT = "OpenAI-compatible brain"


class OpenAIBrain:
    """Streams answers from an OpenAI-compatible chat completions endpoint.

    ``base_url`` is the API root (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``);
    ``api_key`` may be empty for servers without authentication. ``temperature`` and
    ``max_tokens`` are sent only when set. Call ``aclose`` when done with the brain.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float = 30.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        max_tool_argument_chars: int = 65_536,
        max_concurrent: int = 8,
        max_background: int = 2,
    ) -> None:
        self.model = model
        self.lanes = ProviderLanes(max_concurrent=max_concurrent, max_background=max_background)
        """Foreground first (``plugins/brain/lanes.py``): memory work never takes a
        person's place."""
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_tool_argument_chars = max_tool_argument_chars
        self._api_key = api_key
        self._client = create_client(base_url=base_url, api_key=api_key, timeout=timeout)

    async def aclose(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        await self._client.close()

    async def stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        """Stream text deltas and, once complete, the tool calls of one response."""
        async with self.lanes.slot():
            async for delta in self._stream(request):
                yield delta

    async def _stream(self, request: BrainInput) -> AsyncGenerator[BrainDelta, None]:
        tools = [tool_param(spec) for spec in request.tools]
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._client.chat.completions.create(
                    model=self.model,
                    messages=chat_messages(request),
                    stream=True,
                    tools=tools or omit,
                    temperature=omit if self.temperature is None else self.temperature,
                    max_tokens=omit if self.max_tokens is None else self.max_tokens,
                )
        except PROVIDER_EXCEPTIONS as e:
            raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
        calls = _ToolCallAssembler(self.max_tool_argument_chars)
        try:
            while True:
                try:
                    async with asyncio.timeout(self.timeout):
                        chunk: ChatCompletionChunk | None = await anext(response, None)
                except PROVIDER_EXCEPTIONS as e:
                    raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
                if chunk is None:
                    break
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue  # we never ask for n > 1; ignore a server that sends more
                    if choice.delta.content:
                        yield BrainDelta(text=choice.delta.content)
                    for fragment in choice.delta.tool_calls or ():
                        calls.add(fragment)
                    if choice.finish_reason is not None:
                        for call in calls.complete():
                            yield BrainDelta(tool_call=call)
            for call in calls.complete():
                yield BrainDelta(tool_call=call)
        finally:
            await response.close()

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        lane: str,
        background: bool = False,
    ) -> str:
        """One constrained JSON answer (``memory.thread_consolidation.JsonModel``; see
        ``plugins/brain/json_model.py``): the text of a streamed completion with
        ``response_format`` json_schema, under the same timeouts and error mapping as
        ``stream``. ``lane`` is not used (no queue here); ``background`` work takes only
        the places kept for it (``self.lanes``)."""
        del lane
        async with self.lanes.slot(background=background):
            return await self._complete_json(
                messages, schema, max_tokens=max_tokens, background=background
            )

    async def _complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        max_tokens: int,
        background: bool,
    ) -> str:
        wire = cast("list[ChatCompletionMessageParam]", messages)  # role/content dicts
        response_format: ResponseFormatJSONSchema = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }
        try:
            async with asyncio.timeout(self.timeout):
                response = await self._client.chat.completions.create(
                    model=self.model,
                    messages=wire,
                    stream=True,
                    response_format=response_format,
                    temperature=0,
                    max_tokens=max_tokens,
                    # Our own model server runs it in its model's background class.
                    extra_headers={PRIORITY_HEADER: "background"} if background else None,
                )
        except PROVIDER_EXCEPTIONS as e:
            raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
        pieces: list[str] = []
        try:
            while True:
                try:
                    async with asyncio.timeout(self.timeout):
                        chunk: ChatCompletionChunk | None = await anext(response, None)
                except PROVIDER_EXCEPTIONS as e:
                    raise map_openai_error(e, what=_WHAT, api_key=self._api_key) from e
                if chunk is None:
                    return "".join(pieces)
                pieces += [
                    c.delta.content for c in chunk.choices if c.index == 0 and c.delta.content
                ]
        finally:
            await response.close()


def chat_messages(request: BrainInput) -> list[ChatCompletionMessageParam]:
    """The chat messages for ``request`` (see the module's theory of operation)."""
    messages: list[ChatCompletionMessageParam] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": request.model_text})
    calls = list(request.tool_calls)
    called = {call.call_id for call in calls}
    # A caller that predates ``tool_calls`` passes results only: restate their calls.
    calls += [
        ToolCall(result.call_id, result.name, {})
        for result in request.tool_results
        if result.call_id not in called
    ]
    if not calls:
        return messages
    messages.append({"role": "assistant", "content": None, "tool_calls": _call_params(calls)})
    results = {result.call_id: result.content for result in request.tool_results}
    for call in calls:
        content = results.get(call.call_id, NOT_RUN)
        messages.append({"role": "tool", "tool_call_id": call.call_id, "content": content})
    return messages


def tool_param(spec: ToolSpec) -> ChatCompletionToolParam:
    """``spec`` as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def _call_params(calls: list[ToolCall]) -> list[ChatCompletionMessageToolCallParam]:
    return [
        {
            "id": call.call_id,
            "type": "function",
            "function": {
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False),
            },
        }
        for call in calls
    ]


@dataclass(slots=True)
class _PartialCall:
    call_id: str = ""
    name: str = ""
    arguments: str = ""


class _ToolCallAssembler:
    """Joins streamed tool-call fragments by index; ``complete`` hands over the finished calls."""

    def __init__(self, max_argument_chars: int) -> None:
        self._max_argument_chars = max_argument_chars
        self._partial: dict[int, _PartialCall] = {}
        self._count = 0

    def add(self, fragment: ChoiceDeltaToolCall) -> None:
        partial = self._partial.get(fragment.index)
        if partial is None:
            self._count += 1
            if self._count > MAX_TOOL_CALLS:
                raise ProviderError(
                    f"{_WHAT}: more than {MAX_TOOL_CALLS} tool calls in one response",
                    retryable=False,
                )
            partial = self._partial[fragment.index] = _PartialCall()
        if fragment.id:
            partial.call_id = partial.call_id or fragment.id
        function = fragment.function
        if function is None:
            return
        if function.name:
            # Servers send the name once (OpenAI) or repeat it in every fragment: keep the first.
            partial.name = partial.name or function.name
        if function.arguments:
            partial.arguments += function.arguments
            if len(partial.arguments) > self._max_argument_chars:
                raise ProviderError(
                    f"{_WHAT}: tool-call arguments longer than {self._max_argument_chars} "
                    "characters",
                    retryable=False,
                )

    def complete(self) -> list[ToolCall]:
        calls = [_finish(index, self._partial[index]) for index in sorted(self._partial)]
        self._partial.clear()
        return calls


def _finish(index: int, partial: _PartialCall) -> ToolCall:
    if not partial.name:
        raise ProviderError(f"{_WHAT}: tool call {index} has no function name", retryable=True)
    text = partial.arguments.strip() or "{}"  # some servers send nothing for no arguments
    try:
        arguments: Any = json.loads(text)
    except json.JSONDecodeError as e:
        # The model wrote broken JSON; another attempt may well succeed.
        raise ProviderError(
            f"{_WHAT}: tool call {partial.name!r} has invalid JSON arguments "
            f"(line {e.lineno} column {e.colno})",
            retryable=True,
        ) from e
    if not isinstance(arguments, dict):
        raise ProviderError(
            f"{_WHAT}: tool call {partial.name!r} arguments are {type(arguments).__name__}, "
            "not a JSON object",
            retryable=True,
        )
    return ToolCall(
        call_id=partial.call_id or f"call_{index}", name=partial.name, arguments=arguments
    )
