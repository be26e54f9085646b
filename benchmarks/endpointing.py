"""Endpointing: premature cut-offs and lateness of silence-only, Smart Turn and transcript-cue
turn-taking.

``python -m benchmarks.endpointing [--limit N] [--no-sweep]`` prints one JSON object.

Material. Two groups of turns, each synthesised at 16 kHz (seeded noise) and trimmed to its
audible parts, which are joined by digital silence; every clip starts with 0.5 s of silence and
ends with ``TRAILING_SILENCE_S`` of it.

- The original group, ``benchmarks.speech_data.ENDPOINTING_UTTERANCES`` (English, Piper): 36
  turns, 18 with one mid-sentence pause of 0.6–1.2 s (two separate syntheses). Its figures are
  the top-level keys, as before this group had a sibling.
- The cue group, ``CUE_UTTERANCES`` (issue 15, under ``cue_group``): 24 turns, half English
  (Piper), half Chinese (eSpeak NG's ``cmn`` voice): 8 dictations read out in pieces (digits
  one by one or in groups, a code with a letter) with 1–3 pauses of 0.7–1.1 s, 8 turns with a
  pause right after a conjunction ("and", "but", "然后", "所以", …), 8 said in one go.

Simulation, in virtual time (``now`` = seconds of audio fed so far), the way
``pipeline.engine.Engine`` drives the same parts:

- the clip goes in 20 ms frames to a ``SileroVAD`` stream; its events become
  ``TurnCoordinator.on_speech_start/on_speech_end(now, at=event position)``, a voiced frame
  ``on_voice(now)``, and every frame ends with ``on_tick(now)``; between frames the
  coordinator's own deadlines (``next_deadline()``) fire exactly on time, as the engine's timer
  does;
- with Smart Turn, each ``UserSpeechStopped`` (decided at frame time ``now``) hands the
  utterance so far — from 0.2 s before its speech start up to ``now``, like the engine's
  pre-roll — to ``SmartTurnEndpointer.predict``; its wall time is measured and the verdict is
  delivered with ``on_endpoint_verdict`` at ``now + inference time``. Speech resuming or a
  commit discards a verdict still pending, as the engine cancels the task;
- with transcript cues, the speculative transcription of ``pipeline.capture.SpeechCapture`` is
  replayed: it starts after ``SPECULATE_AFTER_S`` of unvoiced frames inside the utterance (a
  voiced frame before the VAD's end of speech cancels it) or, failing that, at
  ``UserSpeechStopped``; its transcript's ``transcript_cue`` reaches the coordinator at the
  pause or when the transcription is done, whichever is later; speech resuming or a commit
  discards it. The coordinator is the engine's ``TurnCoordinator`` with ``transcript_cues`` on
  (``on_transcript_cue``): its deadline is ``speech end + endpoint_delay(verdict, cue,
  eagerness)`` (``pipeline.endpoint_cues``); without cues it is off, so the cue stays NEUTRAL;
- a commit puts the coordinator in THINKING, and nothing answers: if the speaker goes on after
  a premature commit, the coordinator's barge-in rule turns the rest into a new turn, whose
  commit ends the utterance.

Strategies. ``silence`` (the silence delay alone), ``smart_turn`` (its verdict moves the
deadline) and three with transcript cues on top of Smart Turn, differing only in where the
transcript comes from: ``cues`` — Whisper base (the embedded ASR, language forced to the
clip's) transcribes the synthesised audio, and the cue arrives after the transcription's
measured wall time, as in the engine on this machine; ``cues_instant_asr`` — the same
transcripts at no latency (what a GPU or remote ASR approaches); ``cues_known_text`` — the
benchmark's own text up to the last word spoken before the speculation started (word timings
from the TTS, with the punctuation written after that word), at no latency: the engine never has
this transcript, so it is an upper bound on what the cues can do.

The VAD and its settings are the same for every configuration, and the VAD never sees the
coordinator (the engine resets it only on explicit commits), so its decisions are computed once
per clip. Only the Smart Turn and Whisper wall times depend on the machine; each distinct piece
of audio is judged and transcribed once and reused by every configuration (so two calls never
compete for the CPU, as they would in the engine).

Metrics. *Premature cut-off*: the utterance had a commit before its final speech ended — in a
pause, or in the first ≈ 0.25 s of the next part, before the VAD has confirmed that speech
resumed (``min_speech_ms`` plus a window); either way the turn was committed while the speaker
was not done. ``committed_in_pause`` counts only commits inside the silences themselves. *Late*:
end of the final speech (the last audible sample) → the first commit after it (for a cut-off
utterance, the commit of the turn its last part became). An utterance with no commit after its
end counts in ``uncommitted``. ``target`` checks "Smart Turn at most half the premature cut-offs
at an equal or lower median lateness", and the same halving for ``committed_in_pause``;
``target_cues`` the same for each cue strategy against silence (issue 15's target).
``cue_readings`` counts the cues (and the rules that decided them) at pauses inside an utterance
and at its final end.

Sweep (``--no-sweep`` skips it; it reuses the clips, VAD decisions, judged and transcribed
audio): the silence delay of the silence-only configuration; Smart Turn's threshold; Smart Turn
given the audio cut 0.2 s after the VAD's speech end (what Pipecat feeds it; the engine gives it
everything up to the VAD's decision, ``min_silence_ms`` later); both configurations with a
Silero VAD that closes after 200 ms of silence instead of 400; and, over both groups, the cues
at each eagerness (beside silence and Smart Turn with their delays scaled by the eagerness
factor alone, as sessions applied eagerness before transcript cues), at fixed ASR latencies,
and without Smart Turn.

Caveats: the first part of a paused utterance is synthesised on its own, so the TTS speaks it
as a whole sentence, probably with a finished sentence's intonation, where a person hesitating
mid-sentence would not; and Smart Turn was trained on human speech, not Piper's or eSpeak's.
Its verdicts here are a pessimistic estimate for the model, not a measurement on real users.
Whisper base hears eSpeak's Mandarin poorly, so the Chinese ``cues`` figures are a floor and
``cues_known_text`` the ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import heapq
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit, percentile
from benchmarks.speech_data import (
    CUE_UTTERANCES,
    ENDPOINTING_UTTERANCES,
    CueUtterance,
    EndpointingUtterance,
    Speech,
    audible_span,
    seed_speech_synthesis,
    silence,
    synthesize,
    warm_up,
)
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.endpoint_cues import EAGERNESS_SCALE, Cue, CueReading, read_cue
from pipeline.playout import join_text
from pipeline.turn_commands import (
    Command,
    CommitUserTurn,
    TurnEagerness,
    TurnSettings,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from pipeline.turns import TurnCoordinator
from plugins.asr.whisper import WhisperASR
from plugins.contracts import TTS, VADEventKind
from plugins.endpointing.smart_turn import SmartTurnEndpointer
from plugins.tts import create_tts
from plugins.vad.silero import SileroVAD

log = logging.getLogger("benchmarks.endpointing")

FRAME_S = 0.02
FRAME_SAMPLES = round(FRAME_S * INPUT_SAMPLE_RATE)
LEADING_SILENCE_S = 0.5
TRAILING_SILENCE_S = 5.0
"""Long enough for the longest wait swept (the incomplete delay at low eagerness, 4 s)."""
PREROLL_S = 0.2
"""Audio the engine keeps from before the VAD's speech start (``Engine._begin_utterance``)."""
MAX_PREROLL_S = 1.5
SPECULATE_AFTER_S = 0.15
"""``EngineSettings.speculate_after_ms``: quiet that starts the speculative transcription."""

SILENCE_DELAY_S = 0.8
"""The project default (``OPENREALTIME_SILENCE_MS``): what a product ships with."""
COMPLETE_DELAY_S = 0.3
INCOMPLETE_DELAY_S = 2.5
SMART_TURN_THRESHOLD = 0.5
VAD_SETTINGS: dict[str, float] = {"threshold": 0.5, "min_speech_ms": 200.0, "min_silence_ms": 400.0}
"""``SileroVAD`` defaults, the ones the server uses."""

SWEEP_SILENCE_DELAYS = (0.5, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
SWEEP_THRESHOLDS = (0.3, 0.5, 0.7, 0.9)
SWEEP_TAIL_S = 0.2
SWEEP_EAGERNESS = ("low", "medium", "high")
SWEEP_ASR_LATENCIES_S = (0.1, 0.25, 0.5, 1.0)

ORIGINAL_KINDS = ("silent_pause", "filled_pause", "no_pause")
CUE_KINDS = ("dictation", "trailing_conjunction", "no_pause")


# ---------------------------------------------------------------- material


@dataclass(frozen=True, slots=True)
class Clip:
    text: str
    kind: str
    """"silent_pause", "filled_pause", "dictation", "trailing_conjunction" or "no_pause"."""
    language: str
    pcm: PCM
    speech_end_s: float
    """End of the final speech (last audible sample)."""
    pauses: tuple[tuple[float, float], ...]
    """(start, end) of each silence between two parts."""
    known_text: tuple[tuple[float, str], ...]
    """(when it had been said, the text so far), in order: the ``cues_known_text`` source."""

    def known_text_at(self, t: float) -> str:
        """The text said up to ``t`` (the punctuation after its last word included)."""
        times = [when for when, _ in self.known_text]
        index = bisect.bisect_right(times, t + 1e-9)
        return self.known_text[index - 1][1] if index else ""


def assemble(
    text: str,
    kind: str,
    language: str,
    spoken: Sequence[tuple[str, Speech]],
    pauses: Sequence[float],
) -> Clip:
    """Join the audible parts of ``spoken`` with ``pauses`` of silence; note what was said when."""
    parts: list[PCM] = [silence(LEADING_SILENCE_S)]
    position = LEADING_SILENCE_S
    said = ""
    known: list[tuple[float, str]] = []
    intervals: list[tuple[float, float]] = []
    for index, (part_text, speech) in enumerate(spoken):
        start, end = audible_span(speech.pcm)
        duration = (end - start) / INPUT_SAMPLE_RATE
        words = sorted(speech.words, key=lambda w: w.text_start)
        for number, word in enumerate(words):
            following = words[number + 1].text_start if number + 1 < len(words) else len(part_text)
            when = position + min(
                duration, max(0.0, word.end_ms / 1000.0 - start / INPUT_SAMPLE_RATE)
            )
            when = max(when, known[-1][0]) if known else when
            known.append((when, join_text(said, part_text[:following].strip())))
        said = join_text(said, part_text.strip())
        known.append((position + duration, said))
        parts.append(speech.pcm[start:end])
        position += duration
        if index < len(pauses):
            parts.append(silence(pauses[index]))
            intervals.append((position, position + pauses[index]))
            position += pauses[index]
    speech_end_s = position
    parts.append(silence(TRAILING_SILENCE_S))
    return Clip(
        text, kind, language, np.concatenate(parts), speech_end_s, tuple(intervals), tuple(known)
    )


async def build_clip(tts: TTS, utterance: EndpointingUtterance) -> Clip:
    spoken = [(utterance.first, await synthesize(tts, utterance.first))]
    pauses: list[float] = []
    if utterance.second is not None:
        spoken.append((utterance.second, await synthesize(tts, utterance.second)))
        pauses.append(utterance.pause_s)
    kind = "no_pause" if not utterance.paused else "silent_pause"
    if utterance.filler:
        kind = "filled_pause"
    return assemble(utterance.text, kind, "en", spoken, pauses)


async def build_cue_clip(tts: dict[str, TTS], utterance: CueUtterance) -> Clip:
    voice = tts[utterance.language]
    spoken = [
        (part, await synthesize(voice, part, language=utterance.language))
        for part in utterance.parts
    ]
    return assemble(utterance.text, utterance.kind, utterance.language, spoken, utterance.pauses_s)


VADTrace = list[tuple[tuple[tuple[VADEventKind, float], ...], bool]]


async def vad_trace(vad: SileroVAD, pcm: PCM) -> VADTrace:
    """Per 20 ms frame: the VAD events it caused (kind, position in s) and whether it was voiced."""
    stream = vad.create_stream()
    trace: VADTrace = []
    for offset in range(0, pcm.size - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        events = await stream.process(pcm[offset : offset + FRAME_SAMPLES])
        trace.append((tuple((e.kind, e.at_ms / 1000.0) for e in events), stream.voiced))
    return trace


# ---------------------------------------------------------------- models, judged once per audio


@dataclass
class Judge:
    """``SmartTurnEndpointer.predict`` with each distinct piece of audio judged once."""

    endpointer: SmartTurnEndpointer
    cache: dict[tuple[int, int, int], tuple[float | None, float]] = field(default_factory=dict)

    async def __call__(
        self, clip_index: int, pcm: PCM, start: int, end: int
    ) -> tuple[float | None, float]:
        """(probability or None for no opinion, inference seconds) of ``pcm[start:end]``."""
        key = (clip_index, start, end)
        if key not in self.cache:
            started = time.perf_counter()
            verdict = await self.endpointer.predict(pcm[start:end])
            elapsed = time.perf_counter() - started
            probability = None if verdict.complete is None else verdict.probability
            self.cache[key] = (probability, elapsed)
        return self.cache[key]

    @property
    def inference_ms(self) -> list[float]:
        return [1000.0 * seconds for _, seconds in self.cache.values()]


@dataclass
class Transcriber:
    """``WhisperASR.transcribe`` with each distinct piece of audio transcribed once."""

    asr: WhisperASR
    cache: dict[tuple[int, int, int], tuple[str, float]] = field(default_factory=dict)

    async def __call__(
        self, clip_index: int, clip: Clip, start: int, end: int
    ) -> tuple[str, float]:
        """(transcript, wall seconds) of ``clip.pcm[start:end]`` in the clip's language."""
        key = (clip_index, start, end)
        if key not in self.cache:
            started = time.perf_counter()
            transcript = await self.asr.transcribe(clip.pcm[start:end], language=clip.language)
            self.cache[key] = (transcript.text, time.perf_counter() - started)
            log.debug("asr %d [%d:%d] %r", clip_index, start, end, transcript.text)
        return self.cache[key]

    @property
    def latency_ms(self) -> list[float]:
        return [1000.0 * seconds for _, seconds in self.cache.values()]


# ---------------------------------------------------------------- one configuration


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    turn: TurnSettings
    smart_turn: bool
    threshold: float = SMART_TURN_THRESHOLD
    tail_s: float | None = None
    """Cut the audio handed to Smart Turn this long after the VAD's speech end (None: up to the
    moment the VAD decided, as the engine does)."""
    cues: str | None = None
    """Where the transcript comes from: None (no cues), "asr" or "known_text"."""
    asr_latency_s: float | None = None
    """With "asr": None for the measured wall time, else this fixed latency."""
    eagerness: TurnEagerness = "medium"
    """With cues: the coordinator's eagerness (configurations without cues scale their delays
    instead, see ``scaled``)."""


@dataclass
class Outcome:
    commits: list[float] = field(default_factory=list)
    verdicts: list[tuple[float, float | None]] = field(default_factory=list)
    """(decision time, probability) of each Smart Turn call."""
    readings: list[tuple[float, CueReading]] = field(default_factory=list)
    """(pause decision time, cue) of each pause's speculative transcript."""


JudgeFn = Callable[[int, PCM, int, int], Awaitable[tuple[float | None, float]]]
TranscribeFn = Callable[[int, Clip, int, int], Awaitable[tuple[str, float]]]


async def simulate(
    clip_index: int,
    clip: Clip,
    trace: VADTrace,
    config: Config,
    judge: JudgeFn,
    transcribe: TranscribeFn | None = None,
) -> Outcome:
    """Run one clip through the coordinator in virtual time (see the module docstring)."""
    coordinator = TurnCoordinator(
        # Nothing answers here, so nothing judges a held answer either: a speaker going on
        # after a premature commit interrupts at once (the barge-in rule without holds).
        settings=replace(
            config.turn,
            eagerness=config.eagerness,
            transcript_cues=config.cues is not None,
            false_interruption_timeout=None,
        ),
        end_of_turn_model=config.smart_turn,
    )
    outcome = Outcome()
    # (due, order, turn id, verdict or cue): Smart Turn verdicts and transcript cues in flight.
    pending: list[tuple[float, int, int, bool | None | Cue]] = []
    order = 0
    turn_start = 0
    clock = 0.0
    # The speculative transcription (``SpeechCapture``): utterance open, VAD's speech end,
    # first quiet frame, start of the live speculation.
    in_utterance = False
    speech_end_at: float | None = None
    quiet_since: float | None = None
    speculation: float | None = None

    async def speculative_cue(turn_id: int, now: float) -> None:
        nonlocal order
        assert speculation is not None
        end = round(speculation * INPUT_SAMPLE_RATE)
        if config.cues == "known_text":
            text, latency = clip.known_text_at(speculation), 0.0
        else:
            assert transcribe is not None
            text, measured = await transcribe(clip_index, clip, turn_start, end)
            latency = measured if config.asr_latency_s is None else config.asr_latency_s
        reading = read_cue(text, clip.language)
        outcome.readings.append((now, reading))
        heapq.heappush(pending, (max(now, speculation + latency), order, turn_id, reading.cue))
        order += 1

    async def handle(commands: list[Command], now: float) -> None:
        nonlocal turn_start, order, in_utterance, speech_end_at, quiet_since, speculation
        for command in commands:
            if isinstance(command, UserSpeechStarted):
                back = min(now - command.at + PREROLL_S, MAX_PREROLL_S)
                turn_start = max(0, round((now - back) * INPUT_SAMPLE_RATE))
                in_utterance, speech_end_at, quiet_since, speculation = True, None, None, None
            elif isinstance(command, UserSpeechStopped):
                if config.smart_turn:
                    cut = now if config.tail_s is None else min(now, command.at + config.tail_s)
                    end = round(cut * INPUT_SAMPLE_RATE)
                    probability, inference_s = await judge(clip_index, clip.pcm, turn_start, end)
                    outcome.verdicts.append((now, probability))
                    complete = None if probability is None else probability >= config.threshold
                    heapq.heappush(pending, (now + inference_s, order, command.turn_id, complete))
                    order += 1
                if config.cues is not None:
                    speech_end_at = command.at
                    if speculation is None:
                        speculation = now
                    await speculative_cue(command.turn_id, now)
            elif isinstance(command, UserSpeechResumed):
                pending.clear()
                speech_end_at, speculation = None, None
            elif isinstance(command, CommitUserTurn):
                outcome.commits.append(now)
                pending.clear()
                in_utterance, speculation = False, None

    for index, (events, voiced) in enumerate(trace):
        now = (index + 1) * FRAME_S
        # What happens between two frames: the coordinator's deadlines and arriving results.
        while True:
            deadline = coordinator.next_deadline()
            due: list[tuple[float, int]] = []
            if deadline is not None and clock < deadline <= now:
                due.append((deadline, 0))
            if pending and pending[0][0] <= now:
                due.append((pending[0][0], 1))
            if not due:
                break
            when, source = min(due)
            clock = max(clock, when)
            if source == 0:
                coordinator.on_tick(when)
            else:
                _, _, turn_id, signal = heapq.heappop(pending)
                if isinstance(signal, Cue):
                    coordinator.on_transcript_cue(turn_id, signal, when)
                else:
                    coordinator.on_endpoint_verdict(turn_id, signal, when)
            await handle(coordinator.commands(), when)
        clock = now
        for kind, at in events:
            if kind is VADEventKind.SPEECH_START:
                coordinator.on_speech_start(now, at=at)
            else:
                coordinator.on_speech_end(now, at=at)
        if voiced:
            coordinator.on_voice(now)
        coordinator.on_tick(now)
        await handle(coordinator.commands(), now)
        if config.cues is not None and in_utterance and speech_end_at is None:
            if voiced:
                quiet_since, speculation = None, None
            elif quiet_since is None:
                quiet_since = now
            elif speculation is None and now - quiet_since + 1e-9 >= SPECULATE_AFTER_S:
                speculation = now
    return outcome


# ---------------------------------------------------------------- scoring


def score(
    clips: Sequence[Clip], outcomes: Sequence[Outcome], kinds: Sequence[str] = ORIGINAL_KINDS
) -> dict[str, Any]:
    premature = dict.fromkeys(kinds, 0)
    in_pause = 0
    late_ms: list[float] = []
    uncommitted = 0
    for clip, outcome in zip(clips, outcomes, strict=True):
        if any(start <= t < end for t in outcome.commits for start, end in clip.pauses):
            in_pause += 1
        if any(t < clip.speech_end_s for t in outcome.commits):
            premature[clip.kind] += 1
        after = [t for t in outcome.commits if t >= clip.speech_end_s]
        if after:
            late_ms.append(1000.0 * (after[0] - clip.speech_end_s))
        else:
            uncommitted += 1
    return {
        "premature_cutoffs": sum(premature.values()),
        "late_ms_p50": percentile(late_ms, 50),
        "late_ms_p99": percentile(late_ms, 99),
        "premature_by_kind": premature,
        "committed_in_pause": in_pause,
        "late_ms_max": round(max(late_ms), 1) if late_ms else None,
        "uncommitted": uncommitted,
    }


def verdict_summary(
    clips: Sequence[Clip], outcomes: Sequence[Outcome], threshold: float
) -> dict[str, Any]:
    """Smart Turn's opinions at pauses inside an utterance vs at its real end."""
    inside: list[float] = []
    final: list[float] = []
    for clip, outcome in zip(clips, outcomes, strict=True):
        for decided, probability in outcome.verdicts:
            if probability is None:
                continue
            (inside if decided < clip.speech_end_s else final).append(probability)

    def describe(values: list[float]) -> dict[str, Any]:
        return {
            "n": len(values),
            "judged_complete": sum(1 for p in values if p >= threshold),
            "probability_p50": percentile(values, 50),
        }

    return {"inside_utterance": describe(inside), "at_final_end": describe(final)}


def cue_summary(clips: Sequence[Clip], outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The transcript cues given at pauses inside an utterance vs at its real end."""
    inside: list[CueReading] = []
    final: list[CueReading] = []
    for clip, outcome in zip(clips, outcomes, strict=True):
        for decided, reading in outcome.readings:
            (inside if decided < clip.speech_end_s else final).append(reading)

    def describe(readings: list[CueReading]) -> dict[str, Any]:
        cues = Counter(r.cue.value for r in readings)
        return {
            **{cue.value: cues.get(cue.value, 0) for cue in Cue},
            "rules": dict(sorted(Counter(r.rule for r in readings).items())),
        }

    return {"inside_utterance": describe(inside), "at_final_end": describe(final)}


# ---------------------------------------------------------------- configurations


def silence_config(delay: float = SILENCE_DELAY_S) -> Config:
    return Config(f"silence_{delay:g}", TurnSettings(silence_delay=delay), smart_turn=False)


def smart_turn_config(**changes: Any) -> Config:
    base = Config(
        "smart_turn",
        TurnSettings(
            silence_delay=SILENCE_DELAY_S,
            complete_delay=COMPLETE_DELAY_S,
            incomplete_delay=INCOMPLETE_DELAY_S,
        ),
        smart_turn=True,
    )
    return replace(base, **changes)


CUE_STRATEGIES: dict[str, dict[str, Any]] = {
    "cues": {"cues": "asr"},
    "cues_instant_asr": {"cues": "asr", "asr_latency_s": 0.0},
    "cues_known_text": {"cues": "known_text"},
}
"""The cue strategies: Smart Turn plus transcript cues from these transcripts."""


def cue_config(strategy: str, **changes: Any) -> Config:
    return smart_turn_config(name=strategy, **{**CUE_STRATEGIES[strategy], **changes})


def scaled(config: Config, eagerness: str) -> Config:
    """``config`` with every delay scaled by ``eagerness``'s factor and nothing else: how
    sessions applied ``semantic_vad``'s eagerness before transcript cues (the coordinator now
    applies it through ``endpoint_delay``, which at low and high also changes some cells of
    its table)."""
    scale = EAGERNESS_SCALE[eagerness]
    turn = config.turn
    return replace(
        config,
        turn=replace(
            turn,
            silence_delay=turn.silence_delay * scale,
            complete_delay=turn.complete_delay * scale,
            incomplete_delay=turn.incomplete_delay * scale,
        ),
    )


# ---------------------------------------------------------------- the run


@dataclass
class Bench:
    """Everything a configuration is evaluated on."""

    clips: list[Clip]
    traces: list[VADTrace]
    judge: Judge
    transcriber: Transcriber
    offset: int = 0
    """Index of the first clip among all clips (the caches' keys)."""

    async def evaluate(self, config: Config) -> list[Outcome]:
        return [
            await simulate(self.offset + index, clip, trace, config, self.judge, self.transcriber)
            for index, (clip, trace) in enumerate(zip(self.clips, self.traces, strict=True))
        ]

    def part(self, start: int, stop: int) -> Bench:
        return Bench(
            self.clips[start:stop],
            self.traces[start:stop],
            self.judge,
            self.transcriber,
            self.offset + start,
        )


def headline(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("premature_cutoffs", "late_ms_p50", "late_ms_p99")}


async def run(
    *, limit: int | None = None, sweep: bool = True, data_dir: Path = Path(".data")
) -> dict[str, Any]:
    """Simulate the first ``limit`` utterances of each group (all by default) in every
    configuration."""
    original = ENDPOINTING_UTTERANCES[:limit] if limit is not None else ENDPOINTING_UTTERANCES
    cue_utterances = CUE_UTTERANCES[:limit] if limit is not None else CUE_UTTERANCES
    seed_speech_synthesis()
    tts: dict[str, TTS] = {"en": create_tts("piper"), "zh": create_tts("espeak")}
    for engine in tts.values():
        await warm_up(engine)
    # The original group first, in its order: its audio stays what it was before the cue group.
    clips = [await build_clip(tts["en"], utterance) for utterance in original]
    clips += [await build_cue_clip(tts, utterance) for utterance in cue_utterances]
    log.info(
        "synthesised %d clips, %.1f s of audio",
        len(clips),
        sum(c.pcm.size for c in clips) / INPUT_SAMPLE_RATE,
    )

    vad = SileroVAD(
        threshold=VAD_SETTINGS["threshold"],
        min_speech_ms=VAD_SETTINGS["min_speech_ms"],
        min_silence_ms=VAD_SETTINGS["min_silence_ms"],
    )
    traces = [await vad_trace(vad, clip.pcm) for clip in clips]
    endpointer = SmartTurnEndpointer(threshold=SMART_TURN_THRESHOLD)
    await endpointer.predict(silence(1.0))  # load the model before anything is timed
    asr = WhisperASR(data_dir=data_dir)
    await asr.load()
    await asr.transcribe(silence(1.0), language="en")  # the first call pays for set-up
    everything = Bench(clips, traces, Judge(endpointer), Transcriber(asr))
    first = everything.part(0, len(original))
    second = everything.part(len(original), len(clips))

    strategies = {"silence": silence_config(), "smart_turn": smart_turn_config()}
    strategies.update({name: cue_config(name) for name in CUE_STRATEGIES})
    outcomes_first = {name: await first.evaluate(c) for name, c in strategies.items()}
    outcomes_second = {name: await second.evaluate(c) for name, c in strategies.items()}
    log.info(
        "%d Smart Turn calls, %d transcriptions",
        len(everything.judge.cache),
        len(everything.transcriber.cache),
    )

    results = {name: score(first.clips, o) for name, o in outcomes_first.items()}
    silence_result, smart_result = results["silence"], results["smart_turn"]
    smart_result["inference_ms_p50"] = percentile(everything.judge.inference_ms, 50)
    smart_result["inference_ms_p99"] = percentile(everything.judge.inference_ms, 99)
    for name in CUE_STRATEGIES:
        results[name]["cue_readings"] = cue_summary(first.clips, outcomes_first[name])

    paused = [c for c in first.clips if c.pauses]
    result: dict[str, Any] = {
        "utterances": len(first.clips),
        "silence": silence_result,
        "smart_turn": smart_result,
        **{name: results[name] for name in CUE_STRATEGIES},
        "paused_utterances": len(paused),
        "filled_pauses": sum(1 for c in paused if c.kind == "filled_pause"),
        "smart_turn_verdicts": verdict_summary(
            first.clips, outcomes_first["smart_turn"], SMART_TURN_THRESHOLD
        ),
        "target": target(silence_result, smart_result),
        "target_cues": {name: target(silence_result, results[name]) for name in CUE_STRATEGIES},
        "cue_group": group_result(second, outcomes_second),
        "all_utterances": all_result(first, second, outcomes_first, outcomes_second),
        "asr": {
            "engine": "whisper base (faster-whisper int8, CPU), language forced to the clip's",
            "transcriptions": len(everything.transcriber.cache),
            "latency_ms_p50": percentile(everything.transcriber.latency_ms, 50),
            "latency_ms_p99": percentile(everything.transcriber.latency_ms, 99),
        },
        "settings": {
            "vad": {"engine": "silero", **VAD_SETTINGS},
            "frame_ms": round(FRAME_S * 1000),
            "silence": {"silence_delay": SILENCE_DELAY_S},
            "smart_turn": {
                "silence_delay": SILENCE_DELAY_S,
                "complete_delay": COMPLETE_DELAY_S,
                "incomplete_delay": INCOMPLETE_DELAY_S,
                "threshold": SMART_TURN_THRESHOLD,
                "audio": "0.2 s before speech start up to the VAD's decision (as the engine)",
            },
            "cues": {
                "eagerness": "medium",
                "speculate_after_ms": round(SPECULATE_AFTER_S * 1000),
                "transcripts": {
                    "cues": "Whisper base on the clip's audio, measured wall time",
                    "cues_instant_asr": "the same transcripts at no latency",
                    "cues_known_text": "the benchmark's text up to the last word spoken, "
                    "at no latency (an upper bound)",
                },
            },
            "pause_s": [
                min((u.pause_s for u in original if u.paused), default=None),
                max((u.pause_s for u in original if u.paused), default=None),
            ],
            "leading_silence_s": LEADING_SILENCE_S,
            "trailing_silence_s": TRAILING_SILENCE_S,
            "tts": "piper en_US-joe-medium via create_tts('piper') for English, eSpeak NG cmn "
            "via create_tts('espeak') for Chinese; onnxruntime seed fixed",
        },
    }
    if sweep:
        result["sweep"] = await run_sweep(first, everything)
    return result


def group_result(bench: Bench, outcomes: dict[str, list[Outcome]]) -> dict[str, Any]:
    results = {name: score(bench.clips, o, CUE_KINDS) for name, o in outcomes.items()}
    for name in CUE_STRATEGIES:
        results[name]["cue_readings"] = cue_summary(bench.clips, outcomes[name])
    by_language = {
        language: {
            name: score(
                [c for c in bench.clips if c.language == language],
                [o for c, o in zip(bench.clips, outcome, strict=True) if c.language == language],
                CUE_KINDS,
            )["premature_cutoffs"]
            for name, outcome in outcomes.items()
        }
        for language in ("en", "zh")
    }
    return {
        "utterances": len(bench.clips),
        "paused_utterances": sum(1 for c in bench.clips if c.pauses),
        "pauses": sum(len(c.pauses) for c in bench.clips),
        **results,
        "premature_by_language": by_language,
        "target_cues": {name: target(results["silence"], results[name]) for name in CUE_STRATEGIES},
    }


def all_result(
    first: Bench,
    second: Bench,
    outcomes_first: dict[str, list[Outcome]],
    outcomes_second: dict[str, list[Outcome]],
) -> dict[str, Any]:
    clips = first.clips + second.clips
    kinds = tuple(dict.fromkeys(ORIGINAL_KINDS + CUE_KINDS))
    results = {
        name: score(clips, outcomes_first[name] + outcomes_second[name], kinds)
        for name in outcomes_first
    }
    return {
        "utterances": len(clips),
        **{name: headline(r) for name, r in results.items()},
        "target_cues": {name: target(results["silence"], results[name]) for name in CUE_STRATEGIES},
    }


def target(silence_result: dict[str, Any], other_result: dict[str, Any]) -> dict[str, Any]:
    silence_cuts = silence_result["premature_cutoffs"]
    other_cuts = other_result["premature_cutoffs"]
    p50_silence, p50_other = silence_result["late_ms_p50"], other_result["late_ms_p50"]
    not_later = p50_silence is not None and p50_other is not None and p50_other <= p50_silence
    halved = _halved(other_cuts, silence_cuts)
    return {
        "premature_halved": halved,
        "median_not_later": not_later,
        "met": halved and not_later,
        "committed_in_pause_halved": _halved(
            other_result["committed_in_pause"], silence_result["committed_in_pause"]
        ),
    }


def _halved(other: int, silence: int) -> bool:
    return other * 2 <= silence if silence else other == 0


async def run_sweep(first: Bench, everything: Bench) -> dict[str, Any]:
    clips, judge = first.clips, first.judge
    sweep: dict[str, Any] = {"silence_delay": [], "smart_turn_threshold": []}
    for delay in SWEEP_SILENCE_DELAYS:
        outcomes = await first.evaluate(silence_config(delay))
        sweep["silence_delay"].append({"silence_delay": delay, **headline(score(clips, outcomes))})
    for threshold in SWEEP_THRESHOLDS:
        outcomes = await first.evaluate(smart_turn_config(threshold=threshold))
        sweep["smart_turn_threshold"].append(
            {"threshold": threshold, **headline(score(clips, outcomes))}
        )
    # Smart Turn is trained on turns ending ~0.2 s after speech (Pipecat's VAD stop_secs); the
    # engine hands it everything up to the VAD's decision (min_silence_ms later).
    tail_config = smart_turn_config(tail_s=SWEEP_TAIL_S)
    outcomes = await first.evaluate(tail_config)
    sweep[f"smart_turn_audio_cut_{SWEEP_TAIL_S:g}s_after_speech"] = {
        **headline(score(clips, outcomes)),
        "verdicts": verdict_summary(clips, outcomes, SMART_TURN_THRESHOLD),
    }
    # Pipecat's recommended pairing for Smart Turn: a VAD that closes after 0.2 s of silence.
    fast_vad = SileroVAD(
        threshold=VAD_SETTINGS["threshold"],
        min_speech_ms=VAD_SETTINGS["min_speech_ms"],
        min_silence_ms=200.0,
    )
    fast = Bench(clips, [await vad_trace(fast_vad, c.pcm) for c in clips], judge, first.transcriber)
    fast_result: dict[str, Any] = {}
    for config in (silence_config(), smart_turn_config()):
        outcomes = await fast.evaluate(config)
        fast_result["silence" if not config.smart_turn else "smart_turn"] = headline(
            score(clips, outcomes)
        )
    sweep["vad_min_silence_200ms"] = fast_result

    # The cues, over both groups.
    kinds = tuple(dict.fromkeys(ORIGINAL_KINDS + CUE_KINDS))

    async def over_all(config: Config) -> dict[str, Any]:
        return headline(score(everything.clips, await everything.evaluate(config), kinds))

    eagerness: dict[str, Any] = {}
    for level in SWEEP_EAGERNESS:
        eagerness[level] = {
            "silence": await over_all(scaled(silence_config(), level)),
            "smart_turn": await over_all(scaled(smart_turn_config(), level)),
            "cues": await over_all(cue_config("cues", eagerness=level)),
            "cues_known_text": await over_all(cue_config("cues_known_text", eagerness=level)),
        }
    sweep["eagerness_all_utterances"] = eagerness
    sweep["cues_fixed_asr_latency_all_utterances"] = [
        {"asr_latency_s": latency, **await over_all(cue_config("cues", asr_latency_s=latency))}
        for latency in SWEEP_ASR_LATENCIES_S
    ]
    sweep["cues_without_smart_turn_all_utterances"] = {
        name: await over_all(replace(cue_config(name), smart_turn=False)) for name in CUE_STRATEGIES
    }
    return sweep


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N of each group")
    parser.add_argument("--no-sweep", action="store_true", help="skip the settings sweep")
    parser.add_argument("--data-dir", type=Path, default=Path(".data"), help="Whisper's models")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    emit(asyncio.run(run(limit=args.limit, sweep=not args.no_sweep, data_dir=args.data_dir)))


if __name__ == "__main__":
    main()
