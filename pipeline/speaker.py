"""One response's way from the brain to the client: think → speak → pace → playout.

Theory of operation
-------------------
Rule 1. ``AnswerSpeaker.speak`` runs the brain through the shared tool loop in the calling
        task and TTS in a second one, connected by a bounded sentence queue (a
        ``SentenceSplitter`` hands each finished sentence on); audio is resampled to the
        session rate and paced to the client by a ``Pacer`` at most ``playout_lead_ms`` ahead
        of real time. The first frame reaches the socket after a single task switch.
Rule 2. Everything the speaker needs from the session comes through its ``SpeakerHost`` (the
        responder, ``pipeline/responder.py``): settings, plugins, persona, tools, the response
        defaults, the clock, sending events, the fence (``is_current``) and the first-audio
        notice.
Rule 3. A held response (``pause``/``resume``: a candidate interruption) sends nothing and
        does not end its playout until it is resumed or interrupted; brain and TTS work on
        into the bounded queues meanwhile.
Rule 4. Watchdogs: the brain may be silent at most ``brain_timeout_s`` (plus a tool's timeout,
        since tools run between a call and its result), TTS ``tts_timeout_s``; then
        ``PluginTimeout``. A failing stage cancels the others; the first failure is raised.
Rule 5. Tool permissions: the brain of a response is run with the gate the host gives for it
        (``SpeakerHost.tool_gate_for``, ``ToolGateHook``), so every call knows its
        generation (``CallOrigin``); cancelling the response cancels its calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

import numpy as np

from journal.tokens import count_tokens
from pipeline import events as ev
from pipeline.audio import PCM, duration_ms, resample
from pipeline.content import TurnContent
from pipeline.engine_config import EngineSettings, Persona, Plugins, ResponseDefaults
from pipeline.pacer import Pacer
from pipeline.response import Response
from pipeline.sentences import SentenceSplitter
from plugins.brain.tool_loop import ToolGate, ToolHandler, run_brain_with_tools
from plugins.contracts import (
    BrainDelta,
    BrainInput,
    SpeechChunk,
    ToolSpec,
)
from plugins.errors import PluginTimeout
from plugins.language import has_cjk


class SpeakerHost(Protocol):
    """What the speaker needs from the session's responder (Rule 2)."""

    settings: EngineSettings
    plugins: Plugins
    persona: Persona
    tools: Mapping[str, ToolHandler]
    defaults: ResponseDefaults
    """The session's client functions, and who plays the answer out: whether the client
    pauses its playback when told to, whether its playback reports are exact (the server plays
    the audio out itself: WebRTC) — a response's playout then ends when they say so, within
    ``EXACT_PLAYOUT_GRACE_S`` of the estimate."""
    voice_session_id: str
    clock: Callable[[], float]

    def send_all(self, events: list[ev.ServerEvent]) -> None: ...

    def is_current(self, generation: int) -> bool: ...

    def audio_started(self, generation: int, now: float) -> None: ...

    def brain_finished(self, generation: int) -> None:
        """The brain of ``generation`` is done (TTS and playout need no language model)."""
        ...

    def audio_sent(self, pcm: PCM, now: float) -> None: ...

    async def journal_tool(self, response: Response, delta: BrainDelta) -> None: ...

    def tool_gate_for(self, response: Response) -> ToolGate | None:
        """The permission gate for ``response``'s tool calls (Rule 5), or None."""
        ...


class AnswerSpeaker:
    """Brain → sentences → TTS → paced frames for one session's responses (Rule 1)."""

    def __init__(self, host: SpeakerHost) -> None:
        self.host = host

    async def speak(self, response: Response, content: TurnContent) -> None:
        """Brain → sentences → TTS → paced frames. The brain runs in this task, TTS in a
        second one, pacing in a third only once audio is ahead of real time, so the first
        frame reaches the socket after a single task switch."""
        sentences: asyncio.Queue[str | None] = asyncio.Queue(
            self.host.settings.max_sentences_queued
        )
        try:
            async with asyncio.TaskGroup() as group:
                pacer = self._pacer(response, group)
                group.create_task(self._synthesize(response, sentences, pacer))
                await self._think(response, content, sentences)
        except* Exception as failure:
            # Report the first failing stage; the TaskGroup already cancelled the others.
            raise failure.exceptions[0] from None

    async def say(self, response: Response, text: str) -> None:
        """Speak ``text`` as the rest of ``response`` (a failed turn's apology, SPEC RT-11):
        its transcript, then its audio paced like an answer's."""
        events = response.events
        if events.text and not events.text[-1].isspace() and not has_cjk(text):
            text = " " + text
        self.host.send_all(events.text_delta(text))
        sentences: asyncio.Queue[str | None] = asyncio.Queue(2)
        sentences.put_nowait(text.strip())
        sentences.put_nowait(None)
        async with asyncio.TaskGroup() as group:
            await self._synthesize(response, sentences, self._pacer(response, group))

    def _pacer(self, response: Response, group: asyncio.TaskGroup) -> Pacer:
        settings = self.host.settings
        generation = response.generation
        pacer = Pacer(
            tracker=response.tracker,
            clock=self.host.clock,
            group=group,
            is_current=lambda: self.host.is_current(generation),
            send=lambda frame, now: self.send_frame(response, frame, now),
            lead_ms=settings.playout_lead_ms,
            frame_ms=settings.frame_ms,
            message_ms=settings.max_audio_message_ms,
        )
        if response.paused:
            pacer.pause()
        response.pacer = pacer
        return pacer

    async def _think(
        self, response: Response, content: TurnContent, sentences: asyncio.Queue[str | None]
    ) -> None:
        splitter = SentenceSplitter()
        request = dataclasses.replace(
            content.to_brain_input(session=self.host.voice_session_id),
            tool_calls=response.tool_calls,
            tool_results=response.tool_results,
            response_id=response.response_id,
            turn_id=response.turn_id,
        )
        response.prompt = (request.system, request.model_text)
        preempted = response.preemption
        stream = (
            preempted.stream()
            if preempted is not None
            else self.brain_stream(
                request, self.host.tool_gate_for(response), client_tools=response.client_tools
            )
        )
        events = response.events
        # Tools run between a call and its result: the brain's idle watchdog must outlast them.
        idle = self.host.settings.brain_timeout_s + self.host.settings.tool_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(idle) as watchdog:
                async for delta in stream:
                    watchdog.reschedule(loop.time() + idle)
                    if delta.tool_call is not None or delta.tool_result is not None:
                        response.failed_stage = "journal"  # the call's journal write
                        await self.host.journal_tool(response, delta)
                        response.failed_stage = None
                        continue
                    text = delta.text
                    if response.max_output_tokens is not None:
                        text = within_limit(events.text, text, response.max_output_tokens)
                        if text != delta.text:
                            response.incomplete = "max_output_tokens"
                    if text:
                        if "brain_first_token" not in response.marks:
                            response.marks["brain_first_token"] = self.host.clock()
                        self.host.send_all(events.text_delta(text))
                        pieces = splitter.feed(text) if events.audio else []
                        if delta.speak_now and events.audio:
                            pieces += splitter.cut()  # the brain's opening words: said at once
                        for sentence in pieces:
                            watchdog.reschedule(None)
                            await sentences.put(sentence)
                            watchdog.reschedule(loop.time() + idle)
                        if pieces:
                            # The synthesiser takes the sentence before this loop sends more
                            # text: a brain that streams faster than the loop turns would
                            # otherwise have every delta written before the first audio.
                            await asyncio.sleep(0)
                    if response.incomplete is not None:
                        break  # the limit is reached: the brain stops (closed below)
        except TimeoutError as e:
            response.failed_stage = _brain_stage(response)
            raise PluginTimeout(f"brain was silent for more than {idle}s") from e
        except Exception:
            response.failed_stage = response.failed_stage or _brain_stage(response)
            raise
        finally:
            await aclose(stream)
        self.host.brain_finished(response.generation)
        for sentence in splitter.flush() if events.audio else ():
            await sentences.put(sentence)
        await sentences.put(None)

    def brain_stream(
        self,
        request: BrainInput,
        gate: ToolGate | None = None,
        *,
        client_tools: tuple[ToolSpec, ...] | None = None,
    ) -> AsyncIterator[BrainDelta]:
        """The brain through the shared tool loop (the session's server tools and the client's
        functions — ``client_tools``, the session's by default — each call decided by ``gate``
        first when there is one: Rule 5)."""
        if client_tools is None:
            client_tools = self.host.defaults.client_tools
        return run_brain_with_tools(
            self.host.plugins.brain,
            request,
            self.host.tools,
            max_rounds=self.host.settings.max_tool_rounds,
            tool_timeout=self.host.settings.tool_timeout_s,
            client_tools=frozenset(t.name for t in client_tools),
            gate=gate,
        )

    async def _synthesize(
        self, response: Response, sentences: asyncio.Queue[str | None], pacer: Pacer
    ) -> None:
        rate = self.host.settings.output_sample_rate
        frame_samples = rate * self.host.settings.frame_ms // 1000
        tracker = response.tracker
        pending = np.zeros(0, dtype=np.int16)
        idle = self.host.settings.tts_timeout_s
        loop = asyncio.get_running_loop()
        while (sentence := await sentences.get()) is not None:
            tracker.add_sentence(sentence)
            stream = self.host.plugins.tts.stream(
                sentence, voice=self.host.persona.voice, language=self.host.persona.language
            )
            try:
                async with asyncio.timeout(idle) as watchdog:
                    async for chunk in stream:
                        pcm = self._to_output_rate(chunk)
                        if pcm.size == 0:
                            continue
                        tracker.add_audio(duration_ms(pcm.size, rate), chunk.words)
                        if "tts_first_audio" not in response.marks:
                            response.marks["tts_first_audio"] = self.host.clock()
                        pending = np.concatenate((pending, pcm)) if pending.size else pcm
                        whole = pending.size - pending.size % frame_samples
                        for start in range(0, whole, frame_samples):
                            pacer.push(pending[start : start + frame_samples])
                        pending = pending[whole:]
                        if pacer.backlog > self.host.settings.max_frames_queued:
                            watchdog.reschedule(None)
                            await pacer.wait_for_room(self.host.settings.max_frames_queued // 2)
                        watchdog.reschedule(loop.time() + idle)
            except TimeoutError as e:
                response.failed_stage = "tts"
                raise PluginTimeout(f"TTS was silent for more than {idle}s") from e
            except Exception:
                response.failed_stage = "tts"
                raise
            finally:
                await aclose(stream)
        if pending.size:
            pacer.push(pending)
        await pacer.finish()

    def send_frame(self, response: Response, frame: PCM, now: float) -> None:
        """Write one message of a response's audio (the pacer decides when)."""
        tracker = response.tracker
        first = tracker.first_sent_at is None
        self.host.send_all(response.events.audio_delta(frame.tobytes()))
        self.host.audio_sent(frame, now)
        tracker.on_sent(duration_ms(frame.size, self.host.settings.output_sample_rate), now)
        if first:
            response.marks["first_audio_sent"] = now
            self.host.audio_started(response.generation, now)
            self.host.send_all([latency_event(response)])

    def _to_output_rate(self, chunk: SpeechChunk) -> PCM:
        return resample(chunk.pcm, chunk.sample_rate, self.host.settings.output_sample_rate)

    def pause(self, response: Response, now: float) -> None:
        """Hold ``response``: nothing more is sent and its playout does not end until
        ``resume`` (the playback estimate pauses too if the client pauses with us)."""
        if response.paused:
            return
        response.paused = True
        response.unpaused.clear()
        response.tracker.pause(now, client_pauses=self.host.defaults.client_pauses_playback)
        if response.pacer is not None:
            response.pacer.pause()

    def resume(self, response: Response, now: float) -> None:
        if not response.paused:
            return
        response.paused = False
        response.tracker.resume(now)
        response.unpaused.set()
        if response.pacer is not None:
            response.pacer.resume()

    async def await_playout(self, response: Response) -> None:
        tracker = response.tracker
        while True:
            if response.paused:
                await response.unpaused.wait()
                continue
            end = tracker.playout_end()
            if end is None:
                return
            if self.host.defaults.exact_playout:
                end += EXACT_PLAYOUT_GRACE_S
            if tracker.client_played_ms is not None and tracker.client_played_ms >= tracker.sent_ms:
                return
            remaining = end - self.host.clock()
            if remaining <= 1e-6:  # within the loop's clock resolution it has passed
                return
            response.played_report.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(response.played_report.wait(), remaining)


def _brain_stage(response: Response) -> str:
    """``brain`` before the first token, ``brain_stream`` after it."""
    return "brain_stream" if "brain_first_token" in response.marks else "brain"


EXACT_PLAYOUT_GRACE_S = 0.5
"""How long past the real-time estimate a response waits for exact reports of its playout
(a media track that started late, or lags behind the estimate)."""


def latency_event(response: Response) -> ev.TurnLatency:
    """The extension event of a response's latency marks (``openrealtime.turn.latency``)."""
    marks = response.marks
    origin = marks.get("vad_end", marks["committed"])
    names = ("committed", "asr_started", "asr_done", "asr_final", "brain_first_token",
             "tts_first_audio", "first_audio_sent")  # fmt: skip
    return ev.TurnLatency(
        response_id=response.response_id,
        generation=response.generation,
        latency_ms={
            name: round((marks[name] - origin) * 1000.0, 2) for name in names if name in marks
        },
        origin="vad_end" if "vad_end" in marks else "committed",
        preempted=response.preemption is not None,
    )


def usage(prompt: tuple[str, str], output: str) -> ev.Usage:
    """Token usage as far as we know it: both sides estimated with ``journal.tokens`` (the
    brain plugins do not report counts)."""
    input_tokens = sum(count_tokens(part) for part in prompt if part)
    output_tokens = count_tokens(output) if output else 0
    return ev.Usage(
        input_tokens + output_tokens,
        input_tokens,
        output_tokens,
        ev.InputTokenDetails(text_tokens=input_tokens),
        ev.OutputTokenDetails(text_tokens=output_tokens),
    )


def within_limit(said: str, more: str, limit: int) -> str:
    """The part of ``more`` that keeps ``said + more`` within ``limit`` tokens (the
    ``journal.tokens`` estimate ``usage`` reports): all of it, or its longest prefix that
    fits, cut where a word or a CJK character ends."""
    if count_tokens(said + more) <= limit:
        return more
    fits = 0
    for end in range(1, len(more) + 1):
        if end < len(more) and not _ends_word(more, end):
            continue
        if count_tokens(said + more[:end]) > limit:
            break
        fits = end
    return more[:fits].rstrip()


def _ends_word(text: str, end: int) -> bool:
    before, after = text[end - 1], text[end]
    return not (before.isalnum() and after.isalnum()) or has_cjk(before) or has_cjk(after)


async def aclose(stream: object) -> None:
    """Close an async iterator now (and the HTTP stream or model work behind it)."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


__all__ = ["EXACT_PLAYOUT_GRACE_S", "AnswerSpeaker", "SpeakerHost", "latency_event", "usage"]
