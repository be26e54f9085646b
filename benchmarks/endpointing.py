"""Endpointing: premature cut-offs and lateness of silence-only vs Smart Turn turn-taking.

``python -m benchmarks.endpointing [--limit N]`` prints one JSON object.

Material. Each turn of ``benchmarks.speech_data.ENDPOINTING_UTTERANCES`` is synthesised by Piper
(seeded noise) at 16 kHz and trimmed to its audible part; a turn with a mid-sentence pause is
two separate syntheses (its halves) joined by 0.6–1.2 s of digital silence. Every clip starts
with 0.5 s of silence and ends with ``TRAILING_SILENCE_S`` of it.

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
- a commit puts the coordinator in THINKING, and nothing answers: if the speaker goes on after
  a premature commit, the coordinator's barge-in rule turns the rest into a new turn, whose
  commit ends the utterance.

The VAD and its settings are the same for both configurations, and the VAD never sees the
coordinator (the engine resets it only on explicit commits), so its decisions are computed once
per clip. Only the Smart Turn inference times depend on the machine; each distinct piece of
audio is judged once and reused by every configuration.

Metrics. *Premature cut-off*: the utterance had a commit before its final speech ended — in the
pause, or in the first ≈ 0.25 s of the second half, before the VAD has confirmed that speech
resumed (``min_speech_ms`` plus a window); either way the turn was committed while the speaker
was not done. ``committed_in_pause`` counts only commits inside the silence itself. *Late*: end
of the final speech (the last audible sample) → the first commit after it (for a cut-off
utterance, the commit of the turn its second half became). An utterance with no commit after
its end counts in ``uncommitted``. ``target`` checks "Smart Turn at most half the premature
cut-offs at an equal or lower median lateness", and the same halving for ``committed_in_pause``.

Sweep (``--no-sweep`` skips it; it reuses the clips, VAD decisions and judged audio): the silence
delay of the silence-only configuration; Smart Turn's threshold; Smart Turn given the audio cut
0.2 s after the VAD's speech end (what Pipecat feeds it; the engine gives it everything up to the
VAD's decision, ``min_silence_ms`` later); and both configurations with a Silero VAD that closes
after 200 ms of silence instead of 400.

Caveats: the first half of a paused utterance is synthesised on its own, so Piper speaks it as a
whole sentence, probably with a finished sentence's intonation, where a person hesitating
mid-sentence would not; and Smart Turn was trained on human speech, not Piper's. Its verdicts
here are a pessimistic estimate for the model, not a measurement on real users.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from benchmarks.common import emit, percentile
from benchmarks.speech_data import (
    ENDPOINTING_UTTERANCES,
    EndpointingUtterance,
    seed_speech_synthesis,
    silence,
    synthesize,
    trim_silence,
    warm_up,
)
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.turns import (
    Command,
    CommitUserTurn,
    TurnCoordinator,
    TurnSettings,
    UserSpeechResumed,
    UserSpeechStarted,
    UserSpeechStopped,
)
from plugins.contracts import TTS, VADEventKind
from plugins.endpointing.smart_turn import SmartTurnEndpointer
from plugins.tts import create_tts
from plugins.vad.silero import SileroVAD

log = logging.getLogger("benchmarks.endpointing")

FRAME_S = 0.02
FRAME_SAMPLES = round(FRAME_S * INPUT_SAMPLE_RATE)
LEADING_SILENCE_S = 0.5
TRAILING_SILENCE_S = 4.0
PREROLL_S = 0.2
"""Audio the engine keeps from before the VAD's speech start (``Engine._begin_utterance``)."""
MAX_PREROLL_S = 1.5

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


# ---------------------------------------------------------------- material


@dataclass(frozen=True, slots=True)
class Clip:
    utterance: EndpointingUtterance
    pcm: PCM
    speech_end_s: float
    """End of the final speech (last audible sample)."""
    resume_s: float | None
    """Where the second half starts, for a paused utterance."""


async def build_clip(tts: TTS, utterance: EndpointingUtterance) -> Clip:
    first = trim_silence((await synthesize(tts, utterance.first)).pcm)
    parts = [silence(LEADING_SILENCE_S), first]
    resume_s: float | None = None
    if utterance.second is not None:
        second = trim_silence((await synthesize(tts, utterance.second)).pcm)
        parts.append(silence(utterance.pause_s))
        resume_s = sum(p.size for p in parts) / INPUT_SAMPLE_RATE
        parts.append(second)
    speech_end_s = sum(p.size for p in parts) / INPUT_SAMPLE_RATE
    parts.append(silence(TRAILING_SILENCE_S))
    return Clip(utterance, np.concatenate(parts), speech_end_s, resume_s)


VADTrace = list[tuple[tuple[tuple[VADEventKind, float], ...], bool]]


async def vad_trace(vad: SileroVAD, pcm: PCM) -> VADTrace:
    """Per 20 ms frame: the VAD events it caused (kind, position in s) and whether it was voiced."""
    stream = vad.create_stream()
    trace: VADTrace = []
    for offset in range(0, pcm.size - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        events = await stream.process(pcm[offset : offset + FRAME_SAMPLES])
        trace.append((tuple((e.kind, e.at_ms / 1000.0) for e in events), stream.voiced))
    return trace


# ---------------------------------------------------------------- Smart Turn, judged once per audio


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


@dataclass
class Outcome:
    commits: list[float] = field(default_factory=list)
    verdicts: list[tuple[float, float | None]] = field(default_factory=list)
    """(decision time, probability) of each Smart Turn call."""


JudgeFn = Callable[[int, PCM, int, int], Awaitable[tuple[float | None, float]]]


async def simulate(
    clip_index: int,
    clip: Clip,
    trace: VADTrace,
    config: Config,
    judge: JudgeFn,
) -> Outcome:
    """Run one clip through the coordinator in virtual time (see the module docstring)."""
    coordinator = TurnCoordinator(settings=config.turn)
    outcome = Outcome()
    pending: list[tuple[float, int, bool | None]] = []  # (due, turn id, complete)
    turn_start = 0
    clock = 0.0

    async def handle(commands: list[Command], now: float) -> None:
        nonlocal turn_start
        for command in commands:
            if isinstance(command, UserSpeechStarted):
                back = min(now - command.at + PREROLL_S, MAX_PREROLL_S)
                turn_start = max(0, round((now - back) * INPUT_SAMPLE_RATE))
            elif isinstance(command, UserSpeechStopped) and config.smart_turn:
                cut = now if config.tail_s is None else min(now, command.at + config.tail_s)
                end = round(cut * INPUT_SAMPLE_RATE)
                probability, inference_s = await judge(clip_index, clip.pcm, turn_start, end)
                outcome.verdicts.append((now, probability))
                complete = None if probability is None else probability >= config.threshold
                pending.append((now + inference_s, command.turn_id, complete))
            elif isinstance(command, UserSpeechResumed):
                pending.clear()
            elif isinstance(command, CommitUserTurn):
                outcome.commits.append(now)
                pending.clear()

    for index, (events, voiced) in enumerate(trace):
        now = (index + 1) * FRAME_S
        # What happens between two frames: the coordinator's deadlines and arriving verdicts.
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
                _, turn_id, complete = pending.pop(0)
                coordinator.on_endpoint_verdict(turn_id, complete, when)
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
    return outcome


# ---------------------------------------------------------------- scoring


def score(clips: Sequence[Clip], outcomes: Sequence[Outcome]) -> dict[str, Any]:
    premature = {"silent_pause": 0, "filled_pause": 0, "no_pause": 0}
    in_pause = 0
    late_ms: list[float] = []
    uncommitted = 0
    for clip, outcome in zip(clips, outcomes, strict=True):
        resume = clip.resume_s
        if resume is not None and any(
            resume - clip.utterance.pause_s <= t < resume for t in outcome.commits
        ):
            in_pause += 1
        if any(t < clip.speech_end_s for t in outcome.commits):
            kind = "no_pause" if not clip.utterance.paused else "silent_pause"
            if clip.utterance.filler:
                kind = "filled_pause"
            premature[kind] += 1
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


# ---------------------------------------------------------------- the run


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


async def evaluate(
    clips: Sequence[Clip], traces: Sequence[VADTrace], config: Config, judge: JudgeFn
) -> list[Outcome]:
    return [
        await simulate(index, clip, trace, config, judge)
        for index, (clip, trace) in enumerate(zip(clips, traces, strict=True))
    ]


def headline(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result[k] for k in ("premature_cutoffs", "late_ms_p50", "late_ms_p99")}


async def run(*, limit: int | None = None, sweep: bool = True) -> dict[str, Any]:
    """Simulate the first ``limit`` utterances (all by default) in every configuration."""
    utterances = ENDPOINTING_UTTERANCES[:limit] if limit is not None else ENDPOINTING_UTTERANCES
    seed_speech_synthesis()
    tts = create_tts("piper")
    await warm_up(tts)
    clips = [await build_clip(tts, utterance) for utterance in utterances]
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
    judge = Judge(endpointer)

    silence_outcomes = await evaluate(clips, traces, silence_config(), judge)
    smart_config = smart_turn_config()
    smart_outcomes = await evaluate(clips, traces, smart_config, judge)
    silence_result = score(clips, silence_outcomes)
    smart_result = score(clips, smart_outcomes)
    smart_result["inference_ms_p50"] = percentile(judge.inference_ms, 50)
    smart_result["inference_ms_p99"] = percentile(judge.inference_ms, 99)

    paused = [c for c in clips if c.utterance.paused]
    result: dict[str, Any] = {
        "utterances": len(clips),
        "silence": silence_result,
        "smart_turn": smart_result,
        "paused_utterances": len(paused),
        "filled_pauses": sum(1 for c in paused if c.utterance.filler),
        "smart_turn_verdicts": verdict_summary(clips, smart_outcomes, SMART_TURN_THRESHOLD),
        "target": target(silence_result, smart_result),
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
            "pause_s": [
                min((c.utterance.pause_s for c in paused), default=None),
                max((c.utterance.pause_s for c in paused), default=None),
            ],
            "leading_silence_s": LEADING_SILENCE_S,
            "trailing_silence_s": TRAILING_SILENCE_S,
            "tts": "piper en_US-joe-medium via create_tts('piper'), onnxruntime seed fixed",
        },
    }
    if sweep:
        result["sweep"] = await run_sweep(clips, traces, judge)
    return result


def target(silence_result: dict[str, Any], smart_result: dict[str, Any]) -> dict[str, Any]:
    silence_cuts = silence_result["premature_cutoffs"]
    smart_cuts = smart_result["premature_cutoffs"]
    p50_silence, p50_smart = silence_result["late_ms_p50"], smart_result["late_ms_p50"]
    not_later = p50_silence is not None and p50_smart is not None and p50_smart <= p50_silence
    halved = _halved(smart_cuts, silence_cuts)
    return {
        "premature_halved": halved,
        "median_not_later": not_later,
        "met": halved and not_later,
        "committed_in_pause_halved": _halved(
            smart_result["committed_in_pause"], silence_result["committed_in_pause"]
        ),
    }


def _halved(smart: int, silence: int) -> bool:
    return smart * 2 <= silence if silence else smart == 0


async def run_sweep(
    clips: Sequence[Clip], traces: Sequence[VADTrace], judge: Judge
) -> dict[str, Any]:
    sweep: dict[str, Any] = {"silence_delay": [], "smart_turn_threshold": []}
    for delay in SWEEP_SILENCE_DELAYS:
        outcomes = await evaluate(clips, traces, silence_config(delay), judge)
        sweep["silence_delay"].append({"silence_delay": delay, **headline(score(clips, outcomes))})
    for threshold in SWEEP_THRESHOLDS:
        outcomes = await evaluate(clips, traces, smart_turn_config(threshold=threshold), judge)
        sweep["smart_turn_threshold"].append(
            {"threshold": threshold, **headline(score(clips, outcomes))}
        )
    # Smart Turn is trained on turns ending ~0.2 s after speech (Pipecat's VAD stop_secs); the
    # engine hands it everything up to the VAD's decision (min_silence_ms later).
    tail_config = smart_turn_config(tail_s=SWEEP_TAIL_S)
    outcomes = await evaluate(clips, traces, tail_config, judge)
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
    fast_traces = [await vad_trace(fast_vad, clip.pcm) for clip in clips]
    fast: dict[str, Any] = {}
    for config in (silence_config(), smart_turn_config()):
        outcomes = await evaluate(clips, fast_traces, config, judge)
        fast["silence" if not config.smart_turn else "smart_turn"] = headline(
            score(clips, outcomes)
        )
    sweep["vad_min_silence_200ms"] = fast
    return sweep


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N utterances")
    parser.add_argument("--no-sweep", action="store_true", help="skip the settings sweep")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    emit(asyncio.run(run(limit=args.limit, sweep=not args.no_sweep)))


if __name__ == "__main__":
    main()
