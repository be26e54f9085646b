"""The call's voice track (``runtime.webrtc.calls.VoiceTrack``, rule 2) frame by frame, with no
network: what it plays, what it reports as played, and the GA events it sends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from pipeline import events as ev
from runtime.realtime.session import VoiceSession
from runtime.webrtc.track import VoiceTrack

RATE = 24_000
FRAME = RATE // 50


@dataclass
class Outbox:
    current: set[int] = field(default_factory=set)
    sent: list[ev.ServerEvent] = field(default_factory=list)

    def is_current(self, generation: int) -> bool:
        return generation in self.current

    def send(self, event: ev.ServerEvent) -> None:
        self.sent.append(event)


@dataclass
class Engine:
    played: list[tuple[int, float]] = field(default_factory=list)

    def on_playback(self, generation: int, played_ms: float) -> None:
        self.played.append((generation, played_ms))


@dataclass
class Format:
    rate: int = RATE


@dataclass
class Config:
    output_format: Format = field(default_factory=Format)


@dataclass
class Session:
    outbox: Outbox = field(default_factory=Outbox)
    engine: Engine = field(default_factory=Engine)
    config: Config = field(default_factory=Config)


def track() -> tuple[VoiceTrack, Session]:
    session = Session()
    voice = VoiceTrack()
    voice.bind(cast("VoiceSession", session))
    return voice, session


def audio(generation: int, response_id: str, ms: int, level: int = 1000) -> ev.OutputAudioDelta:
    pcm = np.full(RATE * ms // 1000, level, dtype=np.int16)
    return ev.OutputAudioDelta(response_id, "item", 0, 0, pcm.tobytes(), generation=generation)


def done(response_id: str, status: str) -> ev.ResponseDone:
    return ev.ResponseDone(ev.Response(id=response_id, status=status))


def frames(voice: VoiceTrack, count: int) -> list[np.ndarray[Any, Any]]:
    return [voice._next_samples() for _ in range(count)]


def kinds(session: Session) -> list[str]:
    return [type(e).__name__ for e in session.outbox.sent]


def test_an_answer_plays_in_20_ms_frames_reports_its_playout_and_stops_after_done() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    assert voice.take(audio(1, "resp_1", 50)) is True  # audio is the track's, not the channel's
    played = frames(voice, 3)
    assert [int(f.max()) for f in played] == [1000, 1000, 1000]
    assert played[2][: FRAME // 2].max() == 1000 and played[2][FRAME // 2 :].max() == 0
    assert session.engine.played == [(1, 20.0), (1, 40.0), (1, 50.0)]
    assert kinds(session) == ["OutputAudioBufferStarted"]
    frames(voice, 2)
    assert kinds(session) == ["OutputAudioBufferStarted"]  # no response.done yet
    session.outbox.current.discard(1)
    assert voice.take(done("resp_1", "completed")) is False  # still sent to the client
    frames(voice, 1)
    assert kinds(session) == ["OutputAudioBufferStarted", "OutputAudioBufferStopped"]
    assert session.outbox.sent[1] == ev.OutputAudioBufferStopped("resp_1")


def test_a_completed_answer_plays_to_its_end_even_after_its_turn_is_over() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    voice.take(audio(1, "resp_1", 60))
    frames(voice, 1)
    session.outbox.current.clear()
    voice.take(done("resp_1", "completed"))
    rest = frames(voice, 3)
    assert [int(f.max()) for f in rest] == [1000, 1000, 0]
    assert kinds(session) == ["OutputAudioBufferStarted", "OutputAudioBufferStopped"]


def test_an_interrupted_answer_is_cut_at_once_and_cleared() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    voice.take(audio(1, "resp_1", 300))
    frames(voice, 5)
    session.outbox.current.discard(1)  # the user barged in
    after = frames(voice, 2)
    assert all(int(f.max()) == 0 for f in after)
    assert kinds(session) == ["OutputAudioBufferStarted", "OutputAudioBufferCleared"]
    assert session.engine.played[-1] == (1, 100.0)  # the heard prefix: five frames
    session.outbox.current.add(2)
    voice.take(audio(2, "resp_2", 20, level=500))
    assert int(frames(voice, 1)[0].max()) == 500
    assert kinds(session)[-1] == "OutputAudioBufferStarted"


def test_a_held_answer_pauses_in_the_track_and_plays_on_where_it_paused() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    voice.take(audio(1, "resp_1", 100))
    frames(voice, 2)
    voice.take(ev.OutputAudioPaused("resp_1", 1))
    held = frames(voice, 10)
    assert all(int(f.max()) == 0 for f in held)
    assert session.engine.played[-1] == (1, 40.0)
    voice.take(ev.OutputAudioResumed("resp_1", 1))
    resumed = frames(voice, 3)
    assert [int(f.max()) for f in resumed] == [1000, 1000, 1000]
    assert session.engine.played[-1] == (1, 100.0)
    assert "OutputAudioBufferCleared" not in kinds(session)


def test_the_clients_clear_drops_the_rest_and_says_so() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    voice.take(audio(1, "resp_1", 200))
    frames(voice, 1)
    voice.clear()
    assert all(int(f.max()) == 0 for f in frames(voice, 3))
    assert kinds(session) == ["OutputAudioBufferStarted", "OutputAudioBufferCleared"]


def test_a_detached_track_plays_silence_and_forgets_its_queue() -> None:
    voice, session = track()
    session.outbox.current.add(1)
    voice.take(audio(1, "resp_1", 200))
    voice.detach()
    assert all(int(f.max()) == 0 for f in frames(voice, 3))
    assert session.outbox.sent == [] and session.engine.played == []
