"""The GA session configuration: what ``session.update`` may set, and the session object that
``session.created``/``session.updated`` show.

Theory of operation
-------------------
Rule 1. ``apply_update(config, raw)`` validates a ``session.update``'s ``session`` against the
        GA shape (pydantic, unknown fields refused) and returns the new ``SessionConfig``; an
        error is a ``ProtocolError`` whose ``param`` is the GA path of the bad field
        (``session.audio.input.format.rate``). Nothing changes when it fails.
Rule 2. What we accept but cannot honour is listed in ``NO_EFFECT`` (documented in
        docs/protocol.md): the value is kept and shown back, so clients that always send it
        (the openai-agents runner sends ``tracing`` and a transcription model) keep working.
        What we refuse is an error naming the field: ``prompt`` (stored prompts live at
        OpenAI) and an MCP tool's ``connector_id``/``tunnel_id`` (OpenAI's services) are
        ``unsupported_parameter``. MCP tools with a ``server_url`` are served
        (``tools.mcp``); their headers are never shown back (nor stored for a resume, so a
        resumed session declares a server that needs them again).
Rule 3. Voices: our TTS has its own voices; every GA voice name is accepted and spoken with
        the role's voice (docs/protocol.md lists the mapping). The name is shown back.
Rule 4. ``session_json(config)`` is the GA session object (``type: "realtime"``); our own
        fields (session and thread ids) are added by the session under ``openrealtime`` only
        for clients that negotiated extensions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.audio_formats import PCM24K, AudioFormat
from pipeline.turn_commands import TurnEagerness
from plugins.contracts import ToolSpec
from runtime.errors import ProtocolError
from runtime.realtime.protocol import MAX_OUTPUT_TOKENS, ErrorCode, validation_error
from runtime.realtime.protocol_tools import (
    FunctionToolIn,
    McpToolIn,
    ToolChoiceFunctionIn,
    mcp_servers,
    mcp_tool_json,
    tool_specs,
)
from tools.errors import InvalidTool
from tools.mcp import McpServer, check_server

GA_VOICES = frozenset(
    {"alloy", "ash", "ballad", "coral", "echo", "sage", "shimmer", "verse", "marin", "cedar"}
)
NO_EFFECT = (
    "tracing", "truncation", "include", "noise_reduction", "transcription", "speed",
    "parallel_tool_calls", "reasoning", "model",
)  # fmt: skip
"""Accepted and shown back, with no effect here (Rule 2)."""
MAX_TOOLS = 32


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FormatIn(_Strict):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = "audio/pcm"
    rate: int | None = None


class ServerVadIn(_Strict):
    type: Literal["server_vad"]
    threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    prefix_padding_ms: int | None = Field(default=None, ge=0, le=5_000)
    silence_duration_ms: int | None = Field(default=None, ge=0, le=10_000)
    idle_timeout_ms: int | None = Field(default=None, ge=5_000, le=30_000)
    create_response: bool | None = None
    interrupt_response: bool | None = None


class SemanticVadIn(_Strict):
    type: Literal["semantic_vad"]
    eagerness: Literal["low", "medium", "high", "auto"] | None = None
    create_response: bool | None = None
    interrupt_response: bool | None = None


TurnDetectionIn = Annotated[ServerVadIn | SemanticVadIn, Field(discriminator="type")]

SEMANTIC_VAD_EAGERNESS: dict[str, TurnEagerness] = {
    "low": "low", "medium": "medium", "high": "high", "auto": "medium",
}  # fmt: skip
"""``semantic_vad``'s eagerness as the turn coordinator's (GA: ``auto`` is ``medium``)."""


class TranscriptionIn(_Strict):
    model: str | None = Field(default=None, max_length=128)
    language: str | None = Field(default=None, max_length=16)
    prompt: str | None = Field(default=None, max_length=4_000)


class AudioInputIn(_Strict):
    format: FormatIn | None = None
    transcription: TranscriptionIn | None = None
    noise_reduction: dict[str, Any] | None = None
    turn_detection: TurnDetectionIn | None = None


class AudioOutputIn(_Strict):
    format: FormatIn | None = None
    voice: str | None = Field(default=None, max_length=64)
    speed: float | None = Field(default=None, ge=0.25, le=1.5)


class AudioIn(_Strict):
    input: AudioInputIn | None = None
    output: AudioOutputIn | None = None


class SessionIn(_Strict):
    type: Literal["realtime"] | None = None
    model: str | None = Field(default=None, max_length=128)
    instructions: str | None = Field(default=None, max_length=20_000)
    output_modalities: list[Literal["audio", "text"]] | None = Field(
        default=None, min_length=1, max_length=1
    )
    audio: AudioIn | None = None
    tools: list[Annotated[FunctionToolIn | McpToolIn, Field(discriminator="type")]] | None = Field(
        default=None, max_length=MAX_TOOLS
    )
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceFunctionIn | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    parallel_tool_calls: bool | None = None
    tracing: Literal["auto"] | dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | dict[str, Any] | None = None
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = None
    prompt: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnDetectionConfig:
    type: str = "server_vad"  # "server_vad" | "semantic_vad" | "none" (manual commit)
    threshold: float | None = None
    prefix_padding_ms: int | None = None
    silence_duration_ms: int | None = None
    idle_timeout_ms: int | None = None
    eagerness: str = "auto"
    create_response: bool = True
    interrupt_response: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """One session's settings (GA names); frozen: an update makes a new one."""

    model: str = ""
    instructions: str = ""
    voice: str = "alloy"
    output_modalities: tuple[str, ...] = ("audio",)
    input_format: AudioFormat = PCM24K
    output_format: AudioFormat = PCM24K
    turn_detection: TurnDetectionConfig = field(default_factory=TurnDetectionConfig)
    tools: tuple[ToolSpec, ...] = ()
    """The client's functions."""
    mcp_servers: tuple[McpServer, ...] = ()
    """The MCP servers the runtime connects to for this session (``tools.mcp``)."""
    tool_choice: str | dict[str, str] = "auto"
    max_output_tokens: int | str = "inf"
    accepted: dict[str, Any] = field(default_factory=dict)
    """Fields kept only to show back (``NO_EFFECT``)."""
    extension_rates: bool = False
    """Extensions negotiated: 16/22.05/48 kHz PCM are accepted besides GA's 24 kHz."""


def apply_update(
    config: SessionConfig,
    raw: dict[str, Any],
    *,
    event_id: str | None = None,
    tool_hosts: frozenset[str] = frozenset(),
) -> SessionConfig:
    """Rule 1: the configuration after ``session.update``; an MCP server's host must be one of
    ``tool_hosts`` (the tool allowlist: none by default)."""
    try:
        update = SessionIn.model_validate(raw)
    except ValidationError as e:
        raise validation_error(
            e, kind="session.update", event_id=event_id, prefix=("session",)
        ) from None
    if update.prompt is not None:
        raise _unsupported("session.prompt", "stored prompts are not supported", event_id)
    changes: dict[str, Any] = {}
    accepted = dict(config.accepted)
    sent = update.model_fields_set
    for name in ("tracing", "truncation", "include"):
        if name in sent:
            accepted[name] = getattr(update, name)
    if update.model is not None:
        changes["model"] = update.model
    if update.instructions is not None:
        changes["instructions"] = update.instructions
    if update.output_modalities is not None:
        changes["output_modalities"] = tuple(update.output_modalities)
    if update.tools is not None:
        changes["tools"] = tool_specs(update.tools)
        servers = mcp_servers(update.tools, param="session.tools", event_id=event_id)
        for server in servers:
            try:
                check_server(server, tool_hosts)
            except InvalidTool as e:
                index = next(
                    i
                    for i, t in enumerate(update.tools)
                    if isinstance(t, McpToolIn) and t.server_label == server.label
                )
                raise _invalid(
                    f"session.tools[{index}].server_url",
                    f"{e.message} (OPENREALTIME_TOOL_HOSTS)",
                    event_id,
                ) from None
        changes["mcp_servers"] = servers
    if update.tool_choice is not None:
        choice = update.tool_choice
        changes["tool_choice"] = (
            choice if isinstance(choice, str) else {"type": "function", "name": choice.name}
        )
    if update.max_output_tokens is not None:
        tokens = update.max_output_tokens
        if isinstance(tokens, int) and not 1 <= tokens <= MAX_OUTPUT_TOKENS:
            raise ProtocolError(
                ErrorCode.INVALID_VALUE,
                f"max_output_tokens must be between 1 and {MAX_OUTPUT_TOKENS}, or 'inf'",
                param="session.max_output_tokens",
                event_id=event_id,
            )
        changes["max_output_tokens"] = tokens
    audio = update.audio
    if audio is not None and audio.input is not None:
        audio_in = audio.input
        if audio_in.format is not None:
            changes["input_format"] = _format(
                audio_in.format, "session.audio.input.format", config, event_id
            )
        for name in ("transcription", "noise_reduction"):
            if name in audio_in.model_fields_set:
                value = getattr(audio_in, name)
                if isinstance(value, BaseModel):
                    value = value.model_dump(exclude_none=True)
                accepted[name] = value
        if "turn_detection" in audio_in.model_fields_set:
            changes["turn_detection"] = _turn_detection(audio_in.turn_detection)
    if audio is not None and audio.output is not None:
        audio_out = audio.output
        if audio_out.format is not None:
            changes["output_format"] = _format(
                audio_out.format, "session.audio.output.format", config, event_id
            )
        if audio_out.voice is not None:
            changes["voice"] = audio_out.voice
        if audio_out.speed is not None:
            accepted["speed"] = audio_out.speed
    return dataclasses.replace(config, accepted=accepted, **changes)


def session_json(config: SessionConfig) -> dict[str, Any]:
    """Rule 4: the GA session object."""
    accepted = config.accepted
    audio_in: dict[str, Any] = {
        "format": _format_json(config.input_format),
        "turn_detection": _turn_detection_json(config.turn_detection),
    }
    if accepted.get("transcription") is not None:
        audio_in["transcription"] = accepted["transcription"]
    if accepted.get("noise_reduction") is not None:
        audio_in["noise_reduction"] = accepted["noise_reduction"]
    audio_out: dict[str, Any] = {
        "format": _format_json(config.output_format),
        "voice": config.voice,
    }
    if accepted.get("speed") is not None:
        audio_out["speed"] = accepted["speed"]
    out: dict[str, Any] = {
        "type": "realtime",
        "model": config.model,
        "instructions": config.instructions,
        "output_modalities": list(config.output_modalities),
        "audio": {"input": audio_in, "output": audio_out},
        "tools": [
            *({"type": "function", "name": t.name, "description": t.description,
               "parameters": t.parameters}
              for t in config.tools),
            *(mcp_tool_json(server) for server in config.mcp_servers),
        ],
        "tool_choice": config.tool_choice,
        "max_output_tokens": config.max_output_tokens,
    }  # fmt: skip
    for name in ("tracing", "truncation", "include"):
        if accepted.get(name) is not None:
            out[name] = accepted[name]
    return out


def _format(
    value: FormatIn, param: str, config: SessionConfig, event_id: str | None
) -> AudioFormat:
    if value.type != "audio/pcm":
        if value.rate not in (None, 8000):
            raise _invalid(f"{param}.rate", f"{value.type} is 8 kHz", event_id)
        return AudioFormat(value.type, 8000)
    rate = value.rate or 24000
    allowed = (16000, 22050, 24000, 48000) if config.extension_rates else (24000,)
    if rate not in allowed:
        raise _invalid(f"{param}.rate", f"audio/pcm rate must be one of {allowed}", event_id)
    return AudioFormat("audio/pcm", rate)


def _format_json(value: AudioFormat) -> dict[str, Any]:
    if value.kind == "audio/pcm":
        return {"type": value.kind, "rate": value.rate}
    return {"type": value.kind}


def _turn_detection(value: ServerVadIn | SemanticVadIn | None) -> TurnDetectionConfig:
    if value is None:
        return TurnDetectionConfig(type="none", create_response=False, interrupt_response=False)
    create = True if value.create_response is None else value.create_response
    interrupt = True if value.interrupt_response is None else value.interrupt_response
    if isinstance(value, SemanticVadIn):
        return TurnDetectionConfig(
            type="semantic_vad",
            eagerness=value.eagerness or "auto",
            create_response=create,
            interrupt_response=interrupt,
        )
    return TurnDetectionConfig(
        type="server_vad",
        threshold=value.threshold,
        prefix_padding_ms=value.prefix_padding_ms,
        silence_duration_ms=value.silence_duration_ms,
        idle_timeout_ms=value.idle_timeout_ms,
        create_response=create,
        interrupt_response=interrupt,
    )


def _turn_detection_json(value: TurnDetectionConfig) -> dict[str, Any] | None:
    if value.type == "none":
        return None
    out: dict[str, Any] = {"type": value.type}
    if value.type == "semantic_vad":
        out["eagerness"] = value.eagerness
    else:
        for name in ("threshold", "prefix_padding_ms", "silence_duration_ms", "idle_timeout_ms"):
            if getattr(value, name) is not None:
                out[name] = getattr(value, name)
    out["create_response"] = value.create_response
    out["interrupt_response"] = value.interrupt_response
    return out


def _invalid(param: str, message: str, event_id: str | None) -> ProtocolError:
    return ProtocolError(ErrorCode.INVALID_VALUE, message, param=param, event_id=event_id)


def _unsupported(param: str, message: str, event_id: str | None) -> ProtocolError:
    return ProtocolError(ErrorCode.UNSUPPORTED, message, param=param, event_id=event_id)


__all__ = [
    "GA_VOICES",
    "NO_EFFECT",
    "SEMANTIC_VAD_EAGERNESS",
    "SessionConfig",
    "TurnDetectionConfig",
    "apply_update",
    "session_json",
]
