"""Echo: the assistant's own answer fed back into the microphone, with and without the echo guard.

``python -m benchmarks.echo [--seeds 1,2] [--cases N] [--stress-cases N]`` prints one JSON
object.

Material, synthesised at run time. Assistant answers (``ANSWERS``: 6 English by Piper, 6
Chinese by eSpeak NG's ``cmn`` voice, each 2–3 sentences), resampled to the session's 24 kHz
output as the engine does. Interjections of a person talking over them (``INTERJECTIONS``:
"wait, stop", "不对，我是说", and longer ones, in the answer's language) in voices other than the
assistant's (``VOICES``: eSpeak NG variants at other pitches, Piper pitch-shifted), at 16 kHz.

Cases. A seeded generator (``--seeds``; seed 1 is the one the guard was tuned on, the others
are held out) draws each case: the answer, the echo path — delay 20–250 ms, echo level 6–30 dB
below the output, a room impulse response (2–4 early reflections, an exponential tail with
RT60 0.15–0.5 s at 3–15 dB direct-to-reverberant ratio), a small speaker's band (high-pass
150–400 Hz, low-pass 3.5–7 kHz), pinkish background noise at −65…−45 dBFS — and for a barge-in
case the interjection, its voice, its level (active RMS −32…−20 dBFS at the microphone, through
a room path of its own) and its onset (0.6 s after the answer starts up to 1.2 s before it ends).
Half the cases are echo only, half barge-in. Each case is the first answer of a session: the
guard starts from nothing (later answers find the delay and the gains already learned).
Two stress groups (``STRESS``, under ``stress``, not in the headline) draw cases of their own:
``playback_stall``, the client's playback stops once for 60–200 ms and goes on later (its buffer
ran dry: the echo delay jumps and the server does not know); ``clipping_speaker``, a loud echo
(6–12 dB below the output) from a speaker that clips softly.

Simulation, in virtual time (20 ms microphone frames, ``now`` = seconds of microphone audio).
The answer starts at ``ANSWER_START_S``: the coordinator is SPEAKING (a typed turn committed,
its first audio sent); 40 ms output frames are sent the way ``pipeline.pacer.Pacer`` sends them
(the first at once, then at most ``playout_lead_ms`` ahead of playback); the client plays them
from the first one on, and the microphone hears that playback through the echo path (24 kHz →
16 kHz at the device, convolved with the path, scaled, plus noise and the person). Each frame
goes to a real ``SileroVAD`` stream (server defaults); its events and voiced flag drive a real
``TurnCoordinator`` (``TurnSettings`` defaults: min_interrupt 0.4 s, max_voice_gap 0.12 s) as
``Engine.push_audio`` does, its deadlines firing between frames on time. With the guard, every
frame is first judged by an ``EchoGuard`` fed with the output frames as they are sent, and the
VAD's events pass through an ``EchoGate``. When the answer's playout ends the coordinator gets
``on_response_done``; the simulation runs 1.5 s longer.

Metrics. ``self_interruptions``: interruptions with nobody talking (echo-only cases, and barge-in
cases interrupted before the person began). A barge-in is *caught* when the first interruption
comes after the person began and no later than 0.3 s after they stopped;
``bargein_over_echo_caught_rate`` is caught / barge-in cases. The barge-in delay is onset →
interruption; *added* compares it with the same interjection on a clean microphone (no echo, no
guard: what a headset gives). ``clean_mic_with_guard`` runs the guard on that clean microphone
(headphones, or a client that cancels its echo: the guard must then stay out of the way).
``false_turns_after_answer``: user speech starts the echo's tail causes after the answer ended.
Cost: wall time of ``EchoGuard.judge`` per 20 ms frame and of ``played`` per output message,
plus their sum per frame, beside the Silero VAD's per frame in the same run (the machine is
shared: the ratio says more than the absolute figures).

Caveats: outside the stress groups the echo path is linear and steady, and the client's playback
starts when the first frame is sent (the echo delay is all acoustic and device latency); nobody
changes the volume during an answer; synthetic voices are cleaner than people, and the person's
voice never resembles the answer's more than another TTS voice does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.common import emit, percentile
from benchmarks.speech_data import audible_span, seed_speech_synthesis, warm_up
from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from pipeline.echo import EchoGuard
from pipeline.echo_gate import EchoGate
from pipeline.echo_values import EchoJudgement, EchoSettings
from pipeline.turn_commands import Interrupt, TurnSettings, UserSpeechStarted
from pipeline.turns import TurnCoordinator, TurnState
from plugins.contracts import TTS, VADEvent, VADEventKind
from plugins.tts import create_tts
from plugins.tts.espeak import EspeakTTS
from plugins.tts.piper import PiperTTS
from plugins.vad.silero import SileroVAD

log = logging.getLogger("benchmarks.echo")

Floats = npt.NDArray[np.float64]

OUTPUT_RATE = 24_000
FRAME_S = 0.02
FRAME = round(FRAME_S * INPUT_SAMPLE_RATE)
OUTPUT_FRAME_MS = 40
"""``EngineSettings.frame_ms``."""
PLAYOUT_LEAD_MS = 300.0
"""``EngineSettings.playout_lead_ms``."""
MESSAGE_MS = 120
"""``EngineSettings.max_audio_message_ms``."""
ANSWER_START_S = 0.6
AFTER_ANSWER_S = 1.5
CAUGHT_GRACE_S = 0.3
ONSET_FROM_S = 0.6
ONSET_BEFORE_END_S = 1.2
TUNING_SEED = 1
VAD_SETTINGS: dict[str, float] = {"threshold": 0.5, "min_speech_ms": 200.0, "min_silence_ms": 400.0}

ANSWERS: tuple[tuple[str, str], ...] = (
    ("en", "Sure. Tomorrow in Paris will be mostly sunny, with a high of twenty two degrees and "
           "a light breeze from the west. In the evening it gets cooler, so bring a jacket."),
    ("zh", "好的。明天巴黎大部分时间是晴天，最高气温二十二度，下午有西风。"
           "晚上会比较凉，建议您带一件外套。"),
    ("en", "The nearest pharmacy is on Market Street, about ten minutes from here on foot. It is "
           "open until nine tonight, and on Sundays it closes at six."),
    ("zh", "最近的药店在市场街，步行大约十分钟。今天晚上九点关门，星期天六点就关门了。"),
    ("en", "Your order number is four five one two. It was shipped this morning and should "
           "arrive on Thursday. You will get a message with the tracking link soon."),
    ("zh", "您的订单号是四五一二。今天早上已经发货，预计星期四送到。"
           "快递员取件以后，您会收到一条短信。"),
    ("en", "Here is a simple recipe. Boil the pasta for nine minutes, then fry the garlic in "
           "olive oil. Mix everything with a little lemon juice and some parmesan."),
    ("zh", "这道菜很简单。先把面条煮九分钟，然后用橄榄油炒一下大蒜，最后加一点柠檬汁和奶酪拌匀。"),
    ("en", "I have set a reminder for your dentist appointment on Tuesday at ten fifteen. I will "
           "remind you again one hour before, so you have time to get there."),
    ("zh", "我已经帮您设好了星期二上午十点十五分的牙医提醒。我会在一个小时之前再提醒您一次。"),
    ("en", "The train to Boston leaves from platform four at six forty. The trip takes about "
           "three and a half hours, and there is a cafe car in the middle of the train."),
    ("zh", "去波士顿的火车六点四十分从四号站台出发，全程大约三个半小时，车厢中间有餐车。"),
)  # fmt: skip

INTERJECTIONS: dict[str, tuple[str, ...]] = {
    "en": (
        "Wait, stop.",
        "Hold on.",
        "No, no, wait.",
        "Stop, stop.",
        "Sorry, that's not what I asked.",
        "Actually, can you tell me about tomorrow instead?",
        "Hang on, go back to the part about the price.",
        "No, I meant the other one.",
    ),
    "zh": (
        "等一下。",
        "不对，我是说",
        "停，停。",
        "不是这个。",
        "不对，我是说明天下午的天气。",
        "等一下，你能再说一遍吗？",
        "我想问的是另外一家。",
        "先别说了，我有个问题。",
    ),
}


@dataclass(frozen=True, slots=True)
class Voice:
    """A person's voice: an eSpeak NG voice at a pitch, or Piper shifted up by ``shift``."""

    name: str
    engine: str  # "espeak" | "piper"
    pitch: int = 50
    shift: float = 1.0


VOICES: dict[str, tuple[Voice, ...]] = {
    "en": (
        Voice("en-us+f3", "espeak", 65),
        Voice("en-us+m3", "espeak", 35),
        Voice("en-us+f2", "espeak", 55),
        Voice("piper+12%", "piper", shift=1.12),
    ),
    "zh": (
        Voice("cmn+f2", "espeak", 65),
        Voice("cmn+m3", "espeak", 35),
        Voice("cmn+f4", "espeak", 55),
    ),
}


# ---------------------------------------------------------------- synthesis


async def speak(tts: TTS, text: str, language: str, rate: int, *, voice: str | None = None) -> PCM:
    """``text`` spoken by ``tts``, each chunk resampled to ``rate`` (the engine's way)."""
    chunks = [chunk async for chunk in tts.stream(text, voice=voice, language=language)]
    if not chunks:
        raise RuntimeError(f"the TTS produced no audio for {text!r}")
    parts = [resample(chunk.pcm, chunk.sample_rate, rate) for chunk in chunks]
    return np.concatenate(parts).astype(np.int16, copy=False)


async def speak_as(voice: Voice, text: str, language: str, piper: PiperTTS) -> PCM:
    """An interjection at 16 kHz, trimmed to its audible part."""
    if voice.engine == "piper":
        chunks = [chunk async for chunk in piper.stream(text, voice=None, language=language)]
        pcm = np.concatenate([c.pcm for c in chunks])
        # Played faster than it was made: higher and quicker, another speaker to the VAD.
        rate = round(chunks[0].sample_rate * voice.shift)
        pcm = resample(pcm, rate, INPUT_SAMPLE_RATE)
    else:
        espeak = EspeakTTS(pitch=voice.pitch, words_per_minute=175)
        pcm = await speak(espeak, text, language, INPUT_SAMPLE_RATE, voice=voice.name)
    start, end = audible_span(pcm)
    return pcm[start:end]


# ---------------------------------------------------------------- the room


def convolve(x: Floats, h: Floats) -> Floats:
    n = x.size + h.size - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[:n]


def lowpass(cutoff_hz: float, taps: int = 101) -> Floats:
    n = np.arange(taps) - (taps - 1) / 2
    h = np.sinc(2 * cutoff_hz / INPUT_SAMPLE_RATE * n) * np.hamming(taps)
    return np.asarray(h / h.sum())


def highpass(cutoff_hz: float, taps: int = 101) -> Floats:
    h = -lowpass(cutoff_hz, taps)
    h[(taps - 1) // 2] += 1.0
    return h


@dataclass(frozen=True, slots=True)
class EchoPath:
    delay_ms: float
    attenuation_db: float
    rt60_s: float
    drr_db: float
    highpass_hz: float
    lowpass_hz: float
    noise_dbfs: float
    seed: int
    stall: tuple[float, float] | None = None
    """Stress: the client's playback stops once, (fraction of the answer, ms), then goes on."""
    clip_db: float | None = None
    """Stress: the speaker clips softly this far above the answer's active RMS."""

    @staticmethod
    def draw(rng: np.random.Generator) -> EchoPath:
        return EchoPath(
            delay_ms=float(rng.uniform(20, 250)),
            attenuation_db=float(rng.uniform(6, 30)),
            rt60_s=float(rng.uniform(0.15, 0.5)),
            drr_db=float(rng.uniform(3, 15)),
            highpass_hz=float(rng.uniform(150, 400)),
            lowpass_hz=float(rng.uniform(3500, 7000)),
            noise_dbfs=float(rng.uniform(-65, -45)),
            seed=int(rng.integers(2**31)),
        )


def room_response(
    rng: np.random.Generator, *, delay_s: float, rt60_s: float, drr_db: float, reflections: int
) -> Floats:
    """A direct path at ``delay_s``, early reflections within 20 ms, an exponential tail."""
    rate = INPUT_SAMPLE_RATE
    direct = round(delay_s * rate)
    tail_len = round(rt60_s * rate)
    h = np.zeros(direct + tail_len + round(0.025 * rate))
    h[direct] = 1.0
    for _ in range(reflections):
        h[direct + round(rng.uniform(0.0015, 0.02) * rate)] += rng.uniform(0.2, 0.6) * rng.choice(
            (-1.0, 1.0)
        )
    t = np.arange(tail_len) / rate
    tail = rng.standard_normal(tail_len) * np.exp(-6.91 * t / rt60_s)
    tail *= math.sqrt(float(np.sum(h * h)) / float(np.sum(tail * tail)) * 10 ** (-drr_db / 10))
    start = direct + round(0.002 * rate)
    h[start : start + tail_len] += tail[: h.size - start]
    return h


def pink_noise(rng: np.random.Generator, n: int, level_dbfs: float) -> Floats:
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1.0 / INPUT_SAMPLE_RATE)
    spectrum /= np.sqrt(np.maximum(freqs, 50.0))
    noise = np.fft.irfft(spectrum, n)
    return np.asarray(noise / math.sqrt(float(np.mean(noise**2))) * 32768 * 10 ** (level_dbfs / 20))


def active_rms(x: Floats) -> float:
    loud = np.abs(x) > 0.01 * np.max(np.abs(x))
    return math.sqrt(float(np.mean(x[loud] ** 2)))


def echo_of(output24: PCM, path: EchoPath) -> Floats:
    """What the microphone hears of the output played on the speaker (before noise)."""
    rng = np.random.default_rng(path.seed)
    played = resample(output24, OUTPUT_RATE, INPUT_SAMPLE_RATE).astype(np.float64)
    if path.stall is not None:
        at = round(path.stall[0] * played.size)
        gap = np.zeros(round(path.stall[1] * INPUT_SAMPLE_RATE / 1000))
        played = np.concatenate((played[:at], gap, played[at:]))
    if path.clip_db is not None:
        knee = active_rms(played) * 10 ** (path.clip_db / 20)
        played = knee * np.tanh(played / knee)
    h = room_response(
        rng, delay_s=path.delay_ms / 1000, rt60_s=path.rt60_s, drr_db=path.drr_db,
        reflections=int(rng.integers(2, 5)),
    )  # fmt: skip
    h = convolve(convolve(h, highpass(path.highpass_hz)), lowpass(path.lowpass_hz))[100:]
    echo = convolve(played, h)
    return echo * (active_rms(played) / active_rms(echo) * 10 ** (-path.attenuation_db / 20))


# ---------------------------------------------------------------- cases


@dataclass(frozen=True, slots=True)
class Case:
    seed: int
    index: int
    answer: int
    path: EchoPath
    interjection: tuple[str, Voice, float, float] | None = None
    """(text, voice, level dBFS, onset) for a barge-in case; the onset is a fraction of the way
    from 0.6 s after the answer's start to 1.2 s before its end."""

    @property
    def language(self) -> str:
        return ANSWERS[self.answer][0]


STRESS = ("playback_stall", "clipping_speaker")
"""Stress groups, reported apart from the headline (see ``draw_cases``)."""


def draw_cases(seed: int, count: int, stress: str | None = None) -> list[Case]:
    """``count`` cases, alternating echo only / barge-in, drawn from ``seed``. A ``stress`` group
    draws its own cases and adds to each path: ``playback_stall``, the client's playback stops
    once for 60–200 ms at 20–70 % of the answer (its buffer ran dry; the server does not know);
    ``clipping_speaker``, a loud echo (6–12 dB below the output) from a speaker that clips softly
    6–12 dB above the answer's active RMS (its loudest syllables)."""
    rng = np.random.default_rng(seed if stress is None else (seed, STRESS.index(stress) + 1))
    cases = []
    for index in range(count):
        answer = int(rng.integers(len(ANSWERS)))
        path = EchoPath.draw(rng)
        if stress == "playback_stall":
            stall = (float(rng.uniform(0.2, 0.7)), float(rng.uniform(60, 200)))
            path = dataclasses.replace(path, stall=stall)
        elif stress == "clipping_speaker":
            path = dataclasses.replace(
                path, attenuation_db=float(rng.uniform(6, 12)), clip_db=float(rng.uniform(6, 12))
            )
        interjection = None
        if index % 2 == 1:
            language = ANSWERS[answer][0]
            text = str(rng.choice(INTERJECTIONS[language]))
            voice = VOICES[language][int(rng.integers(len(VOICES[language])))]
            level = float(rng.uniform(-32, -20))
            interjection = (text, voice, level, float(rng.uniform()))
        cases.append(Case(seed, index, answer, path, interjection))
    return cases


@dataclass
class Material:
    answers: dict[int, PCM]
    """At 24 kHz, by index in ``ANSWERS``."""
    interjections: dict[tuple[str, str], PCM] = field(default_factory=dict)
    """(text, voice name) → 16 kHz audio."""


@dataclass
class Microphone:
    pcm: PCM
    near: tuple[float, float] | None
    """(start, end) of the person's speech in microphone seconds."""
    answer_end: float


def microphone(case: Case, material: Material, *, with_echo: bool = True) -> Microphone:
    output = material.answers[case.answer]
    answer_s = output.size / OUTPUT_RATE
    total = round((ANSWER_START_S + answer_s + AFTER_ANSWER_S) * INPUT_SAMPLE_RATE)
    rng = np.random.default_rng(case.path.seed + 1)
    mic = pink_noise(rng, total, case.path.noise_dbfs)
    start = round(ANSWER_START_S * INPUT_SAMPLE_RATE)
    if with_echo:
        echo = echo_of(output, case.path)[: total - start]
        mic[start : start + echo.size] += echo
    near: tuple[float, float] | None = None
    if case.interjection is not None:
        text, voice, level, fraction = case.interjection
        onset = ONSET_FROM_S + fraction * max(0.0, answer_s - ONSET_FROM_S - ONSET_BEFORE_END_S)
        voice_pcm = material.interjections[(text, voice.name)].astype(np.float64)
        h = room_response(rng, delay_s=0.001, rt60_s=case.path.rt60_s, drr_db=12.0, reflections=2)
        spoken = convolve(voice_pcm, h)
        spoken *= 32768 * 10 ** (level / 20) / active_rms(spoken)
        at = start + round(onset * INPUT_SAMPLE_RATE)
        spoken = spoken[: total - at]
        mic[at : at + spoken.size] += spoken
        near = (at / INPUT_SAMPLE_RATE, (at + voice_pcm.size) / INPUT_SAMPLE_RATE)
    pcm = np.clip(np.round(mic), -32768, 32767).astype(np.int16)
    return Microphone(pcm, near, ANSWER_START_S + answer_s)


# ---------------------------------------------------------------- simulation


Trace = list[tuple[tuple[VADEvent, ...], bool]]


async def vad_trace(vad: SileroVAD, pcm: PCM, costs: list[float] | None = None) -> Trace:
    """Per 20 ms frame, the VAD's events and voiced flag (and, into ``costs``, its µs)."""
    stream = vad.create_stream()
    trace: Trace = []
    for offset in range(0, pcm.size - FRAME + 1, FRAME):
        started = time.perf_counter()
        events = await stream.process(pcm[offset : offset + FRAME])
        if costs is not None:
            costs.append((time.perf_counter() - started) * 1e6)
        trace.append((tuple(events), stream.voiced))
    return trace


def send_schedule(output: PCM, frames: int) -> list[list[PCM]]:
    """Per microphone frame, the output messages the pacer sends at its end (``Pacer``'s rule:
    the first frame alone at once, then whole frames while at most the lead ahead)."""
    frame = OUTPUT_RATE * OUTPUT_FRAME_MS // 1000
    chunks = [output[i : i + frame] for i in range(0, output.size, frame)]
    per_message = max(1, MESSAGE_MS // OUTPUT_FRAME_MS)
    schedule: list[list[PCM]] = [[] for _ in range(frames)]
    sent_ms = 0.0
    next_chunk = 0
    for index in range(frames):
        now = (index + 1) * FRAME_S
        if now + 1e-9 < ANSWER_START_S:
            continue
        elapsed_ms = (now - ANSWER_START_S) * 1000.0
        while next_chunk < len(chunks):
            ahead = sent_ms - elapsed_ms
            if next_chunk == 0:
                count = 1
            elif ahead > PLAYOUT_LEAD_MS:
                break
            else:
                fits = 1 + int((PLAYOUT_LEAD_MS - ahead + 1e-6) // OUTPUT_FRAME_MS)
                count = min(len(chunks) - next_chunk, per_message, fits)
            message = np.concatenate(chunks[next_chunk : next_chunk + count])
            schedule[index].append(message)
            sent_ms += 1000.0 * message.size / OUTPUT_RATE
            next_chunk += count
    return schedule


@dataclass
class GuardRun:
    judgements: list[EchoJudgement]
    judge_us: list[float]
    played_us: list[float]
    frame_us: list[float]
    delay_ms: float | None
    lock_s: float | None
    """Answer start → the first lock."""


def run_guard(pcm: PCM, output: PCM, settings: EchoSettings) -> GuardRun:
    frames = pcm.size // FRAME
    schedule = send_schedule(output, frames)
    guard = EchoGuard(settings)
    judgements: list[EchoJudgement] = []
    judge_us: list[float] = []
    played_us: list[float] = []
    frame_us: list[float] = []
    lock_s: float | None = None
    for index in range(frames):
        now = (index + 1) * FRAME_S
        started = time.perf_counter()
        judgements.append(guard.judge(pcm[index * FRAME : (index + 1) * FRAME], now))
        judged = time.perf_counter()
        judge_us.append((judged - started) * 1e6)
        for message in schedule[index]:
            before = time.perf_counter()
            guard.played(message, now)
            played_us.append((time.perf_counter() - before) * 1e6)
        frame_us.append((time.perf_counter() - started) * 1e6)
        if lock_s is None and guard.delay_ms is not None:
            lock_s = now - ANSWER_START_S
    return GuardRun(judgements, judge_us, played_us, frame_us, guard.delay_ms, lock_s)


@dataclass
class Outcome:
    interrupted_at: float | None = None
    turn_started_after_answer: bool = False


def simulate(trace: Trace, answer_end: float, judgements: list[EchoJudgement] | None) -> Outcome:
    """The coordinator (and the gate, with ``judgements``) over one microphone trace."""
    # Without holds the rule interrupts where it would otherwise hold the answer (TT-1): the
    # moment a sound counts as a barge-in is the same, and it is what echo must never reach.
    coordinator = TurnCoordinator(settings=TurnSettings(false_interruption_timeout=None))
    coordinator.on_text_input("", 0.0)
    coordinator.commands()
    gate = EchoGate() if judgements is not None else None
    outcome = Outcome()
    answering = True
    clock = 0.0

    def drain(now: float) -> bool:
        for command in coordinator.commands():
            if isinstance(command, Interrupt):
                outcome.interrupted_at = now
                return True
            if isinstance(command, UserSpeechStarted) and not answering:
                outcome.turn_started_after_answer = True
        return False

    for index, (events, voiced) in enumerate(trace):
        now = (index + 1) * FRAME_S
        if answering and now + 1e-9 >= ANSWER_START_S and coordinator.state is TurnState.THINKING:
            coordinator.on_audio_started(coordinator.generation, ANSWER_START_S)
        while True:  # deadlines and the end of the answer, between frames
            deadline = coordinator.next_deadline()
            due = [d for d in (deadline,) if d is not None and clock < d <= now]
            if answering and clock < answer_end <= now:
                due.append(answer_end)
            if not due:
                break
            when = min(due)
            clock = when
            if answering and when == answer_end:
                coordinator.on_response_done(coordinator.generation, when)
                answering = False
            else:
                coordinator.on_tick(when)
            if drain(when):
                return outcome
        clock = now
        if gate is not None and judgements is not None:
            events = tuple(gate.feed(events, voiced, judgements[index]))
            voiced = gate.voiced
        for event in events:
            if event.kind is VADEventKind.SPEECH_START:
                coordinator.on_speech_start(now, at=event.at_ms / 1000.0)
            else:
                coordinator.on_speech_end(now, at=event.at_ms / 1000.0)
        if voiced:
            coordinator.on_voice(now)
        coordinator.on_tick(now)
        if drain(now):
            return outcome
    return outcome


# ---------------------------------------------------------------- one case


@dataclass
class Result:
    case: Case
    guard: Outcome
    baseline: Outcome
    clean: Outcome | None = None
    clean_guard: Outcome | None = None
    near: tuple[float, float] | None = None
    delay_error_ms: float | None = None
    lock_s: float | None = None


async def evaluate(
    case: Case,
    material: Material,
    vad: SileroVAD,
    settings: EchoSettings,
    costs: dict[str, list[float]],
) -> Result:
    output = material.answers[case.answer]
    mic = microphone(case, material)
    trace = await vad_trace(vad, mic.pcm, costs["vad"])
    run = run_guard(mic.pcm, output, settings)
    costs["judge"] += run.judge_us
    costs["played"] += run.played_us
    costs["frame"] += run.frame_us
    result = Result(
        case,
        guard=simulate(trace, mic.answer_end, run.judgements),
        baseline=simulate(trace, mic.answer_end, None),
        near=mic.near,
        delay_error_ms=None if run.delay_ms is None else run.delay_ms - case.path.delay_ms,
        lock_s=run.lock_s,
    )
    if case.interjection is not None:
        clean = microphone(case, material, with_echo=False)
        clean_trace = await vad_trace(vad, clean.pcm)
        clean_run = run_guard(clean.pcm, output, settings)
        result.clean = simulate(clean_trace, clean.answer_end, None)
        result.clean_guard = simulate(clean_trace, clean.answer_end, clean_run.judgements)
    return result


# ---------------------------------------------------------------- scores


def classify(outcome: Outcome, near: tuple[float, float] | None) -> str:
    """One of: self (interrupted with nobody talking), caught, late, missed, none."""
    at = outcome.interrupted_at
    if at is None:
        return "missed" if near is not None else "none"
    if near is None or at < near[0]:
        return "self"
    return "caught" if at <= near[1] + CAUGHT_GRACE_S else "late"


def score(results: Sequence[Result]) -> dict[str, Any]:
    echo_only = [r for r in results if r.case.interjection is None]
    barge = [r for r in results if r.case.interjection is not None]

    def side(pick: str) -> dict[str, Any]:
        outcomes = [(getattr(r, pick), r.near) for r in results]
        kinds = [classify(o, near) for o, near in outcomes]
        barge_kinds = [classify(getattr(r, pick), r.near) for r in barge]
        echo_kinds = [classify(getattr(r, pick), r.near) for r in echo_only]
        return {
            "self_interruptions": kinds.count("self"),
            "self_interruptions_echo_only": echo_kinds.count("self"),
            "bargein_interrupted_before_the_person": barge_kinds.count("self"),
            "bargein_over_echo_caught_rate": _rate(barge_kinds.count("caught"), len(barge)),
            "bargein_missed": barge_kinds.count("missed") + barge_kinds.count("late"),
            "false_turns_after_answer": sum(
                1 for r in echo_only if getattr(r, pick).turn_started_after_answer
            ),
        }

    clean_delays = [_delay(r.clean, r.near) for r in barge]
    guard_delays = [_delay(r.guard, r.near) for r in barge]
    added = [
        g - c
        for g, c, r in zip(guard_delays, clean_delays, barge, strict=True)
        if g is not None and c is not None and classify(r.guard, r.near) == "caught"
    ]
    clean_guard_delays = [_delay(r.clean_guard, r.near) for r in barge]
    clean_added = [
        g - c
        for g, c in zip(clean_guard_delays, clean_delays, strict=True)
        if g is not None and c is not None
    ]
    with_guard = side("guard")
    return {
        "cases": len(results),
        "echo_only_cases": len(echo_only),
        "bargein_cases": len(barge),
        **with_guard,
        "without_guard": side("baseline"),
        "bargein_delay_ms": {
            "clean_mic_no_guard": _p50_p90([d for d in clean_delays if d is not None]),
            "echo_with_guard": _p50_p90([d for d in guard_delays if d is not None]),
            "added_by_echo_and_guard": {**_p50_p90(added), "max": _max(added)},
        },
        "clean_mic_with_guard": {
            "bargein_caught_rate": _rate(
                sum(1 for r in barge if classify(r.clean_guard or Outcome(), r.near) == "caught"),
                len(barge),
            ),
            "clean_mic_no_guard_caught_rate": _rate(
                sum(1 for r in barge if classify(r.clean or Outcome(), r.near) == "caught"),
                len(barge),
            ),
            "added_delay_ms": {**_p50_p90(clean_added), "max": _max(clean_added)},
        },
        "by_attenuation_db": {
            name: _group([r for r in results if low <= r.case.path.attenuation_db < high])
            for name, low, high in (("6-12", 6, 12), ("12-20", 12, 20), ("20-30", 20, 30.01))
        },
        "by_language": {
            language: _group([r for r in results if r.case.language == language])
            for language in ("en", "zh")
        },
        "delay_lock": {
            "locked_cases": sum(1 for r in echo_only if r.delay_error_ms is not None),
            "echo_only_cases": len(echo_only),
            "abs_error_ms": _p50_p90(
                [abs(r.delay_error_ms) for r in echo_only if r.delay_error_ms is not None]
            ),
            "lock_after_answer_start_ms": _p50_p90(
                [1000 * r.lock_s for r in echo_only if r.lock_s is not None]
            ),
        },
    }


def _group(results: Sequence[Result]) -> dict[str, Any]:
    barge = [r for r in results if r.case.interjection is not None]
    return {
        "cases": len(results),
        "self_interruptions": sum(1 for r in results if classify(r.guard, r.near) == "self"),
        "self_interruptions_without_guard": sum(
            1 for r in results if classify(r.baseline, r.near) == "self"
        ),
        "bargein_caught_rate": _rate(
            sum(1 for r in barge if classify(r.guard, r.near) == "caught"), len(barge)
        ),
    }


def _delay(outcome: Outcome | None, near: tuple[float, float] | None) -> float | None:
    if outcome is None or near is None or classify(outcome, near) != "caught":
        return None
    assert outcome.interrupted_at is not None
    return 1000.0 * (outcome.interrupted_at - near[0])


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _p50_p90(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90)}


def _max(values: Sequence[float]) -> float | None:
    return round(max(values), 1) if values else None


# ---------------------------------------------------------------- the run


async def synthesise(cases: Sequence[Case], material: Material, piper: PiperTTS) -> None:
    for case in cases:
        if case.interjection is None:
            continue
        text, voice, _, _ = case.interjection
        if (text, voice.name) not in material.interjections:
            material.interjections[(text, voice.name)] = await speak_as(
                voice, text, case.language, piper
            )


async def run(
    *, seeds: Sequence[int] = (1, 2), cases: int = 100, stress_cases: int = 20
) -> dict[str, Any]:
    """``cases`` cases for each seed, and ``stress_cases`` for each stress group and seed (see
    the module docstring)."""
    drawn = {seed: draw_cases(seed, cases) for seed in seeds}
    stressed = {
        kind: [case for seed in seeds for case in draw_cases(seed, stress_cases, kind)]
        for kind in STRESS
    }
    every_case = [case for batch in (*drawn.values(), *stressed.values()) for case in batch]
    seed_speech_synthesis()
    tts: dict[str, TTS] = {"en": create_tts("piper"), "zh": create_tts("espeak")}
    for engine in tts.values():
        await warm_up(engine)
    needed = sorted({case.answer for case in every_case})
    answers = {
        i: await speak(tts[ANSWERS[i][0]], ANSWERS[i][1], ANSWERS[i][0], OUTPUT_RATE)
        for i in needed
    }
    material = Material(answers)
    seconds = [a.size / OUTPUT_RATE for a in answers.values()]
    await synthesise(every_case, material, PiperTTS())
    vad = SileroVAD(
        threshold=VAD_SETTINGS["threshold"],
        min_speech_ms=VAD_SETTINGS["min_speech_ms"],
        min_silence_ms=VAD_SETTINGS["min_silence_ms"],
    )
    settings = EchoSettings(output_sample_rate=OUTPUT_RATE)
    by_seed: dict[str, Any] = {}
    everything: list[Result] = []
    costs: dict[str, list[float]] = {"judge": [], "played": [], "frame": [], "vad": []}
    for seed, batch in drawn.items():
        results = [await evaluate(case, material, vad, settings, costs) for case in batch]
        for r in results:
            log.debug(
                "seed %d case %d %s %s guard=%s baseline=%s clean=%s",
                seed, r.case.index, r.case.language, r.case.path, classify(r.guard, r.near),
                classify(r.baseline, r.near), r.clean and classify(r.clean, r.near),
            )  # fmt: skip
        by_seed[str(seed)] = score(results)
        everything += results
    headline = score(everything)
    stress: dict[str, Any] = {}
    for kind, batch in stressed.items():
        results = [await evaluate(case, material, vad, settings, costs) for case in batch]
        scores = score(results)
        stress[kind] = {
            key: scores[key]
            for key in ("cases", "self_interruptions", "bargein_over_echo_caught_rate")
        }
        stress[kind]["without_guard"] = {
            key: scores["without_guard"][key]
            for key in ("self_interruptions", "bargein_over_echo_caught_rate")
        }
    return {
        **{
            k: headline[k] for k in ("self_interruptions", "bargein_over_echo_caught_rate", "cases")
        },
        "tuning_seed": TUNING_SEED,
        "held_out_seeds": [s for s in seeds if s != TUNING_SEED],
        "all_seeds": headline,
        "by_seed": by_seed,
        "stress": stress,
        "per_frame_cost_us": {
            "judge": _cost(costs["judge"]),
            "played_per_message": _cost(costs["played"]),
            "per_20ms_frame": _cost(costs["frame"]),
            "silero_vad_per_frame_same_run": _cost(costs["vad"]),
        },
        "settings": {
            "seeds": list(seeds),
            "cases_per_seed": cases,
            "stress_cases_per_seed": stress_cases,
            "answers_used": {
                lang: sum(1 for i in needed if ANSWERS[i][0] == lang) for lang in ("en", "zh")
            },
            "answer_seconds": [round(min(seconds), 2), round(max(seconds), 2)],
            "interjections": {k: len(v) for k, v in INTERJECTIONS.items()},
            "voices": {k: [v.name for v in vs] for k, vs in VOICES.items()},
            "echo_path": {
                "delay_ms": [20, 250],
                "attenuation_db": [6, 30],
                "rt60_s": [0.15, 0.5],
                "drr_db": [3, 15],
                "highpass_hz": [150, 400],
                "lowpass_hz": [3500, 7000],
                "noise_dbfs": [-65, -45],
            },
            "interjection_level_dbfs": [-32, -20],
            "vad": {"engine": "silero", **VAD_SETTINGS},
            "turns": {
                "min_interrupt_s": TurnSettings().min_interrupt,
                "max_voice_gap_s": TurnSettings().max_voice_gap,
            },
            "output": {
                "rate": OUTPUT_RATE,
                "frame_ms": OUTPUT_FRAME_MS,
                "lead_ms": PLAYOUT_LEAD_MS,
            },
            "guard": {
                name: getattr(settings, name)
                for name in (
                    "max_delay_ms",
                    "bands",
                    "margin_db",
                    "near_end_db",
                    "distortion_db",
                    "reverb_decay_db_per_s",
                    "lock_correlation",
                    "jump_tau_ms",
                    "acquire_ms",
                )
            },
            "tts": "answers: Piper en_US-joe-medium (en), eSpeak NG cmn (zh); interjections: "
            "eSpeak NG variants at other pitches, Piper pitch-shifted 12 %; onnxruntime seed fixed",
        },
    }


def _cost(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "count": len(values)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2", help="comma-separated case seeds (1 = tuning)")
    parser.add_argument("--cases", type=int, default=100, help="cases per seed (half barge-in)")
    parser.add_argument(
        "--stress-cases", type=int, default=20, help="cases per stress group and seed"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    emit(asyncio.run(run(seeds=seeds, cases=args.cases, stress_cases=args.stress_cases)))


if __name__ == "__main__":
    main()
