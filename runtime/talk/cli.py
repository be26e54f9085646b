"""``openrealtime talk``: its options, and the entry point that wires the terminal, the sound
devices and ``Talk`` together.

The server's URL and token come from ``--url`` / ``--token`` or, read once here,
``OPENREALTIME_URL`` / ``OPENREALTIME_TOKEN`` (prefer the variable: a command line is visible to
other users of the machine). The token is never printed. Ctrl-C (SIGINT) or SIGTERM ends the
session cleanly with exit status 0; a connection that cannot be made or resumed exits with 1,
bad options with 2.

``--input-wav`` / ``--output-wav`` replace the microphone and the speaker with a WAV file and a
capture: they exist for testing without a sound card (and for scripted demos).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from runtime.talk.audio import AudioError, Microphone, Speaker
from runtime.talk.conversation import TalkMode
from runtime.talk.portaudio import (
    SoundDeviceMicrophone,
    SoundDeviceSpeaker,
    list_devices,
    pick_device,
)
from runtime.talk.runner import Talk
from runtime.talk.terminal import stdin_lines
from runtime.talk.wav import CapturingSpeaker, WavMicrophone

DEFAULT_URL = "ws://127.0.0.1:8765/v1/realtime"
URL_ENV = "OPENREALTIME_URL"
TOKEN_ENV = "OPENREALTIME_TOKEN"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    talk = sub.add_parser(
        "talk",
        help="talk to a server from the terminal (microphone and speaker)",
        description="A terminal voice client: microphone and speaker through PortAudio, the "
        "live transcript on stdout. Type a line and Enter to send it as text. Ctrl-C ends.",
    )
    talk.add_argument("--url", help=f"the realtime endpoint (${URL_ENV}; default {DEFAULT_URL})")
    talk.add_argument("--token", help=f"bearer token (prefer ${TOKEN_ENV}: it is not shown by ps)")
    talk.add_argument("--role", help="agent role id or name (default: the tenant's default role)")
    devices = talk.add_argument_group("sound devices")
    devices.add_argument("--list-devices", action="store_true", help="list devices and exit")
    devices.add_argument("--input", metavar="DEVICE", help="microphone: index or name substring")
    devices.add_argument("--output", metavar="DEVICE", help="speaker: index or name substring")
    modes = talk.add_mutually_exclusive_group()
    modes.add_argument(
        "--half-duplex",
        action="store_true",
        help="pause the microphone while the assistant speaks (speakers without echo "
        "cancellation); the answer cannot be interrupted by voice, Enter cuts it",
    )
    modes.add_argument(
        "--push-to-talk",
        action="store_true",
        help="press Enter to start talking and Enter again to send (no voice activity turns)",
    )
    talk.add_argument(
        "--tail-ms",
        type=float,
        default=300.0,
        help="half duplex: keep the microphone paused this long after the answer (default 300)",
    )
    testing = talk.add_argument_group("testing without a sound card")
    testing.add_argument(
        "--input-wav", type=Path, metavar="PATH", help="play this WAV file as the microphone"
    )
    testing.add_argument(
        "--output-wav", type=Path, metavar="PATH", help="record the speaker into this WAV file"
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.list_devices:
        return _list_devices()
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        return _fail(f"no token: pass --token or set {TOKEN_ENV}", status=2)
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    mode = (
        TalkMode.HALF_DUPLEX
        if args.half_duplex
        else TalkMode.PUSH_TO_TALK
        if args.push_to_talk
        else TalkMode.FULL_DUPLEX
    )
    try:
        return asyncio.run(_talk(args, url, token, mode))
    except KeyboardInterrupt:  # where no signal handler could be installed (Windows)
        return 0
    except AudioError as e:
        return _fail(str(e))


async def _talk(args: argparse.Namespace, url: str, token: str, mode: TalkMode) -> int:
    microphone, speaker = _open_audio(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows
            loop.add_signal_handler(sig, stop.set)
    talk = Talk(
        url,
        token,
        microphone=microphone,
        speaker=speaker,
        mode=mode,
        keys=stdin_lines(),
        role=args.role,
        tail_ms=args.tail_ms,
    )
    status = await talk.run(stop)
    if stop.is_set():
        print("session ended", file=sys.stderr, flush=True)
    return status


def _open_audio(args: argparse.Namespace) -> tuple[Microphone, Speaker]:
    microphone: Microphone | None = None
    speaker: Speaker | None = None
    if args.input_wav is not None:
        microphone = WavMicrophone.from_file(args.input_wav)
    if args.output_wav is not None:
        speaker = CapturingSpeaker(path=args.output_wav)
    if microphone is None or speaker is None:
        devices, default_input, default_output = list_devices()
        if microphone is None:
            index = pick_device(devices, args.input, kind="input", default=default_input)
            microphone = SoundDeviceMicrophone(index)
        if speaker is None:
            index = pick_device(devices, args.output, kind="output", default=default_output)
            speaker = SoundDeviceSpeaker(index)
    return microphone, speaker


def _list_devices() -> int:
    try:
        devices, default_input, default_output = list_devices()
    except AudioError as e:
        return _fail(str(e))
    if not devices:
        print("no sound devices found")
        return 0
    print("  index  device (< default input, > default output)")
    for device in devices:
        print(device.describe(default_input=default_input, default_output=default_output))
    return 0


def _fail(message: str, *, status: int = 1) -> int:
    print(f"openrealtime talk: {message}", file=sys.stderr, flush=True)
    return status
