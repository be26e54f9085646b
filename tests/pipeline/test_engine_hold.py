"""False interruptions through the whole engine, in virtual time (TT-1): sound over the answer
holds it; a backchannel or noise lets it resume where it paused with nothing journaled; words
interrupt it with the heard prefix."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from benchmarks.common import voice_frame
from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.turn_commands import TurnSettings
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from plugins.vad.energy import EnergyVAD
from tests.virtual_time import in_virtual_time

FRAME = 320  # 20 ms at 16 kHz
ANSWER = (
    "First sentence of a long answer. Second sentence goes on and on. "
    "Third sentence is here too. Fourth sentence ends it all."
)
MS_PER_CHAR = 20.0
AUDIO_MS = len(ANSWER.replace(". ", ".")) * MS_PER_CHAR  # FakeTTS: per sentence, per character


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []

    def send(self, value: ServerEvent) -> None:
        now = asyncio.get_running_loop().time()
        self.events.append((now, wire(value, extensions=True)))

    def of(self, kind: str) -> list[tuple[float, dict[str, Any]]]:
        return [(t, e) for t, e in self.events if e["type"] == kind]

    def audio_ms(self) -> float:
        samples = sum(len(e["delta"]) for _, e in self.of("response.output_audio.delta"))
        return samples * 3 / 4 / 2 / 24  # base64 → bytes → samples → ms at 24 kHz


def tone(ms: int, amplitude: int = 6000) -> list[np.ndarray]:
    t = np.arange(FRAME)
    frame = (amplitude * np.sin(2 * np.pi * 220 * t / 16000)).astype(np.int16)
    return [frame] * (ms // 20)


def silence(ms: int) -> list[np.ndarray]:
    return [np.zeros(FRAME, dtype=np.int16)] * (ms // 20)


async def feed(engine: Engine, frames: list[np.ndarray]) -> None:
    """Microphone frames at real-time pace (virtual)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i, frame in enumerate(frames):
        await engine.push_audio(frame)
        await asyncio.sleep(max(0.0, start + (i + 1) * 0.02 - loop.time()))


async def conversation(
    asr: list[str], answers: tuple[str, ...] = (ANSWER, "Okay.")
) -> tuple[Engine, Sink, InMemoryJournalStore, ThreadRef]:
    sink, journal, thread = Sink(), InMemoryJournalStore(), ThreadRef("t", "u", "th")
    engine = Engine(
        plugins=Plugins(
            EnergyVAD(), FakeASR(asr), FakeBrain(list(answers)), FakeTTS(ms_per_char=20)
        ),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Be brief."),
        voice_session_id="vs_hold",
        settings=EngineSettings(turns=TurnSettings(silence_delay=0.3, min_interrupt=0.3)),
        clock=asyncio.get_running_loop().time,
    )
    engine.responder.defaults.client_pauses_playback = True
    return engine, sink, journal, thread


async def until(sink: Sink, kind: str, count: int = 1, limit_s: float = 60.0) -> float:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while len(sink.of(kind)) < count:
        assert loop.time() < deadline, f"no {kind}"
        await asyncio.sleep(0.01)
    return sink.of(kind)[count - 1][0]


@in_virtual_time
async def test_a_backchannel_pauses_the_answer_which_resumes_with_nothing_lost() -> None:
    engine, sink, journal, thread = await conversation(["Uh-huh."])
    try:
        engine.push_text("tell me a story")
        first = await until(sink, "response.output_audio.delta")
        await feed(engine, silence(1000))
        await feed(engine, tone(500))  # "uh-huh" over the answer
        sound_end = asyncio.get_running_loop().time()
        await feed(engine, silence(400))
        paused_at = sink.of("openrealtime.output_audio.paused")[0][0]
        resumed_at = await until(sink, "openrealtime.output_audio.resumed")
        done_at = await until(sink, "response.done")
        done = sink.of("response.done")[0][1]["response"]
        assert done["status"] == "completed" and not sink.of("openrealtime.response.interrupted")
        assert not sink.of("input_audio_buffer.speech_started")
        # Held from min_interrupt into the sound until one gap after it, plus the verdict.
        assert paused_at - first == 1.0 + 0.3 or abs(paused_at - first - 1.3) < 0.05
        assert 0 < resumed_at - sound_end < 0.2
        # Every bit of the answer was sent, and it ended later by the length of the hold.
        assert abs(sink.audio_ms() - AUDIO_MS) < 41
        hold = resumed_at - paused_at
        assert abs((done_at - first) - (AUDIO_MS / 1000 + hold)) < 0.05
        events = await journal.read(thread)
        assert [e.kind for e in events] == [EventKind.USER_INPUT, EventKind.ASSISTANT_OUTPUT]
        assert events[1].payload["interrupted"] is False
        assert events[1].payload["heard_text"] == ANSWER
    finally:
        await engine.close()


@in_virtual_time
async def test_words_over_the_answer_interrupt_it_with_the_prefix_heard_before_the_hold() -> None:
    engine, sink, journal, thread = await conversation(["Wait, stop.", "wait stop"])
    try:
        engine.push_text("tell me a story")
        first = await until(sink, "response.output_audio.delta")
        await feed(engine, silence(1000))
        await feed(engine, tone(500))
        await feed(engine, silence(800))
        await until(sink, "response.done", 2)
        interrupted = sink.of("openrealtime.response.interrupted")
        assert len(interrupted) == 1 and interrupted[0][1]["reason"] == "barge_in"
        paused_at = sink.of("openrealtime.output_audio.paused")[0][0]
        assert not sink.of("openrealtime.output_audio.resumed")
        # Nothing of the held answer was sent after the hold began.
        cut = next(i for i, (_, e) in enumerate(sink.events) if e["type"].endswith("paused"))
        assert not [e for _, e in sink.events[cut:] if e["type"] == "response.output_audio.delta"
                    and e["response_id"] == interrupted[0][1]["response_id"]]  # fmt: skip
        (first_done,) = [
            e["response"]
            for _, e in sink.of("response.done")
            if e["response"]["id"] == interrupted[0][1]["response_id"]
        ]
        assert first_done["status"] == "cancelled"
        # The client paused with us: heard is what played until the hold, 1.3 s of 20 ms/char.
        heard_chars = int((paused_at - first) * 1000 / MS_PER_CHAR)
        heard = first_done["heard_text"]
        assert ANSWER.startswith(heard) and heard_chars - 12 <= len(heard) <= heard_chars
        events = await journal.read(thread)
        users = [e.payload["text"] for e in events if e.kind is EventKind.USER_INPUT]
        # The transcript that judged the sound is the turn's: one transcription, not two.
        assert users == ["tell me a story", "Wait, stop."]
        answers = {
            e.payload["generation"]: e.payload
            for e in events
            if e.kind is EventKind.ASSISTANT_OUTPUT
        }
        assert answers[1]["interrupted"] is True and answers[1]["heard_text"] == heard
        assert answers[2]["text"] == "Okay." and answers[2]["interrupted"] is False
    finally:
        await engine.close()


@in_virtual_time
async def test_noise_with_no_words_resumes_and_a_short_burst_never_holds() -> None:
    engine, sink, journal, thread = await conversation([""])
    try:
        engine.push_text("tell me a story")
        await until(sink, "response.output_audio.delta")
        await feed(engine, silence(300))
        await feed(engine, tone(140))  # with the gap under min_interrupt: not even a hold
        await feed(engine, silence(500))
        assert not sink.of("openrealtime.output_audio.paused")
        await feed(engine, tone(700, amplitude=9000))  # a knock-knock-knock: no words
        await feed(engine, silence(300))
        await until(sink, "openrealtime.output_audio.resumed")
        await until(sink, "response.done")
        assert sink.of("response.done")[0][1]["response"]["status"] == "completed"
        assert [e.kind for e in await journal.read(thread)] == [
            EventKind.USER_INPUT,
            EventKind.ASSISTANT_OUTPUT,
        ]
    finally:
        await engine.close()


def voice(ms: int, amplitude: int = 6000) -> list[np.ndarray]:
    """A steady voiced sound over the speech bands."""
    frame = np.frombuffer(voice_frame(amplitude), dtype="<i2")
    return [frame] * (ms // 20)


async def feed_jittery(engine: Engine, frames: list[np.ndarray]) -> None:
    """Microphone frames as a congested network delivers them: two at once every 40 ms (the
    same audio, at the same average pace, each second frame 20 ms late)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(0, len(frames), 2):
        for frame in frames[i : i + 2]:
            await engine.push_audio(frame)
        await asyncio.sleep(max(0.0, start + (i + 2) * 0.02 - loop.time()))


@in_virtual_time
async def test_words_over_the_answer_interrupt_it_when_the_network_delivers_frames_in_pairs() -> (
    None
):
    # Two frames arriving together are network jitter, not audio faster than real time: the
    # echo guard keeps judging (it once stood aside for the one and started afresh on the next,
    # all through the answer, and a person talking over it went unheard).
    engine, sink, _journal, _thread = await conversation(["Wait, stop.", "wait stop"])
    try:
        engine.push_text("tell me a story")
        await until(sink, "response.output_audio.delta")
        assert engine.echo is not None
        resets = 0
        reset = engine.echo.reset

        def counted() -> None:
            nonlocal resets
            resets += 1
            reset()

        engine.echo.reset = counted  # type: ignore[method-assign]
        await feed_jittery(engine, silence(1000))
        await feed_jittery(engine, voice(500))
        await feed_jittery(engine, silence(800))
        await until(sink, "response.done", 2)
        assert len(sink.of("openrealtime.output_audio.paused")) == 1
        (interrupted,) = sink.of("openrealtime.response.interrupted")
        assert interrupted[1]["reason"] == "barge_in"
        assert resets == 0
    finally:
        await engine.close()


@in_virtual_time
async def test_audio_much_faster_than_real_time_is_no_microphone_and_the_guard_stands_aside() -> (
    None
):
    engine, sink, _journal, _thread = await conversation(["hello"])
    try:
        engine.push_text("tell me a story")
        await until(sink, "response.output_audio.delta")
        for frame in silence(400):  # 0.4 s at once: jitter's catching up, still judged
            await engine.push_audio(frame)
        assert not engine.echo_path.misaligned
        for frame in silence(400):  # 0.8 s ahead of real time: a file, not a microphone
            await engine.push_audio(frame)
        assert engine.echo_path.misaligned
        await asyncio.sleep(0.5)  # a pause, then real time again: judged afresh
        await feed(engine, silence(200))
        assert not engine.echo_path.misaligned
    finally:
        await engine.close()


@in_virtual_time
async def test_words_that_begin_as_a_short_answer_ends_are_heard_whole() -> None:
    # The person answers at once: the words begin while the answer may still be heard (its
    # audio and the guard's tail after it), before the guard could lock on to an echo, so the
    # guard holds them as the answer's possible echo. They go on after it: no echo any more.
    # (The held start was once dropped as the window closed and the utterance lost.)
    engine, sink, journal, thread = await conversation(["What about tomorrow?"], ("Yes.",))
    try:
        engine.push_text("is it open today")
        await until(sink, "response.output_audio.delta")
        await feed(engine, voice(1000))
        await feed(engine, silence(800))
        await until(sink, "response.done", 2)
        assert len(sink.of("input_audio_buffer.speech_started")) == 1
        users = [e.payload["text"] for e in await journal.read(thread)
                 if e.kind is EventKind.USER_INPUT]  # fmt: skip
        assert users == ["is it open today", "What about tomorrow?"]
    finally:
        await engine.close()
