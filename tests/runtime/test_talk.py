"""``openrealtime talk`` against the real server over a real WebSocket, with the sound card
replaced at its boundary: a WAV-backed microphone (``WavMicrophone``, tone bursts the energy VAD
takes for speech, generated here) and a capturing speaker that plays at real-time pace.

In process: a spoken turn, barge-in and the heard prefix, half duplex, push-to-talk, a dropped
connection. Through the real entry point (``python -m runtime.cli talk`` with ``--input-wav`` /
``--output-wav``): SIGINT ends cleanly with status 0. And PortAudio missing gives a clear error.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import threading
import types
import wave
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import runtime.cli.command as cli
from pipeline.audio import PCM
from plugins.fakes import FakeASR, FakeBrain, FakeTTS
from runtime.client import Received
from runtime.config import Settings
from runtime.server import RunningServer, running_server
from runtime.talk import Talk, TalkConversation, TalkMode
from runtime.talk.audio import DeviceNotFound
from runtime.talk.commands import Notice, Play, Send, Show, StopPlayback
from runtime.talk.portaudio import (
    SoundDeviceMicrophone,
    SoundDeviceSpeaker,
    list_devices,
    pick_device,
)
from runtime.talk.terminal import TranscriptPrinter
from runtime.talk.wav import CapturingSpeaker, WavMicrophone, read_wav
from tests.fault_proxy import FaultProxy
from tests.runtime.conftest import fake_plugins
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
LONG_ANSWER = (
    "First sentence of a long answer. Second sentence goes on and on. "
    "Third sentence is here too. Fourth sentence ends it all."
)
TTS_MS_PER_CHAR = 40.0


def tone(ms: int, rate: int = 16_000, amplitude: int = 6000) -> PCM:
    t = np.arange(rate * ms // 1000)
    return (amplitude * np.sin(2 * np.pi * 220 * t / rate)).astype(np.int16)


def silence(ms: int, rate: int = 16_000) -> PCM:
    return np.zeros(rate * ms // 1000, dtype=np.int16)


def write_wav(path: Path, pcm: PCM, rate: int) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm.astype("<i2").tobytes())
    return path


class Keys:
    """The keyboard: ``press("")`` is Enter alone, ``press("hello")`` a typed line."""

    def __init__(self) -> None:
        self._lines: asyncio.Queue[str] = asyncio.Queue()

    def press(self, line: str = "") -> None:
        self._lines.put_nowait(line)

    async def lines(self) -> AsyncIterator[str]:
        while True:
            yield await self._lines.get()


class Running:
    """A ``Talk`` running as a task, with its terminal output captured."""

    def __init__(self, talk: Talk, out: io.StringIO, err: io.StringIO) -> None:
        self.talk = talk
        self.out = out
        self.err = err
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(talk.run(self.stop), name="test-talk")

    def events(self, kind: str) -> list[dict[str, object]]:
        return self.talk.client.events(kind)

    async def end(self) -> int:
        self.stop.set()
        return await asyncio.wait_for(self.task, 10)


@contextlib.asynccontextmanager
async def talking(
    url: str,
    token: str,
    *,
    microphone: WavMicrophone,
    speaker: CapturingSpeaker,
    **options: Any,
) -> AsyncIterator[Running]:
    out, err = io.StringIO(), io.StringIO()
    talk = Talk(
        url, token, microphone=microphone, speaker=speaker, out=out, err=err, live=False, **options
    )
    running = Running(talk, out, err)
    try:
        yield running
    finally:
        if not running.task.done():
            await running.end()


@pytest.fixture
async def long_answer_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    plugins = fake_plugins(
        asr=FakeASR(["wait stop"]),
        brain=FakeBrain([LONG_ANSWER, "Okay, I stopped."]),
        tts=FakeTTS(ms_per_char=TTS_MS_PER_CHAR),
    )
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=300, min_interrupt_ms=300
    )
    async with running_server(settings, plugins=plugins) as running:
        yield running


@pytest.fixture
async def slow_tts_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """The default scripted turn, with an answer of about 1.2 s of audio."""
    settings = Settings(
        port=0, storage="memory", data_dir=tmp_path, silence_ms=300, min_interrupt_ms=300
    )
    plugins = fake_plugins(tts=FakeTTS(ms_per_char=30.0))
    async with running_server(settings, plugins=plugins) as running:
        yield running


async def test_a_spoken_turn_is_answered_played_and_printed(
    server: RunningServer, tmp_path: Path
) -> None:
    question = write_wav(
        tmp_path / "q.wav", np.concatenate([silence(200), tone(600), silence(100)]), 16_000
    )
    speaker = CapturingSpeaker(44_100)  # not a server rate: the client resamples 24 kHz to it
    microphone = WavMicrophone.from_file(question)
    async with talking(server.ws_url, server.token, microphone=microphone, speaker=speaker) as run:
        await until(lambda: "assistant: " in run.out.getvalue())
        # The server ends the answer at its real-time estimate; the speaker may still be
        # playing the last of it, and says so when it is done.
        await until(lambda: any(r.final for r in run.talk.conversation.reports))
        assert await run.end() == 0
    lines = run.out.getvalue().splitlines()
    assert lines == [
        "you: what is the weather",
        "assistant: Sure. Here is the answer. Anything else?",
    ]
    assert "connected" in run.err.getvalue() and server.token not in run.err.getvalue()
    (done,) = run.events("response.done")
    generation = done["response"]["generation"]  # type: ignore[index]
    # The whole answer reached the speaker (resampled), and the final report said so.
    sent_ms = sum(len(m.audio or b"") for m in run.talk.client.audio(generation)) / 2 / 24
    played = speaker.played_audio(generation)
    assert abs(played.size / 44.1 - sent_ms) < 20
    assert float(np.sqrt(np.mean(played.astype(np.float64) ** 2))) > 1000  # not silence
    final = [r for r in run.talk.conversation.reports if r.final]
    assert [r.generation for r in final] == [generation]
    assert abs(final[0].played_ms - sent_ms) < 20
    # Ending sent openrealtime.session.close: the server closed with 1000 and let the session go.
    assert run.talk.client.close_code == 1000
    await until(lambda: not server.services.live_sessions)


async def test_barge_in_stops_the_generation_and_reports_what_the_speaker_played(
    long_answer_server: RunningServer,
) -> None:
    server = long_answer_server
    speaker = CapturingSpeaker(24_000)
    microphone = WavMicrophone()
    keys = Keys()
    async with talking(
        server.ws_url, server.token, microphone=microphone, speaker=speaker, keys=keys.lines()
    ) as run:
        await until(run.talk.connected.is_set)
        keys.press("tell me a story")
        await until(lambda: bool(run.events("response.created")))
        generation = int(run.events("response.created")[0]["response"]["generation"])  # type: ignore[index]
        await until(lambda: speaker.played_ms(generation) >= 800)
        microphone.append(tone(700))  # talk over the assistant
        await until(lambda: "assistant (interrupted): " in run.out.getvalue())
        done = next(
            e
            for e in run.events("response.done")
            if e["response"]["generation"] == generation  # type: ignore[index]
        )
        await asyncio.sleep(0.3)  # audio of the cut generation would show up in the capture now
        assert await run.end() == 0
    response = done["response"]
    assert response["status"] == "cancelled" and response["interrupted"]  # type: ignore[index]
    assert run.events("openrealtime.response.interrupted")[0]["reason"] == "barge_in"
    assert run.events("openrealtime.output_audio.paused")  # held first (pause_playback)
    # The final report is exactly what the capture played of the generation: nothing of it was
    # played after the stop, and the report came from the speaker, not an estimate.
    final = [r for r in run.talk.conversation.reports if r.final and r.generation == generation]
    assert len(final) == 1
    played_ms = speaker.played_audio(generation).size / 24
    assert final[0].played_ms == pytest.approx(played_ms, abs=0.1)
    assert 800 <= played_ms < len(LONG_ANSWER) * TTS_MS_PER_CHAR
    # The heard prefix the server journaled matches that much audio (cut back to a word).
    heard = str(response["heard_text"])  # type: ignore[index]
    assert LONG_ANSWER.startswith(heard) and heard
    assert played_ms / TTS_MS_PER_CHAR - 12 <= len(heard) <= played_ms / TTS_MS_PER_CHAR + 1
    assert f"assistant (interrupted): {heard}" in run.out.getvalue().splitlines()
    assert "you: tell me a story" in run.out.getvalue().splitlines()


async def test_half_duplex_holds_the_microphone_while_the_answer_plays(
    slow_tts_server: RunningServer,
) -> None:
    server = slow_tts_server
    speaker = CapturingSpeaker(24_000)
    microphone = WavMicrophone(np.concatenate([silence(200), tone(600), silence(100)]))
    async with talking(
        server.ws_url,
        server.token,
        microphone=microphone,
        speaker=speaker,
        mode=TalkMode.HALF_DUPLEX,
    ) as run:
        await until(lambda: bool(run.talk.client.audio()))
        generation = run.talk.client.audio()[0].generation
        await until(lambda: speaker.played_ms(generation) > 0)
        held_before = run.talk.frames_held
        microphone.append(tone(600))  # the speaker's sound reaching the microphone
        await until(lambda: "assistant: " in run.out.getvalue())
        assert run.talk.frames_held - held_before >= 600 / 20  # none of the echo was sent
        assert run.events("openrealtime.input.paused")
        await until(lambda: bool(run.events("openrealtime.input.resumed")))
        # The microphone is back after the answer: the next turn is heard and answered.
        microphone.append(np.concatenate([tone(600), silence(100)]))
        await until(lambda: run.out.getvalue().count("assistant: ") == 2)
        assert await run.end() == 0
    assert len(run.events("input_audio_buffer.speech_started")) == 2
    dones = run.events("response.done")
    assert [d["response"]["status"] for d in dones] == ["completed", "completed"]  # type: ignore[index]
    assert "interrupted" not in run.out.getvalue()


async def test_push_to_talk_sends_between_two_presses_and_commits_on_the_second(
    server: RunningServer,
) -> None:
    speaker = CapturingSpeaker(24_000)
    microphone = WavMicrophone()
    keys = Keys()
    async with talking(
        server.ws_url,
        server.token,
        microphone=microphone,
        speaker=speaker,
        mode=TalkMode.PUSH_TO_TALK,
        keys=keys.lines(),
    ) as run:
        await until(run.talk.connected.is_set)
        assert run.talk.client.config["audio"]["input"]["turn_detection"] is None
        microphone.append(tone(400))  # before the key: not sent
        await until(lambda: microphone.tape_ms == 0)
        assert run.talk.frames_sent == 0
        keys.press()
        await until(lambda: run.talk.frames_sent > 0)
        microphone.append(tone(600))
        await until(lambda: microphone.tape_ms == 0)
        await asyncio.sleep(0.2)
        assert not run.events("input_audio_buffer.committed")  # the VAD does not end the turn
        keys.press()
        await until(lambda: "assistant: " in run.out.getvalue())
        sent = run.talk.frames_sent
        await asyncio.sleep(0.1)
        assert run.talk.frames_sent == sent  # idle again after the second press
        assert await run.end() == 0
    assert len(run.events("input_audio_buffer.committed")) == 1
    assert run.out.getvalue().splitlines() == [
        "you: what is the weather",
        "assistant: Sure. Here is the answer. Anything else?",
    ]
    assert "talking" in run.err.getvalue()


@pytest.fixture
async def proxy(server: RunningServer) -> AsyncIterator[tuple[FaultProxy, str]]:
    """A proxy to the server that drops connections on demand, and the URL through it."""
    proxy = FaultProxy(server.host, server.port)
    port = await proxy.start()
    try:
        yield proxy, f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        await proxy.stop()


async def test_a_dropped_connection_is_resumed_and_the_talk_goes_on(
    server: RunningServer, proxy: tuple[FaultProxy, str]
) -> None:
    faults, url = proxy
    keys = Keys()
    async with talking(
        url,
        server.token,
        microphone=WavMicrophone(),
        speaker=CapturingSpeaker(24_000),
        keys=keys.lines(),
    ) as run:
        await until(run.talk.connected.is_set)
        faults.cut_all()
        await until(lambda: "reconnected" in run.err.getvalue())
        keys.press("hello there")
        await until(lambda: "assistant: " in run.out.getvalue())
        assert await run.end() == 0
    assert "connection lost" in run.err.getvalue()
    assert run.talk.client.close_code == 1000  # the resumed session was ended, not left waiting
    await until(lambda: not server.services.live_sessions)


async def test_a_server_that_stays_unreachable_ends_the_talk_with_a_message(
    server: RunningServer, proxy: tuple[FaultProxy, str]
) -> None:
    faults, url = proxy
    async with talking(
        url,
        server.token,
        microphone=WavMicrophone(),
        speaker=CapturingSpeaker(24_000),
        reconnect_attempts=2,
        reconnect_backoff_s=0.05,
    ) as run:
        await until(run.talk.connected.is_set)
        faults.cut_after_bytes(0)  # from now on nothing gets through
        faults.cut_all()
        status = await asyncio.wait_for(run.task, 10)
    assert status == 1
    err = run.err.getvalue()
    assert "connection lost" in err and "could not reconnect, giving up" in err
    assert "Traceback" not in err


def test_talk_conversation_never_plays_an_interrupted_generation() -> None:
    talk = TalkConversation()
    talk.event({"type": "response.created", "response": {"id": "r1", "generation": 3}}, 0.0)
    frame = b"\x01\x00" * 480
    assert Play(3, frame) in talk.receive(Received(1, 0.0, audio=frame, generation=3), 0.0)
    cut = talk.event(
        {"type": "openrealtime.response.interrupted", "generation": 3, "reason": "barge_in"}, 0.1
    )
    assert cut == [StopPlayback(3)]
    assert talk.stopped(3, 120.0) == [
        Send({"type": "openrealtime.playback", "generation": 3, "played_ms": 120.0})
    ]
    assert talk.receive(Received(2, 0.1, audio=frame, generation=3), 0.1) == []
    talk.event({"type": "response.done", "response": {"id": "r1", "generation": 3}}, 0.2)
    assert talk.receive(Received(3, 0.2, audio=frame, generation=3), 0.2) == []


# ---------------------------------------------------------------- the real entry point


@pytest.fixture
def no_portaudio(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import sounddevice → ImportError
    yield


def test_list_devices_without_portaudio_says_how_to_install_it(
    no_portaudio: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["talk", "--list-devices"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("openrealtime talk: PortAudio is not available")
    assert "apt-get install libportaudio2" in err and "Traceback" not in err


def test_talk_without_portaudio_fails_clearly_before_connecting(
    no_portaudio: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENREALTIME_TOKEN", "secret-token-value")
    assert cli.main(["talk", "--url", "ws://127.0.0.1:9/v1/realtime"]) == 1
    err = capsys.readouterr().err
    assert "libportaudio2" in err and "secret-token-value" not in err


async def test_ctrl_c_ends_the_cli_cleanly_with_status_0(
    server: RunningServer, tmp_path: Path
) -> None:
    rate = 48_000  # a typical device rate: resampled to 16 kHz on the way in
    question = write_wav(
        tmp_path / "question.wav",
        np.concatenate([silence(200, rate), tone(600, rate), silence(100, rate)]),
        rate,
    )
    answer = tmp_path / "answer.wav"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENREALTIME_URL": server.ws_url,
        "OPENREALTIME_TOKEN": server.token,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runtime.cli",
        "talk",
        "--input-wav",
        str(question),
        "--output-wav",
        str(answer),
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.PIPE,  # a keyboard nobody types on: its reader must not block
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        lines: list[str] = []
        async with asyncio.timeout(20):
            while not any(line.startswith("assistant: ") for line in lines):
                line = await process.stdout.readline()
                assert line, "the client ended before the answer"
                lines.append(line.decode())
        await asyncio.sleep(0.3)  # the answer's final report and response.done
        process.send_signal(signal.SIGINT)
        rest, err = await asyncio.wait_for(process.communicate(), 10)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    out = "".join(lines) + rest.decode()
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode() and "Task was destroyed" not in err.decode()
    assert server.token not in out + err.decode()
    assert out.splitlines() == [
        "you: what is the weather",
        "assistant: Sure. Here is the answer. Anything else?",
    ]
    assert "session ended" in err.decode()
    recorded, recorded_rate = read_wav(answer)
    assert recorded_rate == 24_000 and np.abs(recorded).max() > 1000
    await until(lambda: not server.services.live_sessions)


async def test_a_bad_token_is_refused_with_a_clear_message(server: RunningServer) -> None:
    async with talking(
        server.ws_url, "not-a-token", microphone=WavMicrophone(), speaker=CapturingSpeaker()
    ) as run:
        status = await asyncio.wait_for(run.task, 10)
    assert status == 1
    assert "could not connect" in run.err.getvalue() and "(unauthorized)" in run.err.getvalue()


def test_on_a_terminal_the_partial_line_is_redrawn_and_the_final_one_kept() -> None:
    out, err = io.StringIO(), io.StringIO()
    printer = TranscriptPrinter(out, err, live=True)
    printer.show(Show("user:1", "you", "what is …", final=False))
    printer.show(Show("user:1", "you", "what is the weather", final=True))
    printer.notice(Notice("nothing was heard", error=True))
    assert out.getvalue() == "you: what is …\r\x1b[Kyou: what is the weather\n"
    assert err.getvalue() == "error: nothing was heard\n"


class FakeSoundDevice(types.ModuleType):
    """Just enough of ``sounddevice`` to run the PortAudio boundary without a sound card: the
    test calls the stream callbacks as PortAudio's thread would."""

    class PortAudioError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("sounddevice")
        self.devices = [
            {"index": 0, "name": "Built-in Microphone", "hostapi": 0, "max_input_channels": 1,
             "max_output_channels": 0, "default_samplerate": 48_000.0},
            {"index": 1, "name": "USB Headset", "hostapi": 0, "max_input_channels": 1,
             "max_output_channels": 2, "default_samplerate": 44_100.0},
        ]  # fmt: skip
        self.default = types.SimpleNamespace(device=(0, 1))
        self.streams: list[Any] = []
        fake = self

        class Stream:
            def __init__(self, **options: Any) -> None:
                self.options = options
                self.running = False
                fake.streams.append(self)

            def start(self) -> None:
                self.running = True

            def stop(self) -> None:
                self.running = False

            def close(self) -> None:
                pass

        self.RawInputStream = self.RawOutputStream = Stream

    def query_hostapis(self) -> list[dict[str, Any]]:
        return [{"name": "ALSA"}]

    def query_devices(self, device: int | None = None) -> Any:
        return self.devices if device is None else self.devices[device]


async def test_the_portaudio_boundary_picks_devices_and_moves_audio_through_callbacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sd = FakeSoundDevice()
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    devices, default_input, default_output = list_devices()
    assert pick_device(devices, None, kind="input", default=default_input) == 0
    assert pick_device(devices, "headset", kind="input", default=default_input) == 1
    assert pick_device(devices, None, kind="output", default=default_output) == 1
    with pytest.raises(DeviceNotFound):
        pick_device(devices, "0", kind="output", default=default_output)  # input only

    speaker = SoundDeviceSpeaker(1)
    await speaker.start()
    (output,) = sd.streams
    assert output.options["samplerate"] == 44_100 and output.options["channels"] == 1
    speaker.push(7, tone(100, 44_100))
    out = bytearray(2 * 2205)
    output.options["callback"](memoryview(out), 2205, None, None)  # 50 ms pulled by the device
    assert np.frombuffer(out, "<i2").any() and speaker.played_ms(7) == pytest.approx(50)
    assert speaker.clear() == {7: pytest.approx(50)} and speaker.queued_ms() == 0
    await speaker.close()

    microphone = SoundDeviceMicrophone(0)
    frames = microphone.frames()
    first = asyncio.ensure_future(anext(frames))
    await until(lambda: len(sd.streams) == 2)
    block = tone(20, 48_000).astype("<i2").tobytes()
    threading.Thread(
        target=sd.streams[1].options["callback"], args=(block, 960, None, None)
    ).start()
    assert np.array_equal(await asyncio.wait_for(first, 5), tone(20, 48_000))
    await frames.aclose()
    await microphone.close()
    assert not sd.streams[1].running
