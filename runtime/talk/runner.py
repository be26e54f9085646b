"""``Talk``: the asyncio side of the terminal client. It only moves things: microphone frames to
the server, server messages into ``TalkConversation`` (runtime/talk/conversation.py), the
commands that come out to the socket, the speaker and the terminal.

Rules:

1. Four tasks in one task group: receive, microphone, playback clock, keyboard. ``run`` ends
   when ``stop`` is set (Ctrl-C) or the connection is gone for good; then every task is
   cancelled and awaited, the microphone and speaker stop, the session is ended
   (``openrealtime.session.close``) and the socket closed.
2. A dropped connection is resumed (``RealtimeClient.reconnect``) up to ``reconnect_attempts``
   times; a refusal (bad token, superseded, revoked) is not retried. Microphone frames are
   dropped while the connection is down.
3. The client keeps at most ``MAX_MESSAGES`` server messages (``RealtimeClient.max_messages``):
   a conversation may last for hours.
4. Every network await has a timeout; closing never waits more than ``CLOSE_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TextIO

import numpy as np
import websockets

from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from runtime.client import ClientClosed, RealtimeClient
from runtime.talk.audio import AudioError, Microphone, Speaker, StreamResampler
from runtime.talk.commands import (
    Command,
    EndAudio,
    ForgetPlayback,
    Notice,
    PausePlayback,
    Play,
    ResumePlayback,
    Send,
    Show,
    StopPlayback,
)
from runtime.talk.conversation import TalkConversation, TalkMode
from runtime.talk.terminal import TranscriptPrinter

MAX_MESSAGES = 512
TICK_S = 0.02
CLOSE_TIMEOUT_S = 3.0
SEND_TIMEOUT_S = 5.0
SERVER_OUTPUT_RATES = (16_000, 22_050, 24_000, 48_000)
"""PCM rates the server speaks with extensions on (docs/protocol.md, *Audio formats*)."""
DEFAULT_OUTPUT_RATE = 24_000
FINAL_CLOSE_CODES = {
    1000: "the session was closed",
    4001: "unauthorized: check the token",
    4003: "the server refused the session",
    4012: "another connection took over this session",
    4013: "the token was revoked",
    4029: "too many live sessions for this user",
}
"""Close codes after which a resume cannot help."""

EXTENSIONS = {"events": True, "seq": True, "binary_audio": True, "pause_playback": True}

HINTS = {
    TalkMode.FULL_DUPLEX: "speak any time (speaking over the answer interrupts it)",
    TalkMode.HALF_DUPLEX: "speak when the assistant is quiet (the microphone pauses meanwhile)",
    TalkMode.PUSH_TO_TALK: "press Enter to talk, Enter again to send",
}


class Talk:
    """One terminal conversation with the server at ``url``."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        microphone: Microphone,
        speaker: Speaker,
        mode: TalkMode = TalkMode.FULL_DUPLEX,
        keys: AsyncIterator[str] | None = None,
        role: str | None = None,
        out: TextIO | None = None,
        err: TextIO | None = None,
        live: bool | None = None,
        reconnect_attempts: int = 5,
        reconnect_backoff_s: float = 0.5,
        tail_ms: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = RealtimeClient(url, token, max_messages=MAX_MESSAGES)
        self.microphone = microphone
        self.speaker = speaker
        self.mode = mode
        self.keys = keys
        self.role = role
        self.printer = TranscriptPrinter(out or sys.stdout, err or sys.stderr, live=live)
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_backoff_s = reconnect_backoff_s
        self.clock = clock
        self.conversation = TalkConversation(mode, tail_ms=tail_ms)
        self.connected = asyncio.Event()
        self.frames_sent = 0
        self.frames_held = 0
        """Microphone frames not sent: the microphone was held, idle, or the link was down."""
        self._input = StreamResampler(microphone.sample_rate, INPUT_SAMPLE_RATE)
        self._output: StreamResampler | None = None
        self._failure: str | None = None

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Talk until ``stop`` is set (0) or the connection is lost for good (1)."""
        stop = stop or asyncio.Event()
        await self.speaker.start()
        talking = asyncio.create_task(self._talk(), name="talk")
        stopping = asyncio.create_task(stop.wait(), name="talk-stop")
        try:
            await asyncio.wait({talking, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (talking, stopping):
                task.cancel()
            await asyncio.gather(talking, stopping, return_exceptions=True)
            await self._shut_down()
        if not talking.cancelled() and (error := talking.exception()) is not None:
            raise error
        if self._failure is not None:
            self.printer.notice(Notice(self._failure, error=True))
            return 1
        return 0

    async def _talk(self) -> None:
        if not await self._connect():
            return
        try:
            async with asyncio.TaskGroup() as group:
                helpers = [
                    group.create_task(self._send_microphone(), name="talk-microphone"),
                    group.create_task(self._tick(), name="talk-playback"),
                ]
                if self.keys is not None:
                    keys = group.create_task(self._read_keys(self.keys), name="talk-keys")
                    helpers.append(keys)
                await self._receive()  # until the connection is gone for good
                for task in helpers:
                    task.cancel()
        except* AudioError as failed:  # the microphone failed: nothing to talk with
            self._failure = str(failed.exceptions[0])

    # ------------------------------------------------------------ connection

    async def _connect(self) -> bool:
        rate = self.speaker.sample_rate
        output_rate = rate if rate in SERVER_OUTPUT_RATES else DEFAULT_OUTPUT_RATE
        detection = {"type": "none"} if self.mode is TalkMode.PUSH_TO_TALK else None
        try:
            session = await self.client.connect(
                role_id=self.role,
                output_sample_rate=output_rate,
                turn_detection=detection,
                extensions=EXTENSIONS,
            )
        except (ClientClosed, OSError, TimeoutError, websockets.InvalidURI) as e:
            await self.client.close()
            self._failure = f"could not connect to {self.client.url}: {_why(e)}"
            return False
        except websockets.InvalidHandshake as e:
            await self.client.close()
            self._failure = f"the server refused the connection: {e}"
            return False
        server_rate = int(session.get("output_sample_rate", output_rate))
        self._output = StreamResampler(server_rate, self.speaker.sample_rate)
        self.connected.set()
        role = (session.get("role") or {}).get("name", "?")
        self.printer.notice(
            Notice(f"connected (role {role}, {self.mode}): {HINTS[self.mode]}; Ctrl-C to quit")
        )
        return True

    async def _reconnect(self) -> bool:
        code = self.client.close_code
        if code in FINAL_CLOSE_CODES:
            self._failure = f"connection closed ({code}): {FINAL_CLOSE_CODES[code]}"
            return False
        self.printer.notice(Notice(f"connection lost (code {code}); reconnecting…"))
        try:
            resumed = await self.client.reconnect(
                attempts=self.reconnect_attempts, backoff=self.reconnect_backoff_s
            )
        except ClientClosed as e:
            self._failure = f"could not reconnect, giving up: {_why(e)}"
            return False
        self.connected.set()
        await self._execute(self.conversation.resumed(resumed))
        return True

    async def _shut_down(self) -> None:
        was_connected = self.connected.is_set()
        self.connected.clear()
        with contextlib.suppress(Exception):
            await self.microphone.close()
        self.speaker.clear()
        with contextlib.suppress(Exception):
            await self.speaker.close()
        if was_connected:
            with contextlib.suppress(Exception):  # the connection may be gone already
                await asyncio.wait_for(self.client.end_session(), CLOSE_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.close(), CLOSE_TIMEOUT_S)

    # ------------------------------------------------------------ tasks

    async def _receive(self) -> None:
        while True:
            try:
                message = await self.client.next_message(timeout=60.0)
            except TimeoutError:
                continue  # a quiet conversation
            except ClientClosed:
                self.connected.clear()
                if not await self._reconnect():
                    return
                continue
            await self._execute(self.conversation.receive(message, self.clock()))

    async def _send_microphone(self) -> None:
        async with contextlib.aclosing(self.microphone.frames()) as frames:
            async for frame in frames:
                await self._microphone_frame(frame)

    async def _microphone_frame(self, frame: PCM) -> None:
        pcm = self._input.push(frame)
        if not pcm.size:
            return
        if not (self.connected.is_set() and self.conversation.sending()):
            self.frames_held += 1
            return
        try:
            await asyncio.wait_for(
                self.client.send_audio(pcm.astype("<i2").tobytes()), SEND_TIMEOUT_S
            )
        except (websockets.ConnectionClosed, TimeoutError):
            self.frames_held += 1  # the receiver notices a lost connection and resumes
            return
        self.frames_sent += 1

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            commands = self.conversation.tick(
                self.clock(), self.speaker.played_ms, self.speaker.queued_ms()
            )
            await self._execute(commands)

    async def _read_keys(self, keys: AsyncIterator[str]) -> None:
        async for line in keys:
            await self._execute(self.conversation.key(line, self.clock()))

    # ------------------------------------------------------------ commands

    async def _execute(self, commands: list[Command]) -> None:
        for command in commands:
            match command:
                case Send(event):
                    await self._send(event)
                case Play(generation, pcm):
                    assert self._output is not None
                    audio = np.frombuffer(pcm, dtype="<i2").astype(np.int16)
                    self.speaker.push(generation, self._output.push(audio))
                case EndAudio(generation):
                    assert self._output is not None
                    self.speaker.push(generation, self._output.flush())
                case StopPlayback(generation):
                    played = self.speaker.clear()
                    if self._output is not None:
                        self._output.reset()
                    if generation is not None:
                        stopped = self.conversation.stopped(generation, played.get(generation, 0))
                        await self._execute(stopped)
                case PausePlayback():
                    self.speaker.pause()
                case ResumePlayback():
                    self.speaker.resume()
                case ForgetPlayback(generation):
                    self.speaker.forget(generation)
                case Show():
                    self.printer.show(command)
                case Notice():
                    self.printer.notice(command)

    async def _send(self, event: dict[str, Any]) -> None:
        if not self.connected.is_set():
            return  # lost with the connection; a resume replays the server's side only
        with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
            await asyncio.wait_for(self.client.send_json(event), SEND_TIMEOUT_S)


def _why(error: BaseException) -> str:
    text = str(error)
    if isinstance(error, ClientClosed) and text.startswith("{"):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            detail = json.loads(text)["error"]
            return f"{detail['message']} ({detail['code']})"
    return text or type(error).__name__
