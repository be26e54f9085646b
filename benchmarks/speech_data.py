"""Generated speech for the speech benchmarks: the texts, and how they become 16 kHz audio.

Nothing here is recorded: every clip is synthesised at run time by the project's English TTS
(Piper, ``create_tts("piper")``) and resampled to 16 kHz with ``pipeline.audio.resample``.
Piper draws random noise inside its ONNX graph (timbre and rhythm vary per call);
``seed_speech_synthesis`` fixes onnxruntime's random seed before the voice is loaded, so a run
that synthesises the same texts in the same order hears the same audio.

The lists are interleaved (a paused utterance, then one said in one go; numbers next to
commands) so that a ``--limit N`` run still sees every kind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, resample
from plugins.contracts import TTS

SEED = 7
"""onnxruntime's random seed for Piper's noise (see ``seed_speech_synthesis``)."""

AUDIBLE = 300
"""Samples with a magnitude above this (≈ -41 dBFS) count as speech when trimming."""

ASR_SENTENCES: tuple[str, ...] = (
    "Turn off the lights in the living room.",
    "The code for the front gate is 4567.",
    "What's the weather going to be like in Paris tomorrow?",
    "The meeting starts at 3:30 this afternoon.",
    "I'm not sure, I don't remember where I put my keys.",
    "A sandwich and a coffee cost $12.50 at the corner shop.",
    "Take the 21st exit and keep left.",
    "Okay, play some jazz in the kitchen.",
    "Set a timer for 15 minutes.",
    "She was born on the 3rd of May in 1987.",
    "About 50% of the tickets are already sold.",
    "Can you remind me to water the plants at 7 o'clock?",
    "We're going to need 3 more chairs for the party.",
    "It's the 2nd door on the right.",
    "Don't forget to lock the back door.",
    "I'd like a table for 4 people, please.",
    "They've already left for the airport.",
    "What time does the last train to Boston leave?",
    "Turn the volume down a little.",
    "Send a message to Anna saying I'll be late.",
    "How far is the nearest gas station?",
    "My flight number is 1432.",
    "My appointment is on the 14th at 10:15.",
    "You can't park here after 6 pm.",
    "Open the garage door.",
    "Is it going to rain this weekend?",
    "I'll have a large coffee with milk, thanks.",
    "The total comes to $47.99.",
    "Pause the music.",
    "Who won the game last night?",
    "There are 365 days in a year.",
    "Let's meet in front of the library at noon.",
    "He isn't answering his phone right now.",
    "What's 25 times 4?",
    "I won't be home before 9:30 tonight.",
    "Okay, that's all for now.",
    "Book me a hotel room from the 1st of June.",
    "The population of the town is about 12,000 people.",
    "Why didn't you tell me the store was closed?",
    "Please dim the bedroom lights to 20%.",
)
"""English sentences for the ASR round trip: numbers, times, money, ordinals, percentages,
short commands, questions and contractions."""


@dataclass(frozen=True, slots=True)
class EndpointingUtterance:
    """One user turn. With ``second`` set, the speaker stops after ``first`` for ``pause_s``
    seconds, mid-sentence, then finishes; ``filler`` marks a first half ending in "um"/"uh"
    (a filled pause), which tells a listener more is coming."""

    first: str
    second: str | None = None
    pause_s: float = 0.0
    filler: bool = False

    @property
    def paused(self) -> bool:
        return self.second is not None

    @property
    def text(self) -> str:
        return self.first if self.second is None else f"{self.first} … {self.second}"


def _paused(
    first: str, second: str, pause_s: float, *, filler: bool = False
) -> EndpointingUtterance:
    return EndpointingUtterance(first, second, pause_s, filler)


ENDPOINTING_UTTERANCES: tuple[EndpointingUtterance, ...] = (
    _paused("I would like to order", "a large pizza with mushrooms.", 0.6),
    EndpointingUtterance("What time does the pharmacy close today?"),
    _paused("I need to book a flight to", "Chicago next Tuesday.", 0.9),
    EndpointingUtterance("Turn off the lights in the kitchen."),
    _paused("Can you tell me, um,", "how long it takes to get downtown?", 1.2, filler=True),
    EndpointingUtterance("Please set an alarm for seven tomorrow morning."),
    _paused("My phone number is", "five five five, two three four nine.", 0.7),
    EndpointingUtterance("I'd like to cancel my subscription."),
    _paused("The thing I wanted to ask you about is", "the bill from last month.", 1.0),
    EndpointingUtterance("How much does a ticket to the museum cost?"),
    _paused("So I was thinking that maybe we could", "go to the beach on Saturday.", 0.8),
    EndpointingUtterance("Play some relaxing music."),
    _paused("Could you send a message to", "my brother saying I'm running late?", 1.1),
    EndpointingUtterance("Where is the nearest post office?"),
    _paused("I want to, uh,", "change the delivery address for my order.", 0.6, filler=True),
    EndpointingUtterance("My name is Sarah and I live in Denver."),
    _paused("What's the best way to get to", "the airport from here?", 0.9),
    EndpointingUtterance("Add milk and eggs to my shopping list."),
    _paused("Remind me to", "call the dentist after lunch.", 1.2),
    EndpointingUtterance("Thanks, that's all I needed."),
    _paused("We're looking for a restaurant that", "serves vegetarian food near the station.", 0.7),
    EndpointingUtterance("Is it going to rain this afternoon?"),
    _paused("I'd like to know, um,", "whether you deliver on Sundays.", 1.0, filler=True),
    EndpointingUtterance("Book a table for two at eight o'clock."),
    _paused("Set a reminder for", "my mother's birthday next week.", 0.8),
    EndpointingUtterance("Can you read me the latest news headlines?"),
    _paused("Yesterday I went to the store and", "they had run out of bread.", 1.1),
    EndpointingUtterance("Stop the timer."),
    _paused("Could you explain how, uh,", "the return policy works?", 0.6, filler=True),
    EndpointingUtterance("I think we should leave a bit earlier tomorrow."),
    _paused("The password for the guest network is", "written on the fridge.", 0.9),
    EndpointingUtterance("What's the exchange rate for euros today?"),
    _paused("Tell me a story about", "a dragon who was afraid of the dark.", 1.2),
    EndpointingUtterance("Lock the front door, please."),
    _paused("Before we start, I, um,", "need to grab a glass of water.", 0.7, filler=True),
    EndpointingUtterance("How many steps did I walk today?"),
)
"""Turns for the endpointing benchmark: 18 with a mid-sentence pause of 0.6–1.2 s (5 of them
filled with "um"/"uh"), 18 said in one go."""


def seed_speech_synthesis(seed: int = SEED) -> None:
    """Make Piper's random noise reproducible. Effective only before the voice is loaded in
    this process (onnxruntime seeds each random kernel when the model is loaded)."""
    import onnxruntime

    onnxruntime.set_seed(seed)


@dataclass(frozen=True, slots=True)
class Speech:
    pcm: PCM
    """16 kHz mono audio."""
    synthesis_s: float
    """Wall time the TTS took (resampling excluded)."""

    @property
    def seconds(self) -> float:
        return self.pcm.size / INPUT_SAMPLE_RATE


async def warm_up(tts: TTS) -> None:
    """Load the TTS engine now, so the first timed sentence does not pay for it."""
    warm = getattr(tts, "warm_up", None)
    if warm is not None:
        await warm()


async def synthesize(tts: TTS, text: str) -> Speech:
    """``text`` spoken by ``tts`` in English, at 16 kHz."""
    started = time.perf_counter()
    chunks = [chunk async for chunk in tts.stream(text, voice=None, language="en")]
    synthesis_s = time.perf_counter() - started
    if not chunks:
        raise RuntimeError(f"the TTS produced no audio for {text!r}")
    parts = [resample(chunk.pcm, chunk.sample_rate, INPUT_SAMPLE_RATE) for chunk in chunks]
    return Speech(np.concatenate(parts).astype(np.int16, copy=False), synthesis_s)


def trim_silence(pcm: PCM) -> PCM:
    """The audible part of a clip: from its first to its last sample louder than ``AUDIBLE``."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > AUDIBLE)
    if loud.size == 0:
        return pcm[:0]
    return pcm[loud[0] : loud[-1] + 1]


def silence(seconds: float) -> PCM:
    return np.zeros(round(seconds * INPUT_SAMPLE_RATE), dtype=np.int16)
