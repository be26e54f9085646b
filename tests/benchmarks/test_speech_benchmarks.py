"""The speech benchmarks: small real runs (three utterances each), the WER normaliser, and the
endpointing simulation on scripted VAD timelines in virtual time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from benchmarks import asr_roundtrip, endpointing
from benchmarks.asr_roundtrip import cardinal, edit_distance, normalise, ordinal
from benchmarks.endpointing import Clip, Config, VADTrace, assemble, simulate
from benchmarks.speech_data import Speech, silence
from pipeline.audio import PCM, WordTiming
from pipeline.endpoint_cues import Cue
from pipeline.turn_commands import TurnSettings
from plugins.contracts import VADEventKind

HEADLINE = ("premature_cutoffs", "late_ms_p50", "late_ms_p99")


@pytest.fixture(scope="module")
def whisper_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the joined Whisper weights, so the model is prepared and loaded once."""
    return tmp_path_factory.mktemp("whisper-data")


# ---------------------------------------------------------------- ASR round trip


@pytest.mark.parametrize(
    ("written", "transcribed"),
    [
        ("The meeting starts at 3:30 today.", "The meeting starts at 3.30 today."),
        ("My appointment is at 10:15.", "My appointment is at 1015."),
        ("It costs $12.50.", "it costs 12 dollars 50 cents"),
        ("The code is 4567.", "The code is four thousand five hundred sixty-seven."),
        ("Take the 21st exit.", "Take the twenty-first exit."),
        ("I'm sure I don't know.", "I am sure I do not know"),
        ("Don't, it's fine.", "Don\u2019t, it\u2019s fine."),
        ("Okay, you can't park after 6 pm.", "OK, you cannot park after 6PM."),
        ("About 50% of the 12,000 people.", "about fifty percent of the twelve thousand people"),
        ("What's 25 times 4?", "What is twenty five times four"),
    ],
)
def test_normalise_makes_written_and_spoken_forms_equal(written: str, transcribed: str) -> None:
    assert normalise(written) == normalise(transcribed)


def test_normalise_keeps_real_differences() -> None:
    assert normalise("Open the garage door.") != normalise("Open the grise door.")
    assert normalise("$47.99") != normalise("$1.47.99")


def test_number_words() -> None:
    assert cardinal(4567) == "four thousand five hundred sixty seven"
    assert cardinal(1_000_000) == "one million"
    assert [ordinal(n) for n in (1, 2, 3, 12, 20, 21)] == [
        "first",
        "second",
        "third",
        "twelfth",
        "twentieth",
        "twenty first",
    ]


def test_edit_distance_counts_substitutions_insertions_and_deletions() -> None:
    assert edit_distance("a b c".split(), "a b c".split()) == 0
    assert edit_distance("a b c".split(), "a x c d".split()) == 2
    assert edit_distance("a b c".split(), []) == 3


async def test_asr_roundtrip_small_run(whisper_data_dir: Path) -> None:
    result = await asr_roundtrip.run(limit=3, data_dir=whisper_data_dir)

    assert result["sentences"] == 3
    assert 0.0 <= result["wer"] <= 0.5
    assert 0.0 < result["rtf_asr"] < 5.0
    assert 0.0 < result["rtf_tts"] < 2.0
    assert result["reference_words"] > 10


def test_asr_roundtrip_prints_one_json_object(
    whisper_data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asr_roundtrip.main(["--limit", "1", "--data-dir", str(whisper_data_dir), "--channel", "pcmu"])

    (line,) = capsys.readouterr().out.splitlines()
    printed = json.loads(line)
    assert {"sentences", "wer", "rtf_asr", "rtf_tts"} <= printed.keys()
    assert printed["channel"] == "pcmu"


def _tone(hz: float, seconds: float = 1.0) -> PCM:
    t = np.arange(int(16_000 * seconds)) / 16_000
    return (8_000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def _power(pcm: PCM) -> float:
    middle = pcm[len(pcm) // 4 : -len(pcm) // 4].astype(np.float64)  # past the filters' edges
    return float(np.mean(middle**2))


@pytest.mark.parametrize("channel", ["pcmu", "pcma"])
def test_a_telephone_channel_keeps_the_voice_band_and_drops_what_is_above_it(channel: str) -> None:
    voice, high = _tone(1_000), _tone(6_000)
    heard = asr_roundtrip.through_channel(voice, channel)
    assert abs(len(heard) - len(voice)) <= 16_000 // 100  # the same second, give or take 10 ms
    n = min(len(heard), len(voice))
    assert np.corrcoef(heard[:n].astype(float), voice[:n].astype(float))[0, 1] > 0.95
    assert _power(asr_roundtrip.through_channel(high, channel)) < _power(high) / 100  # -20 dB
    assert asr_roundtrip.through_channel(voice, "wideband") is voice


# ---------------------------------------------------------------- endpointing simulation


def scripted_trace(
    seconds: float,
    speech: list[tuple[float, float]],
    *,
    decide_after: float = 0.4,
    gaps: Sequence[tuple[float, float]] = (),
) -> VADTrace:
    """A VAD timeline: each (start, end) span is voiced (except inside ``gaps``, too short for
    the VAD to end the speech); SPEECH_START is decided 0.2 s after the start, SPEECH_END
    ``decide_after`` after the end, both reported at the span edges."""
    frames = round(seconds / endpointing.FRAME_S)
    trace: VADTrace = []
    for index in range(frames):
        now = (index + 1) * endpointing.FRAME_S
        events: list[tuple[VADEventKind, float]] = []
        for start, end in speech:
            if abs(now - (start + 0.2)) < 1e-6:
                events.append((VADEventKind.SPEECH_START, start))
            if abs(now - (end + decide_after)) < 1e-6:
                events.append((VADEventKind.SPEECH_END, end))
        voiced = any(start < now <= end for start, end in speech) and not any(
            start < now <= end for start, end in gaps
        )
        trace.append((tuple(events), voiced))
    return trace


def one_go_clip(
    seconds: float, speech_end: float, known: tuple[tuple[float, str], ...] = ()
) -> Clip:
    return Clip("one go", "no_pause", "en", silence(seconds), speech_end, (), known)


def paused_clip(
    seconds: float,
    speech_end: float,
    resume: float,
    pause: float,
    known: tuple[tuple[float, str], ...] = (),
) -> Clip:
    pauses = ((resume - pause, resume),)
    return Clip("first … second", "silent_pause", "en", silence(seconds), speech_end, pauses, known)


async def test_silence_commits_exactly_at_the_silence_delay() -> None:
    trace = scripted_trace(4.0, [(0.5, 1.5)])
    clip = one_go_clip(4.0, 1.5)

    outcome = await simulate(0, clip, trace, endpointing.silence_config(0.8), never_called)

    assert outcome.commits == [pytest.approx(2.3)]


async def test_a_complete_verdict_commits_when_it_arrives() -> None:
    trace = scripted_trace(4.0, [(0.5, 1.5)])
    clip = one_go_clip(4.0, 1.5)

    async def complete(index: int, pcm: PCM, start: int, end: int) -> tuple[float | None, float]:
        # The engine's pre-roll: 0.2 s before the speech start, up to the VAD's decision.
        assert (start, end) == (round(0.3 * 16_000), round(1.9 * 16_000))
        return 0.9, 0.1

    outcome = await simulate(0, clip, trace, endpointing.smart_turn_config(), complete)

    assert outcome.commits == [pytest.approx(2.0)]  # decided at 1.9, inference 0.1 s


async def test_an_incomplete_verdict_bridges_a_pause_the_silence_timer_cuts() -> None:
    # Speech 0.5–1.5, a 1.0 s pause, speech 2.5–3.5: the silence timer fires at 2.3.
    trace = scripted_trace(8.0, [(0.5, 1.5), (2.5, 3.5)])
    clip = paused_clip(8.0, 3.5, 2.5, 1.0)

    async def incomplete_then_complete(
        index: int, pcm: PCM, start: int, end: int
    ) -> tuple[float | None, float]:
        return (0.1 if end < 2.5 * 16_000 else 0.9), 0.05

    silence_only = await simulate(0, clip, trace, endpointing.silence_config(0.8), never_called)
    smart = await simulate(
        0, clip, trace, endpointing.smart_turn_config(), incomplete_then_complete
    )
    scores = endpointing.score([clip, clip], [silence_only, smart])

    assert silence_only.commits[0] == pytest.approx(2.3)
    assert smart.commits == [pytest.approx(3.95)]
    assert scores["premature_cutoffs"] == 1 and scores["committed_in_pause"] == 1


async def test_voice_after_a_pause_holds_the_commit_until_the_vad_confirms() -> None:
    # A 0.7 s pause: the timer is due at 2.3, 0.1 s after speech resumed but before the VAD
    # confirmed it (at 2.4). The voiced frames hold the commit, so the turn is not cut.
    trace = scripted_trace(8.0, [(0.5, 1.5), (2.2, 3.5)])
    clip = paused_clip(8.0, 3.5, 2.2, 0.7)

    outcome = await simulate(0, clip, trace, endpointing.silence_config(0.8), never_called)
    scores = endpointing.score([clip], [outcome])

    assert outcome.commits == [pytest.approx(4.3)]
    assert scores["premature_cutoffs"] == 0 and scores["committed_in_pause"] == 0
    assert scores["late_ms_p50"] == pytest.approx(800.0)


async def never_called(index: int, pcm: PCM, start: int, end: int) -> tuple[float | None, float]:
    raise AssertionError("the silence configuration asked Smart Turn")


def test_configurations_share_the_silence_delay() -> None:
    silence_config: Config = endpointing.silence_config()
    smart: Config = endpointing.smart_turn_config()
    assert silence_config.turn.silence_delay == smart.turn.silence_delay == 0.8
    assert smart.turn == TurnSettings(silence_delay=0.8, complete_delay=0.3, incomplete_delay=2.5)


async def always_complete(index: int, pcm: PCM, start: int, end: int) -> tuple[float | None, float]:
    return 0.9, 0.05


async def test_a_trailing_conjunction_holds_a_pause_smart_turn_judged_complete() -> None:
    # Speech 0.5–1.5 ("… and"), a 1.0 s pause, speech 2.5–3.5. Smart Turn calls both pauses
    # complete; the transcript cue of the first one says more is coming.
    trace = scripted_trace(8.0, [(0.5, 1.5), (2.5, 3.5)])
    known = ((1.5, "I'll take the salad and"), (3.5, "I'll take the salad and a juice."))
    clip = paused_clip(8.0, 3.5, 2.5, 1.0, known)

    smart = await simulate(0, clip, trace, endpointing.smart_turn_config(), always_complete)
    cues = await simulate(
        0, clip, trace, endpointing.cue_config("cues_known_text"), always_complete
    )

    assert smart.commits[0] == pytest.approx(1.95)  # cut in the pause
    assert cues.commits == [pytest.approx(3.95)]  # complete + COMPLETE: at the verdict
    assert [r.cue for _, r in cues.readings] == [Cue.INCOMPLETE, Cue.COMPLETE]


@pytest.mark.parametrize(("latency", "commit"), [(0.3, 1.98), (1.0, 2.3)])
async def test_the_transcript_cue_arrives_after_the_asr_latency(
    latency: float, commit: float
) -> None:
    # Speech 0.5–1.5; quiet from the 1.52 frame starts the transcription at 1.68; the VAD
    # decides at 1.9 and Smart Turn says complete at 1.95. Until the transcript arrives the
    # wait is the silence delay (deadline 2.3).
    trace = scripted_trace(4.0, [(0.5, 1.5)])
    clip = one_go_clip(4.0, 1.5)
    calls: list[tuple[int, int]] = []

    async def transcribe(index: int, clip: Clip, start: int, end: int) -> tuple[str, float]:
        calls.append((start, end))
        return "Turn off the lights.", latency

    outcome = await simulate(
        0, clip, trace, endpointing.cue_config("cues"), always_complete, transcribe
    )

    assert calls == [(round(0.3 * 16_000), round(1.68 * 16_000))]
    assert outcome.commits == [pytest.approx(commit)]


async def test_voice_before_the_vads_end_of_speech_cancels_the_speculation() -> None:
    # A 0.3 s dip inside the speech starts a transcription at 1.18, voice at 1.32 cancels
    # it; the one that counts starts 0.16 s after the speech ends.
    trace = scripted_trace(4.0, [(0.5, 1.5)], gaps=[(1.0, 1.3)])
    clip = one_go_clip(4.0, 1.5)
    calls: list[int] = []

    async def transcribe(index: int, clip: Clip, start: int, end: int) -> tuple[str, float]:
        calls.append(end)
        return "Thanks.", 0.0

    await simulate(0, clip, trace, endpointing.cue_config("cues"), always_complete, transcribe)

    assert calls == [round(1.68 * 16_000)]


def test_known_text_is_what_the_words_said_so_far() -> None:
    pcm = np.zeros(round(0.6 * 16_000), dtype=np.int16)
    pcm[round(0.05 * 16_000) : round(0.55 * 16_000)] = 1000  # audible 0.05–0.55 s
    words = (WordTiming(0, 3, 0.0, 200.0), WordTiming(5, 8, 300.0, 500.0))
    clip = assemble("one, two", "no_pause", "en", [("one, two", Speech(pcm, 0.0, words))], [])

    # The clip starts with 0.5 s of silence; the audio was trimmed by 0.05 s.
    assert clip.speech_end_s == pytest.approx(1.0)
    assert clip.known_text_at(0.6) == ""
    assert clip.known_text_at(0.66) == "one,"  # the punctuation after the word comes with it
    assert clip.known_text_at(0.96) == "one, two"


async def test_endpointing_small_run(whisper_data_dir: Path) -> None:
    result = await endpointing.run(limit=3, data_dir=whisper_data_dir)

    assert result["utterances"] == 3
    assert result["paused_utterances"] == 2  # the list alternates paused / one go
    strategies = ("silence", "smart_turn", "cues", "cues_instant_asr", "cues_known_text")
    for name in strategies:
        scores = result[name]
        assert set(HEADLINE) <= scores.keys()
        assert 0 <= scores["premature_cutoffs"] <= result["paused_utterances"]
        assert 100.0 < scores["late_ms_p50"] <= scores["late_ms_p99"] < 4000.0
        assert scores["uncommitted"] == 0
    group = result["cue_group"]
    assert group["utterances"] == 3 and group["paused_utterances"] == 2
    assert set(strategies) <= group.keys()
    assert set(group["target_cues"]) == set(strategies[2:])
    assert result["all_utterances"]["utterances"] == 6
    assert result["settings"]["silence"]["silence_delay"] == 0.8
    assert {"silence_delay", "smart_turn_threshold", "eagerness_all_utterances"} <= result[
        "sweep"
    ].keys()


def test_endpointing_prints_one_json_object(
    capsys: pytest.CaptureFixture[str], whisper_data_dir: Path
) -> None:
    endpointing.main(["--limit", "1", "--no-sweep", "--data-dir", str(whisper_data_dir)])

    (line,) = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    assert result["utterances"] == 1 and set(HEADLINE) <= result["smart_turn"].keys()
    assert set(HEADLINE) <= result["cues"].keys()
