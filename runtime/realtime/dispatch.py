"""One client message → the session's calls (docs/protocol.md, event by event): everything a
connection receives after its handshake except audio, which goes to ``VoiceSession.hear``.

Rule 1. Every message has one handler here; a message the session cannot take is a
        ``ProtocolError`` with a stable code (and the offending ``param``), never a crash —
        the connection turns it into an ``error`` event and reads on.
Rule 2. The engine's own refusals are mapped at this edge: an item it does not hold is
        ``item_not_found``, a truncation past an answer's audio ``invalid_value`` on
        ``audio_end_ms``; anything else the engine raises is the connection's internal error.
Rule 3. ``openrealtime.session.close`` asks the connection to end the session
        (``SessionCloseRequested``): closing is the connection's business.
"""

from __future__ import annotations

import base64
import binascii

import numpy as np

from pipeline import events as ev
from pipeline.audio_formats import InboundAudio
from pipeline.engine import Engine, ResponseOptions
from pipeline.items import ItemNotFound, TruncatedBeyondAudio
from plugins.contracts import ToolChoice
from runtime.errors import ProtocolError, SessionCloseRequested
from runtime.realtime.protocol import (
    Ack,
    AudioClear,
    AudioCommit,
    ErrorCode,
    FunctionCallOutputIn,
    InputPause,
    InputResume,
    ItemCreate,
    ItemDelete,
    ItemRetrieve,
    ItemTruncate,
    McpApprovalResponseIn,
    MessageIn,
    OutputAudioBufferClear,
    PlaybackProgress,
    ResponseCancel,
    ResponseCreate,
    SessionClose,
    SessionResume,
    SessionStart,
    SessionUpdate,
)
from runtime.realtime.protocol_tools import McpToolIn, tool_specs
from runtime.realtime.session import VoiceSession
from runtime.realtime.transport import MediaOut
from runtime.tool_gate import ApprovalNotFound


async def handle(
    session: VoiceSession, engine: Engine, message: object, *, media: MediaOut | None
) -> None:
    """One client message other than audio and the handshake (docs/protocol.md, event by
    event); ``media``: the link's media track (WebRTC), if it has one."""
    outbox = session.outbox
    event_id = getattr(message, "event_id", None)
    try:
        if isinstance(message, SessionUpdate):
            session.update(message)
        elif isinstance(message, AudioCommit):
            if not engine.commit():
                raise ProtocolError(ErrorCode.COMMIT_EMPTY, "no user speech to commit")
        elif isinstance(message, AudioClear):
            engine.clear_input()
            outbox.send(ev.InputAudioBufferCleared())
        elif isinstance(message, ItemCreate):
            await create_item(session, engine, message)
        elif isinstance(message, ItemRetrieve):
            outbox.send(ev.ItemRetrieved(engine.item(message.item_id)))
        elif isinstance(message, ItemDelete):
            await engine.delete_item(message.item_id)
        elif isinstance(message, ItemTruncate):
            await engine.truncate_item(message.item_id, message.audio_end_ms)
        elif isinstance(message, ResponseCreate):
            engine.create_response(response_options(message))
        elif isinstance(message, ResponseCancel):
            if not engine.cancel_response():
                raise ProtocolError(ErrorCode.NO_RESPONSE, "no response in progress")
        elif isinstance(message, OutputAudioBufferClear):
            if media is None:
                raise ProtocolError(
                    ErrorCode.UNSUPPORTED,
                    "output_audio_buffer.clear is for WebRTC; over WebSocket stop playback "
                    "and send conversation.item.truncate",
                )
            engine.cancel_response()  # what was played stays the heard prefix
            media.clear()
        elif isinstance(message, InputPause):
            engine.pause_microphone()
            outbox.send(ev.InputPaused())
        elif isinstance(message, InputResume):
            engine.resume_microphone()
            outbox.send(ev.InputResumed())
        elif isinstance(message, PlaybackProgress):
            engine.on_playback(message.generation, message.played_ms)
        elif isinstance(message, Ack):
            outbox.ack(message.seq)
        elif isinstance(message, SessionClose):
            raise SessionCloseRequested
        elif isinstance(message, SessionStart | SessionResume):
            raise ProtocolError(ErrorCode.SESSION_ALREADY_STARTED, "session started")
    except ItemNotFound as e:
        raise ProtocolError(
            ErrorCode.ITEM_NOT_FOUND, str(e), param="item_id", event_id=event_id
        ) from None
    except TruncatedBeyondAudio as e:
        raise ProtocolError(
            ErrorCode.INVALID_VALUE, str(e), param="audio_end_ms", event_id=event_id
        ) from None
    except ProtocolError as e:
        e.event_id = e.event_id or event_id
        raise


async def create_item(session: VoiceSession, engine: Engine, message: ItemCreate) -> None:
    """``conversation.item.create``: a user message (text, or audio transcribed here), a
    function's output, or an answer to an MCP approval request."""
    item = message.item
    if isinstance(item, FunctionCallOutputIn):
        engine.add_function_output(item.call_id, item.output, item.id)
        return
    if isinstance(item, McpApprovalResponseIn):
        try:
            session.tool_gate.approve(
                item.approval_request_id, approve=item.approve, scope=item.scope,
                rule=item.rule, item_id=item.id,
            )  # fmt: skip
        except ApprovalNotFound as e:
            raise ProtocolError(
                ErrorCode.ITEM_NOT_FOUND, str(e), param="item.approval_request_id"
            ) from None
        return
    assert isinstance(item, MessageIn)
    if item.role != "user":
        raise ProtocolError(
            ErrorCode.UNSUPPORTED,
            f"{item.role} items are not supported; add user messages "
            "(instructions go in session.update)",
            param="item.role",
        )
    parts: list[str] = []
    for part in item.content:
        if part.type == "input_text" and part.text is not None:
            parts.append(part.text)
        elif part.type == "input_audio" and part.audio is not None:
            parts.append(await transcribe_item(session, engine, part.audio))
        else:
            raise ProtocolError(
                ErrorCode.UNSUPPORTED,
                f"a user message holds input_text or input_audio, not {part.type}",
                param="item.content",
            )
    text = " ".join(p.strip() for p in parts if p.strip())
    if not text:
        raise ProtocolError(ErrorCode.INVALID_VALUE, "the message is empty", param="item.content")
    engine.add_user_text(text, item.id)


async def transcribe_item(session: VoiceSession, engine: Engine, audio: str) -> str:
    """An ``input_audio`` part (base64 in the session's input format), transcribed."""
    try:
        data = base64.b64decode(audio, validate=True)
        decoder = InboundAudio(session.config.input_format)
        pcm = np.concatenate((decoder.decode(data), decoder.flush()))
    except (binascii.Error, ValueError) as e:
        raise ProtocolError(
            ErrorCode.INVALID_AUDIO, f"input_audio: {e}", param="item.content"
        ) from None
    transcript = await session.services.plugins.asr.transcribe(
        pcm, language=engine.responder.persona.language
    )
    return transcript.text


def response_options(message: ResponseCreate) -> ResponseOptions:
    """What a ``response.create`` asks of this one response."""
    params = message.response
    if params is None:
        return ResponseOptions()
    audio = None
    if params.output_modalities is not None:
        audio = "audio" in params.output_modalities
    input_text = None
    if params.input:
        texts = [
            part.text or ""
            for item in params.input
            if isinstance(item, MessageIn)
            for part in item.content
            if part.type == "input_text"
        ]
        input_text = " ".join(t for t in texts if t) or None
    tools = tool_specs(params.tools) if params.tools is not None else None
    for index, tool in enumerate(params.tools or ()):
        if isinstance(tool, McpToolIn):
            raise ProtocolError(
                ErrorCode.UNSUPPORTED,
                "MCP servers are declared with session.update, not per response",
                param=f"response.tools[{index}]",
                event_id=message.event_id,
            )
    tool_choice = None
    if params.tool_choice is not None:
        choice = params.tool_choice
        tool_choice = ToolChoice.from_ga(choice if isinstance(choice, str) else choice.model_dump())
    return ResponseOptions(
        instructions=params.instructions,
        audio=audio,
        in_conversation=params.conversation != "none",
        input_text=input_text,
        tools=tools,
        tool_choice=tool_choice,
        max_output_tokens=params.max_output_tokens,
    )


__all__ = ["SessionCloseRequested", "create_item", "handle", "response_options", "transcribe_item"]
