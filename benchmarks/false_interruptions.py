"""False interruptions (issue 15, TT-1): sound over the answer, through the real engine.

Method
------
Each case is one conversation through ``pipeline.engine.Engine`` on a virtual clock
(``tests.virtual_time.VirtualTimeLoop``) with the embedded models that decide: the Silero VAD
(server defaults, every 20 ms frame) and Whisper base (the embedded ASR). The brain is scripted
(one long answer) and the answer's audio is FakeTTS's (60 ms per character): what the assistant
says does not matter here, only that it is speaking. The answer is not fed back into the
microphone (the echo benchmark does that). The client pauses its playback when told to
(``client_pauses_playback``), as the browser does.

Model time is real time: every Whisper call runs in the loop's thread and its measured wall
time is then slept on the virtual clock (``ChargedPool``), so the engine waits for the model
exactly as long as it would on this CPU while the microphone keeps streaming. The rest of the
engine costs no virtual time.

The script of a case: the user types a question; 1.0 s after the answer's first audio the case's
sound is played into the microphone over a low background noise (−60 dBFS), then 3 s of that
noise. The cases (synthesised at run time, nothing recorded, levels drawn from ``--seed``):

- *backchannel*: listener feedback that asks for nothing, English by Piper at two speeds
  ("uh-huh", "mm-hmm", "okay", "right", "yeah", "I see", "got it", "sure") and Mandarin by
  eSpeak NG ("嗯", "对", "好的", "嗯嗯", "是的", "对对对", "明白");
- *noise*: coughs (one or two bursts of band-passed noise with a fast attack), knocks (three to
  five damped low resonances), noise bursts (0.3–0.8 s of shaped white noise), keyboard
  typing (click trains);
- *real*: interruptions that must stop the answer, English by Piper ("wait, stop", "hold on,
  that's not what I asked", "no, I meant the blue one", …) and Mandarin by eSpeak NG ("不对，我是说
  明天", "等一下", …).

Each sound is scaled to a speech level drawn from −32…−16 dBFS RMS.

Metrics
-------
``false_cancel_rate``: of the backchannel and noise cases, the share whose answer was
interrupted. ``real_caught_rate``: of the real cases, the share interrupted (barge-in).
``resume_ms``: for the false cases that were held and resumed, the time from the end of the
sound (its last audible sample) to ``openrealtime.output_audio.resumed`` — how long the
assistant stays silent beyond the sound itself. ``held_rate``: false cases that held the answer at
all (the rest were shorter than ``min_interrupt`` for the VAD). ``interrupt_ms``: real cases,
end of the sound → interruption (negative: interrupted while the person was still talking).
``journal_user_turns_after_false``: user turns the false cases left in the journal (must be 0).
``asr_calls_ms``: each Whisper call's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np

from benchmarks.common import emit, p50_p99
from benchmarks.speech_data import audible_span, seed_speech_synthesis, synthesize
from journal.events import EventKind, ThreadRef
from journal.store import InMemoryJournalStore
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.engine import Engine, EngineSettings, Persona, Plugins
from pipeline.events import ServerEvent, wire
from pipeline.turn_commands import TurnSettings
from plugins.asr.whisper import WhisperASR
from plugins.fakes import FakeBrain, FakeTTS
from plugins.tts import create_tts
from plugins.vad.silero import SileroVAD
from plugins.workers import WorkerPool

log = logging.getLogger("benchmarks.false_interruptions")

P = ParamSpec("P")
T = TypeVar("T")

FRAME = INPUT_SAMPLE_RATE // 50
ANSWER = (
    "Here is the whole story from the beginning. It starts on a quiet morning in a small town. "
    "The baker opens his shop and the first customers arrive. Later that day a stranger comes "
    "to town with a strange request. Nobody knows what to make of it at first. In the end the "
    "whole town helps him and everyone learns something new."
)
BACKGROUND_DBFS = -60.0
LEAD_IN_S = 1.0
TAIL_S = 3.0
SETTLE_S = 15.0

BACKCHANNELS_EN = ("uh-huh", "mm-hmm", "okay", "right", "yeah", "I see", "got it", "sure")
BACKCHANNELS_ZH = ("嗯", "对", "好的", "嗯嗯", "是的", "对对对", "明白")
REAL_EN = (
    "Wait, stop.",
    "Hold on, that's not what I asked.",
    "No, I meant the blue one.",
    "Stop, stop.",
    "Can you repeat that?",
    "Sorry, what was the price again?",
    "Actually, cancel my order.",
    "Hang on a second, I have a question.",
)
REAL_ZH = (
    "不对，我是说明天。",
    "等一下。",
    "停一下，我有个问题。",
    "不是这个意思。",
    "我想问的是价格。",
    "你能再说一遍吗？",
)


@dataclass(frozen=True, slots=True)
class Case:
    kind: str  # "backchannel" | "noise" | "real"
    label: str
    language: str
    pcm: PCM


@dataclass
class Outcome:
    case: Case
    held: bool = False
    resumed_ms: float | None = None
    interrupted_ms: float | None = None
    user_turns: int = 0
    transcripts: list[str] = field(default_factory=list)


class ChargedPool(WorkerPool):
    """Runs each call in the loop's thread, then sleeps its wall time on the (virtual) clock:
    the engine waits for the model as long as on this CPU, while input keeps arriving."""

    def __init__(self, name: str) -> None:
        super().__init__(name, max_workers=1)
        self.calls_ms: list[float] = []

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            self.calls_ms.append(elapsed * 1000.0)
            await asyncio.sleep(elapsed)


# ---------------------------------------------------------------- sounds


def _level(pcm: PCM | np.ndarray, dbfs: float) -> PCM:
    x = np.asarray(pcm, dtype=np.float64)
    rms = float(np.sqrt(np.mean(x**2))) or 1.0
    y = x * (32768.0 * 10 ** (dbfs / 20.0) / rms)
    return np.clip(y, -32768, 32767).astype(np.int16)


def _speech_level(pcm: PCM, dbfs: float) -> PCM:
    """Scale so the audible part has ``dbfs`` RMS."""
    start, end = audible_span(pcm)
    x = pcm[start:end].astype(np.float64)
    rms = float(np.sqrt(np.mean(x**2))) or 1.0
    y = pcm.astype(np.float64) * (32768.0 * 10 ** (dbfs / 20.0) / rms)
    return np.clip(y, -32768, 32767).astype(np.int16)


def _band(noise: np.ndarray, low: float, high: float) -> np.ndarray:
    spectrum = np.fft.rfft(noise)
    freqs = np.fft.rfftfreq(noise.size, 1.0 / INPUT_SAMPLE_RATE)
    spectrum[(freqs < low) | (freqs > high)] = 0
    return np.fft.irfft(spectrum, noise.size)


def cough(rng: np.random.Generator) -> PCM:
    parts = []
    for _ in range(int(rng.integers(1, 3))):
        n = int(rng.uniform(0.18, 0.35) * INPUT_SAMPLE_RATE)
        t = np.arange(n) / INPUT_SAMPLE_RATE
        envelope = (1 - np.exp(-t / 0.008)) * np.exp(-t / rng.uniform(0.05, 0.12))
        burst = _band(rng.standard_normal(n), rng.uniform(200, 500), rng.uniform(2500, 5000))
        parts += [burst * envelope, np.zeros(int(rng.uniform(0.1, 0.25) * INPUT_SAMPLE_RATE))]
    return _level(np.concatenate(parts), rng.uniform(-26, -14))


def knocks(rng: np.random.Generator) -> PCM:
    parts = []
    for _ in range(int(rng.integers(3, 6))):
        n = int(0.12 * INPUT_SAMPLE_RATE)
        t = np.arange(n) / INPUT_SAMPLE_RATE
        f = rng.uniform(90, 300)
        knock = np.sin(2 * np.pi * f * t) * np.exp(-t / rng.uniform(0.015, 0.04))
        knock += 0.3 * rng.standard_normal(n) * np.exp(-t / 0.004)
        parts += [knock, np.zeros(int(rng.uniform(0.05, 0.18) * INPUT_SAMPLE_RATE))]
    return _level(np.concatenate(parts), rng.uniform(-24, -12))


def noise_burst(rng: np.random.Generator) -> PCM:
    n = int(rng.uniform(0.3, 0.8) * INPUT_SAMPLE_RATE)
    ramp = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / 400.0)
    burst = _band(rng.standard_normal(n), 100, rng.uniform(3000, 7000)) * ramp
    return _level(burst, rng.uniform(-30, -16))


def typing(rng: np.random.Generator) -> PCM:
    total = int(rng.uniform(0.8, 1.5) * INPUT_SAMPLE_RATE)
    out = np.zeros(total)
    position = 0
    while position < total - 400:
        click = rng.standard_normal(160) * np.exp(-np.arange(160) / 25.0)
        out[position : position + 160] += click
        position += int(rng.uniform(0.06, 0.2) * INPUT_SAMPLE_RATE)
    return _level(out, rng.uniform(-32, -20))


async def build_cases(rng: np.random.Generator) -> list[Case]:
    piper, espeak = create_tts("piper"), create_tts("espeak")
    fast_piper = create_tts("piper", speed=1.25)
    cases: list[Case] = []

    async def spoken(kind: str, text: str, language: str, tts: Any) -> None:
        speech = await synthesize(tts, text, language=language)
        pcm = _speech_level(speech.pcm, float(rng.uniform(-32, -16)))
        cases.append(Case(kind, text, language, pcm))

    for text in BACKCHANNELS_EN:
        await spoken("backchannel", text, "en", piper)
        await spoken("backchannel", text, "en", fast_piper)
    for text in BACKCHANNELS_ZH:
        await spoken("backchannel", text, "zh", espeak)
    for make, count in ((cough, 8), (knocks, 6), (noise_burst, 6), (typing, 4)):
        for i in range(count):
            cases.append(Case("noise", f"{make.__name__}-{i}", "-", make(rng)))
    for text in REAL_EN:
        await spoken("real", text, "en", piper)
    for text in REAL_EN[::2]:
        await spoken("real", text, "en", fast_piper)
    for text in REAL_ZH:
        await spoken("real", text, "zh", espeak)
    return cases


# ---------------------------------------------------------------- one conversation


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []

    def send(self, value: ServerEvent) -> None:
        self.events.append((asyncio.get_running_loop().time(), wire(value, extensions=True)))

    def first(self, kind: str) -> float | None:
        return next((t for t, e in self.events if e["type"] == kind), None)


async def run_case(
    case: Case, vad: SileroVAD, asr: WhisperASR, rng: np.random.Generator
) -> Outcome:
    loop = asyncio.get_running_loop()
    sink, journal, thread = Sink(), InMemoryJournalStore(), ThreadRef("t", "u", "bench")
    engine = Engine(
        plugins=Plugins(vad, asr, FakeBrain([ANSWER, "Okay."]), FakeTTS(ms_per_char=60)),
        sink=sink,
        journal=journal,
        thread=thread,
        persona=Persona("Tell the story.", language=None),
        voice_session_id="vs_bench",
        settings=EngineSettings(turns=TurnSettings()),
        clock=loop.time,
    )
    engine.set_playback(client_pauses=True, exact=False)
    outcome = Outcome(case)
    try:
        engine.push_text("Tell me a story.")
        while sink.first("response.output_audio.delta") is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        background = lambda seconds: _level(  # noqa: E731
            rng.standard_normal(int(seconds * INPUT_SAMPLE_RATE)), BACKGROUND_DBFS
        )
        sound = case.pcm.astype(np.int32) + background(case.pcm.size / INPUT_SAMPLE_RATE)
        stream = np.concatenate(
            (
                background(LEAD_IN_S),
                np.clip(sound, -32768, 32767).astype(np.int16),
                background(TAIL_S),
            )
        )
        started = loop.time()
        _, audible_end = audible_span(case.pcm)
        sound_end = started + LEAD_IN_S + audible_end / INPUT_SAMPLE_RATE
        frames = stream.size // FRAME
        quiet = background(0.02)
        i = 0
        # The script, then background noise until the hold is decided (at most SETTLE_S more).
        while i < frames or (
            i < frames + SETTLE_S * 50
            and sink.first("openrealtime.output_audio.paused") is not None
            and sink.first("openrealtime.output_audio.resumed") is None
            and sink.first("openrealtime.response.interrupted") is None
        ):
            frame = stream[i * FRAME : (i + 1) * FRAME] if i < frames else quiet
            await engine.push_audio(frame)
            i += 1
            await asyncio.sleep(max(0.0, started + i * 0.02 - loop.time()))
        held = sink.first("openrealtime.output_audio.paused")
        resumed = sink.first("openrealtime.output_audio.resumed")
        interrupted = sink.first("openrealtime.response.interrupted")
        outcome.held = held is not None
        if resumed is not None and interrupted is None:
            outcome.resumed_ms = (resumed - sound_end) * 1000.0
        if interrupted is not None:
            outcome.interrupted_ms = (interrupted - sound_end) * 1000.0
        await asyncio.sleep(1.0)
        events = await journal.read(thread)
        outcome.user_turns = sum(1 for e in events if e.kind is EventKind.USER_INPUT) - 1
        outcome.transcripts = [
            e["transcript"]
            for _, e in sink.events
            if e["type"] == "conversation.item.input_audio_transcription.completed"
        ]
    finally:
        await engine.close()
    return outcome


# ---------------------------------------------------------------- the benchmark


async def bench(
    cases: list[Case], rng: np.random.Generator, data_dir: Path, seed: int
) -> dict[str, Any]:
    """Runs on a ``VirtualTimeLoop`` (the cases are synthesised before, on a real one)."""
    pool = ChargedPool("asr")
    asr = WhisperASR(data_dir=data_dir, pool=pool)
    await asr.load()
    await asr.transcribe(np.zeros(INPUT_SAMPLE_RATE, dtype=np.int16), language="en")
    pool.calls_ms.clear()
    vad = SileroVAD()
    outcomes = [await run_case(case, vad, asr, rng) for case in cases]

    false = [o for o in outcomes if o.case.kind != "real"]
    real = [o for o in outcomes if o.case.kind == "real"]
    resume = [o.resumed_ms for o in false if o.resumed_ms is not None]
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in ("backchannel", "noise", "real"):
        group = [o for o in outcomes if o.case.kind == kind]
        by_kind[kind] = {
            "cases": len(group),
            "held": sum(o.held for o in group),
            "interrupted": sum(o.interrupted_ms is not None for o in group),
        }
    settings = TurnSettings()
    misses = [
        {"kind": o.case.kind, "label": o.case.label, "transcripts": o.transcripts}
        for o in outcomes
        if (o.case.kind == "real") != (o.interrupted_ms is not None)
    ]
    return {
        "false_cancel_rate": round(
            sum(o.interrupted_ms is not None for o in false) / max(1, len(false)), 3
        ),
        "real_caught_rate": round(
            sum(o.interrupted_ms is not None for o in real) / max(1, len(real)), 3
        ),
        "resume_ms": p50_p99(resume),
        "cases": len(outcomes),
        "by_kind": by_kind,
        "held_rate": round(sum(o.held for o in false) / max(1, len(false)), 3),
        "interrupt_ms": p50_p99([o.interrupted_ms for o in real if o.interrupted_ms is not None]),
        "journal_user_turns_after_false": sum(o.user_turns for o in false),
        "asr_calls_ms": p50_p99(pool.calls_ms),
        "misses": misses,
        "settings": {
            "seed": seed,
            "min_interrupt_ms": settings.min_interrupt * 1000,
            "false_interruption_timeout_ms": (TurnSettings().false_interruption_timeout or 0)
            * 1000,
            "max_voice_gap_ms": settings.max_voice_gap * 1000,
            "vad": "silero (server defaults)",
            "asr": "whisper base, wall time charged to the virtual clock",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, default=Path(".data"))
    parser.add_argument("--limit", type=int, default=None, help="run only this many cases")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from tests.virtual_time import VirtualTimeLoop

    seed_speech_synthesis(args.seed)
    rng = np.random.default_rng(args.seed)
    cases = asyncio.run(build_cases(rng))
    if args.limit is not None:
        cases = cases[:: max(1, len(cases) // args.limit)][: args.limit]
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        emit(runner.run(bench(cases, rng, args.data_dir, args.seed)))


if __name__ == "__main__":
    main()
