"""ASR round trip: English sentences spoken by our TTS, recognised by our ASR, scored by WER.

``python -m benchmarks.asr_roundtrip [--limit N] [--channel wideband|pcmu|pcma]`` prints one
JSON object.

Each sentence of ``benchmarks.speech_data.ASR_SENTENCES`` is synthesised by Piper
(``create_tts("piper")``, seeded noise), resampled to 16 kHz and transcribed by ``WhisperASR``
(Whisper base, language forced to English), one at a time. The word error rate is computed over
the whole corpus (edit operations / reference words) after both texts go through ``normalise``:

1. lower case; curly apostrophes straightened, accents dropped;
2. clock times lose their separator (``3:30`` and ``3.30`` → ``330``, hour ≤ 24, two-digit
   minutes): Whisper writes the spoken "three thirty" as ``3:30``, ``3.30`` or ``330`` from one
   sentence to the next, and all three mean the same to whoever reads the transcript;
   ``5pm``/``5 p.m.`` → "5 pm";
3. written forms are spelled out: ``$12.50`` → "twelve dollars fifty cents" (money first, so it
   is never read as a time), ``50%`` → "fifty percent", ``21st`` → "twenty first", ``2.5`` →
   "two point five", ``12,000`` → "twelve thousand", any other digits → cardinal words ("four
   thousand five hundred sixty seven": no "and", no hyphens);
4. contractions are expanded ("don't" → "do not", "I'm" → "i am", "won't" → "will not",
   "what's" → "what is"; other "'s" stay as possessives without the apostrophe);
5. spelling variants are unified ("ok" → "okay", "alright" → "all right"), hyphens become
   spaces, the remaining punctuation is dropped.

``--channel`` puts the speech through a telephone line first, as the runtime's audio edges do it
(``pipeline.audio_formats``: ``OutboundAudio`` to the line, ``InboundAudio`` from it): 16 kHz →
8 kHz G.711 µ-law (``pcmu``, what Twilio and most SIP trunks carry) or A-law (``pcma``) → 16 kHz,
with nothing of the band above 4 kHz left; ``wideband`` (the default) is the 16 kHz speech as
synthesised.

``rtf_asr`` is transcription time / audio duration, ``rtf_tts`` synthesis time / audio duration
(both after warm-up, on the process's own worker pools). ``wer_strict`` is the same corpus scored
with lower case and punctuation removal only, to show what the normalisation forgives.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit
from benchmarks.speech_data import ASR_SENTENCES, seed_speech_synthesis, synthesize, warm_up
from pipeline.audio import INPUT_SAMPLE_RATE, PCM
from pipeline.audio_formats import InboundAudio, OutboundAudio, audio_format
from plugins.asr.whisper import WhisperASR
from plugins.tts import create_tts

log = logging.getLogger("benchmarks.asr_roundtrip")

WORST_EXAMPLES = 5
CHANNELS = ("wideband", "pcmu", "pcma")


def through_channel(pcm: PCM, channel: str) -> PCM:
    """16 kHz speech as it arrives after ``channel`` (module doc); ``wideband`` leaves it."""
    if channel == "wideband":
        return pcm
    line = audio_format(f"audio/{channel}")
    out = OutboundAudio(line, source_rate=INPUT_SAMPLE_RATE)
    wire = out.encode(pcm) + out.flush()
    back = InboundAudio(line)
    return np.concatenate((back.decode(wire), back.flush()))


# ---------------------------------------------------------------- numbers to words

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def cardinal(n: int) -> str:
    """``4567`` → "four thousand five hundred sixty seven" (American style: no "and")."""
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + ("" if rest == 0 else " " + cardinal(rest))
    for scale, name in _SCALES:
        if n >= scale:
            high, rest = divmod(n, scale)
            return cardinal(high) + " " + name + ("" if rest == 0 else " " + cardinal(rest))
    raise AssertionError("unreachable")


def ordinal(n: int) -> str:
    """``21`` → "twenty first"."""
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _digits(text: str) -> str:
    return " ".join(_ONES[int(d)] for d in text)


# ---------------------------------------------------------------- normalisation

_CONTRACTIONS = {
    "won't": "will not",
    "can't": "can not",
    "cannot": "can not",
    "shan't": "shall not",
    "ain't": "is not",
    "let's": "let us",
    "i'm": "i am",
}
_IS_CONTRACTIONS = (
    "it that what where who how there here he she this"  # "X's" → "X is"
).split()
_SPELLING = {
    "ok": "okay",
    "alright": "all right",
    "o'clock": "oclock",
    "mr": "mister",
    "mrs": "missus",
    "dr": "doctor",
}


def normalise(text: str) -> list[str]:
    """The words of ``text`` in the canonical form used for WER (see the module docstring)."""
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = text.lower().replace("`", "'")
    text = re.sub(r"\b([ap])\.\s?m\.?(?=\W|$)", r"\1m", text)  # p.m. → pm
    text = re.sub(r"(\d)\s*([ap]m)\b", r"\1 \2", text)  # 5pm → 5 pm
    text = re.sub(r"(\d),(?=\d{3}\b)", r"\1", text)  # 12,000 → 12000
    text = re.sub(r"\$(\d+)(?:\.(\d{2}))?", _money, text)  # first: $12.50 is no clock time
    text = re.sub(r"\b(\d{1,2})[:.]([0-5]\d)\b(?![.:]?\d)", _clock, text)  # 3:30, 3.30 → 330
    text = re.sub(r"(\d)\s*%", r"\1 percent", text)
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: ordinal(int(m.group(1))), text)
    text = re.sub(r"\b(\d+)\.(\d+)\b", lambda m: f"{m.group(1)} point {_digits(m.group(2))}", text)
    text = re.sub(r"\d+", lambda m: f" {cardinal(int(m.group()))} ", text)
    text = re.sub(r"[^a-z' ]+", " ", text)  # hyphens and punctuation become spaces
    words: list[str] = []
    for word in text.split():
        words.extend(_expand(word.strip("'")).split())
    return [w for w in words if w]


def _money(match: re.Match[str]) -> str:
    dollars = f"{match.group(1)} dollars"
    cents = match.group(2)
    return dollars if cents in (None, "00") else f"{dollars} {int(cents)} cents"


def _clock(match: re.Match[str]) -> str:
    hour, minute = match.groups()
    return hour + minute if int(hour) <= 24 else match.group()


def strict_words(text: str) -> list[str]:
    """Lower case and punctuation dropped, nothing else: the baseline the rules improve on."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("\u2019", "'")).split()


def _expand(word: str) -> str:
    word = _SPELLING.get(word, word)
    if word in _CONTRACTIONS:
        return _CONTRACTIONS[word]
    if word.endswith("n't"):
        return word[:-3] + " not"
    for suffix, full in (("'re", "are"), ("'ve", "have"), ("'ll", "will"), ("'d", "would")):
        if word.endswith(suffix):
            return f"{word[: -len(suffix)]} {full}"
    if word.endswith("'s") and word[:-2] in _IS_CONTRACTIONS:
        return f"{word[:-2]} is"
    return word.replace("'", "")


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Word-level Levenshtein distance (substitutions + deletions + insertions)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, 1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word))
            )
        previous = current
    return previous[-1]


# ---------------------------------------------------------------- the run


@dataclass(frozen=True, slots=True)
class Scored:
    reference: str
    hypothesis: str
    errors: int
    words: int
    strict_errors: int
    strict_words: int
    audio_s: float
    tts_s: float
    asr_s: float


async def run(
    *, limit: int | None = None, data_dir: Path = Path(".data"), channel: str = "wideband"
) -> dict[str, Any]:
    """Synthesise, send through ``channel``, transcribe and score the first ``limit`` sentences
    (all by default)."""
    sentences = ASR_SENTENCES[:limit] if limit is not None else ASR_SENTENCES
    seed_speech_synthesis()
    tts = create_tts("piper")
    asr = WhisperASR(data_dir=data_dir, languages=("en",))
    await warm_up(tts)
    await asr.load()
    scored: list[Scored] = []
    for index, sentence in enumerate(sentences):
        speech = await synthesize(tts, sentence)
        started = time.perf_counter()
        transcript = await asr.transcribe(through_channel(speech.pcm, channel), language="en")
        asr_s = time.perf_counter() - started
        reference = normalise(sentence)
        errors = edit_distance(reference, normalise(transcript.text))
        strict_reference = strict_words(sentence)
        strict_errors = edit_distance(strict_reference, strict_words(transcript.text))
        scored.append(
            Scored(
                sentence,
                transcript.text,
                errors,
                len(reference),
                strict_errors,
                len(strict_reference),
                speech.seconds,
                speech.synthesis_s,
                asr_s,
            )
        )
        log.info("%d/%d: %d error(s), asr %.2f s", index + 1, len(sentences), errors, asr_s)
    return summarise(scored, channel=channel)


def summarise(scored: Sequence[Scored], *, channel: str = "wideband") -> dict[str, Any]:
    words = sum(s.words for s in scored)
    strict_total = sum(s.strict_words for s in scored)
    audio_s = sum(s.audio_s for s in scored)
    worst = sorted((s for s in scored if s.errors), key=lambda s: s.errors / s.words, reverse=True)
    return {
        "channel": channel,
        "sentences": len(scored),
        "wer": round(sum(s.errors for s in scored) / words, 4) if words else None,
        "rtf_asr": round(sum(s.asr_s for s in scored) / audio_s, 4) if audio_s else None,
        "rtf_tts": round(sum(s.tts_s for s in scored) / audio_s, 4) if audio_s else None,
        "wer_strict": round(sum(s.strict_errors for s in scored) / strict_total, 4)
        if strict_total
        else None,
        "reference_words": words,
        "word_errors": sum(s.errors for s in scored),
        "sentences_with_errors": sum(1 for s in scored if s.errors),
        "audio_s": round(audio_s, 2),
        "asr_s_per_sentence": round(sum(s.asr_s for s in scored) / len(scored), 3)
        if scored
        else None,
        "worst": [
            {
                "reference": s.reference,
                "hypothesis": s.hypothesis,
                "errors": s.errors,
                "words": s.words,
            }
            for s in worst[:WORST_EXAMPLES]
        ],
        "settings": {
            "tts": "piper en_US-joe-medium via create_tts('piper'), resampled to 16 kHz",
            "asr": "WhisperASR (Whisper base int8, greedy), language 'en'",
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--data-dir", type=Path, default=Path(".data"))
    parser.add_argument("--channel", choices=CHANNELS, default="wideband")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    emit(asyncio.run(run(limit=args.limit, data_dir=args.data_dir, channel=args.channel)))


if __name__ == "__main__":
    main()
