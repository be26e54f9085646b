"""The tool-call loop shared by every brain (the offline ``LocalBrain`` and model brains alike).

Theory of operation
-------------------
A response may take several *rounds*; a round is one call of ``Brain.stream``.

Rule 1. Text deltas of every round are passed through as they arrive: the caller speaks them.
        When a round's text follows earlier text that did not end in whitespace, a space is
        put in front of it, so the sentences of two rounds do not run together.
Rule 2. Tool calls of a round are passed through too (so the caller can journal them) and
        collected. When the round's stream ends, the collected calls run concurrently, each
        bounded by ``tool_timeout``; then one ``BrainDelta(tool_result=…)`` per call is yielded,
        in call order.
Rule 3. A call never crashes the loop: an unknown tool, a handler that raises or one that
        times out gives a ``ToolResult`` with ``is_error=True`` and a short message the brain
        can read. Failures are logged with the tool name and the exception type only (details
        at debug level: arguments and messages may hold conversation content).
Rule 4. The next round sees every call and result so far (``BrainInput.tool_calls`` and
        ``tool_results``, in order). A round with no tool calls ends the response.
Rule 5. At most ``max_rounds`` rounds. The last allowed round is offered no tools
        (``request.tools == ()``), so the brain must answer in words; calls it makes anyway are
        logged and dropped, never run or yielded. ``max_rounds=1`` therefore means "no tools".
Rule 6. Client tools (``client_tools``: functions the client declared and runs itself) are
        yielded but never run here: a round that calls one ends the response once the round's
        server tools have run. The client sends the output back and asks for the next response,
        which sees the call and its output in ``BrainInput.tool_calls``/``tool_results``.
Rule 7. A ``gate`` (the runtime's permission check, ``runtime.tool_gate``) is asked about each
        call as it arrives, before the call is passed on, so a refused client call never
        reaches the client. Its ``Verdict``: ``PROCEED`` (run as without a gate: the handler,
        or the client), ``run`` (run this instead of the handler, under the same timeout and
        Rule 3), ``refused`` (that text is the call's result; nothing runs) or ``ask`` (nothing
        runs; once the round's other calls ran and their results were yielded, the question is
        yielded as text and the response ends, as after a client call: the answer continues
        the turn in a new response). Only the calls that proceed end a response as client
        calls (Rule 6).

Closing or cancelling the consumer closes the current round's brain stream (and with it the
HTTP stream of a model brain) and cancels running tool calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from plugins.contracts import Brain, BrainDelta, BrainInput, ToolCall, ToolResult

logger = logging.getLogger(__name__)

ToolHandler: TypeAlias = Callable[[dict[str, Any]], Awaitable[str]]
"""Runs one tool: takes the call's arguments, returns the text the brain reads."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A gate's word on one call (Rule 7); at most one field is set."""

    run: Callable[[], Awaitable[str]] | None = None
    """Run this (bound to the call) instead of the tool's handler."""
    refused: str | None = None
    """The call's result: it was not permitted or cannot be asked about; nothing runs."""
    ask: str | None = None
    """The question for the person; nothing runs and the response ends."""


PROCEED = Verdict()
"""Run the call as without a gate (its handler, or the client)."""

ToolGate: TypeAlias = Callable[[ToolCall], Awaitable[Verdict]]
"""Decides one call before it is passed on (Rule 7)."""


async def run_brain_with_tools(
    brain: Brain,
    request: BrainInput,
    tools: Mapping[str, ToolHandler],
    *,
    max_rounds: int = 4,
    tool_timeout: float = 10.0,
    max_result_chars: int = 16_000,
    client_tools: Collection[str] = (),
    gate: ToolGate | None = None,
) -> AsyncGenerator[BrainDelta, None]:
    """Stream one response of ``brain``, running the tool calls it makes with ``tools``.

    Yields text deltas, tool-call deltas and tool-result deltas (see the module's theory of
    operation). ``request.tools`` are the specs offered to the brain; ``tools`` maps a tool name
    to its handler. Results longer than ``max_result_chars`` are cut. Errors of the brain
    itself (``PluginError``) propagate. It is an async generator: close it (``aclose`` or
    ``contextlib.aclosing``) to stop early and close the brain's stream at once.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
    if tool_timeout <= 0:
        raise ValueError(f"tool_timeout must be positive, got {tool_timeout}")
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    spoke_last = ""  # the latest text delta yielded
    for round_number in range(1, max_rounds + 1):
        last_round = round_number == max_rounds
        # "Let me check." then "It is sunny.": keep the sentences of two rounds apart.
        glue = bool(spoke_last) and not spoke_last[-1].isspace()
        round_request = dataclasses.replace(
            request,
            tools=() if last_round else request.tools,
            tool_calls=(*request.tool_calls, *calls),
            tool_results=(*request.tool_results, *results),
        )
        round_calls: list[ToolCall] = []
        verdicts: dict[int, Verdict] = {}  # by position in round_calls (Rule 7)
        deltas = brain.stream(round_request)
        try:
            async for delta in deltas:
                if delta.text:
                    if glue and not delta.text[0].isspace():
                        delta = dataclasses.replace(delta, text=" " + delta.text)
                    glue = False
                    spoke_last = delta.text
                if delta.tool_call is None:
                    if delta.text:
                        yield delta
                    continue
                if last_round:
                    logger.warning(
                        "brain called tool %s after the last tool round; dropped",
                        delta.tool_call.name,
                    )
                    if delta.text:
                        yield BrainDelta(text=delta.text)
                    continue
                if gate is not None:
                    verdicts[len(round_calls)] = await gate(delta.tool_call)
                round_calls.append(delta.tool_call)
                yield delta
        finally:
            # Close the brain's stream now (and its HTTP response), not when it is collected.
            if isinstance(deltas, AsyncGenerator):
                await deltas.aclose()
        if not round_calls:
            return
        verdict_of = [verdicts.get(i, PROCEED) for i in range(len(round_calls))]
        asked = [v.ask for v in verdict_of if v.ask is not None]
        to_run = [
            (c, v) for c, v in zip(round_calls, verdict_of, strict=True)
            if v.ask is None and (v.refused is not None or v.run is not None
                                  or c.name not in client_tools)
        ]  # fmt: skip
        round_results = await run_tool_calls(
            [c for c, _ in to_run], tools, timeout=tool_timeout,
            max_result_chars=max_result_chars, verdicts=[v for _, v in to_run],
        )  # fmt: skip
        for result in round_results:
            yield BrainDelta(tool_result=result)
        if asked:
            text = asked[0]
            if spoke_last and not spoke_last[-1].isspace():
                text = " " + text
            yield BrainDelta(text=text)
            return  # the person's answer continues the turn (Rule 7)
        if len(to_run) < len(round_calls):
            return  # the client runs the rest and continues the turn (Rule 6)
        calls += round_calls
        results += round_results


async def run_tool_calls(
    calls: Sequence[ToolCall],
    tools: Mapping[str, ToolHandler],
    *,
    timeout: float,
    max_result_chars: int = 16_000,
    verdicts: Sequence[Verdict] | None = None,
) -> list[ToolResult]:
    """Run ``calls`` concurrently; one result per call, in order. Never raises for a failing
    or unknown tool (the result says ``is_error``). ``verdicts`` (one per call) are a gate's
    (Rule 7)."""
    chosen = list(verdicts) if verdicts is not None else [PROCEED] * len(calls)
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                _run_one(call, tools, timeout, max_result_chars, verdict), name=call.name
            )
            for call, verdict in zip(calls, chosen, strict=True)
        ]
    return [task.result() for task in tasks]


async def _run_one(
    call: ToolCall,
    tools: Mapping[str, ToolHandler],
    timeout: float,
    max_result_chars: int,
    verdict: Verdict = PROCEED,
) -> ToolResult:
    if verdict.refused is not None:
        return _error(call, verdict.refused)
    handler = tools.get(call.name)
    runner: Callable[[], Awaitable[str]] | None = verdict.run
    if runner is None and handler is None:
        logger.warning("brain called unknown tool %r", call.name[:64])
        return _error(call, f"Error: there is no tool named {call.name!r}.")
    if runner is None:
        assert handler is not None
        arguments = dict(call.arguments)
        runner = functools.partial(handler, arguments)
    try:
        async with asyncio.timeout(timeout):
            content = await runner()
    except TimeoutError:
        logger.warning("tool %s timed out after %.1f s", call.name, timeout)
        return _error(call, f"Error: the tool {call.name!r} did not answer in time.")
    except Exception as e:  # any handler failure becomes a result the brain can read
        logger.warning("tool %s failed: %s", call.name, type(e).__name__)
        logger.debug("tool %s failure", call.name, exc_info=True)
        return _error(call, f"Error: the tool {call.name!r} failed.")
    if len(content) > max_result_chars:
        content = content[:max_result_chars]
    return ToolResult(call_id=call.call_id, name=call.name, content=content)


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.call_id, name=call.name, content=message, is_error=True)
