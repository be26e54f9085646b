"""The recording's timeline (records/timeline.py) and the session's tap that builds it
(runtime/recording.py Rules 4, 5): what was said when, on the recording's clock."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import numpy as np
import pytest

from memory.crypto import Keyring
from pipeline import events as ev
from records import timeline as timeline_module
from records.audio_store import InMemoryAudioStore
from records.recorder import RATE
from records.recordings import InMemoryRecordingIndex, Recording
from records.timeline import Timeline, open_timeline, seal_timeline
from runtime.recording import SessionRecording

FRAME = RATE // 50  # 20 ms


def test_an_interrupted_answer_ends_at_the_cut_and_its_later_words_were_not_heard() -> None:
    timeline = Timeline()
    timeline.agent_said("it_1", "one two ", more=True)  # the transcript comes before the audio
    timeline.agent_audio("it_1", 1_000, 2_000)
    timeline.agent_said("it_1", "three four", more=True)
    timeline.agent_audio("it_1", 2_000, 3_000)
    timeline.agent_cut(2_000)
    timeline.agent_said("it_1", "one two three four")  # the done event: the text stays
    ((segment),) = timeline.to_json()["segments"]
    assert (segment["start_ms"], segment["end_ms"], segment["interrupted"]) == (1_000, 2_000, True)
    assert segment["words"] == [
        {"text": "one", "start_ms": 1_000, "end_ms": 1_400},
        {"text": "two", "start_ms": 1_400, "end_ms": 1_800},
        {"text": "three", "start_ms": 1_800, "end_ms": 2_467},  # begun before the cut
        {"text": "four", "start_ms": 2_467, "end_ms": 3_000, "heard": False},
    ]


def test_segments_are_in_time_order_and_words_share_their_span_by_length() -> None:
    timeline = Timeline()
    timeline.agent_audio("it_a", 500, 2_500)
    timeline.agent_said("it_a", "你好，世界")
    timeline.person_started("it_p", 200)  # said before the answer began (the event came later)
    timeline.person_stopped("it_p", 400)
    timeline.person_said("it_p", "hi")
    timeline.person_started("it_q", 3_000)  # a cough: no words, no segment
    timeline.person_stopped("it_q", 3_100)
    timeline.agent_said("it_text_only", "typed answers never play")
    timeline.agent_cut(5_000)  # nothing was playing then: nothing changes
    segments = timeline.to_json()["segments"]
    assert [(s["side"], s["text"], s["interrupted"]) for s in segments] == [
        ("person", "hi", False),
        ("agent", "你好，世界", False),
    ]
    assert [w["text"] for w in segments[1]["words"]] == ["你", "好", "，", "世", "界"]
    assert [w["start_ms"] for w in segments[1]["words"]] == [500, 900, 1_300, 1_700, 2_100]


def test_a_timeline_is_bounded_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_module, "MAX_CHARS", 10)
    timeline = Timeline()
    timeline.agent_audio("it_1", 0, 100)
    timeline.agent_said("it_1", "0123456789")
    timeline.agent_audio("it_2", 100, 200)
    timeline.agent_said("it_2", "more")
    out = timeline.to_json()
    assert out["truncated"] is True and [s["text"] for s in out["segments"]] == ["0123456789"]


def test_a_sealed_timeline_opens_only_for_its_recording() -> None:
    keyring, timeline = Keyring.generate(), Timeline()
    timeline.agent_audio("it_1", 0, 100)
    timeline.agent_said("it_1", "secret words")
    sealed = seal_timeline(keyring, "t1", "rec_1", timeline)
    assert b"secret" not in sealed.blob
    assert open_timeline(keyring, "t1", "rec_1", sealed) == timeline.to_json()
    with pytest.raises(Exception):  # noqa: B017 (the AEAD's own error)
        open_timeline(keyring, "t1", "rec_2", sealed)


def _audio(item_id: str, ms: int) -> ev.OutputAudioDelta:
    pcm = np.full(24_000 * ms // 1000, 1000, np.int16)
    return ev.OutputAudioDelta("resp_1", item_id, 0, 0, base64.b64decode(base64.b64encode(pcm)))


async def test_the_tap_waits_for_the_notice_and_places_speech_on_the_recordings_clock() -> None:
    recording = Recording("t1", f"rec_{'a' * 32}", "ann", "vs_1", "th_1", "role_1", "local", "k",
                          datetime.now(UTC))  # fmt: skip
    index = InMemoryRecordingIndex()
    await index.add(recording)
    keyring = Keyring.generate()
    tap = SessionRecording(recording, keyring=keyring, store=InMemoryAudioStore(), index=index,
                           output_rate=24_000, notice=True)  # fmt: skip
    silence = np.zeros(FRAME, np.int16)
    for _ in range(10):  # 200 ms before the notice plays: not recorded
        tap.heard(silence)
    tap.sent(ev.OutputAudioTranscriptDelta("resp_1", "it_n", 0, 0, "Recorded."))
    tap.sent(_audio("it_n", 300))
    tap.sent(ev.OutputAudioDone("resp_1", "it_n", 0, 0))
    for _ in range(50):  # one second, heard while the notice plays
        tap.heard(silence)
    # The session's input stream started 200 ms before the recording.
    tap.sent(ev.SpeechStarted(audio_start_ms=700, item_id="it_p"))
    tap.sent(ev.SpeechStopped(audio_end_ms=1_100, item_id="it_p"))
    tap.sent(ev.TranscriptionCompleted("it_p", "hello there", ev.DurationUsage(0.4)))
    await tap.close()
    assert tap.recorder.duration_ms == 1_000
    sealed = await index.timeline("t1", recording.id)
    assert sealed is not None
    segments = open_timeline(keyring, "t1", recording.id, sealed)["segments"]
    assert [(s["side"], s["start_ms"], s["end_ms"], s["text"]) for s in segments] == [
        ("agent", 0, 300, "Recorded."),
        ("person", 500, 900, "hello there"),
    ]
