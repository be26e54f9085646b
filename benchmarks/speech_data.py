"""Generated speech for the speech benchmarks: the texts, and how they become 16 kHz audio.

Nothing here is recorded: every clip is synthesised at run time by the project's English TTS
(Piper, ``create_tts("piper")``; Chinese turns by eSpeak NG, ``create_tts("espeak")``) and
resampled to 16 kHz with ``pipeline.audio.resample``. Piper draws random noise inside its ONNX
graph (timbre and rhythm vary per call); ``seed_speech_synthesis`` fixes onnxruntime's random
seed before the voice is loaded, so a run that synthesises the same texts in the same order
hears the same audio. eSpeak NG is deterministic.

The lists are interleaved (a paused utterance, then one said in one go; numbers next to
commands) so that a ``--limit N`` run still sees every kind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pipeline.audio import INPUT_SAMPLE_RATE, PCM, WordTiming, resample
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


@dataclass(frozen=True, slots=True)
class CueUtterance:
    """One user turn of the endpointing benchmark's second group (transcript cues): ``parts``
    spoken one after the other with ``pauses_s[i]`` of silence after ``parts[i]``. ``kind`` is
    "dictation" (digits or a code read out piece by piece), "trailing_conjunction" (a pause
    right after "and", "but", "然后", …) or "no_pause"."""

    parts: tuple[str, ...]
    pauses_s: tuple[float, ...]
    kind: str
    language: str

    def __post_init__(self) -> None:
        if len(self.pauses_s) != len(self.parts) - 1:
            raise ValueError("a CueUtterance needs one pause between each two parts")

    @property
    def paused(self) -> bool:
        return bool(self.pauses_s)

    @property
    def text(self) -> str:
        return " … ".join(self.parts)


def _cue(kind: str, language: str, *parts_and_pauses: str | float) -> CueUtterance:
    parts = tuple(p for p in parts_and_pauses if isinstance(p, str))
    pauses = tuple(float(p) for p in parts_and_pauses if not isinstance(p, str))
    return CueUtterance(parts, pauses, kind, language)


CUE_UTTERANCES: tuple[CueUtterance, ...] = (
    _cue("dictation", "en", "My phone number is zero one seven", 0.9, "six five four", 0.8,
         "three two one nine."),
    _cue("no_pause", "en", "What time is it?"),
    _cue("trailing_conjunction", "zh", "我先去银行，然后", 0.9, "再去超市买点水果。"),
    _cue("no_pause", "zh", "好的，谢谢。"),
    _cue("dictation", "zh", "我的手机号是一三八", 0.9, "零零一三", 0.8, "八零零零。"),
    _cue("no_pause", "en", "My number is zero one seven six five four three two one nine."),
    _cue("trailing_conjunction", "en", "I'll take the salad and", 0.9, "a glass of orange juice."),
    _cue("no_pause", "zh", "现在几点了？"),
    _cue("dictation", "en", "The code is four", 0.8, "nine", 0.7, "two", 0.9, "eight."),
    _cue("no_pause", "en", "Thanks, that's everything."),
    _cue("trailing_conjunction", "zh", "我想订一张机票，但是", 1.0, "不知道哪天最便宜。"),
    _cue("no_pause", "zh", "我的手机号是一三八零零一三八零零零。"),
    _cue("dictation", "zh", "验证码是四", 0.8, "五", 0.8, "六", 0.9, "七。"),
    _cue("no_pause", "en", "Please call me back tomorrow morning."),
    _cue("trailing_conjunction", "en", "We could go on Friday, but", 1.0,
         "Saturday would be better for me."),
    _cue("no_pause", "zh", "帮我把客厅的灯关掉。"),
    _cue("dictation", "en", "My order number is A one zero", 1.0, "zero eight six."),
    _cue("trailing_conjunction", "zh", "明天可能会下雨，所以", 0.8, "我们改到下周吧。"),
    _cue("trailing_conjunction", "en", "I'm calling because", 0.8,
         "my internet stopped working this morning."),
    _cue("dictation", "zh", "订单号是A一零", 1.0, "零八六。"),
    _cue("trailing_conjunction", "en", "Do you want to meet at the cafe or", 1.1,
         "should we just talk on the phone?"),
    _cue("dictation", "en", "The last four digits are five", 0.8, "three", 1.1, "one nine."),
    _cue("trailing_conjunction", "zh", "帮我买两杯咖啡，还有", 1.1, "一块蛋糕。"),
    _cue("dictation", "zh", "我家门牌号是二", 0.9, "零", 1.0, "三。"),
)  # fmt: skip
"""The endpointing benchmark's second group, written for the transcript cues (issue 15): 8
dictations read out in pieces with 0.7–1.1 s pauses (digit by digit, in groups, a code with a
letter), 8 turns with a pause right after a conjunction, and 8 turns said in one go (two of
them whole dictations, which the cues cannot tell from unfinished ones); half English, half
Chinese (spoken by eSpeak NG's ``cmn`` voice)."""


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
    words: tuple[WordTiming, ...] = ()
    """Where each word of the text was spoken, in ms from the start of ``pcm``."""

    @property
    def seconds(self) -> float:
        return self.pcm.size / INPUT_SAMPLE_RATE


async def warm_up(tts: TTS) -> None:
    """Load the TTS engine now, so the first timed sentence does not pay for it."""
    warm = getattr(tts, "warm_up", None)
    if warm is not None:
        await warm()


async def synthesize(tts: TTS, text: str, *, language: str = "en") -> Speech:
    """``text`` spoken by ``tts`` in ``language`` (English by default), at 16 kHz."""
    started = time.perf_counter()
    chunks = [chunk async for chunk in tts.stream(text, voice=None, language=language)]
    synthesis_s = time.perf_counter() - started
    if not chunks:
        raise RuntimeError(f"the TTS produced no audio for {text!r}")
    parts = [resample(chunk.pcm, chunk.sample_rate, INPUT_SAMPLE_RATE) for chunk in chunks]
    words: list[WordTiming] = []
    offset_ms = 0.0
    for chunk in chunks:
        words.extend(
            WordTiming(w.text_start, w.text_end, w.start_ms + offset_ms, w.end_ms + offset_ms)
            for w in chunk.words
        )
        offset_ms += 1000.0 * chunk.pcm.size / chunk.sample_rate
    return Speech(np.concatenate(parts).astype(np.int16, copy=False), synthesis_s, tuple(words))


def trim_silence(pcm: PCM) -> PCM:
    """The audible part of a clip: from its first to its last sample louder than ``AUDIBLE``."""
    start, end = audible_span(pcm)
    return pcm[start:end]


def audible_span(pcm: PCM) -> tuple[int, int]:
    """(first, one past the last) sample louder than ``AUDIBLE``; (0, 0) for a silent clip."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > AUDIBLE)
    if loud.size == 0:
        return 0, 0
    return int(loud[0]), int(loud[-1]) + 1


def silence(seconds: float) -> PCM:
    return np.zeros(round(seconds * INPUT_SAMPLE_RATE), dtype=np.int16)
