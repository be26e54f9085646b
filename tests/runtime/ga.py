"""Helpers for GA protocol tests: strict validation of server events against the installed
``openai`` package, and a scripted brain that calls client functions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from openai.types.realtime import RealtimeServerEvent
from pydantic import BaseModel, TypeAdapter

from plugins.contracts import BrainDelta, BrainInput, ToolCall
from runtime.roles import default_role
from runtime.server import RunningServer
from tools.capability import Capability
from tools.grants import GrantedBy, NewGrant

SERVER_EVENTS: TypeAdapter[RealtimeServerEvent] = TypeAdapter(RealtimeServerEvent)


def unknown_fields(value: object, path: str = "") -> list[str]:
    """Every field the openai models did not declare (they allow extras; we do not)."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        found += [f"{path}.{name}" for name in value.model_extra or {}]
        for name in type(value).model_fields:
            found += unknown_fields(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += unknown_fields(item, f"{path}[{index}]")
    return found


def strict(event: dict[str, Any]) -> BaseModel:
    """``event`` parsed as the openai package's server event, with no undeclared field."""
    parsed = SERVER_EVENTS.validate_python(event)
    extra = unknown_fields(parsed)
    assert not extra, f"{event['type']}: undeclared fields {extra}"
    assert isinstance(parsed, BaseModel)
    return parsed


class FunctionBrain:
    """Calls the client's ``get_weather`` function when it is offered and the turn asks about
    the weather, then answers from its output; otherwise a fixed reply."""

    def __init__(self, reply: str = "Sure. Here is the answer. Anything else?") -> None:
        self.reply = reply
        self.requests: list[BrainInput] = []

    async def stream(self, request: BrainInput) -> AsyncIterator[BrainDelta]:
        self.requests.append(request)
        if request.tool_results:
            yield BrainDelta(text=f"The weather: {request.tool_results[-1].content}.")
            return
        offered = {tool.name for tool in request.tools}
        if "get_weather" in offered and "weather" in request.current_input.lower():
            call = ToolCall(call_id="call_weather_1", name="get_weather",
                            arguments={"city": "Paris"})  # fmt: skip
            yield BrainDelta(tool_call=call)
            return
        for word in self.reply.split(" "):
            yield BrainDelta(text=word + " ")


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


async def allow_weather(server: RunningServer) -> None:
    """A lifetime grant for the client's ``get_weather`` on the default role: client tools are
    decided like any other (``runtime/tool_gate.py``), so tests of the function round trip
    itself grant it first."""
    principal = await server.services.accounts.authenticate(server.token)
    assert principal is not None
    role = await default_role(server.services.roles, principal.tenant)
    await server.services.grants.create(principal.tenant, role.id, NewGrant(
        capability=Capability("get_weather"), effect="allow", scope="lifetime",
        granted_by=GrantedBy("person", principal.user)))  # fmt: skip
