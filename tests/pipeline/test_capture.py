"""SpeechCapture (``pipeline/capture.py``): pre-roll, the utterance, speculative and partial
transcription, and the bounds on ASR calls — fed frame by frame in virtual time.

Frames are 1/32 s (500 samples at 16 kHz), a binary fraction of a second, so virtual times add
up exactly and thresholds are crossed on a known frame.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, cast

import numpy as np
import pytest

from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.capture import SpeechCapture
from plugins.contracts import Transcript
from plugins.errors import PluginTimeout
from plugins.fakes import FakeASR, Faults
from tests.virtual_time import in_virtual_time

FRAME_S = 1 / 32
FRAME = int(INPUT_SAMPLE_RATE * FRAME_S)  # 500 samples
MARGIN_FRAMES = math.ceil(200 / (FRAME_S * 1000))
"""``begin`` reaches 200 ms further back than the speech start: 7 frames."""


class RecordingASR(FakeASR):
    """FakeASR that also records what it was given: (samples, language) per call."""

    def __init__(self, texts: tuple[str, ...] = ("hello",), *, faults: Faults | None = None):
        super().__init__(texts, faults=faults)
        self.given: list[tuple[int, str | None]] = []

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        self.given.append((utterance.size, language))
        return await super().transcribe(utterance, language=language)


class Mic:
    """Drives a SpeechCapture the way the engine does: ``remember`` then ``after_frame`` for
    each frame, one frame per 1/32 s of virtual time. Frame ``k`` holds the value ``k``."""

    def __init__(self, asr: FakeASR, settings: dict[str, Any]) -> None:
        self.loop = asyncio.get_running_loop()
        self.asr = asr
        self.spawned: list[tuple[float, str, asyncio.Task[Any]]] = []
        self.finished: dict[asyncio.Task[Any], float] = {}
        self.partials: list[tuple[float, int, str]] = []
        self.next_frame = 0
        options: dict[str, Any] = {
            "language": "en",
            "preroll_ms": 500.0,
            "max_utterance_s": 10.0,
            "asr_timeout_s": 5.0,
            "speculate_after_ms": None,
            "partial_every_s": None,
            **settings,
        }
        self.capture = SpeechCapture(
            asr=asr,
            clock=self.loop.time,
            spawn=self._spawn,
            on_partial=lambda turn, text: self.partials.append((self.now, turn, text)),
            **options,
        )

    @property
    def now(self) -> float:
        return self.loop.time()

    def _spawn(self, work: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(cast(Coroutine[Any, Any, Any], work), name=name)
        task.add_done_callback(lambda t: self.finished.setdefault(t, self.now))
        self.spawned.append((self.now, name, task))
        return task

    def named(self, name: str) -> list[tuple[float, asyncio.Task[Any]]]:
        return [(at, task) for at, n, task in self.spawned if n == name]

    async def frames(self, count: int, *, voiced: bool) -> None:
        for _ in range(count):
            self.capture.remember(np.full(FRAME, self.next_frame, dtype=np.int16))
            self.next_frame += 1
            self.capture.after_frame(voiced, self.now)
            await asyncio.sleep(FRAME_S)

    def begin(self, turn_id: int = 1, *, began_s_ago: float = 0.0) -> None:
        self.capture.begin(turn_id, self.now - began_s_ago, self.now)

    async def close(self) -> None:
        running = [task for _, _, task in self.spawned if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


@asynccontextmanager
async def mic(asr: FakeASR | None = None, **settings: Any) -> AsyncIterator[Mic]:
    m = Mic(asr if asr is not None else RecordingASR(), settings)
    try:
        yield m
    finally:
        await m.close()


def frame_numbers(audio: PCM) -> list[int]:
    return [int(v) for v in audio.reshape(-1, FRAME)[:, 0]]


async def settle(task: asyncio.Task[Any]) -> None:
    """Let ``task`` end (cancelled or not) without raising here."""
    await asyncio.gather(task, return_exceptions=True)


# ---------------------------------------------------------------- pre-roll and utterance


@in_virtual_time
async def test_an_utterance_reaches_back_at_most_preroll_ms() -> None:
    async with mic(preroll_ms=250.0) as m:
        await m.frames(40, voiced=False)
        m.begin(began_s_ago=10.0)  # the VAD says speech began long before the pre-roll
        utterance = m.capture.utterance
        assert utterance is not None
        assert frame_numbers(utterance.audio()) == list(range(32, 40))  # the last 250 ms
        assert utterance.samples == 8 * FRAME


@pytest.mark.parametrize(
    ("began_s_ago", "frames_kept"),
    [
        (0.25, math.ceil((250 + 200) / (FRAME_S * 1000))),
        (0.0, MARGIN_FRAMES),
        (-0.1, MARGIN_FRAMES),  # a start stamped after "now" still gets only the margin
    ],
)
@in_virtual_time
async def test_an_utterance_starts_where_the_speech_did_with_200_ms_of_margin(
    began_s_ago: float, frames_kept: int
) -> None:
    async with mic(preroll_ms=1_000.0) as m:
        await m.frames(40, voiced=False)
        m.begin(turn_id=7, began_s_ago=began_s_ago)
        utterance = m.capture.utterance
        assert utterance is not None and utterance.turn_id == 7
        assert frame_numbers(utterance.audio()) == list(range(40 - frames_kept, 40))
        assert utterance.started_at == m.now


@in_virtual_time
async def test_clearing_the_preroll_forgets_the_audio_before_the_turn() -> None:
    asr = RecordingASR()
    async with mic(asr) as m:
        await m.frames(20, voiced=False)
        m.capture.clear_preroll()
        m.begin(began_s_ago=0.3)
        utterance = m.capture.take()
        assert utterance is not None and utterance.samples == 0
        # Empty audio is never sent to the ASR.
        assert await m.capture.final_transcript(utterance) == Transcript("")
        assert asr.calls == 0


@in_virtual_time
async def test_frames_after_the_start_join_the_utterance_up_to_max_utterance_s() -> None:
    async with mic(preroll_ms=250.0, max_utterance_s=1.0) as m:
        await m.frames(10, voiced=False)
        m.begin()
        await m.frames(40, voiced=True)
        utterance = m.capture.utterance
        assert utterance is not None
        # 7 frames of margin from the pre-roll, then frames in order until one second is full;
        # later frames are left out whole.
        assert frame_numbers(utterance.audio()) == list(range(3, 35))
        assert utterance.samples == INPUT_SAMPLE_RATE * 1


@in_virtual_time
async def test_a_zero_preroll_keeps_nothing_from_before_the_turn() -> None:
    async with mic(preroll_ms=0.0) as m:
        await m.frames(3, voiced=False)
        m.begin(began_s_ago=0.5)
        await m.frames(2, voiced=True)
        utterance = m.capture.utterance
        assert utterance is not None
        assert frame_numbers(utterance.audio()) == [3, 4]


@in_virtual_time
async def test_no_utterance_transcribes_to_nothing() -> None:
    asr = RecordingASR()
    async with mic(asr) as m:
        assert m.capture.take() is None
        assert await m.capture.final_transcript(None) == Transcript("")
        assert asr.calls == 0


# ---------------------------------------------------------------- speculative transcription


@in_virtual_time
async def test_quiet_inside_an_utterance_starts_a_speculative_transcription() -> None:
    asr = RecordingASR()
    async with mic(asr, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        quiet_from = m.now
        await m.frames(4, voiced=False)  # quiet for 3/32 s on the 4th quiet frame
        assert m.named("asr-speculative") == []
        await m.frames(1, voiced=False)  # 4/32 s = 125 ms of quiet
        [(at, task)] = m.named("asr-speculative")
        assert at == quiet_from + 0.125
        assert (await task).text == "hello"
        # The utterance so far was transcribed: margin, speech and the quiet frames.
        assert asr.given == [(15 * FRAME, "en")]


@in_virtual_time
async def test_voice_coming_back_cancels_the_speculation() -> None:
    asr = RecordingASR(faults=Faults(delay=0.5))
    async with mic(asr, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        await m.frames(5, voiced=False)
        [(_, first)] = m.named("asr-speculative")
        await m.frames(1, voiced=True)
        await settle(first)
        assert first.cancelled()
        assert m.capture.utterance is not None and m.capture.utterance.speculation is None
        # The next quiet stretch speculates afresh, over the longer utterance.
        await m.frames(5, voiced=False)
        [first_again, second] = [task for _, task in m.named("asr-speculative")]
        assert first_again is first
        await second
        assert [samples for samples, _ in asr.given] == [15 * FRAME, 21 * FRAME]


@in_virtual_time
async def test_a_commit_uses_the_speculative_transcript_without_asking_again() -> None:
    asr = RecordingASR(("speculated", "asked again"), faults=Faults(delay=0.1))
    async with mic(asr, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        await m.frames(10, voiced=False)  # the speculation finished meanwhile
        utterance = m.capture.take()
        assert m.capture.utterance is None
        committed_at = m.now
        transcript = await m.capture.final_transcript(utterance)
        assert transcript.text == "speculated"
        assert m.now == committed_at  # the ASR latency hid behind the quiet
        assert asr.calls == 1


@in_virtual_time
async def test_a_commit_waits_for_a_speculation_still_running_and_marks_its_latency() -> None:
    asr = RecordingASR(("speculated",), faults=Faults(delay=0.3))
    async with mic(asr, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        await m.frames(5, voiced=False)
        [(started, _)] = m.named("asr-speculative")
        utterance = m.capture.take()
        assert utterance is not None
        assert (await m.capture.final_transcript(utterance)).text == "speculated"
        assert m.now == started + 0.3
        assert asr.calls == 1
        assert (utterance.asr_started, utterance.asr_done) == (started, started + 0.3)


@in_virtual_time
async def test_the_vads_pause_transcribes_once_per_pause() -> None:
    asr = RecordingASR(faults=Faults(delay=0.2))
    async with mic(asr) as m:
        m.begin()
        await m.frames(10, voiced=True)
        pause_at = m.now - 0.1
        audio = m.capture.pause(pause_at)
        assert audio is not None and frame_numbers(audio) == list(range(10))
        utterance = m.capture.utterance
        assert utterance is not None and utterance.speech_end_at == pause_at
        assert m.capture.pause(pause_at) is not None  # told twice about the same pause
        await m.frames(20, voiced=False)  # after the pause, quiet starts nothing more
        assert len(m.named("asr-speculative")) == 1
        assert asr.given == [(len(audio), "en")]


@in_virtual_time
async def test_the_pause_keeps_a_speculation_that_started_in_the_quiet_before_it() -> None:
    asr = RecordingASR(faults=Faults(delay=0.5))
    async with mic(asr, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        await m.frames(6, voiced=False)
        [(_, early)] = m.named("asr-speculative")
        m.capture.pause(m.now - 0.2)
        assert [task for _, task in m.named("asr-speculative")] == [early]
        assert m.capture.utterance is not None and m.capture.utterance.speculation is early
        await early
        assert asr.calls == 1


@in_virtual_time
async def test_a_pause_without_an_utterance_does_nothing() -> None:
    async with mic() as m:
        await m.frames(5, voiced=True)
        assert m.capture.pause(m.now) is None
        assert m.spawned == []


@in_virtual_time
async def test_speech_resuming_after_the_pause_makes_its_transcription_stale() -> None:
    asr = RecordingASR(("whole",), faults=Faults(delay=0.5))
    async with mic(asr) as m:
        m.begin()
        await m.frames(10, voiced=True)
        m.capture.pause(m.now)
        [(_, stale)] = m.named("asr-speculative")
        m.capture.resume()
        await settle(stale)
        assert stale.cancelled()
        utterance = m.capture.utterance
        assert utterance is not None and utterance.speech_end_at is None
        await m.frames(10, voiced=True)
        utterance = m.capture.take()
        assert (await m.capture.final_transcript(utterance)).text == "whole"
        # Asked at the commit, over everything said (the stale work never reached the ASR).
        assert asr.given == [(20 * FRAME, "en")]


@in_virtual_time
async def test_without_speculate_after_ms_quiet_starts_no_transcription() -> None:
    asr = RecordingASR()
    async with mic(asr, speculate_after_ms=None) as m:
        m.begin()
        await m.frames(10, voiced=True)
        await m.frames(40, voiced=False)
        assert m.spawned == []
        utterance = m.capture.take()
        assert (await m.capture.final_transcript(utterance)).text == "hello"
        assert asr.given == [(50 * FRAME, "en")]


@in_virtual_time
async def test_dropping_the_utterance_cancels_its_work() -> None:
    asr = RecordingASR(faults=Faults(delay=1.0))
    async with mic(asr, partial_every_s=0.25) as m:
        m.begin(turn_id=1)
        await m.frames(9, voiced=True)
        [(_, partial)] = m.named("asr-partial")
        m.capture.drop()
        await settle(partial)
        assert partial.cancelled()
        assert m.capture.utterance is None and m.capture.take() is None
        m.begin(turn_id=2)
        await m.frames(4, voiced=True)
        m.capture.pause(m.now)
        [(_, speculation)] = m.named("asr-speculative")
        m.capture.drop()
        await settle(speculation)
        assert speculation.cancelled()
        assert m.capture.utterance is None
        await m.frames(40, voiced=True)  # no utterance: nothing is transcribed
        assert len(m.spawned) == 2 and m.partials == []


@in_virtual_time
async def test_a_new_turn_cancels_the_previous_utterances_work() -> None:
    asr = RecordingASR(faults=Faults(delay=1.0))
    async with mic(asr) as m:
        m.begin(turn_id=1)
        await m.frames(10, voiced=True)
        m.capture.pause(m.now)
        [(_, old)] = m.named("asr-speculative")
        m.begin(turn_id=2, began_s_ago=0.1)
        await settle(old)
        assert old.cancelled()
        utterance = m.capture.utterance
        assert utterance is not None and utterance.turn_id == 2
        assert utterance.speculation is None and utterance.speech_end_at is None


# ---------------------------------------------------------------- partial transcripts


@in_virtual_time
async def test_long_speech_gets_a_partial_transcript_every_partial_every_s() -> None:
    asr = RecordingASR(("one", "one two", "one two three"))
    async with mic(asr, partial_every_s=0.5) as m:
        m.begin(turn_id=3)
        began = m.now
        await m.frames(60, voiced=True)  # 1.875 s of speech
        assert [at for at, _ in m.named("asr-partial")] == [began + 0.5, began + 1.0, began + 1.5]
        assert m.partials == [
            (began + 0.5, 3, "one"),
            (began + 1.0, 3, "one two"),
            (began + 1.5, 3, "one two three"),
        ]


@in_virtual_time
async def test_only_one_partial_runs_at_a_time() -> None:
    asr = RecordingASR(("a", "a b", "a b c"), faults=Faults(delay=0.7))
    async with mic(asr, partial_every_s=0.5) as m:
        m.begin()
        began = m.now
        await m.frames(80, voiced=True)  # 2.5 s
        runs = [(at, m.finished.get(task)) for at, task in m.named("asr-partial")]
        # The second is due at 1.0 but waits for the first (done at 1.2): the next frame.
        assert [at - began for at, _ in runs] == [0.5, 1.21875, 1.9375]
        for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
            assert end is not None and end <= start
        assert [text for _, _, text in m.partials] == ["a", "a b"]


@in_virtual_time
async def test_the_pause_cancels_the_running_partial_and_no_new_ones_start() -> None:
    asr = RecordingASR(faults=Faults(delay=0.4))
    async with mic(asr, partial_every_s=0.25) as m:
        m.begin()
        await m.frames(9, voiced=True)
        [(_, partial)] = m.named("asr-partial")
        m.capture.pause(m.now)
        await settle(partial)
        assert partial.cancelled()
        await m.frames(30, voiced=True)  # the VAD has not said speech resumed
        assert len(m.named("asr-partial")) == 1
        assert m.partials == []


@in_virtual_time
async def test_a_speculation_cancels_the_running_partial() -> None:
    asr = RecordingASR(faults=Faults(delay=0.4))
    async with mic(asr, partial_every_s=0.25, speculate_after_ms=125.0) as m:
        m.begin()
        await m.frames(8, voiced=True)
        await m.frames(1, voiced=False)  # the partial is due on this frame
        [(_, partial)] = m.named("asr-partial")
        await m.frames(4, voiced=False)
        [(_, speculation)] = m.named("asr-speculative")
        await settle(partial)
        assert partial.cancelled() and not speculation.done()
        await speculation


@in_virtual_time
async def test_blank_partials_are_not_reported() -> None:
    asr = RecordingASR(("   ",))
    async with mic(asr, partial_every_s=0.25) as m:
        m.begin()
        await m.frames(20, voiced=True)
        assert asr.calls == 2
        assert m.partials == []


@in_virtual_time
async def test_a_failed_partial_is_skipped_and_the_next_one_still_comes() -> None:
    asr = RecordingASR(("later",), faults=Faults(fail=True))
    async with mic(asr, partial_every_s=0.5) as m:
        m.begin(turn_id=4)
        await m.frames(17, voiced=True)
        [(_, failed)] = m.named("asr-partial")
        await failed  # the PluginError stays inside the task
        asr.faults.fail = False
        await m.frames(16, voiced=True)
        assert [(turn, text) for _, turn, text in m.partials] == [(4, "later")]


@in_virtual_time
async def test_a_partial_that_times_out_is_skipped() -> None:
    asr = RecordingASR(faults=Faults(hang=True))
    async with mic(asr, partial_every_s=0.5, asr_timeout_s=0.25) as m:
        m.begin()
        await m.frames(17, voiced=True)
        [(started, partial)] = m.named("asr-partial")
        await partial
        assert m.finished[partial] == started + 0.25
        assert m.partials == []


@in_virtual_time
async def test_a_partial_finishing_after_the_turn_was_taken_is_not_reported() -> None:
    asr = RecordingASR(faults=Faults(delay=0.7))
    async with mic(asr, partial_every_s=0.5) as m:
        m.begin()
        await m.frames(17, voiced=True)
        [(_, partial)] = m.named("asr-partial")
        assert m.capture.take() is not None
        await partial
        assert m.partials == []


@in_virtual_time
async def test_without_partial_every_s_long_speech_has_no_partials() -> None:
    async with mic(partial_every_s=None) as m:
        m.begin()
        await m.frames(200, voiced=True)
        assert m.spawned == []


# ---------------------------------------------------------------- bounds on ASR calls


@in_virtual_time
async def test_an_asr_call_is_cut_off_after_asr_timeout_s() -> None:
    asr = RecordingASR(faults=Faults(hang=True))
    async with mic(asr, asr_timeout_s=2.0) as m:
        m.begin()
        await m.frames(10, voiced=True)
        utterance = m.capture.take()
        asked_at = m.now
        with pytest.raises(PluginTimeout) as caught:
            await m.capture.final_transcript(utterance)
        assert m.now == asked_at + 2.0
        assert caught.value.retryable is True
        assert asr.calls == 1


@pytest.mark.parametrize(
    ("language", "passed"),
    [("zh", "zh"), ("en", "en"), ("zh-CN", "zh"), ("en_US", "en"), ("fr", None), (None, None)],
)
@in_virtual_time
async def test_only_chinese_and_english_are_passed_to_the_asr(
    language: str | None, passed: str | None
) -> None:
    asr = RecordingASR()
    async with mic(asr, language=language) as m:
        m.begin()
        await m.frames(5, voiced=True)
        await m.capture.final_transcript(m.capture.take())
        assert asr.given == [(5 * FRAME, passed)]
