"""The real microphone and speaker: PortAudio streams through ``sounddevice``, imported lazily
(runtime/talk/audio.py, rule 2), and the device list behind ``--list-devices``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from pipeline.audio import PCM
from runtime.talk.audio import (
    FRAME_MS,
    BufferedSpeaker,
    DeviceFailed,
    DeviceNotFound,
    PortAudioUnavailable,
)


def import_sounddevice() -> ModuleType:
    """``sounddevice``, or ``PortAudioUnavailable`` saying how to get PortAudio."""
    try:
        import sounddevice
    except (ImportError, OSError) as e:  # OSError: the wheel is there, libportaudio is not
        raise PortAudioUnavailable(
            f"PortAudio is not available ({e}). On Debian/Ubuntu: apt-get install libportaudio2; "
            "on macOS and Windows the sounddevice wheel (pip install sounddevice) bundles it."
        ) from e
    module: ModuleType = sounddevice
    return module


@dataclass(frozen=True, slots=True)
class AudioDevice:
    index: int
    name: str
    host_api: str
    max_input_channels: int
    max_output_channels: int
    default_sample_rate: int

    def describe(self, *, default_input: int, default_output: int) -> str:
        marks = ("<" if self.index == default_input else " ") + (
            ">" if self.index == default_output else " "
        )
        return (
            f"{marks} {self.index:3d}  {self.name} ({self.host_api}; "
            f"{self.max_input_channels} in, {self.max_output_channels} out, "
            f"{self.default_sample_rate} Hz)"
        )


def list_devices() -> tuple[list[AudioDevice], int, int]:
    """The PortAudio devices, and the indexes of the default input and output (-1: none)."""
    sd = import_sounddevice()
    try:
        host_apis = [str(api["name"]) for api in sd.query_hostapis()]
        listed = sd.query_devices()
        default_input, default_output = (int(i) for i in sd.default.device)
    except sd.PortAudioError as e:
        raise DeviceFailed(f"PortAudio cannot list the devices: {e}") from e
    devices = [
        AudioDevice(
            index=int(d["index"]),
            name=str(d["name"]),
            host_api=host_apis[int(d["hostapi"])],
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_sample_rate=int(d["default_samplerate"]),
        )
        for d in listed
    ]
    return devices, default_input, default_output


def pick_device(devices: list[AudioDevice], spec: str | None, *, kind: str, default: int) -> int:
    """The device ``spec`` names (an index, or a case-insensitive name substring) among those
    with channels of ``kind`` (``input`` or ``output``); the default device when None."""
    usable = [
        d for d in devices if (d.max_input_channels if kind == "input" else d.max_output_channels)
    ]
    if spec is None:
        if any(d.index == default for d in usable):
            return default
        if usable:
            return usable[0].index
        raise DeviceNotFound(f"no {kind} device found (see --list-devices)")
    if spec.strip().isdigit():
        index = int(spec)
        if any(d.index == index for d in usable):
            return index
        raise DeviceNotFound(f"no {kind} device with index {index} (see --list-devices)")
    matches = [d for d in usable if spec.lower() in d.name.lower()]
    if not matches:
        raise DeviceNotFound(f"no {kind} device matches {spec!r} (see --list-devices)")
    return matches[0].index


def _device_info(sd: ModuleType, device: int) -> Any:
    try:
        return sd.query_devices(device)
    except (sd.PortAudioError, ValueError) as e:
        raise DeviceNotFound(f"no sound device {device} ({e}); see --list-devices") from e


class SoundDeviceMicrophone:
    """A PortAudio input stream at the device's default rate, mono PCM16, in ``FRAME_MS``
    blocks handed from PortAudio's thread to the event loop through a bounded queue."""

    def __init__(self, device: int, *, max_queued_frames: int = 100) -> None:
        self._sd = import_sounddevice()
        info = _device_info(self._sd, device)
        self.device = device
        self.sample_rate = int(info["default_samplerate"])
        self._queue: asyncio.Queue[PCM] = asyncio.Queue(max_queued_frames)
        self._stream: Any = None
        self.overruns = 0

    async def frames(self) -> AsyncGenerator[PCM, None]:
        loop = asyncio.get_running_loop()

        def deliver(pcm: PCM) -> None:
            if self._queue.full():  # the loop fell behind: drop the oldest frame
                self._queue.get_nowait()
                self.overruns += 1
            self._queue.put_nowait(pcm)

        def callback(indata: Any, frames: int, time_info: Any, status: Any) -> None:
            pcm = np.frombuffer(bytes(indata), dtype="<i2").astype(np.int16)
            with contextlib.suppress(RuntimeError):  # the loop closed under us
                loop.call_soon_threadsafe(deliver, pcm)

        try:
            self._stream = self._sd.RawInputStream(
                device=self.device,
                samplerate=self.sample_rate,
                channels=1,
                dtype="int16",
                blocksize=self.sample_rate * FRAME_MS // 1000,
                callback=callback,
            )
            self._stream.start()
        except self._sd.PortAudioError as e:
            raise DeviceFailed(f"cannot open the microphone (device {self.device}): {e}") from e
        while True:
            yield await self._queue.get()

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None


class SoundDeviceSpeaker(BufferedSpeaker):
    """A PortAudio output stream at the device's default rate; its callback pulls from the
    playback buffer (silence when there is nothing to play)."""

    def __init__(self, device: int) -> None:
        self._sd = import_sounddevice()
        info = _device_info(self._sd, device)
        super().__init__(int(info["default_samplerate"]))
        self.device = device
        self._stream: Any = None

    async def start(self) -> None:
        def callback(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
            pcm, _ = self.buffer.pull(frames)
            outdata[:] = pcm.astype("<i2").tobytes()

        try:
            self._stream = self._sd.RawOutputStream(
                device=self.device,
                samplerate=self.sample_rate,
                channels=1,
                dtype="int16",
                latency="low",
                callback=callback,
            )
            self._stream.start()
        except self._sd.PortAudioError as e:
            raise DeviceFailed(f"cannot open the speaker (device {self.device}): {e}") from e

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.stop()
            self._stream.close()
            self._stream = None
