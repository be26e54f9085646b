"""The recorder (records/recorder.py): one timeline, the agent where it plays, cut where the
person interrupted, and a file that reads back — whole, or as far as it got."""

from __future__ import annotations

import io

import av
import numpy as np
import soundfile

from records.recorder import HEAD_BYTES, RATE, Piece, Recorder
from tests.loudness import loud_spans

FRAME = RATE // 50  # 20 ms


def tone(hz: float, ms: int, rate: int = RATE) -> np.ndarray:
    t = np.arange(rate * ms // 1000) / rate
    return (8000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def file_of(pieces: list[Piece]) -> bytes:
    """What a store returns: the last piece of each number, in order."""
    last = {piece.index: piece.data for piece in pieces}
    return b"".join(last[i] for i in sorted(last))


def frames(recorder: Recorder, pcm: np.ndarray) -> None:
    for start in range(0, pcm.size, FRAME):
        recorder.heard(pcm[start : start + FRAME])


def loud(channel: np.ndarray) -> list[tuple[int, int]]:
    return loud_spans(channel, RATE)


def test_both_sides_are_on_one_timeline_the_agent_where_it_plays_and_cut_when_interrupted() -> None:
    pieces: list[Piece] = []
    recorder = Recorder(pieces.append, output_rate=24_000)
    frames(recorder, tone(300, 1000))  # the person speaks for 1 s
    frames(recorder, np.zeros(RATE // 2, np.int16))
    recorder.said(tone(500, 2000, 24_000))  # a 2 s answer, sent at 1.5 s in one go
    frames(recorder, np.zeros(RATE, np.int16))
    recorder.cut()  # the person interrupts at 2.5 s: the rest was never heard
    frames(recorder, tone(300, 500))
    frames(recorder, np.zeros(RATE, np.int16))
    recorder.close()

    audio, rate = soundfile.read(io.BytesIO(file_of(pieces)), dtype="int16")
    assert rate == RATE and audio.shape == (RATE * 4, 2)
    person, agent = audio[:, 0], audio[:, 1]
    assert loud(person) == [(0, 1000), (2500, 3000)]
    assert loud(agent) == [(1500, 2500)]
    assert recorder.duration_ms == 4000


def test_answers_sent_faster_than_they_play_queue_one_after_the_other() -> None:
    pieces: list[Piece] = []
    recorder = Recorder(pieces.append, output_rate=RATE)
    recorder.said(tone(500, 300))
    recorder.said(np.zeros(RATE * 200 // 1000, np.int16))
    recorder.said(tone(500, 300))  # all three sent at once
    frames(recorder, np.zeros(RATE, np.int16))
    recorder.close()

    audio, _ = soundfile.read(io.BytesIO(file_of(pieces)), dtype="int16")
    assert loud(audio[:, 1]) == [(0, 300), (500, 800)]


def test_a_session_that_dies_before_close_leaves_a_readable_file_up_to_its_last_piece() -> None:
    pieces: list[Piece] = []
    recorder = Recorder(pieces.append, output_rate=RATE)
    rng = np.random.default_rng(7)
    minute = rng.normal(0, 3000, RATE * 60).astype(np.int16)  # noise: FLAC cannot shrink it
    frames(recorder, minute)  # never closed

    assert pieces[0].index == 0 and not pieces[0].final  # the provisional head
    assert len(pieces) > 2
    with av.open(io.BytesIO(file_of(pieces)), format="flac") as container:  # cut mid-frame
        decoded = [frame.to_ndarray() for frame in container.decode(audio=0)]
    audio = np.concatenate([block.reshape(-1, 2) for block in decoded])  # s16 interleaved
    assert minute.size - 3 * RATE < audio.shape[0] <= minute.size  # all but the last piece
    assert np.array_equal(audio[:, 0], minute[: audio.shape[0]])


def test_the_final_head_replaces_the_provisional_one() -> None:
    pieces: list[Piece] = []
    recorder = Recorder(pieces.append, output_rate=RATE)
    frames(recorder, np.random.default_rng(1).normal(0, 3000, RATE * 10).astype(np.int16))
    recorder.close()
    heads = [piece for piece in pieces if piece.index == 0]
    assert [head.final for head in heads] == [False, True]
    assert len(heads[1].data) == HEAD_BYTES
    with soundfile.SoundFile(io.BytesIO(file_of(pieces))) as f:
        assert f.frames == RATE * 10  # the stream info knows the length


def test_every_sample_of_an_answer_is_placed_in_its_own_answer() -> None:
    """The resampler holds back its filter's tail: flushed at each answer's end, every sample
    sent is recorded, none slips into the next answer or is lost at the end."""
    pieces: list[Piece] = []
    recorder = Recorder(pieces.append, output_rate=24_000)
    level = np.full(24_000 * 700 // 1000, 3000, np.int16)  # the fake voice: a constant level
    for _ in range(2):
        recorder.said(level)
        recorder.answered()
        frames(recorder, np.zeros(RATE, np.int16))
    recorder.close()
    audio, _ = soundfile.read(io.BytesIO(file_of(pieces)), dtype="int16")
    assert np.count_nonzero(np.abs(audio[:, 1]) > 1500) == 2 * RATE * 700 // 1000
    assert loud(audio[:, 1]) == [(0, 700), (1000, 1700)]
